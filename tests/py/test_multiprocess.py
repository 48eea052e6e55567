"""Regression tests of issue 9: waldio under several processes, stacked
VFSes, ATTACH and re-initialization.

Each test failed before its fix:
  * a refused group-mode upgrade dropped the process's shared lock, so a
    second process could switch group mode on and hide its commits (group
    mode now joins other processes instead of being refused: issue 18);
  * a VFS stacked above waldio (apsw.VFS inheriting the default) crashed at
    the first WAL open (the WAL name was dereferenced as SQLite's own); one
    that transforms the bytes (here: XOR) had its WAL refused;
  * ATTACHed databases (no reserved bytes) were refused in WAL mode;
  * after apsw.shutdown()/initialize() new databases lost their reserve.
The cases that need fork() or a forced interleaving (concurrent first
opens, the conversion race, fork + exit, log growth) are in C
(tests/c/test_processes.c, tests/c/test_growth.c); here six processes of
each SQLite build also open one database together as a smoke test.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

import workloads as wl
from sql_peer import Peer

HERE = Path(__file__).resolve().parent


def run_script(dbdir: Path, template: str, db: str) -> "subprocess.CompletedProcess[str]":
    """Run a Python script (template, with %(here)s) in a new process on
    dbdir/db; it must exit 0. Returns the finished process."""
    script = dbdir / "script.py"
    script.write_text(template % {"here": str(HERE)})
    out = subprocess.run([sys.executable, str(script), str(dbdir / db)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out


@pytest.mark.parametrize("layout", ["standard", "embed"])
def test_group_mode_joins_other_processes(sqlite: Any, dbdir: Path, layout: str) -> None:
    """Group mode switched on while another process has the log open runs
    shared (issue 18): it used to be refused, and before that a refused
    upgrade dropped the process's shared lock, so a second process could
    switch group mode on and hide its commits. Commits of both processes,
    grouped or not, are visible to the other at once."""
    path = dbdir / "g.db"
    conn = sqlite.waldio(path, layout=layout)       # the peer keeps the log's layout
    wl.setup(conn)
    peer = Peer(sqlite.name, path)
    try:
        assert peer.sql("SELECT count(*) FROM acct")["rows"] == [[wl.ACCOUNTS]]
        assert peer.sql("PRAGMA waldio_group=async")["rows"] == [["async"]]
        assert json.loads(peer.sql("PRAGMA waldio")["rows"][0][0])["group_scope"] == "shared"
        assert conn.execute("PRAGMA waldio_group=durable")[0][0] == "durable"
        assert wl.status(conn)["group_scope"] == "shared"
        wl.transfers(conn, 3, 20)
        assert peer.sql("SELECT sum(bal) FROM acct")["rows"] == [[wl.TOTAL]]
        for i in range(20):
            assert "rows" in peer.sql("UPDATE acct SET bal=bal+1 WHERE id=%d" % (i % 10 + 1))
            assert "rows" in peer.sql("UPDATE acct SET bal=bal-1 WHERE id=%d" % (i % 10 + 2))
        ok, _ = wl.snapshot_ok(conn)
        assert ok
        assert peer.sql("PRAGMA integrity_check")["rows"] == [["ok"]]
    finally:
        peer.close()
    assert wl.integrity(conn) == "ok"
    conn.close()


OPENER = textwrap.dedent("""
    import atexit, shutil, sys, time, json
    sys.path.insert(0, %(here)r)
    import conftest
    atexit.register(shutil.rmtree, conftest._EXT_COPIES, True)
    from waldio import drivers
    drv, db, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    sq = conftest.Sqlite(conftest.load_waldio(drivers.driver_by_name(drv)), drv)
    while time.time() < start:
        pass
    try:
        conn = sq.waldio(db)
        conn.execute("PRAGMA busy_timeout=30000")
        n = conn.execute("SELECT count(*) FROM acct")[0][0]
        time.sleep(1)            # all six hold the log open at once
        print(json.dumps({"rows": n}))
        conn.close()
    except drivers.SQLiteError as e:
        print(json.dumps({"error": str(e)}))
""")


def test_processes_opening_together_after_a_clean_close(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "c.db"
    conn = sqlite.waldio(path)
    wl.setup(conn)
    conn.close()                              # clean: the log is idle
    script = dbdir / "opener.py"
    script.write_text(OPENER % {"here": str(HERE)})
    start = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, str(script), sqlite.name, str(path),
                               repr(start)], stdout=subprocess.PIPE, text=True)
             for _ in range(6)]
    answers = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert answers == [{"rows": wl.ACCOUNTS}] * 6


OTHERS_WRITES = 64        # src/wal_log.h LOG_OTHERS_WRITES


def test_full_commits_go_through_the_page_cache_while_others_use_the_log(
        sqlite: Any, dbdir: Path) -> None:
    """waldio full (no group commit) writes a commit directly while no other process
    has the log open; while one has, even one that never commits, its commits go
    through the page cache into the preallocated log, where the other process's
    reads find them (issue 27: each of those reads went to the device, inside SQLite's
    write lock when a writer made it; web at 16 processes ran at 0.92x stock FULL).
    After another process committed, the same for LOG_OTHERS_WRITES writes of its
    own, even once that process closed (a stock process holds no waldio lock).
    Every commit stays visible to the other process at once."""
    path = dbdir / "f.db"
    conn = sqlite.waldio(path)
    wl.setup(conn)

    def stats(c: Any) -> Dict[str, int]:
        rows = c.sql("PRAGMA waldio_stats")["rows"] if isinstance(c, Peer) \
            else c.execute("PRAGMA waldio_stats")
        return json.loads(rows[0][0])

    def commit(n: int, k: int) -> int:
        before = stats(conn)["buffered_writes"]
        for _ in range(n):
            conn.execute("INSERT INTO t(k, v) VALUES(?, zeroblob(3000))", (k,))
        return stats(conn)["buffered_writes"] - before

    def scan(peer: Peer) -> int:
        peer.sql("SELECT count(*) FROM acct")                # its log is open
        before = stats(peer)["device_reads"]
        assert peer.sql("SELECT count(*) FROM t")["rows"][0][0] == \
            conn.execute("SELECT count(*) FROM t")[0][0]
        peer.sql("SELECT sum(length(v)) FROM t")
        return stats(peer)["device_reads"] - before

    try:
        assert commit(20, 1) == 0, "alone: written directly"
        reader = Peer(sqlite.name, path)
        try:
            assert scan(reader) > 0, "the reader read the direct frames from the device"
            assert commit(20, 2) == 20, "a process has the log open: the page cache"
            assert scan(reader) == 0, "the reader found those commits in the page cache"
        finally:
            reader.close()
        assert commit(5, 3) == 0, "alone again: directly"
        writer = Peer(sqlite.name, path)
        writer.sql("INSERT INTO t(k, v) VALUES(4, zeroblob(3000))")
        writer.close()
        assert commit(OTHERS_WRITES + 10, 5) == OTHERS_WRITES
        assert commit(5, 6) == 0
        assert conn.execute("PRAGMA integrity_check") == [("ok",)]
        assert conn.execute("SELECT count(*) FROM t")[0][0] == \
            20 + 20 + 5 + 1 + OTHERS_WRITES + 10 + 5
    finally:
        conn.close()


WRITER = textwrap.dedent("""
    import atexit, shutil, sys, time
    sys.path.insert(0, %(here)r)
    import conftest
    atexit.register(shutil.rmtree, conftest._EXT_COPIES, True)
    from waldio import drivers
    drv, db, who, n, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
        float(sys.argv[5])
    sq = conftest.Sqlite(conftest.load_waldio(drivers.driver_by_name(drv)), drv)
    conn = sq.waldio(db)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA waldio_group=durable")
    while time.time() < start:
        time.sleep(0.001)
    for i in range(n):
        conn.execute("INSERT INTO t VALUES(?, ?, randomblob(100))", (who, i))
    conn.close()
""")


def test_a_saturating_load_still_restarts_the_log(sqlite: Any, dbdir: Path) -> None:
    """Four processes commit back to back in durable group mode: with no pause in
    which a checkpoint could copy the whole log unaided, the log used to grow
    without bound (about 2.5 blocks a commit, 120 MB here). restart_assist.c lets
    SQLite restart it: it must stay below a third of that. Both SQLite builds,
    because they take the write lock in two orders (apsw's before the read lock,
    SQLITE_ENABLE_SETLK_TIMEOUT; Debian's after it). The default layout."""
    saturate(sqlite, dbdir, "standard")


def test_a_saturating_load_still_restarts_an_embed_log(apsw_sqlite: Any, dbdir: Path) -> None:
    """The same with the embed layout (its flush region is in its own
    wal-index), on apsw's SQLite only: each run takes seconds."""
    saturate(apsw_sqlite, dbdir, "embed")


def saturate(sqlite: Any, dbdir: Path, layout: str) -> None:
    nproc, n = 4, 3000
    path = dbdir / "r.db"
    conn = sqlite.waldio(path, layout=layout)       # the writers keep its layout
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(who INTEGER, n INTEGER, pad BLOB, PRIMARY KEY(who, n))")
    conn.close()
    script = dbdir / "writer.py"
    script.write_text(WRITER % {"here": str(HERE)})
    start = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, str(script), sqlite.name, str(path), str(who),
                               str(n), repr(start)], stderr=subprocess.PIPE, text=True)
             for who in range(nproc)]
    log, largest = Path(str(path) + "-wal"), 0
    while any(p.poll() is None for p in procs):
        largest = max(largest, log.stat().st_size if log.exists() else 0)
        time.sleep(0.005)
    assert [p.communicate()[1] for p in procs] == [""] * nproc
    assert [p.returncode for p in procs] == [0] * nproc
    bound = nproc * n * 4096 * 5 // 2 // 3
    assert largest < bound, f"the log reached {largest >> 10} KiB"
    conn = sqlite.waldio(path)
    assert conn.execute("SELECT who, count(*) FROM t GROUP BY who") == \
        [(who, n) for who in range(nproc)]
    assert conn.execute("PRAGMA integrity_check") == [("ok",)]
    conn.close()


STACKED = textwrap.dedent("""
    import atexit, shutil, sys, apsw
    sys.path.insert(0, %(here)r)
    import conftest
    atexit.register(shutil.rmtree, conftest._EXT_COPIES, True)
    from waldio import drivers
    conftest.load_waldio(drivers.driver_by_name("apsw"))
    class Shim(apsw.VFS):
        def __init__(self):
            super().__init__("shim", base="")       # on top of the default: waldio
        def xOpen(self, name, flags):
            return ShimFile("", name, flags)     # inherit the default
    class ShimFile(apsw.VFSFile):
        def __init__(self, inheritfromvfsname, filename, flags):
            super().__init__(inheritfromvfsname, filename, flags)
    shim = Shim()
    db = apsw.Connection(sys.argv[1], vfs="shim")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t(x)")
    with db:
        for i in range(100):
            db.execute("INSERT INTO t VALUES(?)", (i,))
    print(db.execute("SELECT count(*), sum(x) FROM t").fetchall()[0],
          db.execute("PRAGMA integrity_check").fetchall()[0][0],
          "waldio" in db.execute("PRAGMA waldio").fetchall()[0][0])
    db.close()
""")


def test_vfs_stacked_above_waldio(dbdir: Path) -> None:
    out = run_script(dbdir, STACKED, "s.db")
    assert out.stdout.split() == ["(100,", "4950)", "ok", "True"]


XORED = textwrap.dedent("""
    import atexit, shutil, sys, apsw
    sys.path.insert(0, %(here)r)
    import conftest
    atexit.register(shutil.rmtree, conftest._EXT_COPIES, True)
    from waldio import drivers
    conftest.load_waldio(drivers.driver_by_name("apsw"))
    def xor(b):
        return bytes(x ^ 0xA5 for x in b)
    class Obfuscated(apsw.VFS):
        def __init__(self):
            super().__init__("obf", base="")         # above waldio
        def xOpen(self, name, flags):
            return File("", name, flags)
    class File(apsw.VFSFile):
        def xRead(self, n, off):
            return xor(super().xRead(n, off))
        def xWrite(self, data, off):
            super().xWrite(xor(data), off)
    vfs = Obfuscated()
    dbs = [apsw.Connection(sys.argv[1], vfs="obf") for _ in range(2)]
    dbs[0].execute("PRAGMA journal_mode=WAL")
    dbs[0].execute("CREATE TABLE t(x)")
    for i in range(200):
        dbs[i %% 2].execute("INSERT INTO t VALUES(?)", (i,))
    print(dbs[1].execute("SELECT count(*), sum(x) FROM t").fetchall()[0],
          dbs[1].execute("PRAGMA integrity_check").fetchall()[0][0],
          '"passthrough":true' in dbs[0].execute("PRAGMA waldio").fetchall()[0][0])
    for d in dbs:
        d.close()
""")


def test_vfs_transforming_the_bytes_above_waldio(dbdir: Path) -> None:
    """An encrypting shim above waldio: the file is not plain SQLite format,
    so waldio passes the database through (its WAL as stock SQLite's)."""
    out = run_script(dbdir, XORED, "x.db")
    assert out.stdout.split() == ["(200,", "19900)", "ok", "True"]
    assert (dbdir / "x.db").read_bytes()[:16] != b"SQLite format 3\0"


def test_attached_database_in_wal_mode(sqlite: Any, dbdir: Path) -> None:
    conn = sqlite.waldio(dbdir / "main.db")
    wl.setup(conn)
    conn.execute("ATTACH ? AS aux", (str(dbdir / "aux.db"),))
    assert conn.execute("PRAGMA aux.journal_mode=WAL")[0][0] == "wal"
    conn.execute("CREATE TABLE aux.u(x)")
    for i in range(20):
        conn.execute("INSERT INTO aux.u VALUES(?)", (i,))
    assert conn.execute("SELECT count(*) FROM aux.u")[0][0] == 20
    assert conn.execute("PRAGMA aux.integrity_check")[0][0] == "ok"
    assert os.path.getsize(str(dbdir / "aux.db-wal")) > 0     # a waldio log
    conn.close()
    stock = sqlite.waldio(dbdir / "aux.db")
    assert stock.execute("SELECT count(*) FROM u")[0][0] == 20
    stock.close()


REINIT = textwrap.dedent("""
    import atexit, shutil, sys, apsw
    sys.path.insert(0, %(here)r)
    import conftest
    atexit.register(shutil.rmtree, conftest._EXT_COPIES, True)
    from waldio import drivers
    conftest.load_waldio(drivers.driver_by_name("apsw"))
    import waldio
    apsw.shutdown()
    apsw.initialize()
    db = apsw.Connection(":memory:")
    db.enable_load_extension(True)
    db.load_extension(str(conftest._EXT_COPIES / "waldio-apsw.so"), waldio.ENTRY_POINT)
    db.close()
    db = apsw.Connection(waldio.uri(sys.argv[1], layout="embed"),
                         flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
                         | apsw.SQLITE_OPEN_URI)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t(x)")
    db.execute("INSERT INTO t VALUES(1)")
    print(db.execute("SELECT waldio_last_error() IS NOT NULL").fetchall()[0][0],
          '"layout":"embed"' in db.execute("PRAGMA waldio").fetchall()[0][0])
    db.close()
""")


def test_reinitialized_sqlite_keeps_the_per_connection_setup(dbdir: Path) -> None:
    """The per-connection setup: the reserve a new database that asks for
    the embed layout gets, and waldio_last_error()."""
    out = run_script(dbdir, REINIT, "r.db")
    assert out.stdout.split() == ["1", "True"]
    assert (dbdir / "r.db").read_bytes()[20] == 24       # reserved bytes
