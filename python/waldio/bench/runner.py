"""Running a benchmark: rounds, repetitions, the timed region and the checks.

:class:`Bench` runs ``warmup + repetitions`` rounds; in every round every mode
runs once, in the order given (A B C A B C ...), so machine drift hits all
modes alike.  Per repetition (:meth:`Bench._run_rep`): fresh files from a
template database; open and configure the connections (unless the open is
timed); put the log into the chosen regime; ``os.sync()`` and fsync of the
directory; counters; the timed region (``time.perf_counter_ns`` around every
transaction); counters; untimed close; ``os.sync()``; counters again; then a
correctness check on a new connection (rows changed, rows left, key sum,
``PRAGMA integrity_check``, and for the raw modes the stamps of the written
blocks).  Summaries and paired ratios come from :mod:`.stats`.
"""
from __future__ import annotations

import contextlib
import json
import mmap
import os
import random
import shutil
import struct
import threading
import time
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from waldio import params as _params

from . import lsmvbt
from .iostat import (DROP_CACHES, Device, Snapshot, cpu_busy_share, device_windows, devices_for,
                     proc_delta, settle, sync_dir)
from .modes import RAW_APPEND_BYTES, RAW_BLOCK, ModeSpec
from .calibrate import Subject, calibrate
from .native import LOOPS, STATEMENT_STYLES, CompiledPlan, Prepared, Result, TxnLoop
from .plan import build_plan, record_value
from .provenance import UNKNOWN, timestamp, tool_info
from .pyloop import extend_span, python_loop
from .settings import (
    DEFAULT_PREALLOC,
    TIMED_PARTS,
    BenchError,
    Settings,
    create_table_sql,
    parse_size,
)
from .sqlite_env import Opener, SqliteEnv, read_settings
from .stats import latency_summary, pair_ratios, sum_counters, summarize
from .target import Target
from .template import FILL_TABLE, add_fill_table, building, reserve_for, steady_state

SCHEMA_VERSION = 1


ProgressFn = Callable[[Dict[str, Any]], None]


_env_lock = threading.Lock()
_env: Optional[SqliteEnv] = None


def process_env() -> SqliteEnv:
    """The SQLite builds of this process, with waldio loaded into each at most once.

    Shared by every Bench of the process: SQLite keeps a registered VFS for the life
    of the process, and a second copy of waldio.so loaded into the system SQLite is
    refused (a VFS named "waldio" exists), so a second run must reuse the first load.
    """
    global _env
    with _env_lock:
        if _env is None:
            _env = SqliteEnv()
        return _env


class Bench:
    """Runs every mode, interleaved, and returns the result document (see bench.schema.json)."""

    def __init__(self, settings: Settings, modes: Sequence[ModeSpec], *,
                 progress: Optional[ProgressFn] = None, loop: str = "native",
                 statements: str = "prepared", calibrate: bool = True) -> None:
        if not modes:
            raise BenchError("no modes to run")
        if loop not in LOOPS:
            raise BenchError(f"loop {loop!r}: accepted {', '.join(LOOPS)}")
        if statements not in STATEMENT_STYLES:
            raise BenchError(f"statements {statements!r}: accepted {', '.join(STATEMENT_STYLES)}")
        if statements == "exec" and (loop == "python" or settings.regime == "open-close"):
            raise BenchError("--statements exec runs in the C loop only (--loop native, and "
                             "not the open-close regime, which opens connections from Python)")
        self.loop = loop
        self.statements = statements
        self.calibrate = calibrate
        self.calibration: Optional[Dict[str, Any]] = None
        self._compiled: Dict[int, CompiledPlan] = {}
        self.s = settings
        self.modes = list(modes)
        self.progress = progress or (lambda ev: None)
        labels = [m.label for m in self.modes]
        if settings.baseline is None:
            base = "wal-full" if "wal-full" in labels else labels[0]
            settings.baseline = base
        if settings.baseline not in labels:
            raise BenchError(f"--baseline {settings.baseline}: not among the modes run "
                             f"({', '.join(labels)})")
        self.plans = [build_plan(settings, t) for t in range(settings.threads)]
        self.env = process_env()
        self.devices: List[Device] = []
        self._templates: Dict[Tuple[int, str], str] = {}
        self._walfill_rows = 0

    # ---------------------------------------------------------------- helpers

    def need_odirect(self) -> bool:
        return any(m.mode.kind == "waldio" or m.name == "raw-dio" for m in self.modes)

    def _expected_rows(self) -> Dict[int, List[int]]:
        """db index -> sorted final ids."""
        out: Dict[int, List[int]] = {}
        for p in self.plans:
            out.setdefault(p.db_index, []).extend(p.final_ids)
        return {k: sorted(v) for k, v in out.items()}

    def _expected_updated(self) -> Dict[int, int]:
        out: Dict[int, int] = {}
        for p in self.plans:
            out[p.db_index] = out.get(p.db_index, 0) + p.final_updated
        return out

    def _walfill_frames(self) -> int:
        """Frames the reused regime writes before the run: more than the run's log holds."""
        s = self.s
        auto = s.wal_autocheckpoint if s.wal_autocheckpoint is not None else self._default_autockpt
        if auto and auto > 0:
            return int(auto) + 64
        est = sum(p.statements for p in self.plans) * 2 + 64
        return int(min(est, (1 << 30) // s.page_size))

    def _build_template(self, reserve: int, spec: Optional[ModeSpec] = None) -> str:
        """Schema + pre-populated rows, written once; every repetition copies it.

        lsmvbt modes get a template of their own (the table's options are in its schema)."""
        vt = spec.mode if spec is not None and spec.mode.kind == "lsmvbt" else None
        key = (reserve, vt.name if vt else "")
        if key in self._templates:
            return self._templates[key]
        s = self.s
        d = os.path.join(self.root, "templates")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"template-r{reserve}{'-' + vt.name if vt else ''}.db")
        with building(path, s.page_size, reserve) as db:
            if vt:
                lsmvbt.load(db)
            value = record_value(s.record_size)
            for t in s.table_names():
                db.execute(lsmvbt.create_sql(s, t, vt) if vt else create_table_sql(s, t))
                if s.prepopulate:
                    db.executemany(f"INSERT INTO {t}(id, Value) VALUES(?, ?)",
                                   ((i, value) for i in range(1, s.prepopulate + 1)))
            if s.regime == "reused":
                add_fill_table(db, self._walfill_rows, s.page_size)
        os.sync()
        self._templates[key] = path
        return path

    # ------------------------------------------------------------------- run

    def run(self, target: Target) -> Dict[str, Any]:
        s = self.s
        started, t_start = timestamp(), time.perf_counter()
        self.root = target.path
        self.devices = devices_for(self.root)
        if s.drop_caches and not os.access(DROP_CACHES, os.W_OK):
            raise BenchError(f"--drop-caches: {DROP_CACHES} is not writable here (it needs "
                             "root and a writable /proc/sys)")
        for spec in self.modes:
            if spec.sqlite:
                self.env.ensure(spec.sqlite)
        import apsw
        probe = apsw.Connection(":memory:", vfs="unix")
        self._default_autockpt = probe.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0]
        probe.close()
        if s.regime == "reused":
            self._walfill_rows = self._walfill_frames()
        builds = sorted({m.sqlite or "apsw" for m in self.modes if m.mode.is_sql})
        if self.calibrate and builds:
            self.progress({"event": "calibrate", "builds": builds})
            used = "native" if self.loop == "native" and s.regime != "open-close" else "python"
            self.calibration = calibrate(
                Subject(s, self.plans[0], self.compiled(0), self.env, self.statements),
                builds, used)
        openers = {m.label: Opener(m, s, self.env) for m in self.modes if m.mode.is_sql}
        results = {m.label: self._mode_doc(m, openers.get(m.label)) for m in self.modes}
        rounds = s.warmup + s.repetitions
        total = rounds * len(self.modes)
        step = 0
        try:
            for rnd in range(rounds):
                warm = rnd < s.warmup
                for spec in self.modes:
                    step += 1
                    self.progress({"event": "start", "step": step, "total": total,
                                   "mode": spec.label, "round": rnd, "warmup": warm})
                    rep = self._run_rep(spec, openers.get(spec.label), rnd, warm, results)
                    results[spec.label]["repetitions"].append(rep)
                    self.progress({"event": "done", "step": step, "total": total,
                                   "mode": spec.label, "round": rnd, "warmup": warm,
                                   "ops_per_s": rep["ops_per_s"], "ok": rep["ok"],
                                   "error": rep.get("error")})
        finally:
            self.env.close()
        for spec in self.modes:
            results[spec.label]["summary"] = self._summary(results[spec.label])
        base_label = s.baseline
        ratios = {"baseline": base_label, "modes": {}}
        ceiling: Dict[str, Any] = {"mode": s.ceiling if s.ceiling in results else None,
                                   "modes": {}}
        for spec in self.modes:
            ratios["modes"][spec.label] = pair_ratios(results[spec.label]["repetitions"],
                                                      results[base_label]["repetitions"])
            if ceiling["mode"]:
                ceiling["modes"][spec.label] = pair_ratios(
                    results[spec.label]["repetitions"], results[ceiling["mode"]]["repetitions"])
        # each waldio mode against the stock WAL mode of its synchronous setting (same build)
        same = {spec.label: counterpart for spec in self.modes
                if (counterpart := self._same_sync_stock(spec)) is not None}
        ratios["same_sync"] = {label: dict(pair_ratios(results[label]["repetitions"],
                                                       results[c]["repetitions"]), stock=c)
                               for label, c in same.items()}
        if s.reader_scans:
            ratios["reader_time"] = {
                spec.label: reader_ratios(results[spec.label]["repetitions"],
                                          results[base_label]["repetitions"])
                for spec in self.modes if spec.mode.is_sql}
            ratios["reader_time_same_sync"] = {
                label: dict(reader_ratios(results[label]["repetitions"],
                                          results[c]["repetitions"]), stock=c)
                for label, c in same.items()}
        ok = all(r["ok"] for m in results.values() for r in m["repetitions"])
        common = self._common_params(results)
        doc = {
            "schema_version": SCHEMA_VERSION,
            "tool": dict(tool_info(), started_utc=started, finished_utc=timestamp(),
                         wall_s=round(time.perf_counter() - t_start, 3)),
            "params": {
                "bench": self._bench_params(),
                "target": dict(target.info, note=target.note),
                "common": common,
            },
            "modes": [results[m.label] for m in self.modes],
            "ratios": ratios,
            "ceiling": ceiling,
            "ok": ok,
        }
        return doc

    def _same_sync_stock(self, spec: ModeSpec) -> Optional[str]:
        """The label of stock WAL with spec's synchronous setting and build, if it runs."""
        if spec.mode.kind != "waldio":
            return None
        want = f"wal-{spec.mode.synchronous.lower()}" + (
            f"@{spec.sqlite}" if "@" in spec.label else "")
        for m in self.modes:
            if m.label == want or (m.name == want.split("@")[0] and m.sqlite == spec.sqlite
                                   and m.mode.kind == "stock"):
                return m.label
        return None

    def _bench_params(self) -> Dict[str, Any]:
        s = self.s
        d = s.to_json()
        d["timed_region"] = (
            ["open"] if "open" in s.timed or s.regime == "open-close" else []) + \
            ["transactions"] + [p for p in ("checkpoint", "close") if p in s.timed] + \
            (["close (per transaction)"] if s.regime == "open-close" else [])
        d["not_timed"] = [p for p in TIMED_PARTS if p not in s.timed and not
                          (s.regime == "open-close" and p in ("open", "close"))]
        d["statements_per_txn"] = s.ops_per_txn * s.tables
        d["interleave"] = "for each round: every mode once, in the order given (A B C A B C ...)"
        d["rounds"] = {"warmup": s.warmup, "measured": s.repetitions}
        native = self.loop == "native" and s.regime != "open-close"
        d["clock"] = ("CLOCK_MONOTONIC (time.perf_counter_ns) before and after each transaction"
                      + (", read by the C loop" if native else "") +
                      "; wall = start of the timed region to its end, timed from Python")
        d["harness"] = {
            "loop": "native" if native else "python",
            "loop_doc": ("bench/txnloop/txnloop.c: the planned transactions in a C loop, "
                         "through the SQLite routine table of the mode's build" if native else
                         "Python loop over the planned statements (apsw's statement cache; "
                         "the system driver prepares each statement per execution)"),
            "statements": self.statements if native else "prepared",
            "statements_doc": ("each distinct SQL text prepared once before timing; "
                               "reset, bind, step per execution" if self.statements ==
                               "prepared" or not native else
                               "one SQL text per transaction with literal values, run with "
                               "sqlite3_exec() (parsed every time, as Mobibench does)"),
            "calibration": self.calibration}
        d["before_each_repetition"] = ("fresh files copied from a template; os.sync() and fsync "
                                       "of the directory; page cache "
                                       + ("then dropped (echo 3 > /proc/sys/vm/drop_caches)"
                                          if s.drop_caches else "not dropped"))
        d["io_windows"] = {"timed": "counters just before and just after the timed region",
                           "total": "just before the timed region to after the untimed close "
                                    "and a final os.sync()"}
        d["modes"] = [{"label": m.label, "mode": m.name, "layout": m.layout,
                       "sqlite": m.sqlite} for m in self.modes]
        d["devices"] = [asdict(x) for x in self.devices]
        d["sqlite_builds"] = {b: self.env.version(b) for b in
                              sorted({m.sqlite for m in self.modes if m.sqlite})}
        d["waldio_extension"] = dict(self.env.extensions)
        if s.regime == "reused":
            d["reused_fill_frames"] = self._walfill_rows
            d["reused_procedure"] = (
                f"the template holds a table {FILL_TABLE} of {self._walfill_rows} one-page "
                f"rows (zero blobs); before timing, one UPDATE rewrites all of it with new bytes "
                f"(so the log holds more frames than the run writes), then PRAGMA "
                f"wal_checkpoint(RESTART), so the run overwrites the log from its start")
        d["plan"] = [{"thread": p.thread, "db": p.db_index, "transactions": len(p.txns),
                      "statements": p.statements, "ops": p.ops,
                      "expected_changes": p.expected_changes,
                      "expected_rows_left_per_table": len(p.final_ids),
                      "indexes_created": p.indexes_created} for p in self.plans]
        return d

    def _mode_doc(self, spec: ModeSpec, opener: Optional[Opener]) -> Dict[str, Any]:
        m = spec.mode
        return {"label": spec.label, "name": m.name, "kind": m.kind,
                "sqlite_build": spec.sqlite, "layout": spec.layout,
                "journal_mode": m.journal_mode, "synchronous": m.synchronous,
                "pragmas": opener.statements() if opener else [],
                "vfs": opener.vfs if opener else None,
                "uri_options": dict(opener.options) if opener else {},
                "commit": m.commit, "durability": m.durability,
                "params": None, "repetitions": [], "summary": None}

    def _common_params(self, results: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        for spec in self.modes:
            p = results[spec.label]["params"]
            if p:  # the sections every mode shares; sqlite and waldio stay per mode
                return {k: v for k, v in p.items()
                        if k in ("schema_version", "workload", "filesystem", "device", "system")}
        try:
            return {"schema_version": _params.SCHEMA_VERSION,
                    "workload": dict(self.s.to_json(), _why={}),
                    "filesystem": _params.filesystem_params(self.root),
                    "device": _params.device_params(self.root),
                    "system": _params.system_params()}
        except Exception:  # noqa: BLE001
            return None

    # ------------------------------------------------------------ repetitions

    def _rep_dir(self, spec: ModeSpec, rnd: int) -> str:
        safe = spec.label.replace(":", "_").replace("@", "_")
        d = os.path.join(self.root, f"r{rnd}-{safe}")
        shutil.rmtree(d, ignore_errors=True)
        os.mkdir(d)
        return d

    def _new_rep(self, rnd: int, warm: bool) -> Dict[str, Any]:
        return {"index": rnd, "warmup": warm, "ok": False, "error": None,
                "transactions": 0, "statements": 0, "wall_ns": None, "ops_per_s": None,
                "timed_parts_ns": {"open": None, "transactions": None, "checkpoint": None,
                                   "close": None},
                "think_ns": 0, "phases": [], "latency": {"count": 0},
                "io": None, "waldio_stats": None, "waldio_stats_note": None,
                "log_file": None, "settings": None, "checks": {"ok": False, "items": []}}

    def _run_rep(self, spec: ModeSpec, opener: Optional[Opener], rnd: int, warm: bool,
                 results: Dict[str, Any]) -> Dict[str, Any]:
        rep = self._new_rep(rnd, warm)
        d = self._rep_dir(spec, rnd)
        try:
            if spec.mode.kind == "raw":
                self._raw_rep(spec, d, rep)
            else:
                assert opener is not None
                self._sql_rep(spec, opener, d, rep, results[spec.label], warm)
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            rep["ok"] = False
            rep["error"] = f"{type(e).__name__}: {e}"
            rep["checks"]["ok"] = False
        finally:
            shutil.rmtree(d, ignore_errors=True)
        return rep

    # ---------------------------------------------------------- SQL modes

    def _sql_rep(self, spec: ModeSpec, opener: Opener, d: str, rep: Dict[str, Any],
                 mode_doc: Dict[str, Any], warm: bool) -> None:
        s = self.s
        T = s.threads
        ndb = 1 if s.shared_db else T
        template = self._build_template(reserve_for(spec, s.stock_reserve), spec)
        dbs = [os.path.join(d, "bench.db" if s.shared_db else f"bench-{i}.db") for i in range(ndb)]
        is_lsmvbt = spec.mode.kind == "lsmvbt"
        for p in dbs:
            shutil.copyfile(template, p)
            if is_lsmvbt:
                lsmvbt.copy_files(template, p, s.table_names())
        per_txn_open = s.regime == "open-close"
        timed_open = "open" in s.timed and not per_txn_open
        conns: List[Any] = [None] * T
        is_waldio = spec.mode.kind == "waldio"
        # libwaldio's counters belong to the log (one per database in this process),
        # not to the connection: read them through one connection per database.
        first_of_db = [next(t for t in range(T) if self.plans[t].db_index == i)
                       for i in range(ndb)]
        native = self._uses_native(opener)
        build = spec.sqlite or "apsw"
        prepared: List[Optional[Prepared]] = [None] * T
        done: List[Optional[Result]] = [None] * T
        rep["harness"] = {"loop": "native" if native else "python",
                          "statements": self.statements if native else "prepared"}
        try:
            if not per_txn_open and not timed_open:
                for t in range(T):
                    conns[t] = opener.open(dbs[self.plans[t].db_index])
            if s.regime == "reused":
                for i, p in enumerate(dbs):
                    steady_state(conns[first_of_db[i]], s.page_size)
            if conns[0] is not None:
                rep["settings"] = read_settings(conns[0], is_waldio)
                rep["settings"]["read_on"] = "the run connection, before timing"
                if is_waldio:
                    for t in first_of_db:
                        conns[t].rows("PRAGMA waldio_stats=reset")
                if is_lsmvbt:
                    rep["settings"].update(lsmvbt.settings(conns[0], s.table_names()[0]))
            lsm_before = [lsmvbt.stats(conns[t], s.table_names()) for t in first_of_db] \
                if is_lsmvbt and conns[0] is not None else None
            if native and conns[0] is not None:
                self._native_prepare(build, conns, prepared)
            log_before = [_file_size(p + "-wal") for p in dbs]
            tc_before = [self._total_changes(c) for c in conns] if conns[0] is not None else None
            settle(d, s.drop_caches)
            snap0 = Snapshot(self.devices)

            # ------------------------------------------------ timed region
            lat: List[List[int]] = [[] for _ in range(T)]
            phase_span: List[Dict[int, List[int]]] = [dict() for _ in range(T)]
            sel_rows = [0] * T
            think_ns = [0] * T
            errors: List[BaseException] = []
            pc = time.perf_counter_ns
            t0 = pc()
            if timed_open:
                for t in range(T):
                    conns[t] = opener.open(dbs[self.plans[t].db_index])
                if native:
                    self._native_prepare(build, conns, prepared)
            t_open = pc()
            if native:
                self._run_native(prepared, done, errors)
            worker_args = [(t, conns[t], dbs[self.plans[t].db_index], lat[t], phase_span[t],
                            sel_rows, think_ns, errors) for t in range(T)]
            if native:
                pass
            elif T == 1:
                self._txn_loop(opener, *worker_args[0])
            else:
                barrier = threading.Barrier(T)
                ths = [threading.Thread(target=self._txn_thread, args=(barrier, opener) + a,
                                        daemon=True) for a in worker_args]
                for th in ths:
                    th.start()
                for th in ths:
                    th.join()
            t_txn = pc()
            if errors:
                raise errors[0]
            if "checkpoint" in s.timed:
                for i, p in enumerate(dbs):
                    c = self._conn_for_db(conns, i)
                    if c is None:  # open-close: a connection just for the checkpoint
                        c2 = opener.open(p)
                        c2.rows(f"PRAGMA wal_checkpoint({s.checkpoint_mode.upper()})")
                        c2.close()
                    else:
                        c.rows(f"PRAGMA wal_checkpoint({s.checkpoint_mode.upper()})")
            t_ckpt = pc()
            if "close" in s.timed and not per_txn_open:
                _finalize(prepared)
                for t in range(T):
                    conns[t].close()
                    conns[t] = None
            t_end = pc()
            # ----------------------------------------------- end of timed region
            if native:
                self._native_bookkeeping(done, lat, phase_span, sel_rows, think_ns)
            snap1 = Snapshot(self.devices)
            tc_after = [self._total_changes(c) for c in conns] if conns[0] is not None else None
            if is_waldio:
                if conns[0] is not None:
                    stats = [json.loads(conns[t].rows("PRAGMA waldio_stats")[0][0])
                             for t in first_of_db]
                    rep["waldio_stats"] = sum_counters(stats)
                    rep["waldio_stats_note"] = (
                        "PRAGMA waldio_stats of each database's log (summed over "
                        f"{ndb} database{'s' if ndb > 1 else ''}), reset before and read after "
                        "the timed region (excludes the untimed close)")
                else:
                    rep["waldio_stats_note"] = (
                        "unknown: PRAGMA waldio_stats needs an open connection to the log, and "
                        "the run's connections were closed inside the timed region"
                        + (" after every transaction (open-close regime)" if per_txn_open else ""))
            if lsm_before is not None and conns[0] is not None:
                after = [lsmvbt.stats(conns[t], s.table_names()) for t in first_of_db]
                rep["waldio_stats"] = sum_counters([lsmvbt.stats_delta(a, b)
                                                  for a, b in zip(after, lsm_before)])
                rep["waldio_stats_note"] = (
                    "lsmvbt_stats() of every table (the LS-MVBT engine's counters; flushes = "
                    "its fdatasyncs), read before and after the timed region, differenced")
            log_after = [_file_size(p + "-wal") for p in dbs]
            if s.reader_scans and conns[0] is not None:
                rep["reader"] = self._reader(spec, dbs[0])
            _finalize(prepared)
            for t in range(T):
                if conns[t] is not None:
                    conns[t].close()
                    conns[t] = None
            os.sync()
            snap2 = Snapshot(self.devices)

            # ------------------------------------------------ bookkeeping
            n_txn = sum(len(p.txns) for p in self.plans)
            wall = t_end - t0
            rep["transactions"] = n_txn
            rep["statements"] = sum(p.statements for p in self.plans)
            rep["wall_ns"] = wall
            rep["ops_per_s"] = n_txn / (wall / 1e9) if wall > 0 else None
            rep["timed_parts_ns"] = {
                "open": (t_open - t0) if timed_open else None,
                "transactions": t_txn - t_open,
                "checkpoint": (t_ckpt - t_txn) if "checkpoint" in s.timed else None,
                "close": (t_end - t_ckpt) if ("close" in s.timed and not per_txn_open) else None}
            rep["think_ns"] = max(think_ns) if think_ns else 0
            rep["phases"] = self._phases(phase_span)
            all_lat = [x for l in lat for x in l]
            rep["latency"] = self._latency_doc(all_lat, rep["index"])
            rep["io"] = self._io_doc(snap0, snap1, snap2)
            rep["log_file"] = {"path_suffix": "-wal", "before_bytes": sum(log_before),
                               "after_bytes": sum(log_after),
                               "grew": sum(log_after) > sum(log_before)}

            # ------------------------------------------------ checks
            changes: Optional[int] = None
            if tc_before is not None and tc_after is not None and None not in tc_after:
                changes = sum(a - b for a, b in zip(tc_after, tc_before))  # per connection
            self._check_sql(spec, opener, dbs, rep, changes, sum(sel_rows), mode_doc, warm)
            if rep.get("reader"):
                rep["checks"]["items"].append(rep["reader"]["check"])
                rep["checks"]["ok"] = rep["checks"]["ok"] and rep["reader"]["check"]["ok"]
                rep["ok"] = rep["checks"]["ok"]
        finally:
            with contextlib.suppress(Exception):
                _finalize(prepared)
            for c in conns:
                if c is not None:
                    with contextlib.suppress(Exception):
                        c.close()

    # ------------------------------------------------------- the C loop

    def _uses_native(self, opener: Opener) -> bool:
        """The C loop runs the transactions unless asked otherwise, the regime opens a
        connection per transaction, or the opener wraps connections (waldio trace
        brackets every statement from Python)."""
        return (self.loop == "native" and self.s.regime != "open-close"
                and type(opener) is Opener)

    def compiled(self, t: int) -> CompiledPlan:
        """Thread t's plan as the C loop's arrays (compiled once, shared by every mode)."""
        if t not in self._compiled:
            self._compiled[t] = CompiledPlan(self.plans[t], self.statements, self.s.txn,
                                             self.s.phases)
        return self._compiled[t]

    def _native_prepare(self, build: str, conns: List[Any],
                        prepared: List[Optional[Prepared]]) -> None:
        loop = TxnLoop.get()
        for t, c in enumerate(conns):
            prepared[t] = loop.prepare(build, c, self.compiled(t))

    def _run_native(self, prepared: List[Optional[Prepared]], done: List[Optional[Result]],
                    errors: List[BaseException]) -> None:
        """Every thread's plan in the C loop (ctypes releases the GIL: threads run at once)."""
        loop = TxnLoop.get()
        think = int(self.s.think_ms * 1e6)

        def one(t: int, barrier: Optional[threading.Barrier]) -> None:
            try:
                if barrier:
                    barrier.wait()
                p = prepared[t]
                assert p is not None
                done[t] = loop.run(p, think)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        if len(prepared) == 1:
            one(0, None)
            return
        barrier = threading.Barrier(len(prepared))
        ths = [threading.Thread(target=one, args=(t, barrier), daemon=True)
               for t in range(len(prepared))]
        for th in ths:
            th.start()
        for th in ths:
            th.join()

    def _native_bookkeeping(self, done: List[Optional[Result]], lat: List[List[int]],
                            spans: List[Dict[int, List[int]]], sel_rows: List[int],
                            think_ns: List[int]) -> None:
        """Latencies, phase spans, rows and sleep of the C loop (after the timed region)."""
        for t, r in enumerate(done):
            assert r is not None
            starts, ends = r.t_start, r.t_end
            lat[t].extend(b - a for a, b in zip(starts, ends))
            span = spans[t]
            for (phase, _stmts), a, b in zip(self.plans[t].txns, starts, ends):
                extend_span(span, phase, a, b)
            sel_rows[t] = r.rows
            think_ns[t] = r.slept_ns

    def _reader(self, spec: ModeSpec, db: str) -> Dict[str, Any]:
        """A second process scans the tables while the writer's connections stay open."""
        from .reader import spawn
        s = self.s
        out = spawn(spec.label, spec.layout or s.layout, spec.sqlite or s.sqlite, s, db,
                    s.reader_scans, record_value(s.record_size, update=True))
        scans = out["scan_ns"]
        ordered = sorted(scans)
        out["scan_ms_median"] = (ordered[len(ordered) // 2] if len(ordered) % 2 else
                                 (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2])
                                 / 2) / 1e6 if scans else None
        # what every scan must answer: the plan's rows, total length, updated rows
        rows = self._expected_rows()[0]
        upd = self._expected_updated()[0]
        want = [len(rows), len(rows) * len(record_value(s.record_size)),
                upd if record_value(s.record_size, update=True) != record_value(s.record_size)
                else len(rows)]
        bad = [i for i, ans in enumerate(out["answers"]) for a in ans if a != want]
        out["check"] = {"name": "reader process: every scan returns the plan's rows, total "
                                "length and rows holding the update value",
                        "expected": want, "actual": out["answers"][0][0] if out["answers"]
                        else None, "ok": not bad and bool(out["answers"])}
        del out["answers"]
        return out

    @staticmethod
    def _total_changes(conn: Any) -> Optional[int]:
        if conn is None:
            return None
        return int(conn.rows("SELECT total_changes()")[0][0])

    @staticmethod
    def _conn_for_db(conns: List[Any], db_index: int) -> Any:
        if len(conns) == 1:
            return conns[0]
        return conns[db_index] if db_index < len(conns) else conns[0]

    def _txn_thread(self, barrier: threading.Barrier, opener: Opener, *args: Any) -> None:
        errors = args[-1]
        try:
            barrier.wait()
            self._txn_loop(opener, *args)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def _txn_loop(self, opener: Opener, t: int, conn: Any, path: str, lat: List[int],
                  span: Dict[int, List[int]], sel_rows: List[int], think_ns: List[int],
                  errors: List[BaseException]) -> None:
        """Thread t's plan in the Python loop (:mod:`.pyloop`)."""
        sel_rows[t], think_ns[t] = python_loop(self.s, self.plans[t].txns, opener, conn, path,
                                               lat, span, self.s.think_ms / 1000.0)

    def _phases(self, spans: List[Dict[int, List[int]]]) -> List[Dict[str, Any]]:
        out = []
        for i, op in enumerate(self.s.phases):
            parts = [sp[i] for sp in spans if i in sp]
            if not parts:
                continue
            start = min(p[0] for p in parts)
            end = max(p[1] for p in parts)
            n = sum(p[2] for p in parts)
            wall = end - start
            out.append({"op": op, "transactions": n, "wall_ns": wall,
                        "ops_per_s": n / (wall / 1e9) if wall > 0 else None})
        return out

    def _latency_doc(self, lat: List[int], rnd: int) -> Dict[str, Any]:
        doc = latency_summary(lat)
        cap = self.s.max_latency_samples
        if len(lat) <= cap:
            doc["samples_ns"] = list(lat)
            doc["samples_complete"] = True
        else:
            rng = random.Random(f"reservoir:{self.s.seed}:{rnd}")
            doc["samples_ns"] = sorted(rng.sample(lat, cap))
            doc["samples_complete"] = False
        return doc

    def _io_doc(self, s0: Snapshot, s1: Snapshot, s2: Snapshot) -> Dict[str, Any]:
        return {"devices": device_windows(self.devices, s0, s1, s2),
                "process": {"timed": proc_delta(s0.proc, s1.proc),
                            "total": proc_delta(s0.proc, s2.proc)},
                "machine_busy": cpu_busy_share(s0.cpu, s1.cpu)}

    def _check_sql(self, spec: ModeSpec, opener: Opener, dbs: List[str], rep: Dict[str, Any],
                   changes: Optional[int], sel_rows: int, mode_doc: Dict[str, Any],
                   warm: bool) -> None:
        items: List[Dict[str, Any]] = []

        def item(name: str, expected: Any, actual: Any) -> None:
            items.append({"name": name, "expected": expected, "actual": actual,
                          "ok": expected == actual})

        exp_changes = sum(p.expected_changes for p in self.plans)
        exp_sel = sum(p.expected_select_rows for p in self.plans)
        if changes is not None:
            item("rows changed (total_changes of the run connections)", exp_changes, changes)
        item("rows returned by selects", exp_sel, sel_rows)
        expected = self._expected_rows()
        updated = self._expected_updated()
        upd_val = record_value(self.s.record_size, update=True)
        check_updates = upd_val != record_value(self.s.record_size)
        is_waldio = spec.mode.kind == "waldio"
        for i, p in enumerate(dbs):
            c = opener.open(p)
            try:
                tag = f"db{i} " if len(dbs) > 1 else ""
                for t in self.s.table_names():
                    n, total = c.rows(f"SELECT count(*), coalesce(sum(id), 0) FROM {t}")[0]
                    item(f"{tag}{t} rows left", len(expected[i]), n)
                    item(f"{tag}{t} sum of ids", sum(expected[i]), total)
                    if check_updates:
                        nu = c.rows(f"SELECT count(*) FROM {t} WHERE Value = ?", (upd_val,))[0][0]
                        item(f"{tag}{t} rows holding the update value", updated[i], nu)
                n_idx = sum(p.indexes_created for p in self.plans if p.db_index == i)
                if "create-index" in self.s.phases:
                    got = c.rows("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND "
                                 "name LIKE '%\\_bench\\_idx%' ESCAPE '\\'")[0][0]
                    item(f"{tag}indexes created", n_idx, got)
                ic = [r[0] for r in c.rows("PRAGMA integrity_check")]
                item(f"{tag}PRAGMA integrity_check", ["ok"], ic)
                settings = read_settings(c, is_waldio)
                if spec.mode.kind == "lsmvbt":
                    tables = self.s.table_names()
                    item(f"{tag}lsmvbt_check", ["ok"] * len(tables), lsmvbt.check(c, tables))
                    settings.update(lsmvbt.settings(c, tables[0]))
                    item(f"{tag}lsmvbt options read back", lsmvbt.expected(spec.mode),
                         lsmvbt.effective(settings, spec.mode))
                item(f"{tag}journal_mode read back", spec.mode.journal_mode.lower(),
                     str(settings.get("journal_mode")).lower())
                item(f"{tag}synchronous read back", spec.mode.synchronous,
                     settings.get("synchronous"))
                if is_waldio:
                    item(f"{tag}PRAGMA waldio sync", spec.mode.waldio_sync,
                         settings.get("waldio.sync"))
                    item(f"{tag}PRAGMA waldio layout", spec.layout, settings.get("waldio.layout"))
                    if spec.mode.waldio_group is not None:
                        item(f"{tag}PRAGMA waldio group", spec.mode.waldio_group,
                             settings.get("waldio.group"))
                if rep["settings"] is None:
                    rep["settings"] = dict(settings, read_on="a new connection after the run "
                                           "(the run's connections were opened inside the "
                                           "timed region)")
                if i == 0 and not warm and mode_doc["params"] is None:
                    full = _params.all_params(c.raw, p, dict(self._bench_params(), _why={}))
                    if is_waldio:
                        try:
                            full["waldio"] = dict(json.loads(c.rows("PRAGMA waldio")[0][0]),
                                                  _why={})
                        except Exception as e:  # noqa: BLE001
                            full["waldio"] = {"status": UNKNOWN, "_why": {"status": str(e)}}
                    mode_doc["params"] = full
            finally:
                c.close()
        ok = all(x["ok"] for x in items)
        rep["checks"] = {"ok": ok, "items": items}
        rep["ok"] = ok

    # ---------------------------------------------------------- raw modes

    def _raw_rep(self, spec: ModeSpec, d: str, rep: Dict[str, Any]) -> None:
        s = self.s
        T = s.threads
        dio = spec.name == "raw-dio"
        n_txn = [len(p.txns) for p in self.plans]
        ring = max(1, parse_size(s.prealloc) // RAW_BLOCK) if s.prealloc else \
            DEFAULT_PREALLOC // RAW_BLOCK
        size = RAW_BLOCK if dio else RAW_APPEND_BYTES
        paths = [os.path.join(d, f"raw-{t}.dat") for t in range(T)]
        per_txn_open = s.regime == "open-close"
        timed_open = "open" in s.timed and not per_txn_open
        flags = os.O_RDWR | (os.O_DIRECT if dio else 0)
        # setup (untimed): the file as the regime wants it
        for t, p in enumerate(paths):
            fd = os.open(p, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
            try:
                if dio:
                    _zero_fill(fd, ring * RAW_BLOCK)
                elif s.regime == "reused":
                    _zero_fill(fd, n_txn[t] * RAW_APPEND_BYTES)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        sync_dir(d)
        fds: List[Optional[int]] = [None] * T
        bufs = [mmap.mmap(-1, RAW_BLOCK if dio else 8192) for _ in range(T)]
        try:
            if not per_txn_open and not timed_open:
                fds = [os.open(p, flags) for p in paths]
            settle(d, self.s.drop_caches)
            snap0 = Snapshot(self.devices)
            lat: List[List[int]] = [[] for _ in range(T)]
            spans: List[Dict[int, List[int]]] = [dict() for _ in range(T)]
            errors: List[BaseException] = []
            pc = time.perf_counter_ns
            t0 = pc()
            if timed_open:
                fds = [os.open(p, flags) for p in paths]
            t_open = pc()

            def loop(t: int) -> None:
                buf = bufs[t]
                view = memoryview(buf)[:size]
                fd = fds[t]
                path = paths[t]
                append = lat[t].append
                span = spans[t]
                plan = self.plans[t].txns
                think = s.think_ms / 1000.0
                last = len(plan) - 1
                for k, (phase, _stmts) in enumerate(plan):
                    struct.pack_into("<QQ", buf, 0, 0x57414C44494F4231, k)
                    off = (k % ring) * RAW_BLOCK if dio else k * RAW_APPEND_BYTES
                    a = pc()
                    f = os.open(path, flags) if per_txn_open else fd
                    os.pwrite(f, view, off)
                    os.fdatasync(f)
                    if per_txn_open:
                        os.close(f)
                    b = pc()
                    append(b - a)
                    extend_span(span, phase, a, b)
                    if think and k != last:
                        time.sleep(think)

            def guarded(t: int, barrier: Optional[threading.Barrier]) -> None:
                try:
                    if barrier:
                        barrier.wait()
                    loop(t)
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)

            if T == 1:
                loop(0)
            else:
                barrier = threading.Barrier(T)
                ths = [threading.Thread(target=guarded, args=(t, barrier), daemon=True)
                       for t in range(T)]
                for th in ths:
                    th.start()
                for th in ths:
                    th.join()
            t_txn = pc()
            if errors:
                raise errors[0]
            if "close" in s.timed and not per_txn_open:
                for t in range(T):
                    os.close(fds[t])  # type: ignore[arg-type]
                    fds[t] = None
            t_end = pc()
            snap1 = Snapshot(self.devices)
            for t in range(T):
                if fds[t] is not None:
                    os.close(fds[t])  # type: ignore[arg-type]
                    fds[t] = None
            os.sync()
            snap2 = Snapshot(self.devices)
        finally:
            for t in range(T):
                if fds[t] is not None:
                    os.close(fds[t])  # type: ignore[arg-type]
            for b in bufs:
                b.close()
        total = sum(n_txn)
        wall = t_end - t0
        rep["transactions"] = total
        rep["statements"] = total
        rep["wall_ns"] = wall
        rep["ops_per_s"] = total / (wall / 1e9) if wall > 0 else None
        rep["timed_parts_ns"] = {"open": (t_open - t0) if timed_open else None,
                                 "transactions": t_txn - t_open, "checkpoint": None,
                                 "close": (t_end - t_txn) if ("close" in s.timed and
                                                              not per_txn_open) else None}
        rep["phases"] = self._phases(spans)
        rep["latency"] = self._latency_doc([x for l in lat for x in l], rep["index"])
        rep["io"] = self._io_doc(snap0, snap1, snap2)
        rep["settings"] = {"file": "preallocated, zero-filled, fdatasync'ed" if dio else
                           ("fresh, empty (appends)" if s.regime != "reused"
                            else "pre-written (overwrites)"),
                           "write_bytes": size, "o_direct": dio,
                           "ring_blocks": ring if dio else None,
                           "read_on": "harness"}
        items = []
        for t, p in enumerate(paths):
            bad, checked = _verify_stamps(p, n_txn[t], dio, ring)
            items.append({"name": f"thread {t}: stamped blocks read back", "expected": checked,
                          "actual": checked - bad, "ok": bad == 0})
            if not dio:
                want = n_txn[t] * RAW_APPEND_BYTES
                got = os.path.getsize(p)
                items.append({"name": f"thread {t}: file size", "expected": want, "actual": got,
                              "ok": got == want})
        ok = all(x["ok"] for x in items)
        rep["checks"] = {"ok": ok, "items": items}
        rep["ok"] = ok

    # ---------------------------------------------------------- summaries

    def _summary(self, mode: Dict[str, Any]) -> Dict[str, Any]:
        reps = [r for r in mode["repetitions"] if not r["warmup"] and r["ok"]]
        measured = [r for r in mode["repetitions"] if not r["warmup"]]
        ops = summarize([r["ops_per_s"] for r in reps if r["ops_per_s"]])
        pooled: List[int] = []
        complete = True
        for r in reps:
            pooled.extend(r["latency"].get("samples_ns", []))
            complete = complete and bool(r["latency"].get("samples_complete"))

        def per_txn(get: Callable[[Dict[str, Any]], Optional[float]]) -> Optional[Dict[str, Any]]:
            vals = []
            for r in reps:
                v = get(r)
                if v is not None and r["transactions"]:
                    vals.append(v / r["transactions"])
            return summarize(vals)

        def dev(window: str, key: str) -> Callable[[Dict[str, Any]], Optional[float]]:
            def g(r: Dict[str, Any]) -> Optional[float]:
                devs = (r.get("io") or {}).get("devices") or []
                return devs[0][window][key] if devs else None
            return g

        def proc(window: str) -> Callable[[Dict[str, Any]], Optional[float]]:
            return lambda r: ((r.get("io") or {}).get("process") or {}).get(window, {}).get(
                "write_bytes")

        def wchar(window: str) -> Callable[[Dict[str, Any]], Optional[float]]:
            return lambda r: ((r.get("io") or {}).get("process") or {}).get(window, {}).get(
                "wchar")

        def log_bytes(r: Dict[str, Any]) -> Optional[float]:
            st = r.get("waldio_stats")
            return None if not st else st.get("bytes_written")

        def syncs(r: Dict[str, Any]) -> Optional[float]:
            st = r.get("waldio_stats")
            if not st:
                return None
            return st.get("flushes", 0) + st.get("dsync_writes", 0)

        phases: List[Dict[str, Any]] = []
        shape = next((r["phases"] for r in mode["repetitions"] if r["phases"]), [])
        for i, op in enumerate(shape):
            vals = [r["phases"][i]["ops_per_s"] for r in reps
                    if len(r["phases"]) > i and r["phases"][i]["ops_per_s"]]
            phases.append({"op": op["op"], "ops_per_s": summarize(vals)})
        return {
            "repetitions_ok": len(reps),
            "repetitions_failed": len(measured) - len(reps),
            "ops_per_s": ops,
            "latency_ns": latency_summary(pooled),
            "latency_from_samples_only": not complete,
            "per_txn": {
                "device_write_bytes": per_txn(dev("total", "write_bytes")),
                "device_write_bytes_timed": per_txn(dev("timed", "write_bytes")),
                "device_flushes": per_txn(dev("total", "flushes")),
                "device_flushes_timed": per_txn(dev("timed", "flushes")),
                "process_write_bytes": per_txn(proc("total")),
                "process_write_bytes_timed": per_txn(proc("timed")),
                "log_syncs": per_txn(syncs),
                "process_wchar": per_txn(wchar("total")),
                "log_bytes_written": per_txn(log_bytes),
            },
            "waldio_stats_per_txn": _stats_per_txn(reps),
            "machine_busy": summarize([r["io"]["machine_busy"] for r in reps
                                       if (r.get("io") or {}).get("machine_busy") is not None]),
            "reader": _reader_summary(reps),
            "phases": phases,
            "ok": all(r["ok"] for r in mode["repetitions"]) and bool(mode["repetitions"]),
        }


def _stats_per_txn(reps: List[Dict[str, Any]]) -> Optional[Dict[str, float]]:
    """Median over repetitions of each PRAGMA waldio_stats counter per transaction."""
    rows = [(r["waldio_stats"], r["transactions"]) for r in reps
            if r.get("waldio_stats") and r["transactions"]]
    if not rows:
        return None
    keys = sorted({k for st, _ in rows for k in st})
    out = {}
    for k in keys:
        sm = summarize([st.get(k, 0) / n for st, n in rows])
        if sm:
            out[k] = sm["median"]
    return out


def _reader_summary(reps: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    rd = [r["reader"] for r in reps if r.get("reader")]
    if not rd:
        return None
    return {"scan_ms": summarize([x["scan_ms_median"] for x in rd
                                  if x.get("scan_ms_median") is not None]),
            "first_scan_ms": summarize([x["scan_ns"][0] / 1e6 for x in rd if x["scan_ns"]]),
            "mean_scan_ms": summarize([sum(x["scan_ns"]) / len(x["scan_ns"]) / 1e6 for x in rd
                                       if x["scan_ns"]]),
            "scans_per_repetition": len(rd[0]["scan_ns"]),
            "waldio_stats_per_scan": _reader_stats(rd)}


def _reader_stats(rd: List[Dict[str, Any]]) -> Optional[Dict[str, float]]:
    rows = [(x["waldio_stats"], len(x["scan_ns"])) for x in rd
            if x.get("waldio_stats") and x["scan_ns"]]
    if not rows:
        return None
    out = {}
    for k in ("disk_reads", "bytes_read", "cache_hits", "cache_misses"):
        sm = summarize([st.get(k, 0) / n for st, n in rows])
        if sm:
            out[k] = sm["median"]
    return out


def reader_ratios(reps: List[Dict[str, Any]], base_reps: List[Dict[str, Any]]
                  ) -> Dict[str, Any]:
    """Scan time of repetition i over the baseline's repetition i (same round)."""
    base = {r["index"]: r for r in base_reps if not r["warmup"] and r["ok"] and r.get("reader")}
    per = []
    for r in reps:
        b = base.get(r["index"])
        if r["warmup"] or not r["ok"] or not r.get("reader") or b is None:
            continue
        x, y = r["reader"].get("scan_ms_median"), b["reader"].get("scan_ms_median")
        if x is not None and y:
            per.append({"index": r["index"], "ratio": x / y})
    sm = summarize([p["ratio"] for p in per])
    return {"per_rep": per, "median": sm["median"] if sm else None,
            "min": sm["min"] if sm else None, "max": sm["max"] if sm else None}


def _finalize(prepared: List[Optional[Prepared]]) -> None:
    for p in prepared:
        if p is not None:
            p.close()


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _zero_fill(fd: int, nbytes: int) -> None:
    chunk = b"\0" * (1 << 20)
    off = 0
    while off < nbytes:
        n = min(len(chunk), nbytes - off)
        os.pwrite(fd, chunk[:n], off)
        off += n


def _verify_stamps(path: str, n: int, dio: bool, ring: int) -> Tuple[int, int]:
    """(bad, checked): every slot must carry the number of the last commit that wrote it."""
    bad = checked = 0
    with open(path, "rb") as f:
        if dio:
            last: Dict[int, int] = {}
            for k in range(n):
                last[k % ring] = k
            for slot, k in last.items():
                f.seek(slot * RAW_BLOCK)
                magic, got = struct.unpack("<QQ", f.read(16))
                checked += 1
                bad += (magic != 0x57414C44494F4231 or got != k)
        else:
            for k in range(n):
                f.seek(k * RAW_APPEND_BYTES)
                data = f.read(16)
                checked += 1
                if len(data) < 16:
                    bad += 1
                    continue
                magic, got = struct.unpack("<QQ", data)
                bad += (magic != 0x57414C44494F4231 or got != k)
    return bad, checked
