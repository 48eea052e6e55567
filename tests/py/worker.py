"""A separate process for the multi-process and crash tests.

    python3 worker.py DRIVER ROLE DB [JSON-OPTIONS]

ROLE is one of
  writer   run `transfers` (opts: seed, n) and exit normally
  crash    run `transfers`, printing "committed N" after each commit, then
           die without closing anything (os._exit): the log keeps its frames
  forever  commit transfers until killed, printing "committed N T" after each
           commit, T = time.monotonic_ns() when the commit returned
  reader   check snapshots (the transfer total is invariant) until the file
           opts["stop"] exists (creating opts["ready"], if given, after the
           first); print one JSON line {"reads", "bad", "max_seen"}
Options may also carry "uri" (waldio URI options) and "stock": true.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conftest  # noqa: E402  (puts the waldio package on sys.path)
import workloads  # noqa: E402
from waldio import drivers  # noqa: E402


def main() -> None:
    driver_name, role, db = sys.argv[1:4]
    opts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    sq = conftest.Sqlite(conftest.load_waldio(drivers.driver_by_name(driver_name)),
                         driver_name)
    conn = sq.stock(db) if opts.get("stock") else sq.waldio(db, **opts.get("uri", {}))
    if opts.get("sync"):
        conn.execute("PRAGMA synchronous=%s" % opts["sync"])
    for pragma in opts.get("pragmas", []):
        conn.execute("PRAGMA %s" % pragma)
    if role == "writer":
        workloads.transfers(conn, opts.get("seed", 1), opts.get("n", 100))
        conn.close()
    elif role == "crash":
        rng_seed, n = opts.get("seed", 1), opts.get("n", 100)
        for i in range(n):
            workloads.transfers(conn, rng_seed * 100003 + i, 1)
            print("committed", i + 1, flush=True)
        os._exit(0)
    elif role == "forever":
        for i in range(10**9):
            workloads.transfers(conn, 7 * 100003 + i, 1)
            print("committed", i + 1, time.monotonic_ns(), flush=True)
    elif role == "reader":
        stop = Path(opts["stop"])
        reads = bad = max_seen = 0
        while not stop.exists():
            ok, seen = workloads.snapshot_ok(conn)
            reads += 1
            bad += not ok
            if seen < max_seen:
                bad += 1          # a later snapshot must never see less
            max_seen = max(max_seen, seen)
            if reads == 1 and opts.get("ready"):
                Path(opts["ready"]).touch()      # the test may start writing
            time.sleep(0.001)
        print(json.dumps({"reads": reads, "bad": bad, "max_seen": max_seen}), flush=True)
        conn.close()
    else:
        raise SystemExit("unknown role %r" % role)


if __name__ == "__main__":
    main()
