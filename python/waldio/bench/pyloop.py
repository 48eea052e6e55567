"""The timed transaction loop in Python, and the phase spans both loops keep.

``waldio bench`` runs transactions in the C loop (:mod:`.native`) unless the open-close
regime opens a connection per transaction, ``waldio trace`` brackets every statement,
or ``--loop python`` asks for this loop.  :func:`python_loop` runs one thread's
planned transactions with nothing in the loop but the transactions and two clock
reads each (``time.perf_counter_ns``); :func:`extend_span` keeps each phase's first
start, last end and transaction count, for the per-phase rates.  The calibration
(:mod:`.calibrate`) times this same function.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .native import begin_sql
from .plan import Stmt
from .settings import Settings


def extend_span(span: Dict[int, List[int]], phase: int, t0: int, t1: int) -> None:
    """A phase's [first start, last end, transactions], grown by one."""
    sp = span.get(phase)
    if sp is None:
        span[phase] = [t0, t1, 1]
    else:
        sp[1] = t1
        sp[2] += 1


def python_loop(s: Settings, plan: Sequence[Tuple[int, Tuple[Stmt, ...]]], opener: Any,
                conn: Optional[Any], path: str, lat: List[int], span: Dict[int, List[int]],
                think_s: float) -> Tuple[int, int]:
    """Run ``plan`` on ``conn`` (None: open and close a connection per transaction with
    ``opener``), appending each transaction's latency to ``lat``; returns (rows the
    SELECTs returned, ns slept between transactions)."""
    begin_txn = begin_sql(s.txn)
    # VACUUM cannot run inside a transaction: it is its own
    begin_of = [None if p == "vacuum" else begin_txn for p in s.phases]
    pc = time.perf_counter_ns
    append = lat.append
    rows = 0
    slept = 0
    last = len(plan) - 1
    per_txn_open = conn is None
    for i, (phase, stmts) in enumerate(plan):
        begin = begin_of[phase]
        t0 = pc()
        c = opener.open(path) if per_txn_open else conn
        try:
            if begin:
                c.run(begin)
            for sql, params, is_select in stmts:
                if is_select:
                    rows += len(c.rows(sql, params))
                else:
                    c.run(sql, params)
            if begin:
                c.run("COMMIT")
        except BaseException:
            if begin:
                with contextlib.suppress(Exception):
                    c.run("ROLLBACK")
            if per_txn_open:
                c.close()
            raise
        if per_txn_open:
            c.close()
        t1 = pc()
        append(t1 - t0)
        extend_span(span, phase, t0, t1)
        if think_s and i != last:
            ts = pc()
            time.sleep(think_s)
            slept += pc() - ts
    return rows, slept
