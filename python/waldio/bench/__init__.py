"""``waldio bench``: modes, workloads, regimes, timing, I/O accounting, statistics.

The engine has no argparse and prints nothing; :mod:`.cli` builds a
:class:`Settings` and a mode list, runs :class:`Bench` and prints the result,
:mod:`.report` and :mod:`.plots` turn saved results into tables and plots.  docs/bench.md is
the user-facing description of everything here.

What one invocation does
========================

1. Resolve where to run (:func:`open_target`): a fresh loop-mounted file system
   made with :mod:`waldio.fs` (default: ext4, journaled like a phone's),
   or a private sub-directory of ``--dir``.  Everything created is removed.
2. Plan the workload once per thread (:func:`build_plan`): every statement and
   its parameters are generated *before* timing from a seeded RNG, together
   with the results the database must show afterwards (rows changed, rows
   left, sum of the keys left).  The plan is identical for every mode.
3. Build a template database per page format (reserved bytes 0 for stock
   SQLite, 24 for waldio's header embedding) with the schema and the
   pre-populated rows; each repetition starts from a byte copy of it.
4. Run ``warmup + repetitions`` rounds; in every round every mode runs once, in
   the order given (A B C A B C ...), so machine drift hits all modes alike.
   Warm-up rounds are stored but excluded from every summary.
5. Per repetition (:meth:`Bench._run_rep`): fresh files; open and configure
   the connections (unless the open is timed); put the log into the chosen
   regime; ``os.sync()`` and fsync of the directory; counters; the timed
   region (``time.perf_counter_ns`` around every transaction); counters;
   untimed close; ``os.sync()``; counters again; then a correctness check on a
   new connection (rows changed, rows left, key sum, ``PRAGMA
   integrity_check``, and for the raw modes the stamps of the written blocks).
6. Summaries: median / min / max / mean / stdev / coefficient of variation of
   ops/s over the measured repetitions, latency percentiles, per-transaction
   I/O, and ratios against a baseline mode computed pair by pair (repetition i
   of a mode over repetition i of the baseline, same round).

The package, one concern per module
===================================

engine:        :mod:`.modes` (what can run), :mod:`.settings` (options, presets),
               :mod:`.plan` (the workload, planned before timing),
               :mod:`.sqlite_env` (SQLite builds, opening and configuring
               connections), :mod:`.target` (where it runs), :mod:`.iostat`
               (device, process and CPU counters), :mod:`.stats`,
               :mod:`.provenance`, :mod:`.native` (the C loop, bench/txnloop),
               :mod:`.pyloop` (the Python loop), :mod:`.calibrate` (what the
               loops add), :mod:`.runner` (:class:`Bench`),
               :mod:`.reader` (``--reader-scans``: the scanning process),
               :mod:`.speedtest1` (``--workload speedtest1``: SQLite's own
               benchmark, built by bench/speedtest1/build.sh, stock and waldio)
processes:     ``--processes`` (issue 18): :mod:`.process_workloads` (insert,
               update, web), :mod:`.process_worker` (one process),
               :mod:`.worker_pool` (the processes, seen from the parent),
               :mod:`.histogram` (latency buckets), :mod:`.processes`
               (:class:`~.processes.ProcessBench`)
presentation:  :mod:`.options` (command-line values, shared with ``waldio
               trace``), :mod:`.cli` (``waldio bench`` / ``waldio report``),
               :mod:`.printer` (terminal or plain text), :mod:`.verdict` (when
               rounds cannot conclude), :mod:`.report` (tables),
               :mod:`.speedtest1_report`, :mod:`.processes_report`,
               :mod:`.checklist` (the record files), :mod:`.results` (schemas,
               loading saved results), :mod:`.plots`, :mod:`.plots_processes`
"""
from __future__ import annotations

from .modes import (
    JOURNAL_MODES,
    LAYOUTS,
    MODES,
    QUICK_MODES,
    RAW_APPEND_BYTES,
    RAW_BLOCK,
    SHORTCUTS,
    SQLITE_BUILDS,
    SYNC_LEVELS,
    Mode,
    ModeSpec,
    accepted_mode_words,
    parse_modes,
)
from .plan import Plan, build_plan, record_value
from .runner import SCHEMA_VERSION, Bench, ProgressFn
from .settings import (
    CHECKPOINT_MODES,
    DEFAULT_PREALLOC,
    INSERT_IDS,
    KEY_ORDERS,
    LOCKING_MODES,
    OPERATIONS,
    PAGE_SIZES,
    PRESETS,
    REGIMES,
    SCHEMAS,
    TIMED_PARTS,
    TXN_STYLES,
    WORKLOADS,
    BenchError,
    Preset,
    Settings,
    create_table_sql,
    parse_size,
    resolve_settings,
)
from .sqlite_env import Opener, SqliteEnv, read_settings
from .stats import latency_summary, pair_ratios, percentile, summarize
from .target import Target, default_fs_size_mib, open_target

__all__ = [
    "Bench", "BenchError", "Mode", "ModeSpec", "MODES", "PRESETS", "Preset", "QUICK_MODES",
    "SCHEMA_VERSION", "SHORTCUTS", "Settings", "Target", "build_plan", "latency_summary",
    "open_target", "pair_ratios", "parse_modes", "percentile", "resolve_settings", "summarize",
    "default_fs_size_mib", "JOURNAL_MODES", "LAYOUTS", "RAW_APPEND_BYTES", "RAW_BLOCK",
    "SQLITE_BUILDS", "SYNC_LEVELS", "accepted_mode_words", "Plan", "record_value", "ProgressFn",
    "CHECKPOINT_MODES", "DEFAULT_PREALLOC", "INSERT_IDS", "KEY_ORDERS", "LOCKING_MODES",
    "OPERATIONS", "PAGE_SIZES", "REGIMES", "SCHEMAS", "TIMED_PARTS", "TXN_STYLES", "WORKLOADS",
    "create_table_sql", "parse_size", "Opener", "SqliteEnv", "read_settings",
]
