"""A reader in another process: full-table scans while the writer keeps its WAL open.

``waldio bench --reader-scans N`` runs, in every repetition of every SQL mode,
after the timed region and before the writer's connections close (so the WAL
is neither checkpointed nor deleted by a last close), a second Python process
(:func:`spawn`) that opens the database with the mode's own settings and scans
every table N times::

    SELECT count(*), sum(length(Value)), sum(Value = :update_value) FROM <table>

Each scan is timed on its own (``time.perf_counter_ns``).  With
``--wal-autocheckpoint 0`` and ``--timed none`` the WAL holds every frame the
writer committed, so the scans read them through the VFS: stock SQLite from the
page cache; libwaldio from its slot cache, the page cache or the device.  The
answer is checked against the plan (rows left, total length, rows holding the
update value), which proves the reader saw the writer's last commit.

The child is ``python -m waldio.bench.reader``: a JSON request on stdin, a
JSON result on stdout; it loads the same waldio.so as the parent
(``WALDIO_EXTENSION``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import fields
from typing import Any, Dict, List, Optional

from .modes import parse_modes
from .settings import BenchError, Settings
from .sqlite_env import Opener, SqliteEnv, child_env


def scan_sql(table: str) -> str:
    return (f"SELECT count(*), coalesce(sum(length(Value)), 0), coalesce(sum(Value = ?), 0) "
            f"FROM {table}")


def spawn(label_spec: str, layout: str, sqlite: str, s: Settings, db: str, scans: int,
          update_value: str, timeout_s: float = 600.0) -> Dict[str, Any]:
    """Run the reader process; returns its result (see :func:`run_reader`)."""
    req = {"mode": label_spec, "layout": layout, "sqlite": sqlite,
           "settings": {f.name: getattr(s, f.name) for f in fields(Settings)},
           "db": db, "scans": scans, "update_value": update_value}
    env = child_env()
    t0 = time.perf_counter_ns()
    p = subprocess.run([sys.executable, "-m", "waldio.bench.reader"], input=json.dumps(req),
                       capture_output=True, text=True, env=env, timeout=timeout_s)
    t1 = time.perf_counter_ns()
    if p.returncode != 0:
        raise BenchError(f"the reader process exited with status {p.returncode}: "
                         f"{p.stderr.strip()[-600:]}")
    out = json.loads(p.stdout)
    out["process_wall_ns"] = t1 - t0
    return out


def run_reader(req: Dict[str, Any]) -> Dict[str, Any]:
    """In the child: open with the mode's settings, scan, report."""
    s = Settings(**req["settings"])
    spec = parse_modes(req["mode"], req["layout"], req["sqlite"])[0]
    env = SqliteEnv()
    opener = Opener(spec, s, env)
    is_waldio = spec.mode.kind == "waldio"
    t0 = time.perf_counter_ns()
    c = opener.open(req["db"])
    t_open = time.perf_counter_ns() - t0
    try:
        if is_waldio:
            c.rows("PRAGMA waldio_stats=reset")
        scans: List[int] = []
        answers: List[List[List[int]]] = []
        pc = time.perf_counter_ns
        tables = s.table_names()
        sqls = [scan_sql(t) for t in tables]
        val = (req["update_value"],)
        for _ in range(int(req["scans"])):
            a = pc()
            ans = [list(c.rows(q, val)[0]) for q in sqls]
            scans.append(pc() - a)
            answers.append(ans)
        stats: Optional[Dict[str, Any]] = None
        if is_waldio:
            stats = json.loads(c.rows("PRAGMA waldio_stats")[0][0])
        wal_bytes = None
        try:
            wal_bytes = os.path.getsize(req["db"] + "-wal")
        except OSError:
            pass
    finally:
        c.close()
        env.close()
    return {"open_ns": t_open, "scan_ns": scans, "answers": answers, "tables": tables,
            "waldio_stats": stats, "wal_file_bytes": wal_bytes, "pid": os.getpid()}


def main() -> int:
    req = json.load(sys.stdin)
    out = run_reader(req)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

