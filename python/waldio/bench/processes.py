"""``waldio bench --processes``: N processes on one database, stock and waldio side by
side (issue 18).

What one invocation does
========================

1. Where: as every bench run (:func:`~.target.open_target`; default a fresh
   journaled loop ext4).
2. One template database per workload and page format (reserved bytes 0 for
   stock, 24 for waldio's embed layout): the workload's schema and rows
   (:mod:`.process_workloads`) and a fill table for the steady state.
3. A pool of worker processes (:mod:`.worker_pool`, :mod:`.process_worker`), as
   many as the largest process count, started once and kept for the whole run.
4. ``warmup + repetitions`` rounds; in every round, for each workload, for each
   process count, every mode once in the order given, so stock WAL FULL and
   NORMAL and the waldio modes are interleaved round by round.
5. A cell (:meth:`ProcessBench._run_cell`): a copy of the template; process 0
   opens it and puts the log into the steady state (every row of the fill table
   rewritten, more frames than one checkpoint interval, then
   ``wal_checkpoint(RESTART)``: the log is grown and the run overwrites it from its
   start); processes 1..N-1 open it; ``os.sync()`` and an fsync of the directory;
   device and CPU counters; every process is given the same start instant and
   deadline (the start barrier: each sleeps until that CLOCK_MONOTONIC instant)
   and runs its plan in the C loop, recording every transaction's latency in a
   histogram; counters; every process closes; ``os.sync()``; counters; checks on a
   new connection.
6. Summaries: transactions/s per cell (commits/s; requests/s for ``web``), median,
   min-max over measured rounds; latency percentiles from the histograms pooled
   over measured rounds; each mode against stock WAL FULL and against stock WAL
   NORMAL, paired round by round.

Invariants: a cell passes only when every process opened, ran and closed without
an error, the N processes were all running at one instant (the latest first
transaction started before the earliest last transaction ended), their counts add
up to what the database holds, and ``PRAGMA integrity_check`` is ok.  SQLITE_BUSY
is handled by the busy timeout (``--busy-timeout``), as an application would; a
busy error that outlasts it fails the cell.  A worker that dies or hangs fails
its cell and is replaced for the next one.
"""
from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from waldio import params as _params

from . import histogram
from .iostat import Snapshot, cpu_busy_share, device_windows, devices_for, settle
from .modes import ModeSpec
from .process_workloads import WORKLOADS, Shape, expected_select_rows
from .provenance import timestamp, tool_info
from .settings import BenchError, Settings
from .sqlite_env import Opener, SqliteEnv
from .stats import pair_ratios, sum_counters, summarize
from .target import Target
from .template import FILL_TABLE, add_fill_table, building, fill_bytes, reserve_for
from .worker_pool import WorkerError, WorkerPool

SCHEMA_VERSION = 1
KIND = "processes"
STOCK_REFERENCES = ("wal-full", "wal-normal")
DEFAULT_MODES = ("wal-full", "wal-normal", "waldio-full", "waldio-full-durable")
DEFAULT_DURATION_S = 2.0
DEFAULT_REPETITIONS = 3
DEFAULT_UPDATES_PER_TXN = 5
BASE_FS_MIB = 1024           # the loop image (sparse): templates, one cell's files...
LOG_MIB_PER_S = 512          # ...and its logs, which under a saturating load never restart
LOG_KIB_PER_TXN = 32         # (fs_size_mib)
OPEN_TIMEOUT_S = 120.0
RUN_GRACE_S = 300.0          # a timed run may outlast its deadline by this much
COUNT_TIMEOUT_S = 3600.0     # a run of a fixed count of transactions
CLOSE_TIMEOUT_S = 120.0
START_MARGIN_NS = 50_000_000
START_MARGIN_PER_PROCESS_NS = 2_000_000

ProgressFn = Callable[[Dict[str, Any]], None]


@dataclass
class ProcessSettings:
    """What ``--processes`` runs besides the modes: counts, workloads, how long."""

    base: Settings
    processes: List[int]
    workloads: List[str]
    duration_s: Optional[float] = DEFAULT_DURATION_S   # None: a fixed count per process
    transactions: Optional[int] = None                 # per process, instead of a duration
    rows: Optional[int] = None                         # pre-populated rows (default: workload's)
    ops_per_txn: int = DEFAULT_UPDATES_PER_TXN         # updates per transaction (update)
    statements: str = "prepared"

    def __post_init__(self) -> None:
        if not self.processes or any(n < 1 for n in self.processes):
            raise ValueError("--processes: expected a comma list of integers >= 1")
        self.processes = list(dict.fromkeys(self.processes))
        bad = [w for w in self.workloads if w not in WORKLOADS]
        if bad or not self.workloads:
            raise ValueError(f"--workload: {', '.join(bad) or '(none)'} (accepted with "
                             f"--processes: {', '.join(WORKLOADS)})")
        if (self.duration_s is None) == (self.transactions is None):
            raise ValueError("--processes runs for a --duration or a count of --transactions "
                             "per process, one of the two")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError("--duration: must be > 0 seconds")
        if self.ops_per_txn < 1:
            raise ValueError("--ops-per-txn: must be >= 1")

    def fs_size_mib(self) -> int:
        """The default loop image: room for one cell's logs besides the templates. Under a
        saturating load no checkpoint backfills the whole log, so it never restarts: stock
        NORMAL's -wal grew 900 MB in 3 s at 8 processes on the 2-core test machine
        (docs/durability.md, "Checkpoints and the log's length"), and a full image would
        fail the cell."""
        if self.duration_s is not None:
            grow = self.duration_s * LOG_MIB_PER_S
        else:
            grow = (self.transactions or 0) * max(self.processes) * LOG_KIB_PER_TXN / 1024
        return BASE_FS_MIB + math.ceil(grow / 64) * 64

    def shape(self, workload: str) -> Shape:
        rows = self.rows if self.rows is not None else WORKLOADS[workload].default_rows
        if workload != "insert" and rows < 1:
            raise ValueError(f"--prepopulate: the {workload} workload needs at least one row")
        return Shape(record_size=self.base.record_size, rows=rows, ops_per_txn=self.ops_per_txn,
                     schema=self.base.schema)

    def to_json(self) -> Dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "base"}
        d["shapes"] = {w: asdict(self.shape(w)) for w in self.workloads}
        return d


Cells = Dict[Tuple[str, int, str], Dict[str, Any]]


def run_rounds(rounds: int, warmup: int, groups: Sequence[str], counts: Sequence[int],
               modes: Sequence[ModeSpec], key: str, tag: Callable[[str], str],
               run_cell: Callable[[ModeSpec, str, int, int, bool], Dict[str, Any]],
               progress: ProgressFn) -> Cells:
    """Every cell of a run, interleaved: in every round, for each group (a workload, a
    mix), for each process count, every mode in the order given. The cells are keyed
    (group, count, label) and hold the group under ``key``; run_cell(spec, group,
    count, round, warm-up) returns one repetition."""
    cells: Cells = {(g, n, m.label): {key: g, "processes": n, "mode": m.label,
                                      "repetitions": [], "summary": None}
                    for g in groups for n in counts for m in modes}
    total, step = rounds * len(cells), 0
    for rnd in range(rounds):
        warm = rnd < warmup
        for g in groups:
            for n in counts:
                for spec in modes:
                    step += 1
                    ev = {"step": step, "total": total, "round": rnd, "warmup": warm,
                          "mode": f"{tag(g)} x{n} {spec.label}"}
                    progress(dict(ev, event="start"))
                    r = run_cell(spec, g, n, rnd, warm)
                    cells[(g, n, spec.label)]["repetitions"].append(r)
                    progress(dict(ev, event="done", ops_per_s=r["ops_per_s"], ok=r["ok"],
                                  error=r.get("error")))
    return cells


def stock_ratios(cells: Cells, labels: Sequence[str], key: str,
                 extra: Optional[Callable[[List[Any], List[Any]], Dict[str, Any]]] = None
                 ) -> List[Dict[str, Any]]:
    """Each mode's rate over stock WAL FULL's and NORMAL's, paired round by round."""
    out = []
    for (g, n, label), cell in cells.items():
        for ref in STOCK_REFERENCES:
            if ref in labels and ref != label:
                base = cells[(g, n, ref)]["repetitions"]
                r = dict(pair_ratios(cell["repetitions"], base), processes=n, mode=label,
                         stock=ref)
                r[key] = g
                if extra:
                    r.update(extra(cell["repetitions"], base))
                out.append(r)
    return out


def open_modes(modes: Sequence[ModeSpec], s: Settings,
               env: SqliteEnv) -> Dict[str, Opener]:
    """Every mode's SQLite build made ready, and its opener, by label."""
    for spec in modes:
        env.ensure(spec.sqlite or "apsw")
    return {m.label: Opener(m, s, env) for m in modes}


def result_document(kind: str, started: str, t_start: float, params: Dict[str, Any],
                    mode_docs: List[Dict[str, Any]], cells: Cells,
                    ratios: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The JSON document of a run of several processes (--processes, webapp)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "tool": dict(tool_info(), started_utc=started, finished_utc=timestamp(),
                     wall_s=round(time.perf_counter() - t_start, 3)),
        "params": params,
        "modes": mode_docs,
        "cells": list(cells.values()),
        "ratios": ratios,
        "ok": all(r["ok"] for c in cells.values() for r in c["repetitions"]),
    }


def _fill_rows(s: Settings) -> int:
    """Rows of the fill table: more frames than one checkpoint interval."""
    auto = s.wal_autocheckpoint if s.wal_autocheckpoint is not None else 1000
    return (auto if auto > 0 else 1000) + 64


class ProcessBench:
    """Runs every cell (workload x process count x mode), interleaved, and returns the
    result document (schemas/bench-processes.schema.json)."""

    def __init__(self, ps: ProcessSettings, modes: Sequence[ModeSpec], env: SqliteEnv, *,
                 progress: Optional[ProgressFn] = None,
                 worker_argv: Optional[List[str]] = None) -> None:
        if not modes:
            raise BenchError("no modes to run")
        for m in modes:
            if m.mode.kind not in ("stock", "waldio") or m.mode.journal_mode != "WAL":
                raise BenchError(f"--processes: {m.label} is not a WAL mode (processes share "
                                 f"one database in WAL mode: wal-*, waldio-*)")
        if ps.base.locking_mode == "exclusive":
            raise BenchError("--processes: --locking-mode exclusive lets one process only")
        self.ps = ps
        self.s = ps.base
        self.modes = list(modes)
        self.env = env
        self.progress = progress or (lambda ev: None)
        self.worker_argv = worker_argv        # None: python -m waldio.bench.process_worker
        self.labels = [m.label for m in self.modes]
        self._templates: Dict[Tuple[str, int], str] = {}
        self.devices: List[Any] = []
        self.root = ""

    def need_odirect(self) -> bool:
        return any(m.mode.kind == "waldio" for m in self.modes)

    # ------------------------------------------------------------- templates

    def _template(self, workload: str, reserve: int) -> str:
        key = (workload, reserve)
        if key in self._templates:
            return self._templates[key]
        s = self.s
        d = os.path.join(self.root, "templates")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{workload}-r{reserve}.db")
        with building(path, s.page_size, reserve) as db:
            for sql, rows in WORKLOADS[workload].setup(self.ps.shape(workload)):
                if rows is None:
                    db.execute(sql)
                else:
                    db.executemany(sql, rows)
            add_fill_table(db, _fill_rows(s), s.page_size)
        self._templates[key] = path
        return path

    # ------------------------------------------------------------------- run

    def run(self, target: Target) -> Dict[str, Any]:
        ps, s = self.ps, self.s
        started, t_start = timestamp(), time.perf_counter()
        self.root = target.path
        self.devices = devices_for(self.root)
        openers = open_modes(self.modes, s, self.env)
        mode_docs = {m.label: self._mode_doc(m, openers[m.label]) for m in self.modes}
        logs = os.path.join(self.root, "worker-logs")
        os.makedirs(logs, exist_ok=True)
        with WorkerPool(logs, self.worker_argv) as pool:
            cells = run_rounds(
                s.warmup + s.repetitions, s.warmup, ps.workloads, ps.processes, self.modes,
                "workload", lambda wl: wl,
                lambda spec, wl, n, rnd, warm: self._run_cell(
                    pool, spec, openers[spec.label], wl, n, rnd, warm, mode_docs[spec.label]),
                self.progress)
            workers_started = pool.started
        for cell in cells.values():
            cell["summary"] = self._summary(cell)
        return result_document(
            KIND, started, t_start,
            {"bench": self._bench_params(workers_started),
             "target": dict(target.info, note=target.note),
             "common": self._common_params(mode_docs)},
            [mode_docs[m.label] for m in self.modes], cells,
            stock_ratios(cells, self.labels, "workload"))

    def _bench_params(self, workers_started: int) -> Dict[str, Any]:
        ps, s = self.ps, self.s
        d: Dict[str, Any] = dict(ps.to_json())
        d["sqlite_settings"] = {k: getattr(s, k) for k in (
            "page_size", "cache_size", "mmap_size", "locking_mode", "wal_autocheckpoint",
            "journal_size_limit", "stock_reserve", "layout", "flush_ms", "prealloc",
            "group_ms", "group_bytes", "sqlite", "busy_timeout_ms")}
        d["record_size"] = s.record_size
        d["insert_table_schema"] = s.schema
        d["seed"] = s.seed
        d["rounds"] = {"warmup": s.warmup, "measured": s.repetitions}
        d["workload_docs"] = {w: WORKLOADS[w].summary for w in ps.workloads}
        d["interleave"] = ("for each round: for each workload, for each process count, every "
                           "mode once in the order given")
        d["steady_state"] = (
            f"process 0 opens the copy of the template first and rewrites every row of "
            f"{FILL_TABLE} ({_fill_rows(s)} rows of {fill_bytes(s.page_size)} bytes: more frames "
            f"than one checkpoint interval), then PRAGMA wal_checkpoint(RESTART), so the log "
            f"is grown and the run overwrites it from its start; the other processes open "
            f"after that")
        d["start"] = ("every process sleeps until one CLOCK_MONOTONIC instant (the start "
                      f"barrier, {START_MARGIN_NS // 1_000_000} ms + "
                      f"{START_MARGIN_PER_PROCESS_NS // 1_000_000} ms per process after the "
                      f"last process is ready)")
        d["stop"] = (f"each process stops after the first transaction that ends "
                     f"{ps.duration_s:g} s after the start instant" if ps.duration_s else
                     f"each process runs {ps.transactions} transactions")
        d["rate"] = ("transactions of all processes / (end of the last transaction - start of "
                     "the first)")
        d["latency"] = ("each transaction from its first statement to the return of COMMIT "
                        "(or of the autocommit statement), busy waits included, in a "
                        "log-linear histogram per process (buckets < 0.8% wide; percentiles "
                        "are bucket midpoints), pooled over processes and measured rounds")
        d["busy"] = (f"SQLITE_BUSY is retried by SQLite's busy handler for up to "
                     f"{s.busy_timeout_ms} ms (sqlite3_busy_timeout), as an application "
                     f"does; a busy error after that fails the cell")
        d["harness"] = {"loop": "bench/txnloop/txnloop.c wbr_run_timed in every process, "
                                "through the SQLite routine table of the mode's build",
                        "statements": ps.statements,
                        "workers": "python -m waldio.bench.process_worker, started once per "
                                   "run and kept for every cell",
                        "workers_started": workers_started}
        d["before_each_cell"] = ("a copy of the template; the steady state; os.sync() and an "
                                 "fsync of the directory; page cache not dropped")
        d["io_windows"] = {"timed": "device counters just before the start instant and after "
                                    "the last process's result",
                           "total": "the same start to after every process closed and a final "
                                    "os.sync()"}
        d["cpu"] = ("cpu_s: user + system time of every worker process during its timed run "
                    "(getrusage), and its context switches (voluntary and involuntary, every "
                    "thread); machine_busy: share of all CPUs' time that was busy during "
                    "the timed window (/proc/stat), other processes included; "
                    "machine_cpu_us_per_txn, context_switches_per_txn: the busy CPU time and "
                    "context switches of the whole machine (/proc/stat) in that window, per "
                    "transaction")
        d["modes"] = [{"label": m.label, "mode": m.name, "layout": m.layout,
                       "sqlite": m.sqlite} for m in self.modes]
        d["devices"] = [asdict(x) for x in self.devices]
        d["sqlite_builds"] = {b: self.env.version(b) for b in
                              sorted({m.sqlite or "apsw" for m in self.modes})}
        d["waldio_extension"] = dict(self.env.extensions)
        d["notes"] = list(s.notes)
        return d

    def _mode_doc(self, spec: ModeSpec, opener: Opener) -> Dict[str, Any]:
        m = spec.mode
        return {"label": spec.label, "name": m.name, "kind": m.kind,
                "sqlite_build": spec.sqlite, "layout": spec.layout,
                "journal_mode": m.journal_mode, "synchronous": m.synchronous,
                "waldio_group": m.waldio_group, "pragmas": opener.statements(),
                "vfs": opener.vfs, "uri_options": dict(opener.options),
                "commit": m.commit, "durability": m.durability, "params": None}

    def _common_params(self, mode_docs: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        for label in self.labels:
            p = mode_docs[label]["params"]
            if p:
                return {k: v for k, v in p.items()
                        if k in ("schema_version", "filesystem", "device", "system")}
        try:
            return {"schema_version": _params.SCHEMA_VERSION,
                    "filesystem": _params.filesystem_params(self.root),
                    "device": _params.device_params(self.root),
                    "system": _params.system_params()}
        except Exception:  # noqa: BLE001
            return None

    # ------------------------------------------------------------------ cells

    def _new_rep(self, rnd: int, warm: bool) -> Dict[str, Any]:
        return {"index": rnd, "warmup": warm, "ok": False, "error": None,
                "transactions": 0, "kinds": {}, "wall_ns": None, "ops_per_s": None,
                "overlap_ns": None, "processes": [], "latency": {}, "hist": {},
                "io": None, "cpu": None, "waldio_stats": None,
                "checks": {"ok": False, "items": []}}

    def _run_cell(self, pool: WorkerPool, spec: ModeSpec, opener: Opener, workload: str,
                  n: int, rnd: int, warm: bool, mode_doc: Dict[str, Any]) -> Dict[str, Any]:
        rep = self._new_rep(rnd, warm)
        safe = spec.label.replace(":", "_").replace("@", "_")
        d = os.path.join(self.root, f"r{rnd}-{workload}-p{n}-{safe}")
        shutil.rmtree(d, ignore_errors=True)
        os.mkdir(d)
        db = os.path.join(d, "bench.db")
        workers = pool.take(n)
        opened: List[Any] = []
        try:
            shutil.copyfile(self._template(workload, reserve_for(spec, self.s.stock_reserve)), db)
            ready = self._open_all(pool, workers, spec, workload, db, opened)
            settle(d, False)
            snap0 = Snapshot(self.devices)
            start_at = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + START_MARGIN_NS + \
                n * START_MARGIN_PER_PROCESS_NS
            deadline = start_at + int(self.ps.duration_s * 1e9) if self.ps.duration_s else 0
            timeout = (self.ps.duration_s + RUN_GRACE_S) if self.ps.duration_s \
                else COUNT_TIMEOUT_S
            results = [r["result"] for r in pool.ask(
                workers, lambda w: {"cmd": "go", "start_at_ns": start_at,
                                    "deadline_ns": deadline,
                                    "max_txns": self.ps.transactions or 0},
                timeout, "the timed run")]
            snap1 = Snapshot(self.devices)
            pool.ask(workers, lambda w: {"cmd": "close"}, CLOSE_TIMEOUT_S, "close")
            opened.clear()
            os.sync()
            snap2 = Snapshot(self.devices)
            self._bookkeeping(rep, workload, ready, results, snap0, snap1, snap2)
            self._check(rep, spec, opener, workload, db, ready, results, mode_doc, warm)
        except Exception as e:  # noqa: BLE001 - recorded; the run goes on, the exit status fails
            rep["ok"] = False
            rep["error"] = f"{type(e).__name__}: {e}"
            rep["checks"]["ok"] = False
        finally:
            if opened:
                try:
                    pool.ask(opened, lambda w: {"cmd": "close"}, CLOSE_TIMEOUT_S, "close")
                except WorkerError:
                    pass    # those workers are marked broken and replaced by the next take()
            shutil.rmtree(d, ignore_errors=True)
        return rep

    def _open_all(self, pool: WorkerPool, workers: List[Any], spec: ModeSpec, workload: str,
                  db: str, opened: List[Any]) -> List[Dict[str, Any]]:
        """Process 0 opens first and makes the steady state, then the others open."""
        s, ps = self.s, self.ps

        def msg(w: Any) -> Dict[str, Any]:
            out = {"cmd": "open", "mode": spec.label, "layout": spec.layout or s.layout,
                   "sqlite": spec.sqlite or s.sqlite,
                   "settings": {k: v for k, v in asdict(s).items()},
                   "db": db, "workload": workload, "shape": asdict(ps.shape(workload)),
                   "seed": s.seed, "process": w.index, "statements": ps.statements}
            if w.index == 0:
                out.update(steady_state=True)
            return out

        opened.append(workers[0])
        ready = pool.ask(workers[:1], msg, OPEN_TIMEOUT_S, "open (process 0, steady state)")
        if len(workers) > 1:
            opened.extend(workers[1:])
            ready += pool.ask(workers[1:], msg, OPEN_TIMEOUT_S, "open")
        return [r["ready"] for r in ready]

    def _bookkeeping(self, rep: Dict[str, Any], workload: str, ready: List[Dict[str, Any]],
                     results: List[Dict[str, Any]], s0: Snapshot, s1: Snapshot,
                     s2: Snapshot) -> None:
        kinds = WORKLOADS[workload].kinds
        total = sum(r["done"] for r in results)
        first = min(r["first_start_ns"] for r in results)
        last = max(r["last_end_ns"] for r in results)
        wall = last - first
        rep["transactions"] = total
        rep["kinds"] = {k: sum(r["kinds"].get(k, 0) for r in results) for k in kinds}
        rep["wall_ns"] = wall
        rep["ops_per_s"] = total / (wall / 1e9) if wall > 0 else None
        rep["overlap_ns"] = min(r["last_end_ns"] for r in results) - \
            max(r["first_start_ns"] for r in results)
        rep["processes"] = [
            {"index": i, "pid": r["pid"], "open_ns": rd["open_ns"], "done": r["done"],
             "kinds": r["kinds"], "rows": r["rows"], "first_start_ns": r["first_start_ns"],
             "last_end_ns": r["last_end_ns"], "start_late_ns": r["start_late_ns"],
             "cpu_s": r["cpu_s"], "context_switches": r.get("context_switches"),
             "settings": rd["settings"], "waldio_stats": r["waldio_stats"]}
            for i, (rd, r) in enumerate(zip(ready, results))]
        rep["hist"] = {k: histogram.merge(r["hist"][k] for r in results) for k in kinds}
        rep["latency"] = {"all": histogram.summary(histogram.merge(rep["hist"].values())),
                          "kinds": {k: histogram.summary(h) for k, h in rep["hist"].items()}}
        rep["io"] = {"devices": device_windows(self.devices, s0, s1, s2)}
        cpu_s = sum(r["cpu_s"] for r in results)
        tick = os.sysconf("SC_CLK_TCK")
        machine_s = (s1.cpu["busy"] - s0.cpu["busy"]) / tick if s0.cpu and s1.cpu else None
        ctxt = s1.cpu.get("ctxt", 0) - s0.cpu.get("ctxt", 0) if s0.cpu and s1.cpu else None
        cs = sum(r.get("context_switches", 0) for r in results)
        rep["cpu"] = {"process_cpu_s": round(cpu_s, 6),
                      "cpu_us_per_txn": cpu_s * 1e6 / total if total else None,
                      "process_context_switches_per_txn": cs / total if total else None,
                      "machine_busy": cpu_busy_share(s0.cpu, s1.cpu),
                      "machine_cpu_us_per_txn": machine_s * 1e6 / total
                      if total and machine_s is not None else None,
                      "context_switches_per_txn": ctxt / total
                      if total and ctxt is not None else None}
        stats = [r["waldio_stats"] for r in results if r["waldio_stats"]]
        if stats:
            rep["waldio_stats"] = sum_counters(stats)

    def _check(self, rep: Dict[str, Any], spec: ModeSpec, opener: Opener, workload: str,
               db: str, ready: List[Dict[str, Any]], results: List[Dict[str, Any]],
               mode_doc: Dict[str, Any], warm: bool) -> None:
        items: List[Dict[str, Any]] = []

        def item(name: str, expected: Any, actual: Any) -> None:
            items.append({"name": name, "expected": expected, "actual": actual,
                          "ok": expected == actual})

        n = len(results)
        item("distinct process ids", n, len({r["pid"] for r in results}))
        item("all processes running at one instant (latest first start before earliest "
             "last end)", True, rep["overlap_ns"] is not None and rep["overlap_ns"] > 0)
        item("transactions counted in the histograms = transactions done", rep["transactions"],
             sum(histogram.total(h) for h in rep["hist"].values()))
        if self.ps.transactions is not None:
            item("transactions done = processes x --transactions", n * self.ps.transactions,
                 rep["transactions"])
        item("rows returned by the SELECTs", expected_select_rows(workload, rep["kinds"]),
             sum(r["rows"] for r in results))
        m = spec.mode
        for i, rd in enumerate(ready):
            st = rd["settings"]
            got = (str(st.get("journal_mode")).lower(), st.get("synchronous"))
            want = ("wal", m.synchronous)
            if m.kind == "waldio":
                got += (st.get("waldio.sync"), st.get("waldio.group"))
                want += (m.waldio_sync, m.waldio_group)
            item(f"process {i}: journal_mode, synchronous" +
                 (", waldio sync, group" if m.kind == "waldio" else "") + " read back",
                 list(want), list(got))
        c = opener.open(db)
        try:
            for name, sql, want in WORKLOADS[workload].checks(self.ps.shape(workload),
                                                               rep["kinds"]):
                item(name, want, c.rows(sql)[0][0])
            item("PRAGMA integrity_check", ["ok"], [r[0] for r in c.rows("PRAGMA integrity_check")])
            if not warm and mode_doc["params"] is None:
                full = _params.all_params(c.raw, db, {"_why": {}})
                full.pop("workload", None)
                mode_doc["params"] = full
        finally:
            c.close()
        ok = all(x["ok"] for x in items)
        rep["checks"] = {"ok": ok, "items": items}
        rep["ok"] = ok

    # -------------------------------------------------------------- summaries

    def _summary(self, cell: Dict[str, Any]) -> Dict[str, Any]:
        reps = [r for r in cell["repetitions"] if not r["warmup"] and r["ok"]]
        measured = [r for r in cell["repetitions"] if not r["warmup"]]
        kinds = WORKLOADS[cell["workload"]].kinds
        pooled = {k: histogram.merge(r["hist"].get(k, []) for r in reps) for k in kinds}

        def per_txn(get: Callable[[Dict[str, Any]], Optional[float]]) -> Optional[Dict[str, Any]]:
            vals = [v / r["transactions"] for r in reps
                    if (v := get(r)) is not None and r["transactions"]]
            return summarize(vals)

        def dev(key: str) -> Callable[[Dict[str, Any]], Optional[float]]:
            def g(r: Dict[str, Any]) -> Optional[float]:
                devs = (r.get("io") or {}).get("devices") or []
                return devs[0]["timed"][key] if devs else None
            return g

        def syncs(r: Dict[str, Any]) -> Optional[float]:
            st = r.get("waldio_stats")
            return None if not st else st.get("flushes", 0) + st.get("dsync_writes", 0)

        return {
            "repetitions_ok": len(reps),
            "repetitions_failed": len(measured) - len(reps),
            "ops_per_s": summarize([r["ops_per_s"] for r in reps if r["ops_per_s"]]),
            "latency_ns": histogram.summary(histogram.merge(pooled.values())),
            "latency_ns_kinds": {k: histogram.summary(h) for k, h in pooled.items()},
            "per_txn": {
                "device_write_bytes": per_txn(dev("write_bytes")),
                "device_flushes": per_txn(dev("flushes")),
                "log_syncs": per_txn(syncs),
                "cpu_us": summarize([r["cpu"]["cpu_us_per_txn"] for r in reps
                                     if r["cpu"] and r["cpu"]["cpu_us_per_txn"] is not None]),
                "machine_cpu_us": summarize([r["cpu"]["machine_cpu_us_per_txn"] for r in reps
                                             if r["cpu"] and r["cpu"].get(
                                                 "machine_cpu_us_per_txn") is not None]),
                "process_context_switches": summarize(
                    [r["cpu"]["process_context_switches_per_txn"] for r in reps
                     if r["cpu"] and r["cpu"].get("process_context_switches_per_txn")
                     is not None]),
                "context_switches": summarize([r["cpu"]["context_switches_per_txn"]
                                               for r in reps if r["cpu"] and r["cpu"].get(
                                                   "context_switches_per_txn") is not None]),
            },
            "machine_busy": summarize([r["cpu"]["machine_busy"] for r in reps
                                       if r["cpu"] and r["cpu"]["machine_busy"] is not None]),
            "ok": bool(cell["repetitions"]) and all(r["ok"] for r in cell["repetitions"]),
        }
