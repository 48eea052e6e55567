"""SQLite-level tests: the same workloads through waldio and through stock
SQLite, on both SQLite builds, compared row by row and integrity-checked.
Each runs with the default layout of a new log, standard (SQLite's own WAL),
and with embed (frame headers in the pages' reserved bytes; on apsw's SQLite
only, to save time); the stock reference gets the same reserved bytes, so its
B-trees and frame counts are the waldio database's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict

import pytest

import workloads as wl
from waldio import logformat

WORKER = str(Path(__file__).resolve().parent / "worker.py")
LAYOUTS = ["standard", "embed"]


def both_layouts(test: Any) -> Any:
    """Run with each of LAYOUTS: embed on apsw's SQLite only, the default
    layout on both builds (time)."""
    return pytest.mark.second_layout_on_apsw(pytest.mark.parametrize("layout", LAYOUTS)(test))
RESERVE = {"standard": 0, "embed": 24, "pad4k": 0, "pad8k": 0}
# What a TRUNCATE checkpoint leaves: nothing, as stock SQLite, or block 0.
AFTER_TRUNCATE = {"standard": 0, "embed": 4096}
# The wal-index: SQLite's own, or waldio's beside the log.
WAL_INDEX = {"standard": "-shm", "embed": "-wal-shm"}


def run_both(sqlite: Any, dbdir: Path, fn: Any, *, synchronous: str = "FULL",
             page_size: int | None = None, **options: Any) -> Dict[str, Any]:
    """Run fn(conn) on a waldio database and a stock one; return both results."""
    out = {}
    for kind in ("waldio", "stock"):
        path = dbdir / ("%s.db" % kind)
        if kind == "waldio":
            conn = sqlite.waldio(path, **options)
        else:
            conn = sqlite.stock(path, reserve=RESERVE[options.get("layout", "standard")])
        wl.setup(conn, page_size=page_size, sync=synchronous)
        ret = fn(conn)
        out[kind] = {"ret": ret, "rows": wl.dump(conn), "integrity": wl.integrity(conn)}
        if kind == "waldio":
            out["stats"] = wl.stats(conn)
            out["status"] = wl.status(conn)
        conn.close()
    return out


def assert_same(out: Dict[str, Any]) -> None:
    assert out["waldio"]["integrity"] == "ok"
    assert out["stock"]["integrity"] == "ok"
    assert out["waldio"]["ret"] == out["stock"]["ret"]
    assert out["waldio"]["rows"] == out["stock"]["rows"]


def stock_rows(sqlite: Any, path: Path, transfers: list[tuple[int, int]]) -> Any:
    """The rows stock SQLite holds after running `transfers` [(seed, n), ...]
    on a new database (rows do not depend on the reserved bytes)."""
    ref = sqlite.stock(path)
    try:
        wl.setup(ref)
        for seed, n in transfers:
            wl.transfers(ref, seed, n)
        return wl.dump(ref)
    finally:
        ref.close()


def reopen_rows(sqlite: Any, path: Path, **options: Any) -> Any:
    conn = sqlite.waldio(path, **options)
    try:
        assert wl.integrity(conn) == "ok"
        return wl.dump(conn)
    finally:
        conn.close()


@both_layouts
@pytest.mark.parametrize("sync", ["FULL", "NORMAL"])
@pytest.mark.parametrize("workload", sorted(wl.WORKLOADS))
def test_workload_matches_stock(sqlite: Any, dbdir: Path, workload: str, sync: str,
                                layout: str) -> None:
    out = run_both(sqlite, dbdir, lambda c: wl.WORKLOADS[workload](c, 42),
                   synchronous=sync, layout=layout)
    assert_same(out)
    st = out["stats"]
    assert st["frames_written"] > 0
    assert out["status"]["io"] == "direct" and out["status"]["layout"] == layout
    if workload == "big_transaction":
        # The cache spill really happened: pages rewritten in place, then
        # headers rewritten by walRewriteChecksums.
        assert st["page_overwrites"] > 0 and st["header_rewrites"] > 0
    if workload == "checkpoints":
        assert st["logical_truncates"] >= 2
        # The workload ends with a TRUNCATE checkpoint: it leaves 0 bytes, as
        # stock SQLite, or embed's header block (the close adds nothing).
        assert os.path.getsize(dbdir / "waldio.db-wal") == AFTER_TRUNCATE[layout]
    # Closed and reopened: same rows (clean close and recovery paths).
    assert reopen_rows(sqlite, dbdir / "waldio.db") == out["stock"]["rows"]


@pytest.mark.parametrize("layout,page_size", [
    ("standard", 1024), ("standard", 4096), ("standard", 16384), ("standard", 65536),
    ("embed", 4096), ("embed", 8192), ("embed", 16384), ("embed", 32768),
    ("embed", 65536), ("pad4k", 1024), ("pad4k", 4096), ("pad4k", 8192),
    ("pad8k", 4096), ("pad8k", 16384)])
def test_page_sizes_and_layouts(sqlite: Any, dbdir: Path, layout: str, page_size: int) -> None:
    def work(c: Any) -> Any:
        wl.crud(c, 7, n=120)
        wl.big_transaction(c, 8)
        return c.execute("PRAGMA page_size")[0][0]
    out = run_both(sqlite, dbdir, work, page_size=page_size, layout=layout)
    assert_same(out)
    assert out["waldio"]["ret"] == page_size
    assert out["status"]["layout"] == layout
    assert out["status"]["page_size"] == page_size
    slot = out["status"]["frame_bytes"]
    if layout == "standard":
        assert slot == page_size + 24            # SQLite's own frames
    elif layout == "embed":
        assert slot == page_size                 # one frame = one page
    else:
        assert slot % 4096 == 0 and slot >= page_size + 4096
    assert reopen_rows(sqlite, dbdir / "waldio.db", layout=layout) == out["stock"]["rows"]


@both_layouts
def test_vacuum_keeps_reserve(sqlite: Any, dbdir: Path, layout: str) -> None:
    def work(c: Any) -> Any:
        wl.crud(c, 3, n=200)
        c.execute("DELETE FROM t WHERE id % 2 = 0")
        c.execute("VACUUM")
        return c.execute("PRAGMA page_count")[0][0]
    out = run_both(sqlite, dbdir, work, layout=layout)
    assert_same(out)
    header = (dbdir / "waldio.db").read_bytes()[:100]
    assert header[20] == RESERVE[layout]     # reserved bytes per page, set at creation
    assert (dbdir / "stock.db").read_bytes()[20] == RESERVE[layout]   # the reference too


@both_layouts
def test_wal_restart_reuses_the_preallocated_log(sqlite: Any, dbdir: Path, layout: str) -> None:
    extends = []

    def work(c: Any) -> Any:
        ckpts = []
        for cycle in range(12):
            wl.crud(c, cycle, n=60)
            ckpts.append(tuple(c.execute("PRAGMA wal_checkpoint(PASSIVE)")[0]))
            rows = c.execute("PRAGMA waldio_stats")          # none on stock
            if rows:
                extends.append(json.loads(rows[0][0])["prealloc_extends"])
        return ckpts
    out = run_both(sqlite, dbdir, work, layout=layout)
    assert_same(out)
    # The first cycle's direct commits preallocated the log; every later
    # cycle restarted it at frame 1 and never had to grow it.
    assert len(extends) == 12 and extends[0] >= 1
    assert extends[-1] == extends[0], extends
    assert out["stats"]["block0_writes"] >= 12


@both_layouts
def test_journal_size_limit(sqlite: Any, dbdir: Path, layout: str) -> None:
    sizes = []

    def work(c: Any) -> Any:
        c.execute("PRAGMA wal_autocheckpoint=0")
        wl.crud(c, 5, n=400)             # grows past the 256K preallocation
        c.execute("PRAGMA journal_size_limit=65536")
        res = [tuple(c.execute("PRAGMA wal_checkpoint(TRUNCATE)")[0])]
        sizes.append((dbdir / "waldio.db-wal").stat().st_size)
        wl.crud(c, 6, n=50)
        res.append(tuple(c.execute("PRAGMA wal_checkpoint(RESTART)")[0]))
        wl.crud(c, 7, n=50)
        return res
    out = run_both(sqlite, dbdir, work, prealloc="256K", layout=layout)
    assert_same(out)
    # The TRUNCATE checkpoint leaves 0 bytes, as stock SQLite, or embed's
    # header block. After the last close, the limit bounds what the log keeps.
    assert sizes[0] == AFTER_TRUNCATE[layout]
    assert (dbdir / "waldio.db-wal").stat().st_size <= 65536
    assert out["stats"]["prealloc_extends"] >= 1


@both_layouts
def test_sync_modes(sqlite: Any, dbdir: Path, layout: str) -> None:
    for mode in ("full", "normal", "persistent"):
        d = dbdir / mode
        d.mkdir()
        sync = "NORMAL" if mode == "normal" else "FULL"
        opts = {"sync": "persistent"} if mode == "persistent" else {}
        out = run_both(sqlite, d, lambda c: wl.inserts(c, 11, n=150),
                       synchronous=sync, layout=layout, **opts)
        assert_same(out)
        st = out["stats"]
        assert out["status"]["sync"] == mode
        if mode == "persistent":
            # Every log write was O_DSYNC (one per commit: a commit's frames
            # go out together), except the superblock written at creation;
            # no flush per commit: only SQLite's first sync is a flush (until
            # this process has flushed or published, another process's
            # frames may be unflushed: wal_log.h L2). In the standard layout
            # group commit is on (auto, the default): at most one more, a
            # strict reader's wait for the first commit, whose ticket was
            # taken while its header write (through the page cache) was
            # unflushed.
            assert st["frames_written"] >= 150
            assert st["dsync_writes"] >= 150
            assert st["log_writes"] - st["dsync_writes"] <= 1
            assert st["flushes"] <= (2 if layout == "standard" else 1), json.dumps(st)
        elif mode == "full":
            # One write and one flush per commit.
            assert st["flushes"] >= 150 and st["dsync_writes"] == 0
            assert 150 <= st["log_writes"] <= 160
        else:
            # No flush per commit: far fewer flushes than commits.
            assert st["flushes"] < 50


@both_layouts
def test_threads_read_while_one_writes(sqlite: Any, dbdir: Path, layout: str) -> None:
    path = dbdir / "waldio.db"
    conn = sqlite.waldio(path, layout=layout)
    wl.setup(conn)
    stop = threading.Event()
    results = []

    def reader() -> None:
        c = sqlite.waldio(path)
        reads = bad = max_seen = 0
        try:
            while not stop.is_set():
                ok, seen = wl.snapshot_ok(c)
                reads += 1
                bad += (not ok) + (seen < max_seen)
                max_seen = max(max_seen, seen)
        finally:
            c.close()
        results.append((reads, bad, max_seen))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    wl.transfers(conn, 99, 300)
    stop.set()
    for t in threads:
        t.join()
    assert len(results) == 3
    assert all(bad == 0 for _, bad, _ in results), results
    assert all(reads > 0 for reads, _, _ in results), results
    rows = wl.dump(conn)
    assert wl.integrity(conn) == "ok"
    conn.close()
    assert rows == stock_rows(sqlite, dbdir / "stock.db", [(99, 300)])


@both_layouts
def test_processes_read_while_one_writes(sqlite: Any, dbdir: Path, layout: str) -> None:
    """The readers and the writer open with auto: the log keeps its layout."""
    path = dbdir / "waldio.db"
    conn = sqlite.waldio(path, layout=layout)
    wl.setup(conn)
    conn.close()
    stop = dbdir / "stop"
    ready = [dbdir / ("ready-%d" % i) for i in range(2)]
    readers = [subprocess.Popen([sys.executable, WORKER, sqlite.name, "reader", str(path),
                                 json.dumps({"stop": str(stop), "ready": str(ready[i])})],
                                stdout=subprocess.PIPE, text=True) for i in range(2)]
    deadline = time.monotonic() + 120            # both read once before the writer starts
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    writer = subprocess.run([sys.executable, WORKER, sqlite.name, "writer", str(path),
                             json.dumps({"seed": 5, "n": 300})], timeout=300)
    assert writer.returncode == 0
    stop.touch()
    reports = [json.loads(r.communicate(timeout=60)[0]) for r in readers]
    assert all(r["bad"] == 0 and r["reads"] > 0 for r in reports), reports
    conn = sqlite.waldio(path)
    rows = wl.dump(conn)
    assert wl.integrity(conn) == "ok"
    conn.close()
    assert rows == stock_rows(sqlite, dbdir / "stock.db", [(5, 300)])


@both_layouts
@pytest.mark.parametrize("sync", ["FULL", "NORMAL"])
def test_reopen_recovers_committed_frames_after_a_crash(sqlite: Any, dbdir: Path,
                                                        sync: str, layout: str) -> None:
    path = dbdir / "waldio.db"
    conn = sqlite.waldio(path, layout=layout)
    wl.setup(conn)
    conn.close()
    proc = subprocess.run([sys.executable, WORKER, sqlite.name, "crash", str(path),
                           json.dumps({"seed": 3, "n": 150, "sync": sync})],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    committed = proc.stdout.split().count("committed")
    assert committed == 150
    # The dead process left a log holding frames: a process crash loses
    # nothing in any mode (direct writes are in the device, not in memory).
    wal = logformat.describe_database(path)["wal_file"]
    if layout == "embed":
        assert wal["header"]["kind"].startswith("waldio guard"), wal
        assert wal["superblock"]["holds_frames"], wal
    else:
        assert wal["commits"] >= committed, wal     # SQLite's own WAL, whole
    conn = sqlite.waldio(path)
    rows = wl.dump(conn)
    assert wl.integrity(conn) == "ok"
    conn.close()
    expected = [(3 * 100003 + i, 1) for i in range(committed)]
    assert rows == stock_rows(sqlite, dbdir / "stock.db", expected)


@both_layouts
def test_alternating_writer_processes_never_see_stale_frames(sqlite: Any, dbdir: Path,
                                                             layout: str) -> None:
    """Process A keeps its connection (and its cache of the frames it wrote)
    while process B restarts the log and overwrites the same frame numbers;
    A must read B's pages, not its cached ones."""
    path = dbdir / "waldio.db"
    a = sqlite.waldio(path, layout=layout)
    wl.setup(a)
    ref = sqlite.stock(dbdir / "stock.db", reserve=RESERVE[layout])
    wl.setup(ref)
    for round_, seed in enumerate((11, 12, 13, 14)):
        wl.transfers(a, seed, 40)                # A writes frames 1..n
        wl.transfers(ref, seed, 40)
        a.execute("PRAGMA wal_checkpoint(PASSIVE)")
        other = 100 + seed
        proc = subprocess.run([sys.executable, WORKER, sqlite.name, "writer", str(path),
                               json.dumps({"seed": other, "n": 30})], timeout=300)
        assert proc.returncode == 0              # B restarted the log: 1..m again
        wl.transfers(ref, other, 30)
        assert wl.dump(a) == wl.dump(ref), "round %d" % round_
        assert wl.integrity(a) == "ok"
    stats = wl.stats(a)
    assert stats["cache_invalidations"] >= 4     # A noticed B every round
    a.close()
    ref.close()


@both_layouts
@pytest.mark.parametrize("group", ["off", "async", "durable"])
def test_exclusive_locking_mode(sqlite: Any, dbdir: Path, group: str, layout: str) -> None:
    """locking_mode=EXCLUSIVE before the log opens: SQLite keeps the wal-index
    in heap memory, so there is no shared memory and no xShmBarrier."""
    path = dbdir / "x.db"
    def work(c: Any) -> Any:
        c.execute("PRAGMA locking_mode=EXCLUSIVE")
        wl.setup(c)
        wl.transfers(c, 21, 80)
        wl.big_transaction(c, 22)
        return wl.checkpoints(c, 23)
    conn = sqlite.waldio(path, group=group, layout=layout)
    ret = work(conn)
    rows = wl.dump(conn)
    assert wl.integrity(conn) == "ok"
    assert wl.status(conn)["layout"] == layout
    conn.close()
    assert not (dbdir / ("x.db" + WAL_INDEX[layout])).exists()   # heap-memory wal-index
    ref = sqlite.stock(dbdir / "ref.db", reserve=RESERVE[layout])
    assert work(ref) == ret
    assert wl.dump(ref) == rows
    ref.close()
    assert reopen_rows(sqlite, path) == rows
