"""Block-level proof of LS-MVBT's claim (issue 12), on a fresh journaled ext4 (loop device).

100 single-row autocommit inserts into an lsmvbt table with sync=full: the
block trace must show one page written into the table's file per commit that
dirtied one node (a leaf split makes a few commits write two), one flush per
commit, and nothing written into the database file: a commit overwrites its
node's other slot in place, in blocks that were zero-filled and synced when
the file was preallocated.

Needs root, loop devices and tracefs; skipped with the reason elsewhere.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict

import pytest

from waldio import fs as fsimage
from waldio.bench import lsmvbt
from waldio.trace import block as blocktrace

COMMITS = 100
PAGE = 4096


def skip_reason() -> str | None:
    return fsimage.unavailable_reason("ext4") or blocktrace.trace_unavailable_reason()


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


def open_table(db: Path) -> Any:
    import apsw
    conn = apsw.Connection(str(db))
    lsmvbt.load(conn)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE VIRTUAL TABLE m USING lsmvbt(id INTEGER PRIMARY KEY, v BLOB, "
                 "sync=full, prealloc='1M')")
    conn.execute("INSERT INTO m(v) VALUES(zeroblob(100))")
    return conn


def stats(conn: Any) -> Dict[str, Any]:
    return dict(json.loads(conn.execute("SELECT lsmvbt_stats('m')").fetchall()[0][0]))


def test_one_page_and_one_flush_per_single_row_commit(apsw_sqlite: Any) -> None:
    with fsimage.loop_filesystem("ext4") as fs:
        journal = Path("/sys/fs/ext4/%s/journal_task" % Path(fs.device).name)
        assert journal.read_text().strip() != "<none>"     # a journaled ext4
        db = Path(fs.path("t.db"))
        conn = open_table(db)
        before = stats(conn)
        os.sync()
        with blocktrace.BlockTrace([fs.device]) as trace:
            for _ in range(COMMITS):
                conn.execute("INSERT INTO m(v) VALUES(?)", (os.urandom(100),))
        after = stats(conn)
        files = {"lsmvbt": [str(db) + "-m.lsmvbt"], "db": [str(db)],
                 "wal": [str(db) + "-wal"], "shm": [str(db) + "-shm"]}
        layout = blocktrace.describe_layout(fs, files)
        report = blocktrace.classify(trace.requests, layout, trace.stats)
        conn.close()
    assert trace.stats.complete, trace.stats
    d = report.to_dict()
    pages = after["pages_written"] - before["pages_written"]
    one = after["commit_pages"][0] - before["commit_pages"][0]
    assert after["commits"] - before["commits"] == COMMITS
    assert after["syncs"] - before["syncs"] == COMMITS
    # Most commits dirty one leaf and write exactly that page; a leaf split
    # (every ~30 rows) makes a commit write the new leaf and the parent.
    assert one >= COMMITS - 8 and pages == one + 2 * (COMMITS - one), after
    table = report.classes["lsmvbt"]
    assert table.bytes_written == pages * PAGE, d        # the device saw exactly those pages
    assert pages <= table.write_requests + 8 and table.write_requests <= pages, d
    assert report.written("db") == 0 and report.written("wal") == 0, d
    # ext4's journal is not asserted: buffered overwrites of allocated blocks
    # still let a jbd2 commit through now and then (docs/reproductions.md).
    assert report.flushes >= COMMITS, d
