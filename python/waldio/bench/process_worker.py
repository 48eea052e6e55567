"""One process of ``waldio bench --processes``: a worker that opens, runs and closes
on command.

The parent (:mod:`.processes`) starts as many workers as the largest process count
once per run and keeps them for every cell, so no cell pays Python's start-up.  A
worker is ``python -m waldio.bench.process_worker``; it loads the parent's waldio.so
(``WALDIO_EXTENSION``) and the C transaction loop, then answers JSON lines on stdin
with one JSON line on stdout each:

``{"cmd": "open", ...}``
    open the database with the mode's settings (:class:`~.sqlite_env.Opener`: VFS,
    URI options, PRAGMAs, busy timeout), put the log into the steady state when
    asked (``steady_state``: :func:`~.template.steady_state`: the log grown, then
    restarted, so the run overwrites it from its start), reset ``PRAGMA waldio_stats``, prepare the plan of this
    process.  Reply ``{"ready": {"pid", "open_ns", "settings"}}``.
``{"cmd": "go", "start_at_ns": T, "deadline_ns": D, "max_txns": N}``
    run the plan in the C loop (``wbr_run_timed``): wait until T (CLOCK_MONOTONIC,
    the same instant for every process: the start barrier), then repeat the plan
    until a transaction ends at or after D, or N transactions are done (0: no
    deadline, no count).  Reply
    ``{"result": {...}}``: transactions per kind, SELECT rows, latency histograms,
    first start and last end, CPU time of this process, ``PRAGMA waldio_stats``.
``{"cmd": "close"}``
    finalize the statements, close the connection; reply ``{"closed": true}``.

A failure replies ``{"error": "..."}`` (a waldio open adds libwaldio's own reason)
and closes the connection, so the worker is ready for the next open.  End of input
closes what is open and exits with status 0.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any, Dict, Optional

from . import histogram
from .modes import parse_modes
from .native import CompiledPlan, Prepared, TxnLoop
from .process_workloads import Shape, process_plan
from .settings import BenchError, Settings
from .sqlite_env import Opener, SqliteEnv, read_settings
from .template import steady_state


def _cpu_s_and_switches() -> tuple:
    """This process's CPU time (user + system) and context switches (voluntary and
    not), every thread included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw + r.ru_nivcsw


class Worker:
    """The state between commands: at most one open connection and its prepared plan."""

    def __init__(self) -> None:
        self.env = SqliteEnv()
        self.loop = TxnLoop.get()
        self.conn: Any = None
        self.prepared: Optional[Prepared] = None
        self.kinds: tuple = ()
        self.is_waldio = False
        self._plans: Dict[str, CompiledPlan] = {}

    def open(self, req: Dict[str, Any]) -> Dict[str, Any]:
        self.close()
        s = Settings(**req["settings"])
        spec = parse_modes(req["mode"], req["layout"], req["sqlite"])[0]
        self.is_waldio = spec.mode.kind == "waldio"
        build = spec.sqlite or "apsw"
        t0 = time.perf_counter_ns()
        self.conn = Opener(spec, s, self.env).open(req["db"])
        open_ns = time.perf_counter_ns() - t0
        if req.get("steady_state"):
            steady_state(self.conn, s.page_size)
        settings = read_settings(self.conn, self.is_waldio)
        if self.is_waldio:
            self.conn.rows("PRAGMA waldio_stats=reset")
        key = f"{req['workload']}:{req['seed']}:{req['process']}:{req['statements']}"
        if key not in self._plans:
            plan = process_plan(req["workload"], Shape(**req["shape"]), int(req["seed"]),
                                int(req["process"]))
            self._plans[key] = CompiledPlan(plan, req["statements"], "autocommit",
                                            list(plan.kinds))
        cplan = self._plans[key]
        self.kinds = tuple(cplan.plan.kinds)
        self.prepared = self.loop.prepare(build, self.conn, cplan)
        return {"ready": {"pid": os.getpid(), "open_ns": open_ns, "settings": settings}}

    def go(self, req: Dict[str, Any]) -> Dict[str, Any]:
        if self.prepared is None:
            raise BenchError("go before open")
        cpu0, cs0 = _cpu_s_and_switches()
        r = self.loop.run_timed(self.prepared, len(self.kinds), int(req["start_at_ns"]),
                                int(req["deadline_ns"]), int(req.get("max_txns") or 0))
        cpu1, cs1 = _cpu_s_and_switches()
        stats = json.loads(self.conn.rows("PRAGMA waldio_stats")[0][0]) if self.is_waldio \
            else None
        return {"result": {
            "pid": os.getpid(), "done": r.done, "rows": r.rows,
            "kinds": {k: histogram.total(h) for k, h in zip(self.kinds, r.hist)},
            "hist": dict(zip(self.kinds, r.hist)),
            "first_start_ns": r.first_start_ns, "last_end_ns": r.last_end_ns,
            "start_late_ns": r.first_start_ns - int(req["start_at_ns"]),
            "cpu_s": round(cpu1 - cpu0, 6), "context_switches": cs1 - cs0,
            "waldio_stats": stats}}

    def close(self) -> Dict[str, Any]:
        if self.prepared is not None:
            self.prepared.close()
            self.prepared = None
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close()
        return {"closed": True}


def serve(inp: Any, out: Any) -> int:
    w = Worker()
    commands = {"open": w.open, "go": w.go, "close": lambda req: w.close()}
    try:
        for line in inp:
            if not line.strip():
                continue
            req = json.loads(line)
            try:
                reply = commands[req["cmd"]](req)
            except Exception as e:  # noqa: BLE001 - reported to the parent, who fails loudly
                try:
                    w.close()
                except Exception:  # noqa: BLE001
                    pass
                reply = {"error": f"{type(e).__name__}: {e}"}
            out.write(json.dumps(reply) + "\n")
            out.flush()
    finally:
        w.close()
        w.env.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.stdin, sys.stdout))
