"""`waldio info / detach / convert`, and the extension in the sqlite3 shell."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import waldio
import workloads as wl
from waldio import admin

WALDIO = [sys.executable, "-m", "waldio"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WALDIO, *args], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(Path(waldio.__file__).parents[1]),
                               "PATH": "/usr/bin:/bin"})


def test_info_describes_a_live_log(apsw_sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "i.db"
    conn = apsw_sqlite.waldio(path, layout="pad4k")
    wl.setup(conn)
    wl.transfers(conn, 1, 10)
    info = json.loads(run("info", "--json", str(path)).stdout)
    sb = info["wal_file"]["superblock"]
    assert sb["present"] and sb["checksum_ok"] and sb["layout"] == "pad4k"
    assert sb["holds_frames"] and sb["in_use_guard"]
    assert sb["frame_bytes"] == 8192 and sb["page_size"] == 4096
    assert sb["sqlite_header"]["kind"] == "standard SQLite WAL header"
    assert "guard" in info["wal_file"]["header"]["kind"]
    assert info["reserve_bytes"] == 0                    # pad layouts need none
    conn.close()
    # After a clean close: no frames, no guard, stock SQLite may open it.
    info = json.loads(run("info", "--json", str(path)).stdout)
    assert not info["wal_file"]["superblock"]["holds_frames"]
    assert not info["wal_file"]["superblock"]["in_use_guard"]
    assert info["wal_file"]["header"]["kind"].startswith("none")
    text = run("info", str(path)).stdout
    assert "layout:" in text and "pad4k" in text


def test_info_describes_a_standard_log(apsw_sqlite: Any, dbdir: Path) -> None:
    """The default layout's log is SQLite's own WAL: info counts its frames
    and commits as SQLite's recovery would, inside the preallocated file."""
    path = dbdir / "s.db"
    conn = apsw_sqlite.waldio(path)
    wl.setup(conn)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")      # the next commit starts afresh
    wl.transfers(conn, 1, 10)
    wal = json.loads(run("info", "--json", str(path)).stdout)["wal_file"]
    assert wal["layout"] == "standard" and not wal["superblock"]["present"]
    assert wal["header"]["kind"] == "standard SQLite WAL header"
    assert wal["commits"] == 10 and wal["committed_frames"] == wal["frames"] >= 10
    assert wal["size"] > 32 + wal["frames"] * (4096 + 24)      # zeros beyond the frames
    assert not wal["has_wal_shm"] and wal["has_shm"]            # SQLite's own wal-index
    text = run("info", str(path)).stdout
    assert "standard" in text and "commits:" in text
    conn.close()


def test_detach_and_keep_wal(apsw_sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "d.db"
    conn = apsw_sqlite.waldio(path)
    wl.setup(conn)
    wl.transfers(conn, 2, 30)
    rows = wl.dump(conn)
    busy = run("detach", str(path))                     # still open here
    assert busy.returncode != 0 and "other connections" in busy.stderr
    conn.close()
    done = run("detach", "--keep-wal", str(path))
    assert done.returncode == 0, done.stderr
    assert "detached" in done.stdout
    info = admin.describe_database(path)
    assert info["journal"] == "wal"
    stock = apsw_sqlite.stock(path)
    assert wl.dump(stock) == rows
    stock.close()


def test_convert_then_embed(apsw_sqlite: Any, dbdir: Path) -> None:
    """`waldio convert` gives a stock database the reserve the embed layout
    needs; asked for by name, embed then holds it (auto would give the new
    log the standard layout, which needs no reserve)."""
    path = dbdir / "c.db"
    stock = apsw_sqlite.stock(path)
    wl.setup(stock)
    wl.transfers(stock, 3, 25)
    rows = wl.dump(stock)
    stock.close()
    assert admin.describe_database(path)["reserve_bytes"] == 0
    out = run("convert", str(path))
    assert out.returncode == 0, out.stderr
    assert admin.describe_database(path)["reserve_bytes"] == 24
    conn = apsw_sqlite.waldio(path, layout="embed")
    assert wl.dump(conn) == rows
    wl.transfers(conn, 4, 5)
    assert wl.status(conn)["layout"] == "embed"
    assert wl.integrity(conn) == "ok"
    conn.close()
    bad = run("convert", "--reserve", "7", str(path))
    assert bad.returncode == 2 and "--reserve" in bad.stderr


def test_sqlite3_shell_loads_the_extension(dbdir: Path) -> None:
    """Debian's sqlite3 shell: .load, then .open through the default VFS; a
    new database's log gets the standard layout, with SQLite's own -shm."""
    path = dbdir / "shell.db"
    script = (".load %s\n.open %s\nPRAGMA journal_mode=WAL;\nCREATE TABLE t(x);\n"
              "INSERT INTO t VALUES(1),(2),(3);\nSELECT sum(x) FROM t;\n.vfsname\n"
              "PRAGMA waldio;\n" % (waldio.extension_path().with_suffix(""), path))
    out = subprocess.run(["sqlite3"], input=script, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "wal" and lines[1] == "6"
    assert lines[2] == "waldio/unix"
    status = json.loads(lines[3])
    assert (status["layout"], status["wal_index"]) == ("standard", "sqlite"), status
