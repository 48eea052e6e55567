"""A graceful stop of many worker processes leaves what a last close promises (issue 27).

A server's workers are stopped together: gunicorn's master sends SIGTERM to every
worker, each finishes its request and exits, and Python's finalization closes its
SQLite connections in whatever order it tears objects down.  The closes overlap.
SQLite checkpoints and empties the log only in the close that gets the database lock
exclusively, and every other connection's shared lock refuses it; waldio makes one
refused closer wait while all other processes are closing too (src/wal_log.h L8).
Without that, the log was left holding frames (5-50 MB) with its in-use guard set in
up to 7 of 9 stops, and stock SQLite could not open the database.

Each case: a database (made through waldio, or by stock SQLite for pad4k), its log
in the layout the case names (WALDIO_LAYOUT), six workers (tests/py/stop_worker.py: Python's sqlite3 module under LD_PRELOAD, as
``eval "$(waldio env --group MODE)"`` sets up, four ways of exiting and closing), all
committing; SIGTERM to all at once; then, with stock SQLite: the log beside the
database holds no frames, no guard and at most the idle bound, every acknowledged
commit is in the database, ``integrity_check`` is ok.  Two stops per case: the race
did not lose every time.  The standard layout waits the same way while no stock
process has the database open (db_file.c: a stock process holds no ACTIVE byte, and
one that stayed would make every close wait); with one open, what it promises is
SQLite's own, a log stock SQLite recovers (test_standard_layout.py).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from waldio import logformat
from waldio.run import environment

HERE = Path(__file__).resolve().parent
WORKERS = 6
STOPS = 2
RUN_S = 0.3


def python_env(group: str, preload: bool, layout: str = "standard") -> Dict[str, str]:
    base = {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and not k.startswith("WALDIO_")}
    base["PYTHONPATH"] = str(HERE.parent.parent / "python")
    return (environment(argparse.Namespace(group=group, layout=layout), base)
            if preload else base)


def make_database(path: Path, through_waldio: bool, layout: str) -> None:
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "c.execute('PRAGMA journal_mode=WAL'); "
            "c.execute('CREATE TABLE t(w INTEGER, seq INTEGER)'); "
            "c.execute('CREATE INDEX t_w ON t(w, seq)'); "
            "c.execute('CREATE TABLE c(n INTEGER)'); c.execute('INSERT INTO c VALUES (0)'); "
            "c.commit(); c.close()")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60,
                   env=python_env("off", through_waldio, layout))


def stop_workers(db: Path, group: str, layout: str) -> List[Dict[str, Any]]:
    env = python_env(group, True, layout)
    procs = [subprocess.Popen([sys.executable, str(HERE / "stop_worker.py"), str(db), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(WORKERS)]
    try:
        ready = []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line, p.communicate(timeout=60)[1]
            ready.append(json.loads(line))
        # every worker commits for a while, then gunicorn's master stops them all
        subprocess.run(["sleep", str(RUN_S)], check=True)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return ready


def stock_check(db: Path) -> Dict[str, Any]:
    """What stock SQLite (no waldio in the process) finds: counts per worker, the check."""
    code = ("import json, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); print(json.dumps({"
            "'integrity': c.execute('PRAGMA integrity_check').fetchall(), "
            "'seq': dict(c.execute('SELECT w, max(seq) FROM t GROUP BY w').fetchall())}))")
    r = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True,
                       timeout=60, env=python_env("off", False))
    assert r.returncode == 0, f"stock SQLite cannot read the database: {r.stderr.strip()}"
    return json.loads(r.stdout)


@pytest.mark.parametrize("layout", ["embed", "pad4k", "standard"])
@pytest.mark.parametrize("group", ["off", "durable", "strict", "async"])
def test_workers_stopped_together_leave_a_clean_log(group: str, layout: str,
                                                    dbdir: Path) -> None:
    for stop in range(STOPS):
        db = dbdir / f"app{stop}.db"
        make_database(db, layout != "pad4k", layout)
        ready = stop_workers(db, group, layout)
        for r in ready:
            w = r["waldio"]
            assert w is not None, "the worker's SQLite is not running waldio"
            assert (w["group"], w["layout"]) == (group, layout)
        bound = ready[0]["waldio"]["idle_log_bytes"]
        log = Path(f"{db}-wal").read_bytes()
        if layout == "standard":
            state = {"bytes": len(log), "holds_frames":
                     logformat.standard_frames(log)["committed_frames"] > 0,
                     "in_use_guard": False}
        else:
            sb = logformat.describe_superblock(log[:4096])
            state = {"bytes": len(log), "holds_frames": sb.get("holds_frames"),
                     "in_use_guard": sb.get("in_use_guard")}
        assert state == {"bytes": min(len(log), bound), "holds_frames": False,
                         "in_use_guard": False}, f"stop {stop}: the log left behind: {state}"
        seen = stock_check(db)
        assert seen["integrity"] == [["ok"]]
        acked = [int(Path(f"{db}.acked-{i}").read_text()) for i in range(WORKERS)]
        assert sum(acked) > 0
        assert all(seen["seq"].get(str(i), 0) >= a for i, a in enumerate(acked)), \
            (acked, seen["seq"])
