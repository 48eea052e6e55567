"""A worker process that stops the way a gunicorn sync worker does (test_graceful_stop.py).

    python stop_worker.py DATABASE INDEX

Python's own sqlite3 module; waldio, if any, comes from the environment (LD_PRELOAD,
WALDIO_*), as under ``eval "$(waldio env)"``.  The worker opens its connections,
prints one JSON line (pid, and ``PRAGMA waldio`` as read back), then commits until it
is told to stop: single-row inserts ``(w, seq)`` and, every fifth time, a
``BEGIN IMMEDIATE`` counter update, with a read between.  The last acknowledged seq is
written to ``DATABASE.acked-INDEX`` at exit.

How it stops and closes depends on INDEX % 4, the ways gunicorn's workers and
Python's finalization do it:

0  SIGTERM clears ``alive`` (gunicorn's ``Worker.handle_exit``); the loop ends and
   ``sys.exit(0)``; the module-global connection is closed by finalization.
1  the same, but the connection sits in a reference cycle: the cyclic collector
   closes it during finalization.
2  the same, with two connections to the database, closed by an ``atexit`` handler
   in the opposite order of opening.
3  SIGTERM raises ``SystemExit`` at once (gunicorn's ``Worker.handle_quit``), possibly
   inside a transaction; a global connection and one in a cycle.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import sqlite3
import sys
from typing import Any, List, Optional

alive = True
acked = 0
conn: Optional[sqlite3.Connection] = None


class Holder:
    """A reference cycle around a connection."""

    def __init__(self, c: sqlite3.Connection) -> None:
        self.c = c
        self.me = self


def connect(path: str) -> sqlite3.Connection:
    c = sqlite3.connect(path, timeout=10, isolation_level=None)
    c.execute("PRAGMA synchronous=FULL")
    return c


def report(path: str) -> None:
    with open(path, "w") as f:
        f.write(str(acked))


def handle_exit(signum: int, frame: Any) -> None:
    global alive
    alive = False


def handle_quit(signum: int, frame: Any) -> None:
    sys.exit(0)


def main() -> None:
    global conn, acked
    path, index = sys.argv[1], int(sys.argv[2])
    style = index % 4
    atexit.register(report, f"{path}.acked-{index}")     # runs last (atexit is LIFO)
    signal.signal(signal.SIGTERM, handle_quit if style == 3 else handle_exit)
    first = connect(path)
    extra: List[sqlite3.Connection] = []
    if style in (0, 3):
        conn = first
    if style in (1, 3):
        Holder(first if style == 1 else connect(path))
    if style == 2:
        extra = [first, connect(path)]
        atexit.register(lambda: [c.close() for c in reversed(extra)])
    status = first.execute("PRAGMA waldio").fetchone()
    print(json.dumps({"pid": os.getpid(),
                      "waldio": json.loads(status[0]) if status else None}), flush=True)
    seq = 0
    while alive:
        seq += 1
        first.execute("INSERT INTO t(w, seq) VALUES (?, ?)", (index, seq))
        acked = seq
        first.execute("SELECT count(*) FROM t WHERE w = ?", (index,)).fetchone()
        if seq % 5 == 0:
            first.execute("BEGIN IMMEDIATE")
            first.execute("UPDATE c SET n = n + 1")
            first.execute("COMMIT")
    sys.exit(0)


if __name__ == "__main__":
    main()
