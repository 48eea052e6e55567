"""Which path each kind of log write takes (wal_file.c, "the I/O policy"),
seen through PRAGMA waldio_stats, and the log's size after the last close.

  * a small commit with synchronous=FULL: one direct write, nothing through
    the page cache;
  * synchronous=NORMAL: commits through the page cache, made durable by the
    flusher within flush_ms; waldio_sync=ns keeps direct writes;
  * synchronous=OFF: the page cache, never flushed by waldio;
  * a transaction larger than one batch: its frames through the page cache,
    appended without zero-filling the log first (which would double its
    bytes), then one flush;
  * journal_size_limit bounds the log left by the last connection;
  * a new log is block 0 only: the first direct commit preallocates it, and
    a direct write into bytes a buffered write left unflushed flushes them
    first (wal_log.h L1); a log with synchronous=OFF writes nobody flushed
    is cut at the last close (to nothing, or to embed's block 0), before
    the kernel writes it back.
Every case also checks the data, so a wrong path cannot pass by losing it.
Each runs with the default layout of a new log, standard (SQLite's own WAL:
its 32-byte header, written at every restart, goes through the page cache),
and with embed (block 0 holds a superblock, frames whole blocks).
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import time
from pathlib import Path
from typing import Any, Dict

import pytest

import workloads as wl

LAYOUTS = ["standard", "embed"]
layouts = pytest.mark.parametrize("layout", LAYOUTS)


def stats(conn: Any) -> Dict[str, int]:
    return json.loads(conn.execute("PRAGMA waldio_stats")[0][0])


def fresh(sqlite: Any, path: Path, synchronous: str, **uri: Any) -> Any:
    """A new database in WAL mode, its statistics reset (uri: layout...)."""
    conn = sqlite.waldio(path, **uri)
    wl.setup(conn, sync=synchronous)
    conn.execute("PRAGMA waldio_stats=reset")
    return conn


@layouts
def test_small_full_commits_are_direct_writes(sqlite: Any, dbdir: Path, layout: str) -> None:
    conn = fresh(sqlite, dbdir / "f.db", "FULL", layout=layout)
    wl.inserts(conn, 1, n=50)
    st = stats(conn)
    assert st["buffered_writes"] == 0, st
    assert st["log_writes"] == 50 and st["flushes"] == 50, st
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 50
    conn.close()


@layouts
def test_normal_commits_go_through_the_page_cache_and_are_flushed(sqlite: Any, dbdir: Path,
                                                                   layout: str) -> None:
    conn = fresh(sqlite, dbdir / "n.db", "NORMAL", flush_ms=20, layout=layout)
    wl.inserts(conn, 2, n=50)
    st = stats(conn)
    assert st["buffered_writes"] == st["log_writes"] == 50, st
    deadline = time.monotonic() + 10
    while stats(conn)["timer_flushes"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stats(conn)["timer_flushes"] >= 1            # the loss bound's flush
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 50
    conn.close()


@layouts
def test_flusher_flushes_only_what_commits_owe(sqlite: Any, dbdir: Path, layout: str) -> None:
    """A checkpoint syncs the log, so the commit before it owes the flusher
    nothing: a transaction still open when the deadline passes must not have its
    spilled frames written back early (SQLite may overwrite them, and stock
    SQLite writes them once). Its own commit is flushed within flush_ms."""
    conn = fresh(sqlite, dbdir / "owed.db", "NORMAL", flush_ms=20, layout=layout)
    wl.inserts(conn, 9, n=1)                            # arms the flusher
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")      # and syncs the log
    # (On a loaded machine the flusher may have flushed that commit before
    # the checkpoint: what counts is what it does from here on.)
    before = stats(conn)["timer_flushes"]
    conn.execute("PRAGMA cache_size=-256")              # force spills
    conn.execute("BEGIN")
    for i in range(1500):
        conn.execute("INSERT INTO t(k, v) VALUES(?, randomblob(1000))", (1000 + i,))
    spilled = stats(conn)
    assert spilled["buffered_writes"] > 1, spilled
    time.sleep(0.2)                                     # ten deadlines
    st = stats(conn)
    assert st["timer_flushes"] == before, st
    conn.execute("COMMIT")
    deadline = time.monotonic() + 10
    while stats(conn)["timer_flushes"] == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stats(conn)["timer_flushes"] == before + 1
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 1501
    conn.close()


@layouts
def test_ns_keeps_direct_normal_commits(sqlite: Any, dbdir: Path, layout: str) -> None:
    conn = fresh(sqlite, dbdir / "ns.db", "NORMAL", sync="ns", layout=layout)
    assert conn.execute("PRAGMA waldio_sync")[0][0] == "ns"
    wl.inserts(conn, 3, n=20)
    st = stats(conn)
    assert st["buffered_writes"] == 0 and st["log_writes"] == 20, st
    conn.close()


@layouts
def test_off_is_never_flushed_by_waldio(sqlite: Any, dbdir: Path, layout: str) -> None:
    conn = fresh(sqlite, dbdir / "o.db", "OFF", flush_ms=5, layout=layout)
    wl.inserts(conn, 4, n=30)
    time.sleep(0.1)
    st = stats(conn)
    assert st["buffered_writes"] == 30 and st["flushes"] == 0, st
    conn.close()


@layouts
def test_large_transaction_appends_without_zero_fill(sqlite: Any, dbdir: Path,
                                                    layout: str) -> None:
    conn = fresh(sqlite, dbdir / "big.db", "FULL", prealloc="256K", layout=layout)
    conn.execute("PRAGMA cache_size=-512")              # force spills
    conn.execute("BEGIN")
    for i in range(3000):
        conn.execute("INSERT INTO t(k, v) VALUES(?, randomblob(1000))", (i,))
    conn.execute("COMMIT")
    st = stats(conn)
    frames_bytes = (st["frames_written"] + st["page_overwrites"]) * 4096
    assert st["prealloc_extends"] == 0, st               # no zero-fill growth
    assert page_cache_frames(st, layout) == st["log_writes"] - st["block0_writes"], st
    assert st["bytes_written"] <= 1.1 * frames_bytes + 4096, st
    assert os.path.getsize(str(dbdir / "big.db-wal")) > 256 * 1024
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 3000
    assert wl.integrity(conn) == "ok"
    conn.close()
    conn = sqlite.waldio(dbdir / "big.db")
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 3000
    conn.close()


@layouts
@pytest.mark.parametrize("mode", ["persistent", "ns"])
def test_spilled_commit_is_synced_without_a_shared_wal_index(sqlite: Any, dbdir: Path,
                                                             mode: str, layout: str) -> None:
    """persistent and ns promise that a NORMAL commit survives an OS crash when it
    returns. A transaction that spilled wrote its frames through the page cache; they
    are synced before COMMIT returns, also in locking_mode=EXCLUSIVE, where the
    wal-index is heap memory and SQLite never calls xShmBarrier."""
    path = dbdir / f"x-{mode}.db"
    conn = sqlite.waldio(path, sync=mode, flush_ms=60000, layout=layout)   # no timer flush
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")             # before WAL: heap memory
    wl.setup(conn, sync="NORMAL")
    conn.execute("PRAGMA cache_size=-256")                     # force spills
    conn.execute("PRAGMA waldio_stats=reset")
    conn.execute("BEGIN")
    for i in range(2000):
        conn.execute("INSERT INTO t(k, v) VALUES(?, randomblob(1000))", (i,))
    conn.execute("COMMIT")
    st = stats(conn)
    assert st["buffered_writes"] > 0, st                      # it did spill
    assert st["flushes"] >= 1 and st["timer_flushes"] == 0, st
    st0 = st
    wl.inserts(conn, 8, n=5)                                   # small commits stay cheap
    st = stats(conn)
    assert st["flushes"] == st0["flushes"], st
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 2005
    conn.close()


@layouts
def test_journal_size_limit_bounds_the_idle_log(sqlite: Any, dbdir: Path,
                                               layout: str) -> None:
    path = dbdir / "idle.db"
    wal = Path(str(path) + "-wal")
    conn = fresh(sqlite, path, "FULL", prealloc="1M", layout=layout)
    wl.inserts(conn, 5, n=10)
    conn.close()
    # Default: kept, as the direct commits preallocated it (256 KiB first).
    assert wal.stat().st_size == 256 << 10
    conn = sqlite.waldio(path, prealloc="1M")
    conn.execute("PRAGMA journal_size_limit=0")
    wl.inserts(conn, 6, n=10)
    conn.close()
    assert wal.stat().st_size <= (0 if layout == "standard" else 8192)   # a header area
    conn = sqlite.waldio(path, prealloc="1M")              # and it reopens
    wl.inserts(conn, 7, n=10)
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 30
    assert wl.integrity(conn) == "ok"
    conn.close()


def wal_size(path: Path) -> int:
    return os.path.getsize(str(path) + "-wal")


def page_cache_frames(st: Dict[str, int], layout: str) -> int:
    """Log writes through the page cache, but for a standard log's header
    (SQLite's 32 bytes at a restart, which waldio writes buffered). In the
    standard layout a generation's first commit, beside the header in
    block 0, is one of them (wal_file.c, the I/O policy)."""
    return st["buffered_writes"] - (st["block0_writes"] if layout == "standard" else 0)


def log_bytes(layout: str, frames: int) -> int:
    """A log of `frames` frames of 4 KiB pages, appended as SQLite appends:
    SQLite's header and frames, or embed's block 0 and one block a frame."""
    return 32 + frames * (4096 + 24) if layout == "standard" else 4096 * (1 + frames)


@layouts
def test_only_direct_commits_preallocate_a_new_log(sqlite: Any, dbdir: Path,
                                                  layout: str) -> None:
    for sync in ("NORMAL", "OFF"):
        conn = sqlite.waldio(dbdir / f"{sync}.db", flush_ms=60000, layout=layout)
        wl.setup(conn, sync=sync)
        wl.inserts(conn, 8, n=20)
        st = stats(conn)
        assert st["prealloc_extends"] == 0 and st["prealloc_bytes"] == 0, st
        # The header and the frames themselves, appended as stock SQLite does.
        frames = st["frames_written"]
        assert wal_size(dbdir / f"{sync}.db") == log_bytes(layout, frames), st
        assert conn.execute("SELECT count(*) FROM t")[0][0] == 20
        conn.close()
    conn = sqlite.waldio(dbdir / "full.db", layout=layout)
    wl.setup(conn, sync="FULL")                          # the first direct commit
    st = stats(conn)
    assert st["prealloc_extends"] == 1 and st["prealloc_bytes"] < 256 << 10, st
    assert wal_size(dbdir / "full.db") == 256 << 10
    conn.close()


@layouts
def test_a_direct_commit_flushes_buffered_bytes_it_lands_on(sqlite: Any, dbdir: Path,
                                                            layout: str) -> None:
    """OFF commits extend the log through the page cache and nobody flushes
    them; after a restart, a FULL commit's direct write lands on those
    blocks, whose allocation may not be durable yet: one flush first, then
    plain direct writes (L1). SQLite's sync of the new generation's header,
    before its first frame, is that flush: no flush of waldio's own, and as
    many as stock SQLite makes (issue 27)."""
    path = dbdir / "mixed.db"
    conn = fresh(sqlite, path, "OFF", layout=layout)
    wl.inserts(conn, 10, n=40)
    conn.execute("PRAGMA wal_checkpoint(RESTART)")       # frames restart at 1
    size = wal_size(path)
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA waldio_stats=reset")
    wl.inserts(conn, 11, n=5)
    st = stats(conn)
    assert st["prealloc_syncs"] == 0 and st["prealloc_extends"] == 0, st
    assert st["flushes"] == 5 + 1 and st["block0_writes"] == 1, st
    # Nothing allocated, nothing cut: the commits landed at the log's start,
    # directly but for the standard layout's first, beside the header.
    assert page_cache_frames(st, layout) == (layout == "standard"), st
    assert wal_size(path) == size, st
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 45
    conn.close()


@layouts
def test_another_processs_restart_makes_direct_writes_flush_again(
        sqlite: Any, dbdir: Path, layout: str) -> None:
    """What this process knew durable may have been cut and re-extended by
    another process (a TRUNCATE checkpoint, then commits through the page
    cache): after a new generation it flushes once before its next direct
    write: SQLite's sync of the new header, before its first frame."""
    from sql_peer import Peer
    path = dbdir / "peers.db"
    conn = fresh(sqlite, path, "FULL", layout=layout)
    wl.inserts(conn, 12, n=5)
    peer = Peer(sqlite.name, path)
    try:
        assert "error" not in peer.sql("PRAGMA synchronous=OFF")
        assert "error" not in peer.sql("PRAGMA wal_checkpoint(TRUNCATE)")   # cut
        for i in range(30):
            assert "error" not in peer.sql(f"INSERT INTO t(k, v) VALUES({1000 + i}, randomblob(300))")
        assert "error" not in peer.sql("PRAGMA wal_checkpoint(RESTART)")    # re-extended
    finally:
        peer.close()        # alone again: commits are written directly (durability.md)
    conn.execute("PRAGMA waldio_stats=reset")
    wl.inserts(conn, 13, n=3)
    st = stats(conn)
    assert st["prealloc_syncs"] == 0 and st["block0_writes"] == 1, st
    assert st["flushes"] == 3 + 1 and st["log_writes"] >= 3, st
    assert page_cache_frames(st, layout) == (layout == "standard"), st
    peer = Peer(sqlite.name, path)
    try:
        assert peer.sql("SELECT count(*) FROM t")["rows"] == [[38]]
    finally:
        peer.close()
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 38
    conn.close()


@layouts
def test_unflushed_off_log_is_cut_at_the_last_close(sqlite: Any, dbdir: Path,
                                                   layout: str) -> None:
    path = dbdir / "off.db"
    conn = fresh(sqlite, path, "OFF", layout=layout)
    wl.inserts(conn, 14, n=30)
    conn.close()
    # Nothing to write back: no log (standard, as stock SQLite), or block 0.
    assert wal_size(path) == (0 if layout == "standard" else 4096)
    conn = sqlite.waldio(path)
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 30
    assert wl.integrity(conn) == "ok"
    conn.close()


@layouts
def test_a_reader_process_reads_ahead_what_keeps_missing_the_page_cache(
        sqlite: Any, dbdir: Path, layout: str) -> None:
    """Frames written directly are not in the page cache: another process's
    point lookups read them one by one, its scan asks the kernel to read the
    snapshot ahead after a few misses (wal_log.c, read-ahead)."""
    from sql_peer import Peer
    path = dbdir / "scan.db"
    conn = fresh(sqlite, path, "FULL", layout=layout)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("BEGIN")
    for i in range(2000):
        conn.execute("INSERT INTO t(k, v) VALUES(?, randomblob(500))", (i,))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA waldio_stats=reset")
    for i in range(300):                                # direct commits
        conn.execute("UPDATE t SET v = randomblob(500) WHERE k = ?", ((i * 7919) % 2000,))
    assert page_cache_frames(stats(conn), layout) == (layout == "standard")
    want = conn.execute("SELECT count(*), sum(length(v)) FROM t")[0]
    peer = Peer(sqlite.name, path)
    try:
        for k in (5, 900, 1700):
            assert peer.sql(f"SELECT length(v) FROM t WHERE k = {k}")["rows"] == [[500]]
        st = json.loads(peer.sql("PRAGMA waldio_stats")["rows"][0][0])
        assert st["readaheads"] == 0 and 0 < st["device_reads"] < 8, st
        assert peer.sql("SELECT count(*), sum(length(v)) FROM t")["rows"] == [list(want)]
        st = json.loads(peer.sql("PRAGMA waldio_stats")["rows"][0][0])
        assert st["readaheads"] >= 1, st
        assert st["device_reads"] < st["disk_reads"], st   # the rest was cached
    finally:
        peer.close()
    conn.close()


def block0_cached(path: Path) -> bool:
    """Whether the log's block 0 is in the page cache: mincore(2) of a
    mapping, which (unlike a read that may not wait) starts no read itself."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(str(path) + "-wal", os.O_RDONLY)
    try:
        addr = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        vec = ctypes.create_string_buffer(1)
        try:
            assert libc.mincore(addr, 4096, vec) == 0, os.strerror(ctypes.get_errno())
        finally:
            libc.munmap(addr, 4096)
        return (vec.raw[0] & 1) == 1
    finally:
        os.close(fd)


def test_a_generations_first_commit_keeps_block_0_in_the_page_cache(
        sqlite: Any, dbdir: Path) -> None:
    """SQLite writes each generation's header, 32 bytes, through the page
    cache, and syncs it. The commit that begins beside it in block 0 goes
    the same way, as whole blocks (wal_file.c, the I/O policy): a direct
    write would drop block 0 from the cache, and the next generation's
    header write would make the kernel read it from the device inside that
    commit (update x1's p99, issue 27). The commits after it are direct."""
    path = dbdir / "gen.db"
    conn = fresh(sqlite, path, "FULL", layout="standard")
    for gen in range(3):
        wl.inserts(conn, 20 + gen, n=3)
        conn.execute("PRAGMA wal_checkpoint(RESTART)")      # the next commit restarts
        fd = os.open(str(path) + "-wal", os.O_RDONLY)
        os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        assert not block0_cached(path)
        conn.execute("PRAGMA waldio_stats=reset")
        wl.inserts(conn, 30 + gen, n=1)     # the header, then block 0 and on
        st = stats(conn)
        assert st["block0_writes"] == 1 and st["buffered_writes"] == 2, st
        assert st["flushes"] == 2 and st["edge_reads"] == 1, st
        assert block0_cached(path), gen
        wl.inserts(conn, 40 + gen, n=2)     # frames 2 and 3: direct
        st = stats(conn)
        assert st["buffered_writes"] == 2 and st["log_writes"] == 4, st
        assert st["edge_reads"] == 1, st    # frame 2's block: the copy kept (T2)
        assert block0_cached(path), gen
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 18
    assert wl.integrity(conn) == "ok"
    conn.close()
