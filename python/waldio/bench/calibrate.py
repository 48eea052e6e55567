"""How much the harness adds per transaction: measured in every run, per SQLite build.

This module owns the calibration round of ``waldio bench`` (issue 13).  Before
the modes run, for every SQLite build the run uses, the head of thread 0's plan
(at most :data:`MAX_TXNS` transactions) runs on fresh in-memory databases with
``synchronous=OFF`` (nothing reaches a disk, so what is left is CPU: SQLite's own
work and the harness's), three ways, in a rotating order, :data:`ROUNDS` times:

``bare``     the C loop with no timestamp inside it (one before the first
             transaction, one after the last): the same SQLite calls as the run,
             and nothing else.  This is "SQLite's own cost".
``native``   the C loop as the run uses it (two timestamps per transaction),
             timed from Python around the call, exactly as the run's wall time.
``python``   the Python loop (the open-close regime and ``waldio trace`` use it;
             ``--loop python`` forces it), timed the same way.

The overhead of a loop is its best (minimum) time per transaction minus
``bare``'s best: on a shared machine interference only ever adds time, so the
best of several rounds is the estimate least disturbed by it.  The JSON also
keeps every round and the round-by-round paired differences (median, min, max),
which show how noisy the machine was.
Nothing is printed here: the result is a dict stored in the run's JSON
(``params.bench.harness.calibration``) and printed by :mod:`.report`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence

from .native import CompiledPlan, TxnLoop
from .plan import Plan, record_value
from .pyloop import python_loop
from .settings import Settings, create_table_sql
from .sqlite_env import SqliteEnv
from .stats import summarize

ROUNDS = 9
MAX_TXNS = 2000
MAX_STATEMENT_TXNS = 3       # VACUUM / CREATE INDEX over 100k rows: seconds each
LOOP_KINDS = ("bare", "native", "python")


def _setup(conn: Any, s: Settings) -> None:
    """Schema and pre-populated rows of the template, in memory, synchronous=OFF."""
    conn.rows(f"PRAGMA page_size={s.page_size}")
    conn.rows("PRAGMA synchronous=OFF")
    value = record_value(s.record_size)
    for t in s.table_names():
        conn.run(create_table_sql(s, t))
        if s.prepopulate:
            conn.run(f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                     f"WHERE x < {int(s.prepopulate)}) INSERT INTO {t}(id, Value) "
                     f"SELECT x, ? FROM c", (value,))


@dataclass
class Subject:
    """What is calibrated: the run's settings, thread 0's plan (and its C arrays), the
    SQLite builds of the run and its statement style."""

    s: Settings
    plan: Plan
    compiled: CompiledPlan
    env: SqliteEnv
    statements: str


def _txn_count(sub: Subject) -> int:
    cap = MAX_STATEMENT_TXNS if any(p in ("vacuum", "create-index") for p in sub.s.phases) \
        else MAX_TXNS
    return min(cap, len(sub.plan.txns))


def _timed_c(sub: Subject, build: str, conn: Any, n: int, stamps: bool) -> int:
    loop = TxnLoop.get()
    prepared = loop.prepare(build, conn, sub.compiled.head(n))
    try:
        if not stamps:
            r = loop.run(prepared, 0, stamps=False)
            return r.t_end_c[0] - r.t_start_c[0]
        pc = time.perf_counter_ns
        t0 = pc()
        loop.run(prepared, 0)
        return pc() - t0
    finally:
        prepared.close()


def _timed_python(sub: Subject, conn: Any, n: int) -> int:
    lat: List[int] = []
    pc = time.perf_counter_ns
    t0 = pc()
    python_loop(sub.s, sub.plan.txns[:n], None, conn, ":memory:", lat, {}, 0.0)
    return pc() - t0


def calibrate_build(sub: Subject, build: str, kinds: Sequence[str]) -> Dict[str, Any]:
    """The calibration of one SQLite build (see the module docstring)."""
    n = _txn_count(sub)
    per: Dict[str, List[float]] = {k: [] for k in kinds}
    runners: Dict[str, Callable[[Any], int]] = {
        "bare": lambda c: _timed_c(sub, build, c, n, stamps=False),
        "native": lambda c: _timed_c(sub, build, c, n, stamps=True),
        "python": lambda c: _timed_python(sub, c, n)}
    for rnd in range(ROUNDS):
        order = list(kinds[rnd % len(kinds):]) + list(kinds[:rnd % len(kinds)])
        for kind in order:
            conn = sub.env.connect(build, ":memory:", "unix", {})
            try:
                _setup(conn, sub.s)
                per[kind].append(runners[kind](conn) / n / 1000.0)
            finally:
                conn.close()
    out: Dict[str, Any] = {"build": build, "sqlite_version": sub.env.version(build),
                           "transactions": n, "rounds": ROUNDS,
                           "statements": sub.statements,
                           "us_per_txn": {k: summarize(v) for k, v in per.items()}}
    out["rounds_us_per_txn"] = {k: [round(x, 3) for x in v] for k, v in per.items()}
    out["overhead_us_per_txn"] = {
        k: dict(best=min(per[k]) - min(per["bare"]),
                paired=summarize([x - b for x, b in zip(per[k], per["bare"])]))
        for k in kinds if k != "bare"}
    return out


def calibrate(sub: Subject, builds: Sequence[str], used: str) -> Dict[str, Any]:
    """Calibrate every build; ``used`` is the loop the run's SQL modes use."""
    kinds = ("bare", "native", "python") if sub.statements == "prepared" else ("bare", "native")
    return {"what": "per-transaction time of the head of thread 0's plan on in-memory databases "
                    "(synchronous=OFF); overhead = best round of the loop minus best round of "
                    "the bare C loop (no timestamps inside); paired = round-by-round "
                    "differences",
            "loop_used": used,
            "builds": [calibrate_build(sub, b, kinds) for b in builds]}
