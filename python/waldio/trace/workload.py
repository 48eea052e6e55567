"""The traced workload: ``waldio bench``'s own engine, wrapped.

:class:`TracedBench` runs :class:`waldio.bench.Bench` on a fresh loop file
system (:class:`LoopFs`); it only wraps the connection opener (to bracket
every transaction) and the repetition (to trace it). Measured repetitions
alternate traced / untraced, so the trace's own overhead is measured in the
same run.  Nothing here times anything: ops/s come from bench's clock.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from waldio import bench as B

from .analysis import analyze_session
from .capture import TraceSession, Windows
from .model import JOURNAL, TraceError, mono


@dataclass
class TraceOptions:
    """What ``waldio trace`` adds to a bench run."""

    overhead: bool = True          # run an untraced repetition next to every traced one
    traced_repetitions: int = 1
    steady_after: int = 10
    poll_ms: float = 0.0
    timeline: bool = True
    buffer_kib_per_cpu: int = 8192

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)


class _Recorder:
    """Shared state of one traced repetition, fed by the opener and connection wrappers."""

    def __init__(self, session: TraceSession, settings: B.Settings, plan_sql: Iterable[str]) -> None:
        self.session = session
        self.s = settings
        self.plan_sql = frozenset(plan_sql)
        self.begin_sql = {"begin": "BEGIN", "begin-immediate": "BEGIN IMMEDIATE"}.get(settings.txn)
        self.open_close = settings.regime == "open-close"
        self.timed_open = "open" in settings.timed and not self.open_close
        self.first_open: Optional[float] = None
        self.txn_started = False
        self.timed_ends: List[float] = []
        self.check_open: Optional[float] = None


class _TracingConn:
    """A bench connection that reports its transactions' brackets (and nothing else changes)."""

    def __init__(self, inner: Any, rec: _Recorder, opened_at: float) -> None:
        self._c = inner
        self._rec = rec
        self._opened_at = opened_at
        self._pending: Optional[float] = None
        self._ran_plan = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)

    def _statement(self, call: Callable[[], Any], sql: str) -> Any:
        rec = self._rec
        if sql in rec.plan_sql:
            rec.txn_started = True
            self._ran_plan = True
            if rec.begin_sql is None and not rec.open_close:   # autocommit: one statement
                start = mono()
                out = call()
                rec.session.add_bracket(start, mono())
                return out
            return call()
        if rec.begin_sql is not None and sql == rec.begin_sql and not rec.open_close:
            self._pending = mono()
            return call()
        if sql == "COMMIT" and self._pending is not None:
            out = call()
            rec.session.add_bracket(self._pending, mono())
            self._pending = None
            return out
        if sql.startswith("PRAGMA wal_checkpoint(") and rec.txn_started:
            out = call()
            rec.timed_ends.append(mono())
            return out
        if sql == "PRAGMA integrity_check" and rec.check_open is None:
            rec.check_open = self._opened_at
        return call()

    def run(self, sql: str, params: Tuple[Any, ...] = ()) -> Any:
        return self._statement(lambda: self._c.run(sql, params), sql)

    def rows(self, sql: str, params: Tuple[Any, ...] = ()) -> Any:
        return self._statement(lambda: self._c.rows(sql, params), sql)

    def close(self) -> None:
        rec = self._rec
        rec.session.poll()              # the stock WAL is deleted by this close
        self._c.close()
        end = mono()
        if rec.open_close and self._ran_plan:
            rec.session.add_bracket(self._opened_at, end)
        elif rec.txn_started and "close" in rec.s.timed and rec.check_open is None:
            rec.timed_ends.append(end)


class _TracingOpener:
    """Wraps :class:`waldio.bench.Opener`: registers the database's files, wraps connections."""

    def __init__(self, inner: B.Opener, rec: _Recorder) -> None:
        self._o = inner
        self._rec = rec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._o, name)

    def open(self, path: str) -> _TracingConn:
        rec = self._rec
        opened_at = mono()
        if rec.first_open is None:
            rec.first_open = opened_at
        rec.session.sqlite_db(path)
        rec.session.poll()
        return _TracingConn(self._o.open(path), rec, opened_at)


def _find_mountpoint(path: str) -> str:
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    return p


@dataclass
class LoopFs:
    """What the analysis needs of a loop file system made by ``bench.open_target``."""

    kind: str
    device: str
    mountpoint: str
    journal_device: Optional[str]

    @property
    def devices(self) -> List[str]:
        return [d for d in (self.device, self.journal_device) if d]

    @classmethod
    def from_target(cls, target: B.Target) -> "LoopFs":
        loop = target.info.get("loop")
        if target.kind != "loop" or not loop:
            raise TraceError("waldio trace needs a fresh loop file system (root, loop devices); "
                             f"got {target.kind} target: {target.note}")
        return cls(loop["kind"], loop["device"], _find_mountpoint(target.path),
                   loop.get("journal_device"))


class TracedBench(B.Bench):
    """``waldio bench``'s engine with every measured repetition traced or left as a control.

    Rounds: ``settings.warmup`` untraced warm-up rounds, then the measured
    rounds; with ``options.overhead`` they alternate traced / untraced in the
    pattern T U U T T U ... (so neither kind always runs first), and
    ``settings.repetitions`` must be twice ``options.traced_repetitions``.
    """

    def __init__(self, settings: B.Settings, modes: Sequence[B.ModeSpec], fs: LoopFs,
                 options: TraceOptions, progress: Optional[B.ProgressFn] = None) -> None:
        raw = [m.label for m in modes if not m.mode.is_sql]
        if raw:
            raise B.BenchError(f"raw modes ({', '.join(raw)}) run no SQLite transactions to "
                               "bracket; waldio trace takes SQL modes (tests/py/test_trace.py "
                               "traces the raw system-call patterns)")
        # The Python loop in every round: traced rounds bracket each statement from
        # Python, and untraced control rounds must time the same loop.
        super().__init__(settings, modes, progress=progress, loop="python")
        self.fs = fs
        self.options = options
        self.plan_sql = {sql for p in self.plans for _ph, stmts in p.txns for sql, _a, _r in stmts}

    def is_traced(self, rnd: int) -> bool:
        if rnd < self.s.warmup:
            return False
        m = rnd - self.s.warmup
        if not self.options.overhead:
            return True
        return (m % 2 == 0) != ((m // 2) % 2 == 1)

    def _run_rep(self, spec: B.ModeSpec, opener: Optional[B.Opener], rnd: int, warm: bool,
                 results: Dict[str, Any]) -> Dict[str, Any]:
        if not self.is_traced(rnd) or opener is None:
            rep = super()._run_rep(spec, opener, rnd, warm, results)
            rep["traced"], rep["trace"] = False, None
            return rep
        session = TraceSession(self.fs, poll_ms=self.options.poll_ms, elimination_class=JOURNAL,
                               buffer_kib_per_cpu=self.options.buffer_kib_per_cpu)
        rec = _Recorder(session, self.s, self.plan_sql)
        with session:
            rep = super()._run_rep(spec, _TracingOpener(opener, rec), rnd, warm, results)
        rep["traced"] = True
        if rep.get("error") or not session.brackets:
            rep["trace"] = {"ok": False, "error": rep.get("error") or "no transaction bracketed"}
            return rep
        start = rec.first_open if (rec.timed_open or rec.open_close) else None
        session.windows = Windows(start=start if start is not None else min(session.brackets)[0],
                                  timed_end=max([e for _s, e in session.brackets] + rec.timed_ends),
                                  end=rec.check_open)
        dev = (rep.get("io") or {}).get("devices") or []
        stat = dev[0]["total"] if dev else None
        doc = analyze_session(session, timeline=self.options.timeline,
                              steady_after=self.options.steady_after,
                              per_txn=self.s.threads == 1, device_stat=stat,
                              expected_transactions=rep.get("transactions"))
        rep["trace"] = doc
        if rep.get("io") is not None:
            rep["io"]["classes"] = dict(doc["classes"]["total"])
        return rep
