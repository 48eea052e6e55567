"""Real SIGKILLs among several committing processes (issue 18).

Each of ``procs`` writer processes commits small transactions on one
database: a row ``(who, n)`` (its own count) and a money transfer between
accounts whose total never changes, printing ``ack n`` after each commit
returns. A round kills one writer, chosen at random, at a random moment
(with several processes committing, often a flush leader inside its
fdatasync or a committer waiting in COMMIT_PHASETWO), lets the others
finish, and checks each writer's own acknowledged prefix:

* every survivor's rows 1..n are all there;
* the killed writer holds 1..k with ``acked <= k <= acked + 1`` (its commit
  in flight may have finished unseen), and nothing beyond;
* integrity_check passes and the account total is intact;
* nobody hung: the survivors finish within a deadline (flush_region.h F4).

Group async (kill contract "committed") may lose, in a process that was
alone, what was acknowledged in the last group_ms: the killed writer must
then hold what it acknowledged at least group_ms (+ slack) before the kill.
"""
from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from .database import open_db, state_dir_base
from .modes import Mode, get_mode
from .recorder import child_env

ASYNC_SLACK_MS = 200
ACCOUNTS = 10
SCHEMA = ("CREATE TABLE IF NOT EXISTS pk(who INTEGER, n INTEGER, v BLOB, PRIMARY KEY(who, n));"
          "CREATE TABLE IF NOT EXISTS acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL);")
SURVIVOR_DEADLINE_S = 120


def _setup(mode: Mode, db: Path) -> None:
    import waldio
    waldio.load()
    conn = open_db(mode, db)
    conn.execute("PRAGMA page_size=4096")
    conn.execute("PRAGMA journal_mode=WAL").fetchall()
    conn.execute(SCHEMA)
    with conn:
        for i in range(ACCOUNTS):
            conn.execute("INSERT INTO acct VALUES(?, 1000)", (i,))
    conn.close()


def role_proc_writer(args: Dict[str, Any]) -> None:
    """One writer: commits until it has made args["n"], acknowledging each."""
    import waldio
    waldio.load()
    mode = get_mode(args["mode"])
    conn = open_db(mode, Path(args["db"]))
    conn.execute("PRAGMA synchronous=%s" % mode.synchronous)
    conn.setbusytimeout(60000)
    rng = random.Random("pk:%d" % args["who"])
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for n in range(1, args["n"] + 1):
        a, b = rng.randrange(ACCOUNTS), rng.randrange(ACCOUNTS)
        with conn:
            conn.execute("INSERT INTO pk VALUES(?, ?, ?)", (args["who"], n, rng.randbytes(100)))
            conn.execute("UPDATE acct SET bal = bal - 1 WHERE id = ?", (a,))
            conn.execute("UPDATE acct SET bal = bal + 1 WHERE id = ?", (b,))
        out.write("ack %d\n" % n)
        out.flush()
    conn.close()


def _start(mode_name: str, db: Path, who: int, n: int) -> subprocess.Popen:
    args = {"mode": mode_name, "db": str(db), "who": who, "n": n}
    return subprocess.Popen([sys.executable, "-m", "waldio.crash", "_proc_writer", json.dumps(args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(),
                            bufsize=0)


def _acks(line: bytes) -> Optional[int]:
    return int(line.split()[1]) if line.startswith(b"ack ") else None


def _check(mode: Mode, db: Path, expect: Dict[int, Tuple[int, int]]) -> Tuple[bool, str]:
    """expect[who] = (least, most) rows that writer must hold, 1..k."""
    conn = open_db(mode, db)
    try:
        if conn.execute("PRAGMA integrity_check").fetchall() != [("ok",)]:
            return False, "integrity_check failed"
        total = conn.execute("SELECT sum(bal) FROM acct").fetchall()[0][0]
        if total != ACCOUNTS * 1000:
            return False, "account total %s, expected %d" % (total, ACCOUNTS * 1000)
        for who, (least, most) in expect.items():
            got = [r[0] for r in conn.execute("SELECT n FROM pk WHERE who=? ORDER BY n", (who,))]
            if got != list(range(1, len(got) + 1)):
                return False, "writer %d: rows are not a prefix 1..k" % who
            if not least <= len(got) <= most:
                return False, ("writer %d holds %d transactions, its contract requires %d..%d"
                               % (who, len(got), least, most))
        return True, ""
    finally:
        conn.close()


def _one_round(mode: Mode, mode_name: str, rdir: Path, procs: int, txns: int,
               rng: random.Random) -> Dict[str, Any]:
    db = rdir / "k.db"
    _setup(mode, db)
    ps = [_start(mode_name, db, w, txns) for w in range(procs)]
    victim = rng.randrange(procs)
    target = rng.randrange(1, txns)
    extra_us = rng.randrange(0, 3000)
    seen: List[Tuple[float, int]] = []
    acked = 0
    vout = ps[victim].stdout
    assert vout is not None
    while True:
        line = vout.readline()
        if not line:
            break
        n = _acks(line)
        if n is not None:
            acked = n
            seen.append((time.monotonic(), n))
            if n >= target:
                time.sleep(extra_us / 1e6)
                break
    ps[victim].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    rest, err = ps[victim].communicate()
    for line in rest.splitlines():
        acked = _acks(line) or acked
    least = acked
    if mode.kill_contract == "committed":
        bound = (int(mode.uri_options().get("group_ms", "2")) + ASYNC_SLACK_MS) / 1000
        least = max([n for (when, n) in seen if when <= killed_at - bound] or [0])
    expect: Dict[int, Tuple[int, int]] = {victim: (least, acked + 1)}
    hung: List[int] = []
    for w, p in enumerate(ps):
        if w == victim:
            continue
        try:
            out, err_w = p.communicate(timeout=SURVIVOR_DEADLINE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err_w = p.communicate()
            hung.append(w)
        last = max([_acks(line) or 0 for line in out.splitlines()] or [0])
        if p.returncode != 0 and w not in hung:
            return {"ok": False, "reason": "writer %d failed: %s" % (w, err_w.decode()[-300:]),
                    "victim": victim, "acked": acked}
        expect[w] = (last, last)
    if hung:
        return {"ok": False, "reason": "writers %s did not finish within %d s (a wait on a dead"
                " process?)" % (hung, SURVIVOR_DEADLINE_S), "victim": victim, "acked": acked}
    ok, reason = _check(mode, db, expect)
    return {"ok": ok, "reason": reason, "victim": victim, "acked": acked}


def run_proc_kills(mode_name: str, rounds: int, seed: int, *, procs: int = 4, txns: int = 150,
                   workdir: Optional[Path] = None,
                   log: Callable[[str], None] = lambda s: None) -> Dict[str, Any]:
    """`rounds` rounds of `procs` writers, one of them killed in each."""
    mode = get_mode(mode_name)
    rng = random.Random("proc-kill:%s:%d" % (mode_name, seed))
    workdir = Path(workdir or tempfile.mkdtemp(prefix="waldio-pkill-", dir=state_dir_base()))
    result: Dict[str, Any] = {"mode": mode_name, "workload": "procs", "procs": procs,
                              "rounds": 0, "passed": 0, "failures": [], "acked_total": 0}
    for r in range(rounds):
        rdir = workdir / ("round-%d" % r)
        shutil.rmtree(rdir, ignore_errors=True)
        rdir.mkdir(parents=True)
        out = _one_round(mode, mode_name, rdir, procs, txns, rng)
        result["rounds"] += 1
        result["acked_total"] += out["acked"]
        if out["ok"]:
            result["passed"] += 1
            shutil.rmtree(rdir, ignore_errors=True)
        else:
            result["failures"].append({"round": r, "dir": str(rdir), **out})
            log("  round %d: writer %d killed: %s" % (r, out["victim"], out["reason"]))
    if not result["failures"]:                # failures keep their directories
        shutil.rmtree(workdir, ignore_errors=True)
    return result
