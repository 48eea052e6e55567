"""One process of test_standard_layout.py's mix: waldio and stock SQLite
sharing one standard-layout database.

    python3 mix_worker.py ROLE DB JSON-OPTIONS

ROLE is one of
  waldio      apsw through waldio (opts "uri": waldio URI options)
  apsw        apsw through SQLite's own unix VFS: no waldio at all
  sqlite3     Python's sqlite3 module (Debian's SQLite), no waldio loaded
Each inserts opts["n"] rows with ids opts["base"] + i, one autocommit
transaction each, and after each COMMIT returns appends the id to the file
opts["acks"] (a commit acknowledged). Every opts["every"] commits it also
runs the next of opts["ops"], in turn: "ckpt:PASSIVE|FULL|RESTART|TRUNCATE",
"limit:N" (PRAGMA journal_size_limit), "read" (the row count must never go
down); opts["pace_ms"] sleeps between commits; opts["create"] makes the
database (WAL mode, table t) first. At the end it prints one JSON line
{"ok": ..., "stats": PRAGMA waldio_stats or null, "status": PRAGMA waldio or
null} and closes.
"""
from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Callable, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conftest  # noqa: E402  (puts the waldio package on sys.path)
from waldio import drivers  # noqa: E402


def connect(role: str, db: str, uri: dict) -> Callable[[str], List[Any]]:
    """A function running one statement and returning its rows."""
    if role == "sqlite3":
        conn = sqlite3.connect(db, timeout=30, isolation_level=None)
        return lambda sql: conn.execute(sql).fetchall()
    sq = conftest.Sqlite(conftest.load_waldio(drivers.driver_by_name("apsw")), "apsw")
    c = sq.waldio(db, **uri) if role == "waldio" else sq.stock(db)
    c.execute("PRAGMA busy_timeout=30000")
    return lambda sql: [tuple(r) for r in c.execute(sql)]


def main() -> None:
    role, db = sys.argv[1:3]
    opts = json.loads(sys.argv[3])
    run = connect(role, db, opts.get("uri", {}))
    if opts.get("create"):
        run("PRAGMA journal_mode=WAL")
        run("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, who TEXT, at REAL)")
    run("PRAGMA synchronous=%s" % opts.get("sync", "FULL"))
    pace = opts.get("pace_ms", 0) / 1000.0
    ops, every, seen = opts.get("ops", []), opts.get("every", 25), 0
    with open(opts["acks"], "a", buffering=1) as acks:
        for i in range(opts["n"]):
            rid = opts["base"] + i
            run("INSERT INTO t(id, who, at) VALUES(%d, '%s', %f)" % (rid, role, time.time()))
            acks.write("%d\n" % rid)
            if pace:
                time.sleep(pace)
            if ops and (i + 1) % every == 0:
                op = ops[(i // every) % len(ops)]
                if op == "read":
                    n = run("SELECT count(*) FROM t")[0][0]
                    assert n >= seen, "the row count went down: %d after %d" % (n, seen)
                    seen = n
                elif op.startswith("ckpt:"):
                    run("PRAGMA wal_checkpoint(%s)" % op[5:])
                elif op.startswith("limit:"):
                    run("PRAGMA journal_size_limit=%s" % op[6:])
    stats = status = None
    if role == "waldio":
        stats = json.loads(run("PRAGMA waldio_stats")[0][0])
        status = json.loads(run("PRAGMA waldio")[0][0])
    print(json.dumps({"ok": True, "stats": stats, "status": status}), flush=True)


if __name__ == "__main__":
    main()
