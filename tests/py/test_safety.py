"""Safety and bad input: stock SQLite meeting a waldio log, waldio meeting a
standard WAL, detaching, databases waldio cannot hold, unsupported file
systems, corrupt logs and a full disk. Each case must end in a clear error
or the right data, never in silent loss.

The default layout of a new log, standard, is SQLite's own WAL: stock SQLite
shares such a database at any time. The embed layout (asked for by name here)
changes the file format, so stock SQLite is refused while its log holds
frames or a waldio connection has it open, and waldio while stock SQLite has
the database.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import waldio
import workloads as wl
from waldio.drivers import SQLiteError

WORKER = str(Path(__file__).resolve().parent / "worker.py")
SLOT0 = 4096            # embed layout, 4 KiB pages: frame i at 4096 * i
STANDARD_PAGE0 = 32 + 24 + 100   # SQLite's WAL: a byte inside frame 1's page
EMBED = {"layout": "embed"}


def crash_writer(sqlite: Any, path: Path, n: int, **opts: Any) -> int:
    """A process commits n transfers and dies without closing anything."""
    proc = subprocess.run([sys.executable, WORKER, sqlite.name, "crash", str(path),
                           json.dumps(dict(seed=3, n=n, **opts))],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split().count("committed")


def new_db(sqlite: Any, path: Path, **options: Any) -> None:
    conn = sqlite.waldio(path, **options)
    wl.setup(conn)
    conn.close()


def expected_rows(sqlite: Any, path: Path, commits: int, reserve: int = 0) -> Any:
    """The rows after `commits` transfers of crash_writer, made by stock SQLite
    (reserve: the reserved bytes of the database they are compared with)."""
    ref = sqlite.stock(path, reserve=reserve)
    wl.setup(ref)
    for i in range(commits):
        wl.transfers(ref, 3 * 100003 + i, 1)
    rows = wl.dump(ref)
    ref.close()
    return rows


def shell_count(path: Path, sql: str = "") -> "subprocess.CompletedProcess[str]":
    """The stock sqlite3 shell (Debian's 3.40.1): sql, then the number of rows of t."""
    return subprocess.run(["sqlite3", str(path), sql + "SELECT count(*) FROM t"],
                          capture_output=True, text=True)


def test_stock_sqlite_refuses_a_log_holding_frames(sqlite: Any, dbdir: Path) -> None:
    """The embed layout: its log is not SQLite's format."""
    path = dbdir / "w.db"
    new_db(sqlite, path, **EMBED)
    assert crash_writer(sqlite, path, 40, uri=EMBED) == 40
    # The stock sqlite3 shell (Debian's 3.40.1) fails loudly...
    shell = shell_count(path)
    assert shell.returncode != 0
    assert "unable to open database file" in shell.stderr
    # ...and so does stock SQLite inside this process (the unix VFS).
    stock = sqlite.stock(path)
    with pytest.raises(SQLiteError) as e:
        stock.execute("SELECT count(*) FROM t")
    assert e.value.code == 14                    # SQLITE_CANTOPEN
    stock.close()
    # Nothing was lost: waldio recovers every commit.
    conn = sqlite.waldio(path)
    assert wl.dump(conn) == expected_rows(sqlite, dbdir / "ref.db", 40, reserve=24)
    assert wl.status(conn)["layout"] == "embed"
    # While a waldio connection is open, stock SQLite is refused too (the
    # guard stays even when the log is empty) ...
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shell = shell_count(path)
    assert shell.returncode != 0 and "unable to open" in shell.stderr
    conn.close()
    # ... and after the last connection closed cleanly, stock SQLite reads
    # everything: the close checkpointed the log and dropped the guard.
    shell = shell_count(path)
    assert shell.returncode == 0, shell.stderr
    assert int(shell.stdout) == 40


def test_stock_sqlite_shares_a_standard_log(sqlite: Any, dbdir: Path) -> None:
    """The standard layout: stock SQLite reads what a dead waldio process
    committed, and writes while waldio has the database open."""
    path = dbdir / "w.db"
    new_db(sqlite, path)
    assert crash_writer(sqlite, path, 40) == 40
    assert Path(str(path) + "-wal").read_bytes()[4:8] == (3007000).to_bytes(4, "big")
    shell = shell_count(path)                    # recovers the dead process's frames
    assert (shell.returncode, shell.stdout) == (0, "40\n"), shell.stderr
    conn = sqlite.waldio(path)
    assert wl.dump(conn) == expected_rows(sqlite, dbdir / "ref.db", 40)
    assert wl.status(conn)["layout"] == "standard"
    shell = shell_count(path, "INSERT INTO t(k, v) VALUES (-1, x'00');")
    assert (shell.returncode, shell.stdout) == (0, "41\n"), shell.stderr
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 41
    wl.transfers(conn, 5, 3)
    assert wl.integrity(conn) == "ok"
    conn.close()
    shell = shell_count(path)
    assert (shell.returncode, shell.stdout) == (0, "44\n"), shell.stderr


def test_waldio_refuses_while_stock_sqlite_has_the_database(sqlite: Any, dbdir: Path) -> None:
    """Asked for the embed layout, which stock SQLite could not read."""
    path = dbdir / "s.db"
    stock = sqlite.stock(path, reserve=24)
    wl.setup(stock)
    # Refused by the open itself, with SQLITE_BUSY (contention: it ends when
    # stock SQLite closes) and the reason: not at the first statement, where
    # SQLite would retry a BUSY for the whole busy timeout first.
    with pytest.raises(SQLiteError) as e:
        sqlite.driver.connect(waldio.uri(path, **EMBED), vfs="waldio", timeout_ms=5000)
    assert e.value.code == 5
    assert "open in SQLite without waldio" in sqlite.last_error()
    stock.close()
    conn = sqlite.waldio(path, **EMBED)
    assert conn.execute("SELECT count(*) FROM acct")[0][0] == wl.ACCOUNTS
    assert wl.status(conn)["layout"] == "embed"
    conn.close()


def test_waldio_shares_the_database_with_stock_sqlite(sqlite: Any, dbdir: Path) -> None:
    """The default: a database stock SQLite has open is opened, and both
    write, each seeing the other's commits."""
    path = dbdir / "s.db"
    stock = sqlite.stock(path)
    wl.setup(stock)
    conn = sqlite.driver.connect(waldio.uri(path), vfs="waldio", timeout_ms=5000)
    try:
        for seed in range(4):
            wl.transfers(conn if seed % 2 else stock, seed, 5)
        assert wl.snapshot_ok(conn) == wl.snapshot_ok(stock) == (True, 20)
        assert wl.status(conn)["layout"] == "standard"
        assert wl.integrity(conn) == "ok"
    finally:
        conn.close()
        stock.close()


@pytest.mark.parametrize("asked,reserve,want", [("auto", 0, "standard"), ("embed", 24, "embed")])
def test_standard_wal_left_by_stock_sqlite_is_recovered(sqlite: Any, dbdir: Path, asked: str,
                                                        reserve: int, want: str) -> None:
    """auto keeps a stock WAL as it is (standard); embed converts its frames."""
    path = dbdir / "w.db"
    new_db(sqlite, path, layout=asked)     # closed cleanly
    assert path.read_bytes()[20] == reserve
    # Stock SQLite commits 60 transactions and crashes: a standard-format
    # WAL with committed, uncheckpointed frames is left behind.
    assert crash_writer(sqlite, path, 60, stock=True) == 60
    wal = Path(str(path) + "-wal").read_bytes()
    assert wal[4:8] == (3007000).to_bytes(4, "big")
    conn = sqlite.waldio(path, layout=asked)
    assert wl.dump(conn) == expected_rows(sqlite, dbdir / "ref.db", 60, reserve)
    assert wl.integrity(conn) == "ok"
    status = wl.status(conn)
    assert status["holds_frames"] and status["layout"] == want
    if asked == "auto":
        assert status["layout_reason"].startswith("an existing log keeps its layout"), status
    conn.close()
    assert not Path(str(path) + "-wal.waldio-convert").exists()


@pytest.mark.parametrize("asked,want", [("auto", "standard"), ("pad4k", "pad4k")])
def test_standard_wal_without_reserve(sqlite: Any, dbdir: Path, asked: str, want: str) -> None:
    """A stock database (no reserved bytes) with a standard WAL of committed
    transactions: an explicit embed layout is refused with the fix named; the
    default (auto) keeps the WAL standard, pad4k converts it, and both keep
    every commit and say why."""
    path = dbdir / "plain.db"
    stock = sqlite.stock(path)               # no reserved bytes
    wl.setup(stock)
    stock.close()
    assert crash_writer(sqlite, path, 30, stock=True) == 30
    with pytest.raises(SQLiteError) as e:
        sqlite.waldio(path, layout="embed").execute("SELECT count(*) FROM t")
    assert e.value.code == 14
    msg = sqlite.last_error()
    assert "fewer than 24 reserved bytes" in msg and "waldio convert" in msg
    conn = sqlite.waldio(path, layout=asked)
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 30
    assert wl.integrity(conn) == "ok"
    status = wl.status(conn)
    assert status["layout"] == want and status["layout_reason"], status
    conn.close()


def test_detach_hands_the_database_back_to_stock_sqlite(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "d.db"
    conn = sqlite.waldio(path)
    wl.setup(conn)
    wl.transfers(conn, 8, 50)
    rows = wl.dump(conn)
    assert conn.execute("PRAGMA journal_mode=DELETE")[0][0] == "delete"
    conn.close()
    assert not Path(str(path) + "-wal").exists()
    stock = sqlite.stock(path)
    assert wl.dump(stock) == rows
    stock.close()


def test_existing_database_without_reserve(sqlite: Any, dbdir: Path) -> None:
    """embed is refused with the fix named; auto (standard) and the padding
    layouts hold the database as it is."""
    path = dbdir / "old.db"
    stock = sqlite.stock(path)
    stock.execute("CREATE TABLE t(x)")
    stock.execute("INSERT INTO t VALUES(1)")
    stock.close()
    conn = sqlite.waldio(path, layout="embed")
    assert conn.execute("PRAGMA journal_mode=WAL")[0][0] == "wal"
    with pytest.raises(SQLiteError) as e:
        conn.execute("INSERT INTO t VALUES(2)")
    assert e.value.code == 14
    assert "waldio convert" in sqlite.last_error()
    conn.close()
    conn = sqlite.waldio(path)                     # auto: the standard layout
    conn.execute("INSERT INTO t VALUES(2)")
    assert conn.execute("SELECT sum(x) FROM t")[0][0] == 3
    assert wl.status(conn)["layout"] == "standard"
    conn.close()
    conn = sqlite.waldio(path, layout="pad4k")     # the idle standard log, converted
    conn.execute("INSERT INTO t VALUES(3)")
    assert conn.execute("SELECT sum(x) FROM t")[0][0] == 6
    assert wl.status(conn)["layout"] == "pad4k"
    conn.close()


def test_page_with_bytes_in_the_reserved_tail_is_refused(sqlite: Any, dbdir: Path) -> None:
    """The embed layout keeps frame headers in the reserved tail of pages."""
    path = dbdir / "tail.db"
    conn = sqlite.waldio(path, **EMBED)
    wl.setup(conn)
    conn.execute("INSERT INTO t(k, v) VALUES(1, x'00')")
    conn.close()                                    # checkpointed into the db
    with open(path, "r+b") as f:                   # page 2 is t's root page:
        f.seek(2 * 4096 - 1)                       # another extension's byte
        f.write(b"\xab")                           # in its reserved tail
    conn = sqlite.waldio(path)                      # the log is embed's: kept
    with pytest.raises(SQLiteError) as e:
        conn.execute("INSERT INTO t(k, v) VALUES(2, x'00')")
    assert e.value.code == 10                       # SQLITE_IOERR
    assert "last 24 reserved bytes" in sqlite.last_error()
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 1
    assert wl.integrity(conn) == "ok"
    conn.close()


def test_page1_tail_in_use(sqlite: Any, dbdir: Path) -> None:
    """Reserved bytes another extension fills (a checksum, say): the auto
    layout (standard) stores pages as SQLite gives them, so the extension's
    bytes stay; embed, asked for, refuses the write and names pad4k."""
    path = dbdir / "ext.db"
    stock = sqlite.stock(path, reserve=32)
    stock.execute("CREATE TABLE t(x)")
    stock.execute("INSERT INTO t VALUES(1)")
    stock.close()
    with open(path, "r+b") as f:                   # the extension's bytes
        f.seek(4096 - 8)
        f.write(b"\x5a" * 8)
    conn = sqlite.waldio(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE u(x)")              # writes page 1
    conn.execute("INSERT INTO t VALUES(2)")
    assert wl.status(conn)["layout"] == "standard"
    assert conn.execute("SELECT sum(x) FROM t")[0][0] == 3
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert path.read_bytes()[4096 - 8:4096] == b"\x5a" * 8
    conn = sqlite.waldio(path, **EMBED)            # the idle standard log, converted
    with pytest.raises(SQLiteError) as e:
        conn.execute("CREATE TABLE v(x)")
    assert e.value.code == 10 and "pad4k" in sqlite.last_error()
    assert wl.status(conn)["layout"] == "embed"
    assert conn.execute("SELECT sum(x) FROM t")[0][0] == 3
    conn.close()


def test_page_size_smaller_than_a_block(sqlite: Any, dbdir: Path) -> None:
    """1 KiB pages (SQLite's default before 3.12): auto (standard) holds
    them, embed refuses."""
    conn = sqlite.waldio(dbdir / "small.db")
    conn.execute("PRAGMA page_size=1024")
    assert conn.execute("PRAGMA journal_mode=WAL")[0][0] == "wal"
    conn.execute("CREATE TABLE t(x)")
    conn.execute("INSERT INTO t VALUES(1)")
    status = wl.status(conn)
    assert (status["layout"], status["page_size"], status["io"]) == ("standard", 1024, "direct")
    assert wl.integrity(conn) == "ok"
    conn.close()
    conn = sqlite.waldio(dbdir / "small2.db", layout="embed")
    conn.execute("PRAGMA page_size=1024")
    with pytest.raises(SQLiteError):
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t(x)")
    assert "page size 1024" in sqlite.last_error()
    conn.close()


def test_bad_options_are_named(sqlite: Any, dbdir: Path) -> None:
    with pytest.raises(SQLiteError) as e:
        sqlite.waldio(dbdir / "x.db", layout="diagonal").execute("SELECT 1 FROM sqlite_master")
    assert e.value.code == 14
    assert "waldio_layout=diagonal" in sqlite.last_error()
    conn = sqlite.waldio(dbdir / "y.db")
    with pytest.raises(SQLiteError) as e:
        conn.execute("PRAGMA waldio_sync=full")
    assert "follow PRAGMA synchronous" in str(e.value)
    with pytest.raises(SQLiteError) as e:
        conn.execute("PRAGMA waldio_bogus")
    assert "unknown pragma" in str(e.value)
    assert conn.execute("PRAGMA waldio_sync=persistent")[0][0] == "persistent"
    assert conn.execute("PRAGMA waldio_flush_ms=20")[0][0] == "20"
    conn.close()


def tmpfs_dir() -> Path | None:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        dev, mnt, fstype = line.split()[:3]
        if fstype == "tmpfs" and os.access(mnt, os.W_OK) and mnt in ("/dev/shm", "/tmp", "/run"):
            return Path(mnt)
    return None


def test_tmpfs_has_no_direct_io(sqlite: Any) -> None:
    """The standard layout leaves the WAL to SQLite there (stock I/O, said
    why); embed, whose format needs waldio's writes, is refused unless
    waldio_io=auto allows its buffered fallback."""
    base = tmpfs_dir()
    if base is None:
        pytest.skip("no writable tmpfs mounted (looked for /dev/shm, /tmp, /run)")
    path = base / ("waldio-tmpfs-%d.db" % os.getpid())
    try:
        conn = sqlite.waldio(path)
        wl.setup(conn)
        wl.transfers(conn, 1, 20)
        status = wl.status(conn)
        assert (status["layout"], status["io"]) == ("standard", "stock"), status
        assert "tmpfs" in status["io_reason"]
        assert wl.integrity(conn) == "ok"
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        conn = sqlite.waldio(path, **EMBED)
        with pytest.raises(SQLiteError) as e:
            wl.setup(conn)
        conn.close()
        assert e.value.code == 14
        msg = sqlite.last_error()
        assert "direct I/O is not available" in msg and "waldio_io=auto" in msg
        conn = sqlite.waldio(path, io="auto", **EMBED)
        wl.setup(conn)
        wl.transfers(conn, 1, 20)
        assert (wl.status(conn)["io"], wl.status(conn)["layout"]) == ("buffered", "embed")
        assert wl.integrity(conn) == "ok"
        conn.close()
    finally:
        for suffix in ("", "-wal", "-wal-shm", "-shm", "-journal"):
            Path(str(path) + suffix).unlink(missing_ok=True)


def test_damaged_superblock_is_refused(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "c.db"
    new_db(sqlite, path, **EMBED)
    crash_writer(sqlite, path, 10, uri=EMBED)
    with open(str(path) + "-wal", "r+b") as f:
        f.seek(50)
        f.write(b"\x99")
    with pytest.raises(SQLiteError):
        sqlite.waldio(path).execute("SELECT count(*) FROM t")
    msg = sqlite.last_error()
    assert "block 0 of the log is damaged" in msg and "waldio recover" in msg


def test_damaged_wal_header_with_frames_is_refused(sqlite: Any, dbdir: Path) -> None:
    """The standard layout never leaves data after a broken header: a header
    that fails its checksum in front of frames is damage, where stock SQLite
    would silently see an empty log."""
    path = dbdir / "c.db"
    new_db(sqlite, path)
    crash_writer(sqlite, path, 10)
    with open(str(path) + "-wal", "r+b") as f:
        f.seek(10)                                    # the page size field
        f.write(b"\x99")
    with pytest.raises(SQLiteError) as e:
        sqlite.waldio(path).execute("SELECT count(*) FROM t")
    assert e.value.code & 0xff == 11                  # SQLITE_CORRUPT
    assert "WAL header (bytes 0..31) is damaged" in sqlite.last_error()


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("frame", [1, 17, 40])
def test_damaged_frame_is_recovered_like_stock_sqlite(sqlite: Any, dbdir: Path,
                                                      frame: int) -> None:
    """A flipped byte in frame k of an embed log: waldio keeps exactly what
    stock SQLite keeps when the same frame of its own WAL is damaged
    (everything before it)."""
    results = []
    for kind in ("waldio", "stock"):
        d = dbdir / kind
        d.mkdir()
        path = d / "db"
        if kind == "waldio":
            new_db(sqlite, path, **EMBED)
        else:
            c = sqlite.stock(path, reserve=24)
            wl.setup(c)
            c.close()
        assert crash_writer(sqlite, path, 30, stock=(kind == "stock")) == 30
        if kind == "waldio":
            offset = SLOT0 * frame + 100             # inside frame k's page
        else:
            offset = STANDARD_PAGE0 + (frame - 1) * (4096 + 24)
        flip_byte(Path(str(path) + "-wal"), offset)
        conn = sqlite.waldio(path) if kind == "waldio" else sqlite.stock(path)
        results.append((wl.dump(conn), wl.integrity(conn)))
        conn.close()
    assert results[0] == results[1]
    assert results[0][1] == "ok"


@pytest.mark.parametrize("frame", [1, 17, 40])
def test_damaged_frame_of_a_standard_log_is_recovered_like_stock_sqlite(
        sqlite: Any, dbdir: Path, frame: int) -> None:
    """A standard log is SQLite's WAL: a copy of the files a dead process
    left, damaged at the same byte of frame k, opened by stock SQLite and
    through waldio, gives the same database."""
    path = dbdir / "db"
    new_db(sqlite, path)
    assert crash_writer(sqlite, path, 30) == 30
    copy = dbdir / "copy"
    shutil.copyfile(path, copy)
    shutil.copyfile(str(path) + "-wal", str(copy) + "-wal")
    offset = STANDARD_PAGE0 + (frame - 1) * (4096 + 24)
    assert os.path.getsize(str(path) + "-wal") > offset
    results = []
    for p, conn_of in ((path, sqlite.waldio), (copy, sqlite.stock)):
        flip_byte(Path(str(p) + "-wal"), offset)
        conn = conn_of(p)
        results.append((wl.dump(conn), wl.integrity(conn)))
        conn.close()
    assert results[0] == results[1]
    assert results[0][1] == "ok"


def test_full_disk(sqlite: Any) -> None:
    from waldio import fs as fsimage
    reason = fsimage.unavailable_reason("ext4")
    if reason:
        pytest.skip(reason)
    with fsimage.loop_filesystem("ext4", size_mib=32) as fs:
        path = Path(fs.mountpoint) / "full.db"
        conn = sqlite.waldio(path, prealloc="256K")
        wl.setup(conn)
        conn.execute("PRAGMA wal_autocheckpoint=0")
        filler = Path(fs.mountpoint) / "filler"
        with open(filler, "wb") as f:              # leave almost nothing free
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
                    os.fsync(f.fileno())
            except OSError:
                pass
        committed, error = 0, None
        for i in range(400):                        # the log must grow: it can't
            try:
                wl.transfers(conn, 1000 + i, 1)
                committed += 1
            except SQLiteError as e:
                error = e
                break
        assert error is not None and error.code == 13          # SQLITE_FULL
        assert "No space left" in sqlite.last_error()
        try:
            conn.execute("ROLLBACK")
        except SQLiteError:
            pass
        filler.unlink()
        wl.transfers(conn, 5000, 20)                # space again: carries on
        assert wl.integrity(conn) == "ok"
        ok, count = wl.snapshot_ok(conn)
        assert ok and count == committed + 20
        conn.close()
