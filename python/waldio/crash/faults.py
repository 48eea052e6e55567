"""Fault injection: EIO and ENOSPC from waldio's system calls, through the recorder.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import waldio

from .database import Runner, create_base, open_db, state_dir_base
from .modes import MODES
from .oracle import check_files, verdict, waldio_error_text
from .recorder import child_env, control_connection, load_recorder
from .workload import DB_NAME, Step, apsw_module, make_steps, reference_digests

EIO, ENOSPC, EOPNOTSUPP = 5, 28, 95


FAULT_CASES: Dict[str, str] = {
    "eio-log-write": "EIO on a direct write of frames (or block 0) to the log",
    "eio-log-write-partial": "half of a direct log write lands, then EIO",
    "eio-dsync-write": "EIO on an RWF_DSYNC log write (persistent mode)",
    "enospc-prealloc": "ENOSPC while zero-filling a new log",
    "enospc-grow": "ENOSPC while growing the log (a reader pins it)",
    "eio-flush": "EIO from fdatasync of the log (the log is poisoned until reopened)",
    "eio-db-write": "EIO writing the database file (checkpoints)",
}


def fault_skip(case: str, seed: int) -> int:
    """How many matching calls a fault run lets through first (seeded)."""
    rng = random.Random("fault:%s:%d" % (case, seed))
    # Bounded by how many matching calls a run makes (a run whose fault was
    # never injected proves nothing and is reported as a failure).
    limit = {"eio-log-write": 35, "eio-log-write-partial": 6, "eio-dsync-write": 35,
             "enospc-prealloc": 1, "enospc-grow": 1, "eio-flush": 30, "eio-db-write": 60}[case]
    return rng.randrange(limit)


def run_fault(case: str, seed: int, skip: int, *, workdir: Optional[Path] = None,
              timeout: float = 300) -> Dict[str, Any]:
    """One fault-injection run in a child process (the recorder must load
    before waldio). Returns its JSON report (passed, reason, errors...)."""
    wd = Path(workdir or tempfile.mkdtemp(prefix="waldio-fault-", dir=state_dir_base()))
    args = {"case": case, "seed": seed, "skip": skip, "dir": str(wd)}
    proc = subprocess.run([sys.executable, "-m", "waldio.crash", "_fault", json.dumps(args)],
                          capture_output=True, text=True, timeout=timeout, env=child_env())
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"case": case, "skip": skip, "seed": seed, "passed": False, "injected": 0,
                "reason": "fault run died (exit %d): %s" % (proc.returncode, proc.stderr[-2000:])}
    res = json.loads(lines[-1])
    if res.get("passed"):
        shutil.rmtree(wd, ignore_errors=True)
    else:
        res["dir"] = str(wd)
    return res


class FaultRunner(Runner):
    """A Runner that survives failures the way an application should: after
    an error, close every connection (a poisoned log needs that), reopen,
    and redo the transaction unless the database already holds it (a commit
    whose flush failed may or may not be there: durability.md)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        kw["retry_failed"] = True
        super().__init__(*a, **kw)
        self.n_errors = 0

    def run(self, steps: Sequence[Step]) -> None:
        apsw = apsw_module()
        for step in steps:
            for attempt in range(20):
                try:
                    if step.kind in ("txn", "rollback"):
                        self._txn(step)
                    else:
                        Runner.run(self, [step])
                    if step.kind == "txn":
                        self.on_ack(step.n)
                    break
                except apsw.Error as e:
                    self.n_errors += 1
                    self.errors.append("%s: %s | %s" % (type(e).__name__, e, waldio_error_text()))
                    if step.kind not in ("txn", "rollback"):
                        break                 # a failed checkpoint is not redone
                    self._reopen()
                    if step.kind == "txn" and self._has(step.n):
                        self.on_ack(step.n)   # it committed after all
                        break
            else:
                raise RuntimeError("transaction %d kept failing" % step.n)

    def _reopen(self) -> None:
        apsw = apsw_module()
        for c in (self.reader, self.conn):
            if c is not None:
                try:
                    c.close()
                except apsw.Error:
                    pass
        self.reader = None
        for attempt in range(20):
            try:
                self.conn = self._open()
                self.conn.execute("SELECT count(*) FROM meta").fetchall()
                return
            except apsw.Error as e:
                self.errors.append("reopen: %s: %s" % (type(e).__name__, e))
        raise RuntimeError("cannot reopen the database after a fault")

    def _has(self, n: int) -> bool:
        return self.conn.execute("SELECT txn FROM meta WHERE id = 1").fetchall()[0][0] >= n


def role_fault(args: Dict[str, Any]) -> None:
    apsw = apsw_module()
    load_recorder()
    waldio.load()
    ctl = control_connection()
    ctl.execute("SELECT recorder_hook_waldio('waldio')").fetchall()
    case, seed, skip = args["case"], args["seed"], args["skip"]
    d = Path(args["dir"])
    d.mkdir(parents=True, exist_ok=True)
    txns = 40
    mode = MODES["waldio-persistent" if case == "eio-dsync-write" else "waldio-full"]
    db = d / DB_NAME
    digests = reference_digests("mixed", seed, txns)
    steps = make_steps("mixed", seed, txns)
    rng = random.Random("faultcase:%s:%d" % (case, seed))
    report: Dict[str, Any] = {"case": case, "seed": seed, "skip": skip, "errors": []}

    def arm(*a: Any) -> None:
        ctl.execute("SELECT recorder_fault(%s)" % ",".join("?" * len(a)), a).fetchall()

    def injected() -> int:
        return int(ctl.execute("SELECT recorder_fault_count()").fetchall()[0][0])

    # How the zero-fill of a log fails: fallocate(WRITE_ZEROES) itself with
    # ENOSPC, or fallocate unsupported and the written zeros hit ENOSPC.
    def arm_zero_fill_enospc(count: int) -> str:
        if rng.random() < 0.5:
            arm("fallocate", skip, ENOSPC, count)
            return "fallocate ENOSPC"
        ctl.execute("SELECT recorder_config('no_write_zeroes', 1)").fetchall()
        arm("write", skip, ENOSPC, count, "zeros")
        return "zero writes ENOSPC"

    need_error = True
    if case == "enospc-prealloc":
        report["how"] = arm_zero_fill_enospc(-1)
        try:
            create_base(mode, db)
            report["errors"].append("none")
        except apsw.Error as e:
            report["errors"].append("%s: %s" % (type(e).__name__, e))
            report["message"] = waldio_error_text()
        report["injected"] = injected()
        ctl.execute("SELECT recorder_fault_clear()").fetchall()
        msg = report.get("message", "")
        clear = ("FullError" in report["errors"][0] or "CantOpen" in report["errors"][0]) \
            and "-wal" in msg and ("No space" in msg or "full" in msg.lower())
        # Space is back: the database is created and works, and holds what
        # was committed (nothing: the first transaction failed).
        try:
            for p in d.iterdir():
                p.unlink()
            create_base(mode, db)
            r = Runner(mode, db)
            r.run(steps)
            r.close()
            out = check_files(mode, d, digests)
            ok, reason = verdict(out, txns, txns)
        except apsw.Error as e:
            ok, reason = False, "after space came back: %s" % e
        report["passed"] = bool(report["injected"]) and clear and ok
        if not report["injected"]:
            reason = "no fault was injected"
        report["reason"] = ("clear error (%s), then the database works: %s" % (report["errors"][0], reason)
                            if report["passed"] else
                            "error %r, message %r, then: %s" % (report["errors"], msg, reason))
        print(json.dumps(report))
        return

    create_base(mode, db)
    acked = [0]
    runner = FaultRunner(mode, db, on_ack=lambda n: acked.__setitem__(0, n))
    if case in ("eio-log-write", "eio-dsync-write"):
        arm("write", skip, EIO, 1, "data", 4096, 1 << 20)
    elif case == "eio-log-write-partial":
        arm("write", skip, EIO, 1, "data", 8192, 1 << 20, 1)
    elif case == "enospc-grow":
        # A reader pins the log for the whole run: it must grow.
        runner.reader = open_db(mode, db)
        runner.reader.execute("BEGIN")
        runner.reader.execute("SELECT count(*) FROM kv").fetchall()
        report["how"] = arm_zero_fill_enospc(rng.randrange(1, 4))
        steps = [s for s in steps if s.kind in ("txn", "rollback")]
    elif case == "eio-flush":
        arm("fdatasync", skip, EIO, 1)
    elif case == "eio-db-write":
        arm("xwrite", skip, EIO, 1)
        need_error = False       # an automatic checkpoint's failure is silent
    else:
        raise SystemExit("unknown fault case %r" % case)
    try:
        runner.run(steps)
        runner.close()
    except (apsw.Error, RuntimeError) as e:
        report["errors"].append("unrecovered: %s: %s" % (type(e).__name__, e))
    report["errors"] = report["errors"] + runner.errors
    report["injected"] = injected()
    ctl.execute("SELECT recorder_fault_clear()").fetchall()
    out = check_files(mode, d, digests)
    passed, reason = verdict(out, acked[0], acked[0] + 1)
    report.update({"acked": acked[0], "k": out.k, "integrity": out.integrity})
    if passed and not report["injected"]:
        passed, reason = False, "no fault was injected (skip %d too large)" % skip
    if passed and acked[0] != txns:
        passed, reason = False, "the run did not complete: %d of %d acknowledged" % (acked[0], txns)
    # A fault may hit a write nobody needs, e.g. the spilled frames of a
    # rolled-back transaction, which waldio writes lazily at the next
    # read transaction's xShmBarrier, where an error cannot be returned.
    # Then no statement fails; the oracle above (every transaction, read
    # back from disk by a new connection) shows nothing was lost.
    report["absorbed"] = bool(report["injected"]) and not runner.errors
    if passed and any(e.startswith("unrecovered") for e in report["errors"]):
        passed, reason = False, "the application could not continue"
    if passed and runner.errors and need_error:
        wanted = {"eio-flush": "IOError", "enospc-grow": "FullError"}.get(case, "IOError")
        if not any(wanted in e for e in runner.errors):
            passed, reason = False, "expected %s, got %s" % (wanted, runner.errors[:2])
    if passed and report["absorbed"]:
        reason += " (the failed write carried nothing any transaction needed: absorbed)"
    report["passed"] = passed
    report["reason"] = reason
    report["errors"] = report["errors"][:6]
    print(json.dumps(report))
