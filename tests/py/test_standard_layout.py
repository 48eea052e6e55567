"""The standard layout (src/layout_standard.c): the -wal and -shm beside a
waldio database are exactly SQLite's, so stock SQLite shares the database at
any time -- reading, writing, checkpointing in every mode, limiting the log,
closing last -- while waldio processes commit, group durable included.

Judged by what SQLite itself accepts: the log parses as a WAL whose frames
SQLite's recovery would take (salts, chained checksums), no acknowledged
commit is missing, nothing was added that no process wrote, and
integrity_check passes.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import waldio
from waldio.logformat import FRAME_HDR, WAL_HDR, WAL_VERSION, header_ok, wal_checksum

MIX_WORKER = str(Path(__file__).resolve().parent / "mix_worker.py")


def _u32(b: bytes, off: int) -> int:
    return int(struct.unpack_from(">I", b, off)[0])


def committed_frames(wal: Path) -> Tuple[bytes, List[Tuple[int, bytes]]]:
    """SQLite's recovery, in Python: the header and every frame up to the
    last commit frame whose salts and chained checksum hold."""
    data = wal.read_bytes()
    hdr = data[:WAL_HDR]
    assert header_ok(hdr) and _u32(hdr, 4) == WAL_VERSION, "not a valid WAL header"
    page, big = _u32(hdr, 8), bool(_u32(hdr, 0) & 1)
    s = (_u32(hdr, 24), _u32(hdr, 28))
    out: List[Tuple[int, bytes]] = []
    pending: List[Tuple[int, bytes]] = []
    off = WAL_HDR
    while off + FRAME_HDR + page <= len(data):
        fh, pg = data[off:off + FRAME_HDR], data[off + FRAME_HDR:off + FRAME_HDR + page]
        if fh[8:16] != hdr[16:24] or _u32(fh, 0) == 0:
            break
        s = wal_checksum(pg, big, wal_checksum(fh[:8], big, s))
        if s != (_u32(fh, 16), _u32(fh, 20)):
            break
        pending.append((_u32(fh, 0), pg))
        if _u32(fh, 4):
            out += pending
            pending = []
        off += FRAME_HDR + page
    return hdr, out


def status(conn: Any) -> Dict[str, Any]:
    return json.loads(conn.execute("PRAGMA waldio")[0][0])


def stats(conn: Any) -> Dict[str, Any]:
    return json.loads(conn.execute("PRAGMA waldio_stats")[0][0])


def make_table(conn: Any) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, who TEXT, at REAL)")


def test_a_new_log_is_sqlites_own_wal(apsw_sqlite: Any, dbdir: Path) -> None:
    """A new database gets the standard layout: SQLite's WAL header, frames
    at SQLite's offsets with SQLite's checksums, zeros past them; SQLite's
    own -shm and nothing else beside the database (no reserve bytes)."""
    db = dbdir / "std.db"
    conn = apsw_sqlite.waldio(db)
    make_table(conn)
    for i in range(40):
        conn.execute("INSERT INTO t VALUES(?, ?, ?)", (i, "x" * (50 + 300 * (i % 3)), i))
    conn.execute("BEGIN")
    for i in range(40, 400):
        conn.execute("INSERT INTO t VALUES(?, ?, ?)", (i, "y" * 500, i))
    conn.execute("COMMIT")
    st = status(conn)
    assert st["layout"] == "standard" and st["wal_index"] == "sqlite"
    assert st["io"] == "direct"
    wal = dbdir / "std.db-wal"
    hdr, frames = committed_frames(wal)
    assert _u32(hdr, 8) == 4096
    mx = conn.execute("PRAGMA wal_checkpoint(PASSIVE)")[0][1]
    assert len(frames) == mx > 0                 # every frame SQLite counts
    end = WAL_HDR + len(frames) * (FRAME_HDR + 4096)
    assert wal.stat().st_size > end              # preallocated ...
    tail = wal.read_bytes()[end:end + 65536]
    assert tail == bytes(len(tail))              # ... with zeros
    # ... and the side file of group commit (auto, the default: flush_side.h)
    assert sorted(p.name for p in dbdir.iterdir()) == ["std.db", "std.db-shm", "std.db-wal",
                                                       "std.db-waldio"]
    assert (dbdir / "std.db").read_bytes()[20] == 0        # no reserved bytes
    conn.close()


def test_stock_checkpoints_and_limits_under_a_waldio_writer(apsw_sqlite: Any,
                                                            dbdir: Path) -> None:
    """A stock connection (SQLite's unix VFS, same process: the same -shm
    and locks) truncates the log, restarts it and limits it between waldio
    commits: waldio re-extends it where it needs to, and never loses a row."""
    db = dbdir / "mix.db"
    w = apsw_sqlite.waldio(db)
    make_table(w)
    s = apsw_sqlite.stock(db)
    wal = dbdir / "mix.db-wal"
    n = 0
    for mode in ("PASSIVE", "FULL", "RESTART", "TRUNCATE", "TRUNCATE"):
        for _ in range(30):
            w.execute("INSERT INTO t VALUES(?, 'waldio', 0)", (n,))
            n += 1
        s.execute("INSERT INTO t VALUES(?, 'stock', 0)", (n,))
        n += 1
        busy, log, done = s.execute("PRAGMA wal_checkpoint(%s)" % mode)[0]
        assert busy == 0 and log == done
        if mode == "TRUNCATE":
            assert wal.stat().st_size == 0          # as stock leaves it
    extends = stats(w)["prealloc_extends"]
    w.execute("INSERT INTO t VALUES(?, 'waldio', 0)", (n,))
    n += 1
    assert stats(w)["prealloc_extends"] == extends + 1  # re-extended, zero-filled
    assert wal.stat().st_size >= 256 << 10
    s.execute("PRAGMA journal_size_limit=0")
    for _ in range(20):
        s.execute("INSERT INTO t VALUES(?, 'stock', 0)", (n,))
        n += 1
    s.execute("PRAGMA wal_checkpoint(RESTART)")
    s.execute("INSERT INTO t VALUES(?, 'stock', 0)", (n,))     # restarts, limits
    n += 1
    w.execute("INSERT INTO t VALUES(?, 'waldio', 0)", (n,))
    n += 1
    for c in (w, s):
        assert c.execute("SELECT count(*), min(id), max(id) FROM t")[0] == (n, 0, n - 1)
        assert c.execute("PRAGMA integrity_check")[0][0] == "ok"
    _, frames = committed_frames(wal)
    assert frames                                # the last commits, as SQLite reads them
    w.close()
    s.close()


def test_stock_closes_last_and_waldio_comes_back(apsw_sqlite: Any, dbdir: Path) -> None:
    db = dbdir / "last.db"
    s = apsw_sqlite.stock(db)
    make_table(s)
    w = apsw_sqlite.waldio(db)
    for i in range(50):
        w.execute("INSERT INTO t VALUES(?, 'waldio', 0)", (i,))
    w.close()                                    # not the last: stock is open
    s.execute("INSERT INTO t VALUES(50, 'stock', 0)")
    s.close()                                    # the last: deletes -wal, -shm
    assert not (dbdir / "last.db-wal").exists()
    assert not (dbdir / "last.db-shm").exists()
    w = apsw_sqlite.waldio(db)
    w.execute("INSERT INTO t VALUES(51, 'waldio', 0)")
    assert w.execute("SELECT count(*) FROM t")[0][0] == 52
    assert status(w)["layout"] == "standard"
    w.close()


def test_last_close_leaves_a_bounded_log_recovery_cannot_replay(apsw_sqlite: Any,
                                                                 dbdir: Path) -> None:
    """The last connection's clean close keeps the idle bound of the log,
    but only after a durable header with new salts: no prefix of the old
    frames (older copies of pages the database now holds) can be replayed."""
    db = dbdir / "idle.db"
    w = apsw_sqlite.waldio(db)
    make_table(w)
    for i in range(300):                         # ~1.2 MB of frames
        w.execute("INSERT INTO t VALUES(?, ?, 0)", (i, "z" * 1000))
    old_salts = (dbdir / "idle.db-wal").read_bytes()[16:24]
    w.close()
    wal = dbdir / "idle.db-wal"
    assert wal.stat().st_size == 256 << 10
    hdr, frames = committed_frames(wal)
    assert hdr[16:24] != old_salts and frames == []
    s = apsw_sqlite.stock(db)
    assert s.execute("PRAGMA wal_checkpoint(PASSIVE)")[0] == (0, 0, 0)
    assert s.execute("SELECT count(*) FROM t")[0][0] == 300
    s.close()


@pytest.mark.parametrize("group", ["off", "durable", "async"])
def test_stock_processes_share_the_database_while_waldio_commits(dbdir: Path,
                                                                 group: str) -> None:
    """Three waldio processes commit (group mode as given) while a stock
    apsw process and a Python sqlite3 process write too and run every
    checkpoint mode and journal_size_limit, and the sqlite3 shell writes and
    checkpoints in short sessions of its own; a stock process closes last.
    Every acknowledged commit is there, nothing else is."""
    db = dbdir / "shared.db"
    acks = dbdir / "acks"
    sq = subprocess.run(["sqlite3", str(db), "PRAGMA journal_mode=WAL;"
                         " CREATE TABLE t(id INTEGER PRIMARY KEY, who TEXT, at REAL);"],
                        capture_output=True, text=True, check=True)
    assert sq.stdout.strip() == "wal"
    def spawn(role: str, base: int, n: int, **opts: Any) -> subprocess.Popen:
        opts.update(base=base, n=n, acks=str(acks))
        return subprocess.Popen([sys.executable, MIX_WORKER, role, str(db), json.dumps(opts)],
                                stdout=subprocess.PIPE, text=True)
    procs = [spawn("waldio", k * 100000, 250, uri={"group": group}) for k in range(1, 4)]
    procs.append(spawn("apsw", 500000, 150, every=10,
                       ops=["ckpt:PASSIVE", "read", "ckpt:RESTART", "ckpt:FULL",
                            "ckpt:TRUNCATE", "limit:0"]))
    procs.append(spawn("sqlite3", 600000, 150, every=15, sync="NORMAL",
                       ops=["read", "ckpt:TRUNCATE", "limit:65536", "ckpt:PASSIVE",
                            "limit:-1", "ckpt:RESTART"]))
    shell_ids = []
    for k in range(8):                           # short sessions, opened and closed
        rid = 700000 + k
        subprocess.run(["sqlite3", "-cmd", ".timeout 30000", str(db),
                        "INSERT INTO t VALUES(%d, 'shell', 0);"
                        " PRAGMA wal_checkpoint(%s);" % (rid, ("PASSIVE", "TRUNCATE")[k % 2])],
                       capture_output=True, text=True, check=True)
        shell_ids.append(rid)
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        results.append(json.loads(out.strip().splitlines()[-1]))
    acked = {int(x) for x in acks.read_text().split()} | set(shell_ids)
    for r in results[:3]:
        assert r["status"]["layout"] == "standard"
        assert r["status"]["group"] == group
        assert r["stats"]["frames_written"] > 0
    # A stock process closes last: the log and -shm go, as stock SQLite's do.
    last = subprocess.run(["sqlite3", str(db), "PRAGMA integrity_check; SELECT id FROM t"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert last[0] == "ok"
    assert set(map(int, last[1:])) == acked
    assert not (dbdir / "shared.db-wal").exists()


def test_a_device_that_is_not_powersafe_is_reported_from_the_first_question(
        apsw_sqlite: Any, dbdir: Path) -> None:
    """With psow=0 the standard layout reports the device as it is from the
    pager's open on, before any WAL: the pager then writes a changed page's
    whole 4096-byte sector into the log, as on stock (pager.c
    pagerWriteLargeSector). Before, waldio answered power-safe until its WAL
    opened, and the log held the changed page alone (found by walfault2-1)."""
    def pages_of_one_insert(db: Path, conn: Any) -> List[int]:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("INSERT INTO t VALUES(NULL, 'last')")
        return [pg for pg, _ in committed_frames(Path(f"{db}-wal"))[1]]

    def fill(conn: Any) -> None:
        conn.execute("PRAGMA page_size=1024")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        conn.execute("BEGIN")
        for i in range(300):
            conn.execute("INSERT INTO t VALUES(?, ?)", (i, "x" * 80))
        conn.execute("COMMIT")

    seen = {}
    for who in ("stock", "waldio"):
        db = dbdir / f"{who}.db"
        path = "file:%s?psow=0" % db
        conn = (apsw_sqlite.driver.connect(path, vfs="unix") if who == "stock"
                else apsw_sqlite.driver.connect(path + "&waldio_layout=standard",
                                                vfs="waldio"))
        fill(conn)
        seen[who] = pages_of_one_insert(db, conn)
        conn.close()
    assert len(set(seen["stock"])) > 1, seen     # the changed page's sector-mates
    assert seen["waldio"] == seen["stock"]       # and the same padding


def test_a_damaged_header_is_refused_and_recovered(apsw_sqlite: Any, dbdir: Path) -> None:
    """Frames of committed transactions behind a header another program
    damaged: stock SQLite would ignore them all; waldio refuses to open,
    and `waldio recover` rebuilds the header from the first frame."""
    db = dbdir / "dmg.db"
    code = ("import sys, os; sys.path.insert(0, %r); import conftest;"
            " from waldio import drivers;"
            " sq = conftest.Sqlite(conftest.load_waldio(drivers.driver_by_name('apsw')), 'apsw');"
            " c = sq.waldio(%r); c.execute('PRAGMA journal_mode=WAL');"
            " c.execute('CREATE TABLE t(id INTEGER PRIMARY KEY, v)');"
            " [c.execute('INSERT INTO t VALUES(?, ?)', (i, 'v' * 300)) for i in range(60)];"
            " os._exit(0)" % (str(Path(__file__).resolve().parent), str(db)))
    subprocess.run([sys.executable, "-c", code], check=True)   # killed: frames stay
    wal = dbdir / "dmg.db-wal"
    raw = bytearray(wal.read_bytes())
    raw[16] ^= 0xFF                              # salt-1: the header's checksum fails
    wal.write_bytes(bytes(raw))
    with pytest.raises(Exception) as e:
        apsw_sqlite.waldio(db).execute("SELECT count(*) FROM t")
    msg = waldio.last_error()
    assert "damaged" in msg and "waldio recover" in msg, (e.value, msg)
    out = subprocess.run([sys.executable, "-m", "waldio", "recover", str(db)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert (dbdir / "dmg.db-wal.damaged").read_bytes() == bytes(raw)
    conn = apsw_sqlite.waldio(db)
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 60
    assert conn.execute("PRAGMA integrity_check")[0][0] == "ok"
    conn.close()


def wal_table(sq: Any, db: Path, rows: int, size: int) -> Any:
    """A waldio connection to a new WAL database whose table t holds `rows`
    random blobs of `size` bytes, each its own commit."""
    conn = sq.waldio(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    for _ in range(rows):
        conn.execute("INSERT INTO t VALUES(randomblob(?))", (size,))
    return conn


def opens_whole_and_goes_on(sq: Any, db: Path, rows: int) -> None:
    """Stock SQLite reads the copy `stock.db` beside db with every row;
    waldio opens db with every row, intact, and its next commit (a new
    generation) is there after a reopen."""
    stock = sq.stock(db.parent / "stock.db")
    assert stock.execute("SELECT count(*) FROM t")[0][0] == rows
    stock.close()
    conn = sq.waldio(db)
    assert conn.execute("SELECT count(*) FROM t")[0][0] == rows
    assert conn.execute("PRAGMA integrity_check")[0][0] == "ok"
    conn.execute("INSERT INTO t VALUES(1)")          # a new generation begins
    conn.close()
    conn = sq.waldio(db)
    assert conn.execute("SELECT count(*) FROM t")[0][0] == rows + 1
    conn.close()


def test_a_header_torn_at_a_restart_loses_nothing(apsw_sqlite: Any, dbdir: Path) -> None:
    """SQLite writes a new generation's header only over a log a checkpoint
    copied whole into the database. A power loss during that write may leave
    any bytes there: every frame behind it is in the database, so waldio
    opens the database as stock SQLite does, with every row. One frame the
    database does not hold makes it the damage of the test above."""
    db = dbdir / "torn.db"
    conn = wal_table(apsw_sqlite, db, 20, 3000)
    assert conn.execute("PRAGMA wal_checkpoint(PASSIVE)")[0][0] == 0
    raw = bytearray((dbdir / "torn.db-wal").read_bytes())
    conn.close()
    raw[0:32] = random.Random(1).randbytes(32)
    for name in ("stock.db", "waldio.db", "newer.db"):
        shutil.copy(db, dbdir / name)
        (dbdir / (name + "-wal")).write_bytes(bytes(raw))
    opens_whole_and_goes_on(apsw_sqlite, dbdir / "waldio.db", 20)
    # The database's last page differs from its newest copy in the log.
    page = 4096
    with open(dbdir / "newer.db", "r+b") as f:
        f.seek(-page + 200, os.SEEK_END)
        f.write(b"\x01")
    with pytest.raises(Exception):
        apsw_sqlite.waldio(dbdir / "newer.db").execute("SELECT count(*) FROM t")
    assert "damaged" in waldio.last_error()


@pytest.mark.parametrize("after", [b"", bytes(4096 - 32)], ids=["emptied", "zeros"])
def test_a_header_torn_over_a_log_without_frames_opens_empty(
        apsw_sqlite: Any, dbdir: Path, after: bytes) -> None:
    """A TRUNCATE checkpoint empties the log; the next commit's header write
    (32 bytes) is torn by a power loss into any bytes. No frame follows it
    (the file ends, or holds zeros: frame 1 has no page number), so no header
    could make SQLite read one: waldio opens the database as stock SQLite
    does, with every row, and the next commit starts a new generation.
    (The crash model's fork and ckpt-proc workloads found this state.)"""
    db = dbdir / "emptied.db"
    conn = wal_table(apsw_sqlite, db, 10, 300)
    assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")[0][0] == 0
    conn.close()
    wal = dbdir / "emptied.db-wal"
    wal.write_bytes(random.Random(2).randbytes(32) + after)
    shutil.copy(db, dbdir / "stock.db")
    shutil.copy(wal, dbdir / "stock.db-wal")
    opens_whole_and_goes_on(apsw_sqlite, db, 10)


def test_group_commit_without_a_usable_side_file(apsw_sqlite: Any, dbdir: Path) -> None:
    """The flush region's side file cannot be used (here: a directory in its
    place): group commit falls back to every commit flushing itself, and
    PRAGMA waldio says why."""
    db = dbdir / "side.db"
    (dbdir / "side.db-waldio").mkdir()
    conn = apsw_sqlite.waldio(db, group="durable")
    make_table(conn)
    for i in range(20):
        conn.execute("INSERT INTO t VALUES(?, 'x', 0)", (i,))
    st = status(conn)
    assert st["flush_region"] == "none"
    assert "side.db-waldio" in st["flush_region_reason"]
    assert stats(conn)["flushes"] >= 20                # each commit its own
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 20
    conn.close()


def test_a_side_file_of_another_user_is_not_trusted(apsw_sqlite: Any, dbdir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the side file another owner")
    db = dbdir / "foreign.db"
    side = dbdir / "foreign.db-waldio"
    side.write_bytes(bytes(4096))
    os.chown(side, 65534, 65534)                 # nobody: neither the db's owner nor us
    conn = apsw_sqlite.waldio(db, group="durable")
    make_table(conn)
    conn.execute("INSERT INTO t VALUES(1, 'x', 0)")
    st = status(conn)
    assert st["flush_region"] == "none" and "owned by another user" in st["flush_region_reason"]
    conn.close()


def test_group_commit_uses_the_side_file(apsw_sqlite: Any, dbdir: Path) -> None:
    db = dbdir / "grp.db"
    conn = apsw_sqlite.waldio(db, group="durable")
    make_table(conn)
    conn.execute("INSERT INTO t VALUES(1, 'x', 0)")
    st = status(conn)
    assert st["flush_region"] == "side file"
    assert (dbdir / "grp.db-waldio").stat().st_size > 0
    assert not (dbdir / "grp.db-wal-shm").exists()
    conn.close()


STOCK_READER = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("SELECT count(*) FROM t").fetchall()   # maps -shm: holds its dead-man switch
print("ready", flush=True)
sys.stdin.read()
c.close()
"""


def _commit_until(conn: Any, first: int, want: Any, limit: int = 500) -> Dict[str, Any]:
    """Commit one row at a time, 5 ms apart, until want(stats) or limit rows."""
    st: Dict[str, Any] = {}
    for i in range(first, first + limit):
        conn.execute("INSERT INTO t VALUES(?, 'w', 0)", (i,))
        st = stats(conn)
        if want(st):
            break
        time.sleep(0.005)
    return st


def test_group_commit_keeps_its_read_lock_while_a_stock_process_shares(
        apsw_sqlite: Any, dbdir: Path) -> None:
    """A durable group commit gives its wal-index read lock back while it
    waits for its flush only while every process on the database runs
    waldio; while a stock process has it open the lock is kept, so that no
    stock checkpointer copies a commit that is not durable yet (interop.md).
    Who shares is counted (/proc/locks) only after -shm or the side file is
    opened or closed: never while the same processes commit on (shm_watch.h)."""
    db = dbdir / "share.db"
    # Every commit waits for a shared flush (one with no other near would
    # flush before its publication and never wait: wal_file.c).
    conn = apsw_sqlite.driver.connect(
        waldio.uri(db, group="durable") + "&waldio_flush_alone=0", vfs="waldio")
    make_table(conn)
    conn.execute("PRAGMA synchronous=FULL")
    st = _commit_until(conn, 0, lambda s: s["early_releases"] > 0)
    assert st["early_releases"] > 0, st                     # alone: given back

    conn.execute("PRAGMA waldio_stats=reset")
    for i in range(1000, 1100):
        conn.execute("INSERT INTO t VALUES(?, 'w', 0)", (i,))
    st = stats(conn)
    assert st["early_releases"] == 100 and st["sharer_counts"] == 0, st

    stock = subprocess.Popen([sys.executable, "-c", STOCK_READER, str(db)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert stock.stdout is not None and stock.stdout.readline().strip() == "ready"
        conn.execute("PRAGMA waldio_stats=reset")
        st = _commit_until(conn, 2000, lambda s: False, limit=60)
        assert st["sharer_counts"] == 1, st                 # the open was noticed
        assert st["early_releases"] == 0, st                # and the lock kept
    finally:
        stock.communicate("", timeout=30)
    assert stock.returncode == 0

    conn.execute("PRAGMA waldio_stats=reset")
    st = _commit_until(conn, 3000, lambda s: s["early_releases"] > 0)
    assert st["early_releases"] > 0 and st["sharer_counts"] >= 1, st   # the close too
    assert conn.execute("PRAGMA integrity_check")[0][0] == "ok"
    conn.close()


def test_memory_file_system_gets_stock_io(apsw_sqlite: Any) -> None:
    """tmpfs has no direct I/O: the log is SQLite's own, written as stock
    SQLite writes it, and PRAGMA waldio says so."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.statvfs(shm).f_bsize == 0:
        pytest.skip("no /dev/shm tmpfs here")
    d = shm / ("waldio-std-%d" % os.getpid())
    d.mkdir()
    try:
        conn = apsw_sqlite.waldio(d / "m.db")
        make_table(conn)
        conn.execute("INSERT INTO t VALUES(1, 'x', 0)")
        st = status(conn)
        assert st["io"] == "stock" and "tmpfs" in st["io_reason"]
        s = apsw_sqlite.stock(d / "m.db")
        assert s.execute("SELECT count(*) FROM t")[0][0] == 1
        s.close()
        conn.close()
    finally:
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


def test_convert_goes_both_ways(dbdir: Path) -> None:
    """`waldio convert` moves a database from the standard layout to embed
    and back; an existing log keeps its layout in between (auto)."""
    db = dbdir / "conv.db"
    conn = waldio.connect(db)
    make_table(conn)
    for i in range(100):
        conn.execute("INSERT INTO t VALUES(?, 'x', 0)", (i,))
    conn.close()

    def run(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "waldio", "convert", *args, str(db)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    def layout_and_rows() -> Tuple[str, int, int]:
        c = waldio.connect(db)
        try:
            return (c.execute("PRAGMA waldio_layout").fetchall()[0][0],
                    c.execute("SELECT count(*) FROM t").fetchall()[0][0],
                    c.execute("PRAGMA integrity_check").fetchall()[0][0] == "ok")
        finally:
            c.close()

    run()                                        # --to embed, the default
    assert (dbdir / "conv.db").read_bytes()[20] == 24
    assert layout_and_rows() == ("embed", 100, True)
    run("--to", "standard")
    assert layout_and_rows() == ("standard", 100, True)
    s = subprocess.run(["sqlite3", str(db), "SELECT count(*) FROM t"], capture_output=True,
                       text=True)
    assert s.stdout.strip() == "100"             # stock SQLite shares it again
