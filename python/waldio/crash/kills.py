"""Real process kills: SIGKILL a writer at random moments and check what survives.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import waldio

from .database import Runner, make_base, state_dir_base
from .modes import get_mode
from .oracle import check_files, verdict
from .recorder import child_env
from .workload import DB_NAME, make_steps, reference_digests

ASYNC_SLACK_MS = 200      # scheduling slack on top of group_ms (kill tests)


def run_kills(mode_name: str, rounds: int, seed: int, *, workload: str = "mixed", txns: int = 60,
              workdir: Optional[Path] = None,
              log: Callable[[str], None] = lambda s: None) -> Dict[str, Any]:
    """Kill a writer with SIGKILL at seeded random points, `rounds` times;
    reopen each time and check the prefix oracle (everything the writer
    acknowledged must be there)."""
    mode = get_mode(mode_name)
    digests = reference_digests(workload, seed, txns)
    rng = random.Random("kill:%s:%d" % (mode_name, seed))
    workdir = Path(workdir or tempfile.mkdtemp(prefix="waldio-kill-", dir=state_dir_base()))
    base = workdir / "base"
    base.mkdir(parents=True, exist_ok=True)
    waldio.load()
    rest, done_before = make_base(mode, base / DB_NAME, workload, seed, txns)
    skip = len(make_steps(workload, seed, txns)) - len(rest)
    result: Dict[str, Any] = {"mode": mode_name, "rounds": 0, "passed": 0, "failures": [],
                              "acked_total": 0}
    try:
        for r in range(rounds):
            rdir = workdir / ("round-%d" % r)
            if rdir.exists():
                shutil.rmtree(rdir)
            shutil.copytree(base, rdir)
            target = rng.randrange(done_before, txns + 1)
            extra_us = rng.randrange(0, 3000)
            args = {"mode": mode_name, "workload": workload, "seed": seed, "txns": txns,
                    "db": str(rdir / DB_NAME), "skip": skip}
            # Unbuffered: readline must not read ahead of what communicate() sees.
            proc = subprocess.Popen([sys.executable, "-m", "waldio.crash", "_writer", json.dumps(args)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(),
                                    bufsize=0)
            acked = done_before
            seen: List[Tuple[float, int]] = []          # (when the parent read it, n)
            assert proc.stdout is not None
            while True:
                line = proc.stdout.readline()
                if not line:
                    break
                if line.startswith(b"ack "):
                    acked = int(line.split()[1])
                    seen.append((time.monotonic(), acked))
                    if acked >= target:
                        time.sleep(extra_us / 1e6)
                        break
                elif line.startswith(b"ready") and target <= done_before:
                    time.sleep(extra_us / 1e6)
                    break
            proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            rest, err = proc.communicate()
            for line in rest.splitlines():
                if line.startswith(b"ack "):
                    acked = int(line.split()[1])
            required = acked
            if mode.kill_contract == "committed":
                # Group async may lose what was acknowledged in the last
                # group_ms: require what was acknowledged (read by us) at
                # least group_ms + ASYNC_SLACK_MS before the kill.
                bound = (int(mode.uri_options().get("group_ms", "2")) + ASYNC_SLACK_MS) / 1000
                required = max([n for (when, n) in seen if when <= killed_at - bound] or [done_before])
            out = check_files(mode, rdir, digests)
            ok, reason = verdict(out, required, acked + 1)
            result["rounds"] += 1
            result["acked_total"] += acked
            if ok:
                result["passed"] += 1
            else:
                result["failures"].append({"round": r, "acked": acked, "reason": reason,
                                           "dir": str(rdir), "stderr": err.decode()[-500:]})
            if ok:
                shutil.rmtree(rdir, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if not result["failures"]:
            shutil.rmtree(workdir, ignore_errors=True)
    return result


def role_writer(args: Dict[str, Any]) -> None:
    mode = get_mode(args["mode"])
    waldio.load()
    steps = make_steps(args["workload"], args["seed"], args["txns"])[args.get("skip", 0):]

    def ack(n: int) -> None:
        sys.stdout.write("ack %d\n" % n)
        sys.stdout.flush()

    runner = Runner(mode, Path(args["db"]), on_ack=ack)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    runner.run(steps)
    sys.stdout.write("done\n")
    sys.stdout.flush()
    if args.get("exit_dirty"):
        os._exit(0)
    runner.close()
