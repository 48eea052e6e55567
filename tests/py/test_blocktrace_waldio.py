"""Block-level proof of waldio's claim, on a fresh journaled ext4 (loop device).

100 single-row autocommit inserts in waldio full mode must write one request
per commit into the log -- with embed, exactly its frames' 4 KiB blocks; with
the standard layout (the default), the blocks its frames cover, a 4120-byte
frame straddling two -- and nothing into the ext4 journal region, while
stock WAL on the same file system journals its own journal.

Needs root, loop devices and tracefs; skipped with the reason elsewhere.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import pytest

from waldio import fs as fsimage
from waldio.trace import block as blocktrace

COMMITS = 100
BLOCK = 4096


def skip_reason() -> str | None:
    return fsimage.unavailable_reason("ext4") or blocktrace.trace_unavailable_reason()


pytestmark = pytest.mark.skipif(skip_reason() is not None,
                                reason=skip_reason() or "")


def prepare(conn: Any) -> None:
    """A table without indexes: one insert dirties exactly one page."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE m(id INTEGER PRIMARY KEY, v BLOB)")
    # A new log is block 0 only; direct commits preallocate it as they go
    # (doubling from 256 KiB). Grow it past the traced window, then restart
    # it: the window's commits reuse preallocated blocks, as a log in use does.
    for _ in range(COMMITS + 20):
        conn.execute("INSERT INTO m(v) VALUES(zeroblob(100))")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("INSERT INTO m(v) VALUES(zeroblob(100))")   # a new generation


def traced_commits(conn: Any, fs: Any, db: Path) -> Dict[str, Any]:
    """Trace COMMITS one-row inserts; classify every written sector."""
    os.sync()                                   # nothing pending from setup
    with blocktrace.BlockTrace([fs.device]) as trace:
        for i in range(COMMITS):
            conn.execute("INSERT INTO m(v) VALUES(?)", (os.urandom(100),))
    files = {"wal": [str(db) + "-wal"], "db": [str(db)],
             "shm": [str(db) + "-shm", str(db) + "-wal-shm"]}
    layout = blocktrace.describe_layout(fs, files)
    report = blocktrace.classify(trace.requests, layout, trace.stats)
    assert trace.stats.complete, trace.stats
    return {"report": report, "dict": report.to_dict()}


@pytest.mark.parametrize("layout", ["standard", "embed"])
def test_waldio_full_writes_one_block_per_commit_and_no_journal(apsw_sqlite: Any,
                                                                layout: str) -> None:
    with fsimage.loop_filesystem("ext4") as fs:
        journal = Path("/sys/fs/ext4/%s/journal_task" % Path(fs.device).name)
        assert journal.read_text().strip() != "<none>"     # a journaled ext4
        db = Path(fs.path("waldio.db"))
        conn = apsw_sqlite.waldio(db, layout=layout)
        prepare(conn)
        conn.execute("PRAGMA waldio_stats=reset")
        result = traced_commits(conn, fs, db)
        stats = json.loads(conn.execute("PRAGMA waldio_stats")[0][0])
        conn.close()
    report = result["report"]
    wal = report.classes["wal"]
    frames = stats["frames_written"]
    # Each commit wrote its page(s) as frames; B-tree splits make a few
    # commits write two or three pages.
    assert COMMITS <= frames <= COMMITS + 8, stats
    # One write request per commit (a commit that split a page writes its 2-3
    # frames at once), carrying whole blocks: embed, exactly its frames' 4 KiB
    # blocks; standard, the blocks its 4120-byte frames cover, at most one
    # more than they fill.
    assert wal.write_requests == COMMITS == stats["log_writes"], result["dict"]
    if layout == "embed":
        assert wal.bytes_written == frames * BLOCK, result["dict"]
    else:
        assert frames * BLOCK < wal.bytes_written <= (frames + COMMITS) * BLOCK, result["dict"]
    # And the file system journaled nothing.
    assert report.written(blocktrace.FS_JOURNAL) == 0, result["dict"]
    assert report.written("db") == 0              # no checkpoint in the window
    assert report.flushes >= COMMITS
    assert stats["prealloc_extends"] == 0


def test_stock_wal_journals_its_journal(apsw_sqlite: Any) -> None:
    with fsimage.loop_filesystem("ext4") as fs:
        db = Path(fs.path("stock.db"))
        conn = apsw_sqlite.stock(db)
        prepare(conn)
        result = traced_commits(conn, fs, db)
        conn.close()
    report = result["report"]
    # The growing WAL is appended: each fdatasync commits ext4's journal.
    assert report.written(blocktrace.FS_JOURNAL) >= COMMITS * BLOCK, result["dict"]
    # Each 4120-byte frame straddles blocks: more than one block per commit.
    assert report.written("wal") > COMMITS * BLOCK
