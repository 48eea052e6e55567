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
  * journal_size_limit bounds the log left by the last connection.
Every case also checks the data, so a wrong path cannot pass by losing it.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict

import workloads as wl


def stats(conn: Any) -> Dict[str, int]:
    return json.loads(conn.execute("PRAGMA waldio_stats")[0][0])


def fresh(sqlite: Any, path: Path, synchronous: str, **uri: Any) -> Any:
    conn = sqlite.waldio(path, **uri)
    wl.setup(conn, sync=synchronous)
    conn.execute("PRAGMA waldio_stats=reset")
    return conn


def test_small_full_commits_are_direct_writes(sqlite: Any, dbdir: Path) -> None:
    conn = fresh(sqlite, dbdir / "f.db", "FULL")
    wl.inserts(conn, 1, n=50)
    st = stats(conn)
    assert st["buffered_writes"] == 0, st
    assert st["log_writes"] == 50 and st["flushes"] == 50, st
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 50
    conn.close()


def test_normal_commits_go_through_the_page_cache_and_are_flushed(sqlite: Any,
                                                                   dbdir: Path) -> None:
    conn = fresh(sqlite, dbdir / "n.db", "NORMAL", flush_ms=20)
    wl.inserts(conn, 2, n=50)
    st = stats(conn)
    assert st["buffered_writes"] == st["log_writes"] == 50, st
    deadline = time.monotonic() + 10
    while stats(conn)["timer_flushes"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stats(conn)["timer_flushes"] >= 1            # the loss bound's flush
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 50
    conn.close()


def test_ns_keeps_direct_normal_commits(sqlite: Any, dbdir: Path) -> None:
    conn = fresh(sqlite, dbdir / "ns.db", "NORMAL", sync="ns")
    assert conn.execute("PRAGMA waldio_sync")[0][0] == "ns"
    wl.inserts(conn, 3, n=20)
    st = stats(conn)
    assert st["buffered_writes"] == 0 and st["log_writes"] == 20, st
    conn.close()


def test_off_is_never_flushed_by_waldio(sqlite: Any, dbdir: Path) -> None:
    conn = fresh(sqlite, dbdir / "o.db", "OFF", flush_ms=5)
    wl.inserts(conn, 4, n=30)
    time.sleep(0.1)
    st = stats(conn)
    assert st["buffered_writes"] == 30 and st["flushes"] == 0, st
    conn.close()


def test_large_transaction_appends_without_zero_fill(sqlite: Any, dbdir: Path) -> None:
    conn = fresh(sqlite, dbdir / "big.db", "FULL", prealloc="256K")
    conn.execute("PRAGMA cache_size=-512")              # force spills
    conn.execute("BEGIN")
    for i in range(3000):
        conn.execute("INSERT INTO t(k, v) VALUES(?, randomblob(1000))", (i,))
    conn.execute("COMMIT")
    st = stats(conn)
    frames_bytes = (st["frames_written"] + st["page_overwrites"]) * 4096
    assert st["prealloc_extends"] == 0, st               # no zero-fill growth
    assert st["buffered_writes"] == st["log_writes"] - st["block0_writes"], st
    assert st["bytes_written"] <= 1.1 * frames_bytes + 4096, st
    assert os.path.getsize(str(dbdir / "big.db-wal")) > 256 * 1024
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 3000
    assert wl.integrity(conn) == "ok"
    conn.close()
    conn = sqlite.waldio(dbdir / "big.db")
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 3000
    conn.close()


def test_journal_size_limit_bounds_the_idle_log(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "idle.db"
    wal = Path(str(path) + "-wal")
    conn = fresh(sqlite, path, "FULL", prealloc="1M")
    wl.inserts(conn, 5, n=10)
    conn.close()
    assert wal.stat().st_size == 1 << 20                 # default: kept
    conn = sqlite.waldio(path, prealloc="1M")
    conn.execute("PRAGMA journal_size_limit=0")
    wl.inserts(conn, 6, n=10)
    conn.close()
    assert wal.stat().st_size <= 8192                     # one header area
    conn = sqlite.waldio(path, prealloc="1M")              # and it reopens
    wl.inserts(conn, 7, n=10)
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 30
    assert wl.integrity(conn) == "ok"
    conn.close()
