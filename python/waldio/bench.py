"""The engine of ``waldio bench``: modes, workloads, regimes, timing, I/O accounting, statistics.

This module has no argparse and prints nothing; ``waldio.bench_cli`` builds a
:class:`Settings` and a mode list, runs :class:`Bench` and prints the result,
``waldio.report`` turns saved results into tables and plots.  docs/bench.md is
the user-facing description of everything here.

What one invocation does
========================

1. Resolve where to run (:func:`open_target`): a fresh loop-mounted file system
   made with :mod:`waldio.fsimage` (default: ext4, journaled like a phone's),
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

Modes
=====

:data:`MODES` is the table of everything that can be run.  A stock mode is a
``journal_mode`` and a ``synchronous`` level through SQLite's ``unix`` VFS; a
waldio mode is ``journal_mode=WAL`` through the ``waldio`` VFS plus optional
PRAGMAs (``waldio-persistent`` adds ``PRAGMA waldio_sync=persistent``; ``<base>-async`` and
``<base>-durable`` add ``PRAGMA waldio_group=...``).  A new libwaldio mode is one
more :class:`Mode` entry with its PRAGMA.  ``raw-dio`` and ``raw-append`` run no SQLite at all:
they are the system-call ceilings a commit cannot beat on this file system.

A mode spec on the command line is ``NAME[:LAYOUT][@BUILD]``:
``waldio-full:pad4k`` runs waldio-full with the pad4k log layout,
``wal-full@system`` runs stock WAL on the system SQLite library.

I/O accounting (no root needed)
===============================

* Block device: ``/sys/class/block/<dev>/stat`` of the device holding the
  database (for a loop file system: the loop device, which sees the file
  system's journal and data and nothing else); its sectors written (field 7)
  and flush requests (field 16).  Also the disk holding a loop device's
  backing file, for information.  Two windows: *timed* (from just before the
  timed region to its end) and *total* (to after the untimed close and a
  final ``os.sync()``), so deferred write-back of NORMAL/OFF modes and the
  checkpoint at close are charged to the mode that caused them.  The counters
  include every other writer of the device.
* Process: ``/proc/self/io`` (``write_bytes``: bytes this process caused to be
  sent to storage, counted when pages are dirtied or direct I/O is issued;
  ``syscw``, ``wchar``), same windows.
* waldio modes: ``PRAGMA waldio_stats`` (log writes, O_DSYNC writes, flushes)
  of the run connection, reset before and read after the timed region.
"""
from __future__ import annotations

import bisect
import contextlib
import ctypes
import datetime
import json
import math
import mmap
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from . import params as _params

SCHEMA_VERSION = 1
UNKNOWN = "unknown"

JOURNAL_MODES = ("DELETE", "TRUNCATE", "PERSIST", "WAL", "MEMORY", "OFF")
SYNC_LEVELS = ("OFF", "NORMAL", "FULL")
LAYOUTS = ("embed", "pad4k", "pad8k")
SQLITE_BUILDS = ("apsw", "system")
REGIMES = ("growing", "reused", "open-close")
TIMED_PARTS = ("open", "checkpoint", "close")
CHECKPOINT_MODES = ("passive", "full", "restart", "truncate")
KEY_ORDERS = ("seq", "random")
OPERATIONS = ("insert", "update", "delete", "select")
WORKLOADS = OPERATIONS + ("mixed",)
TXN_STYLES = ("auto", "autocommit", "begin", "begin-immediate")
SCHEMAS = ("autoincrement", "rowid")
INSERT_IDS = ("auto", "explicit")
LOCKING_MODES = ("normal", "exclusive")
PAGE_SIZES = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)

RAW_BLOCK = 4096          # raw-dio: one aligned block per commit
RAW_APPEND_BYTES = 4120   # raw-append: a WAL frame (24-byte header + 4096-byte page)
RESERVE_FOR_EMBED = 24    # waldio's header embedding needs 24 reserved bytes per page
SQLITE_FCNTL_RESERVE_BYTES = 38
DEFAULT_PREALLOC = 4 << 20  # libwaldio's default log preallocation (waldio.h)
WALFILL_TABLE = "_bench_walfill"


class BenchError(Exception):
    """A configuration or environment problem, explained in words."""


# --------------------------------------------------------------------------
# modes
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Mode:
    """One way of committing: what SQLite is told, and what a commit then does."""

    name: str
    kind: str                               # "stock", "waldio" or "raw"
    journal_mode: Optional[str] = None      # PRAGMA journal_mode (SQL modes)
    synchronous: Optional[str] = None       # PRAGMA synchronous (SQL modes)
    pragmas: Tuple[str, ...] = ()           # further PRAGMAs, run in order
    waldio_sync: Optional[str] = None       # what PRAGMA waldio must report as "sync"
    waldio_group: Optional[str] = None      # what PRAGMA waldio must report as "group"
    commit: str = ""                        # what one commit does
    durability: str = ""                    # what survives a crash

    @property
    def is_sql(self) -> bool:
        return self.kind in ("stock", "waldio")


def _stock_commit(jm: str, sync: str) -> str:
    if jm == "WAL":
        return {"FULL": "buffered WAL append + fdatasync of the WAL per commit",
                "NORMAL": "buffered WAL append; fsyncs only at checkpoints",
                "OFF": "buffered WAL append; never syncs"}[sync]
    journal = {"DELETE": "rollback journal written then deleted",
               "TRUNCATE": "rollback journal written then truncated",
               "PERSIST": "rollback journal written then its header zeroed",
               "MEMORY": "rollback journal kept in memory",
               "OFF": "no rollback journal"}[jm]
    syncs = {"FULL": "journal and database fsynced per commit",
             "NORMAL": "journal and database fsynced per commit (fewer header syncs)",
             "OFF": "never syncs"}[sync]
    if jm in ("MEMORY", "OFF"):
        syncs = {"FULL": "database fsynced per commit", "NORMAL": "database fsynced per commit",
                 "OFF": "never syncs"}[sync]
    return f"{journal}; {syncs}"


def _stock_durability(jm: str, sync: str) -> str:
    if jm in ("MEMORY", "OFF"):
        return ("a crash inside a write transaction can corrupt the database "
                "(no rollback journal on disk)")
    if sync == "OFF":
        return "OS crash or power loss can lose commits or corrupt the database"
    if jm == "WAL" and sync == "NORMAL":
        return "no loss on process crash; OS crash or power loss may lose recent commits"
    if sync == "NORMAL":
        return "no loss on process crash; power loss: small chance of corruption (SQLite docs)"
    return "no loss on process crash, OS crash or power loss"


MODES: Dict[str, Mode] = {}


def _add(mode: Mode) -> None:
    MODES[mode.name] = mode


for _jm in JOURNAL_MODES:
    for _sync in SYNC_LEVELS:
        _add(Mode(f"{_jm.lower()}-{_sync.lower()}", "stock", _jm, _sync,
                  commit=_stock_commit(_jm, _sync), durability=_stock_durability(_jm, _sync)))

_add(Mode("waldio-full", "waldio", "WAL", "FULL", waldio_sync="full",
          commit="O_DIRECT overwrite of preallocated log blocks + fdatasync per commit",
          durability="no loss on process crash, OS crash or power loss"))
_add(Mode("waldio-persistent", "waldio", "WAL", "FULL",
          pragmas=("PRAGMA waldio_sync=persistent",), waldio_sync="persistent",
          commit="O_DIRECT|O_DSYNC overwrite per log write (FUA where the device has it, "
                 "else write + flush)",
          durability="no loss on process crash, OS crash or power loss"))
_add(Mode("waldio-normal", "waldio", "WAL", "NORMAL", waldio_sync="normal",
          commit="O_DIRECT overwrite, no flush; log flushed at checkpoints and within flush_ms",
          durability="no loss on process or OS crash; power loss may lose commits since "
                     "the last flush (bounded by flush_ms)"))
# Group commit (the paper's Group Synch; docs/durability.md): one entry per base mode
# and group mode.  The group PRAGMA comes after the base mode's own PRAGMAs.
for _base in ("waldio-full", "waldio-persistent", "waldio-normal"):
    _b = MODES[_base]
    _add(Mode(f"{_base}-async", "waldio", "WAL", _b.synchronous,
              pragmas=_b.pragmas + ("PRAGMA waldio_group=async",), waldio_sync=_b.waldio_sync,
              waldio_group="async",
              commit="returns once buffered; one log write (+ the base mode's flush) per "
                     "group_ms (default 2 ms) or group_bytes (default 16 KiB); base: " + _b.commit,
              durability="the base mode's loss plus commits of the last group_ms, on process "
                         "crash, OS crash and power loss (base: " + _b.durability + ")"))
    _add(Mode(f"{_base}-durable", "waldio", "WAL", _b.synchronous,
              pragmas=_b.pragmas + ("PRAGMA waldio_group=durable",), waldio_sync=_b.waldio_sync,
              waldio_group="durable",
              commit="returns after a group write covering it; concurrent committers share the "
                     "write; base: " + _b.commit,
              durability=_b.durability))
for _m in ("waldio-full", "waldio-persistent", "waldio-normal"):
    MODES[_m] = replace(MODES[_m], waldio_group="off")
_add(Mode("raw-dio", "raw",
          commit="one 4096-byte O_DIRECT overwrite of a zero-filled, fdatasync'ed "
                 "preallocated file + fdatasync (no SQLite)",
          durability="ceiling: what a durable one-block commit costs here"))
_add(Mode("raw-append", "raw",
          commit="one buffered 4120-byte write at the end of the file + fdatasync "
                 "(what stock WAL does while its file grows; no SQLite)",
          durability="ceiling of stock WAL FULL while the WAL grows"))

QUICK_MODES = ("wal-full", "wal-normal", "waldio-full", "waldio-normal", "waldio-persistent",
               "raw-dio")
SHORTCUTS: Dict[str, Tuple[str, ...]] = {
    "quick": QUICK_MODES,
    "all-stock": tuple(n for n, m in MODES.items() if m.kind == "stock"),
    "all-waldio": tuple(n for n, m in MODES.items() if m.kind == "waldio"),
    "all-raw": tuple(n for n, m in MODES.items() if m.kind == "raw"),
    "all": tuple(MODES),
}


@dataclass(frozen=True)
class ModeSpec:
    """A mode as it runs: the mode, the log layout (waldio) and the SQLite build."""

    mode: Mode
    layout: Optional[str]       # waldio modes only
    sqlite: Optional[str]       # "apsw" / "system" for SQL modes, None for raw
    label: str

    @property
    def name(self) -> str:
        return self.mode.name


def accepted_mode_words() -> str:
    return ", ".join(list(SHORTCUTS) + list(MODES))


def parse_modes(text: str, layout: str = "embed", sqlite: str = "apsw") -> List[ModeSpec]:
    """Parse ``--modes``: a comma list of NAME[:LAYOUT][@BUILD] and shortcuts.

    Raises ValueError naming the bad word and the accepted values.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (accepted: {', '.join(LAYOUTS)})")
    if sqlite not in SQLITE_BUILDS:
        raise ValueError(f"unknown SQLite build {sqlite!r} (accepted: {', '.join(SQLITE_BUILDS)})")
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        raise ValueError("no mode given")
    specs: List[ModeSpec] = []
    seen: Dict[str, str] = {}
    for word in words:
        base, _, build = word.partition("@")
        name, _, lay = base.partition(":")
        shortcut = name in SHORTCUTS
        if shortcut:
            names = list(SHORTCUTS[name])
        elif name in MODES:
            names = [name]
        else:
            raise ValueError(f"unknown mode {name!r} (accepted: {accepted_mode_words()}; "
                             f"optionally :{'|'.join(LAYOUTS)} and @{'|'.join(SQLITE_BUILDS)})")
        if lay and lay not in LAYOUTS:
            raise ValueError(f"unknown layout {lay!r} in {word!r} (accepted: {', '.join(LAYOUTS)})")
        if build and build not in SQLITE_BUILDS:
            raise ValueError(f"unknown SQLite build {build!r} in {word!r} "
                             f"(accepted: {', '.join(SQLITE_BUILDS)})")
        if not shortcut and lay and MODES[name].kind != "waldio":
            raise ValueError(f"{word!r}: a layout (:{lay}) applies to waldio modes only")
        if not shortcut and build and MODES[name].kind == "raw":
            raise ValueError(f"{word!r}: raw modes run no SQLite, so @{build} does not apply")
        for n in names:
            mode = MODES[n]
            label = n
            if lay and mode.kind == "waldio":
                label += f":{lay}"
            if build and mode.is_sql:
                label += f"@{build}"
            if label in seen:
                continue  # a shortcut and an explicit name may overlap
            seen[label] = word
            specs.append(ModeSpec(
                mode=mode,
                layout=(lay or layout) if mode.kind == "waldio" else None,
                sqlite=(build or sqlite) if mode.is_sql else None,
                label=label))
    return specs


# --------------------------------------------------------------------------
# settings and presets
# --------------------------------------------------------------------------

@dataclass
class Settings:
    """Everything a run depends on besides the modes and the target (JSON-able)."""

    preset: Optional[str] = "mobibench-2015"
    phases: List[str] = field(default_factory=lambda: ["insert"])
    mix: Dict[str, float] = field(default_factory=lambda: {"insert": 50.0, "update": 30.0,
                                                            "delete": 10.0, "select": 10.0})
    transactions: int = 1000            # per phase, all threads together
    ops_per_txn: int = 1
    record_size: int = 100
    prepopulate: int = 0                # rows per table before the run
    tables: int = 1
    table_prefix: str = "tblMyList"
    numbered_tables: bool = False       # tblMyList0.. (Mobibench >= 2017) vs tblMyList
    schema: str = "autoincrement"
    insert_ids: str = "auto"
    txn: str = "autocommit"
    key_order: str = "seq"
    seed: int = 1
    threads: int = 1
    shared_db: bool = True
    think_ms: float = 0.0
    regime: str = "growing"
    timed: List[str] = field(default_factory=lambda: ["checkpoint"])
    checkpoint_mode: str = "passive"
    repetitions: int = 5
    warmup: int = 1
    page_size: int = 4096
    cache_size: Optional[int] = None
    mmap_size: Optional[int] = None
    locking_mode: Optional[str] = None
    wal_autocheckpoint: Optional[int] = None
    journal_size_limit: Optional[int] = None
    stock_reserve: int = 0
    layout: str = "embed"
    flush_ms: Optional[int] = None
    prealloc: Optional[str] = None
    group_ms: Optional[int] = None
    group_bytes: Optional[str] = None
    sqlite: str = "apsw"
    baseline: Optional[str] = None
    ceiling: str = "raw-dio"
    max_latency_samples: int = 100_000
    busy_timeout_ms: int = 10_000
    notes: List[str] = field(default_factory=list)

    def table_names(self) -> List[str]:
        if self.tables == 1 and not self.numbered_tables:
            return [self.table_prefix]
        return [f"{self.table_prefix}{i}" for i in range(self.tables)]

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        d["table_names"] = self.table_names()
        d["create_table_sql"] = create_table_sql(self, self.table_names()[0])
        return d


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    values: Dict[str, Any]
    native_modes: Tuple[str, ...]
    prepopulate_rule: str               # how the default pre-population is derived
    doc: str


PRESETS: Dict[str, Preset] = {
    "mobibench-2015": Preset(
        name="mobibench-2015",
        summary="WALDIO paper (ATC'15) setting: Mobibench 1.0.4/1.0.5, 1 table, AUTOINCREMENT, "
                "one autocommit 100-byte insert per transaction, 1,000 transactions",
        values=dict(phases=["insert"], transactions=1000, ops_per_txn=1, record_size=100,
                    tables=1, table_prefix="tblMyList", numbered_tables=False,
                    schema="autoincrement", insert_ids="auto", txn="autocommit",
                    key_order="seq", page_size=4096, timed=["checkpoint"],
                    checkpoint_mode="passive", regime="growing"),
        native_modes=("wal-full",),
        prepopulate_rule="transactions x ops-per-txn rows when the workload updates, deletes "
                         "or selects (Mobibench 1.0.5 fills the table to -n rows), else 0",
        doc="""Mobibench as the WALDIO paper ran it (`mobibench -d 0 -n 1000 -j 3 -s 2`,
shell/mobibench.c of v1.0.5, commit 1ad7644): `PRAGMA page_size=4096`, one table
`tblMyList(id INTEGER PRIMARY KEY autoincrement, Value TEXT not null, creation_date long)`,
each transaction one autocommit `INSERT INTO tblMyList(Value) VALUES('<100 chars>')`
(no BEGIN/COMMIT; AUTOINCREMENT also rewrites sqlite_sequence, so two B-tree pages
are dirtied per insert), 1,000 transactions, the final `sqlite3_wal_checkpoint()`
inside the timed region, close outside it.  Differences from that binary: SQLite is
the one under test (Mobibench bundled 3.7.5 with -DSQLITE_DEFAULT_JOURNAL_SIZE_LIMIT=1048576
and -DSQLITE_DEFAULT_AUTOVACUUM=1; here every setting is read back and printed), the
database starts fresh per repetition (Mobibench reused its file), and values are bound
parameters instead of SQL literals.""",
    ),
    "mobibench": Preset(
        name="mobibench",
        summary="current Mobibench defaults (HEAD f56ea5e): 3 tables, explicit BEGIN/COMMIT "
                "with one insert per table, 10 transactions, TRUNCATE journal, synchronous FULL",
        values=dict(phases=["insert"], transactions=10, ops_per_txn=1, record_size=100,
                    tables=3, table_prefix="tblMyList", numbered_tables=True,
                    schema="rowid", insert_ids="explicit", txn="begin",
                    key_order="seq", page_size=4096, timed=["checkpoint"],
                    checkpoint_mode="passive", regime="growing"),
        native_modes=("truncate-full",),
        prepopulate_rule="max(transactions, 296) rows per table when the workload updates, "
                         "deletes or selects (Mobibench's MIN_CHECK = ((40 KiB / 4 KiB) - 2) x 37), "
                         "else 0",
        doc="""Mobibench's current shell defaults (`mobibench -d 0`, HEAD f56ea5e, 2023):
`-n 10` transactions, `-j 1` (TRUNCATE), `-s 2` (FULL), `-T 3` tables
`tblMyList0..2(id INTEGER PRIMARY KEY, Value TEXT not null, creation_date long)`, `-D 1`
database, `-t 1` thread; one transaction = `BEGIN; INSERT INTO tblMyList<k>(id,Value)
VALUES(<tx>, '<100 chars>')` for every table; `COMMIT;`, ids = transaction index;
update/delete pre-populate each table to max(-n, 296) rows; the final WAL checkpoint is
timed.  TRUNCATE/FULL is run in addition to the chosen modes when --modes is not given.""",
    ),
    "apsys17": Preset(
        name="apsys17",
        summary="APSys'17 (Purohith et al.): 1,000 inserts + 1,000 updates + 1,000 deletes on "
                "a table pre-populated with 100,000 rows",
        values=dict(phases=["insert", "update", "delete"], transactions=1000, ops_per_txn=1,
                    record_size=100, prepopulate=100_000, tables=1, table_prefix="tblMyList",
                    numbered_tables=False, schema="autoincrement", insert_ids="auto",
                    txn="autocommit", key_order="random", page_size=4096, timed=[],
                    checkpoint_mode="passive", regime="growing"),
        native_modes=("delete-full",),
        prepopulate_rule="100,000 rows (the paper's pre-population)",
        doc="""The experiment of "The Dangers and Complexities of SQLite Benchmarking" (APSys'17,
section 3): 3,000 transactions (1,000 inserts, 1,000 updates, 1,000 deletes) on a
database pre-populated with 100K rows; the paper's default configuration is DELETE
journal, synchronous FULL (run in addition when --modes is not given).  The paper gives
neither the record size nor the schema; the co-author's app (jayashreemohan29/sqlite-bench,
plausibly the paper's harness, unconfirmed) uses an AUTOINCREMENT table, autocommit
operations on random ids and 3,072-byte values.  This preset keeps Mobibench's 100-byte
record so that the 100K-row database stays ~12 MB; pass --record-size 3072 to follow the
app (the loop image is sized from the workload).""",
    ),
}


def create_table_sql(s: Settings, table: str) -> str:
    key = "id INTEGER PRIMARY KEY AUTOINCREMENT" if s.schema == "autoincrement" \
        else "id INTEGER PRIMARY KEY"
    return f"CREATE TABLE {table}({key}, Value TEXT not null, creation_date long)"


def _needs_rows(phases: Sequence[str], mix: Dict[str, float]) -> bool:
    for p in phases:
        if p in ("update", "delete", "select"):
            return True
        if p == "mixed" and any(mix.get(o, 0) > 0 for o in ("update", "delete", "select")):
            return True
    return False


def resolve_settings(preset: Optional[str], overrides: Dict[str, Any]) -> Settings:
    """Settings = dataclass defaults <- preset values <- explicit overrides.

    ``overrides`` holds only what the user set (None values are ignored).
    Raises ValueError with the option name on an invalid combination.
    """
    s = Settings(preset=preset)
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r} (accepted: {', '.join(PRESETS)})")
        for k, v in PRESETS[preset].values.items():
            setattr(s, k, list(v) if isinstance(v, list) else v)
    given = {k: v for k, v in overrides.items() if v is not None}
    names = {f.name for f in fields(Settings)}
    for k, v in given.items():
        if k not in names:
            raise ValueError(f"unknown setting {k!r}")
        setattr(s, k, v)
    if "prepopulate" not in given and (preset is None or "prepopulate" not in PRESETS[preset].values):
        if _needs_rows(s.phases, s.mix):
            per = s.transactions * s.ops_per_txn
            s.prepopulate = max(s.transactions, 296) if preset == "mobibench" else per
            s.notes.append(f"pre-populated {s.prepopulate} rows per table "
                           f"({PRESETS[preset].prepopulate_rule if preset else 'enough rows for the workload'})")
        else:
            s.prepopulate = 0
    _validate(s, given)
    return s


def _validate(s: Settings, given: Dict[str, Any]) -> None:
    def bad(option: str, msg: str) -> None:
        raise ValueError(f"{option}: {msg}")

    for p in s.phases:
        if p not in WORKLOADS:
            bad("--workload", f"unknown workload {p!r} (accepted: {', '.join(WORKLOADS)}, "
                              "or a comma list of them run as phases)")
    if not s.phases:
        bad("--workload", "no workload given")
    if "mixed" in s.phases:
        if not s.mix or sum(s.mix.values()) <= 0:
            bad("--mix", "the mixed workload needs at least one positive weight")
        for k, v in s.mix.items():
            if k not in OPERATIONS:
                bad("--mix", f"unknown operation {k!r} (accepted: {', '.join(OPERATIONS)})")
            if v < 0:
                bad("--mix", f"weight of {k} is negative")
    for name, value, lo in (("--transactions", s.transactions, 1), ("--ops-per-txn", s.ops_per_txn, 1),
                            ("--record-size", s.record_size, 0), ("--prepopulate", s.prepopulate, 0),
                            ("--tables", s.tables, 1), ("--threads", s.threads, 1),
                            ("--repetitions", s.repetitions, 1), ("--warmup", s.warmup, 0),
                            ("--stock-reserve", s.stock_reserve, 0),
                            ("--max-latency-samples", s.max_latency_samples, 1)):
        if not isinstance(value, int) or value < lo:
            bad(name, f"must be an integer >= {lo}, got {value!r}")
    if s.tables > 100:
        bad("--tables", "at most 100")
    if s.stock_reserve > 255:
        bad("--stock-reserve", "at most 255")
    if s.think_ms < 0:
        bad("--think-ms", "must be >= 0")
    if s.regime not in REGIMES:
        bad("--regime", f"unknown regime {s.regime!r} (accepted: {', '.join(REGIMES)})")
    for t in s.timed:
        if t not in TIMED_PARTS:
            bad("--timed", f"unknown part {t!r} (accepted: {', '.join(TIMED_PARTS)} or none)")
    if s.regime == "reused" and "open" in s.timed:
        bad("--timed", "'open' cannot be timed in the reused regime: the log is filled and "
                       "checkpointed on the connection that then runs the workload")
    if s.checkpoint_mode not in CHECKPOINT_MODES:
        bad("--checkpoint-mode", f"unknown mode {s.checkpoint_mode!r} "
                                 f"(accepted: {', '.join(CHECKPOINT_MODES)})")
    if s.key_order not in KEY_ORDERS:
        bad("--key-order", f"unknown order {s.key_order!r} (accepted: {', '.join(KEY_ORDERS)})")
    if s.schema not in SCHEMAS:
        bad("--schema", f"unknown schema {s.schema!r} (accepted: {', '.join(SCHEMAS)})")
    if s.insert_ids not in INSERT_IDS:
        bad("--insert-ids", f"unknown value {s.insert_ids!r} (accepted: {', '.join(INSERT_IDS)})")
    if s.txn not in TXN_STYLES:
        bad("--txn", f"unknown style {s.txn!r} (accepted: {', '.join(TXN_STYLES)})")
    if s.page_size not in PAGE_SIZES:
        bad("--page-size", f"{s.page_size} is not a SQLite page size "
                           f"(accepted: {', '.join(map(str, PAGE_SIZES))})")
    if s.locking_mode is not None and s.locking_mode not in LOCKING_MODES:
        bad("--locking-mode", f"unknown mode {s.locking_mode!r} (accepted: {', '.join(LOCKING_MODES)})")
    if s.layout not in LAYOUTS:
        bad("--layout", f"unknown layout {s.layout!r} (accepted: {', '.join(LAYOUTS)})")
    if s.sqlite not in SQLITE_BUILDS:
        bad("--sqlite", f"unknown build {s.sqlite!r} (accepted: {', '.join(SQLITE_BUILDS)})")
    if s.flush_ms is not None and not 1 <= s.flush_ms <= 60000:
        bad("--flush-ms", "must be between 1 and 60000")
    if s.group_ms is not None and not 1 <= s.group_ms <= 60000:
        bad("--group-ms", "must be between 1 and 60000")
    if s.group_bytes is not None:
        try:
            gb = _parse_size(s.group_bytes)
        except ValueError:
            gb = -1
        if not 4096 <= gb <= 16 << 20:
            bad("--group-bytes", f"expected 4K..16M (bytes, optional K/M suffix), got "
                                 f"{s.group_bytes!r}")
    statements = s.ops_per_txn * s.tables
    if s.txn == "auto":
        s.txn = "autocommit" if statements == 1 else "begin"
    if s.txn == "autocommit" and statements > 1:
        if "txn" in given:
            bad("--txn", f"autocommit runs one statement per transaction, but --ops-per-txn x "
                         f"--tables = {statements}; use begin or begin-immediate")
        s.txn = "begin"
        s.notes.append(f"transactions are BEGIN ... COMMIT: the preset's autocommit runs one "
                       f"statement, this workload has {statements} per transaction")
    if s.threads > 1 and s.shared_db and s.insert_ids == "auto":
        s.insert_ids = "explicit"
        s.notes.append("inserts pass explicit ids (disjoint per thread) because several "
                       "threads share one database")
    if s.key_order == "random" and s.insert_ids == "auto" and _has_op(s, "insert") \
            and "key_order" in given and "insert_ids" not in given:
        s.insert_ids = "explicit"
        s.notes.append("inserts pass explicit ids in random order because --key-order random "
                       "was given (use --insert-ids auto to let SQLite pick ids)")
    if s.threads > 1 and s.shared_db and s.txn == "begin":
        s.txn = "begin-immediate"
        s.notes.append("transactions start with BEGIN IMMEDIATE because several threads share "
                       "one database (a deferred BEGIN can deadlock on the lock upgrade)")
    if s.regime == "open-close":
        s.notes.append("open-close regime: every transaction opens a connection, sets its "
                       "PRAGMAs, commits and closes; open and close are inside every "
                       "transaction's latency")


def _has_op(s: Settings, op: str) -> bool:
    return op in s.phases or ("mixed" in s.phases and s.mix.get(op, 0) > 0)


# --------------------------------------------------------------------------
# workload plan
# --------------------------------------------------------------------------

_PATTERN = ("aaaaaaaaaabbbbbbbbbbccccccccccddddddddddeeeeeeeeee"
            "ffffffffffgggggggggghhhhhhhhhhiiiiiiiiiijjjjjjjjjj")


def record_value(size: int, update: bool = False) -> str:
    """Mobibench's record: INSERT_STR, or UPDATE_STR (rotated by 50) for updates."""
    p = _PATTERN[50:] + _PATTERN[:50] if update else _PATTERN
    return (p * (size // len(p) + 1))[:size]


class _Keys:
    """Live ids of one database's tables (every table holds the same ids)."""

    def __init__(self, ids: List[int], schema: str, high_water: int) -> None:
        self.ids = ids                  # sorted
        self.schema = schema
        self.high = high_water          # AUTOINCREMENT: largest id ever used
        self.cursor = 0

    def pick(self, rng: random.Random, order: str) -> int:
        if order == "random":
            return self.ids[rng.randrange(len(self.ids))]
        k = self.ids[self.cursor % len(self.ids)]
        self.cursor += 1
        return k

    def take(self, rng: random.Random, order: str) -> int:
        i = rng.randrange(len(self.ids)) if order == "random" else 0
        return self.ids.pop(i)

    def next_auto(self) -> int:
        top = self.ids[-1] if self.ids else 0
        return max(top, self.high) + 1 if self.schema == "autoincrement" else top + 1

    def add(self, k: int) -> None:
        bisect.insort(self.ids, k)
        self.high = max(self.high, k)


Stmt = Tuple[str, Tuple[Any, ...], bool]     # sql, params, returns rows


@dataclass
class Plan:
    """One thread's transactions, and what the database must show afterwards."""

    thread: int
    db_index: int
    txns: List[Tuple[int, Tuple[Stmt, ...]]]    # (phase index, statements)
    ops: Dict[str, int]
    expected_changes: int
    expected_select_rows: int
    final_ids: List[int]                         # this thread's share of the final rows
    final_updated: int                           # of those, rows whose last write was an update

    @property
    def statements(self) -> int:
        return sum(len(t[1]) for t in self.txns)


def _split(n: int, parts: int, i: int) -> int:
    return n // parts + (1 if i < n % parts else 0)


def build_plan(s: Settings, thread: int) -> Plan:
    """Generate thread ``thread``'s statements (seeded; independent of the mode)."""
    T = s.threads
    shared = s.shared_db and T > 1
    rng = random.Random(f"waldio-bench:{s.seed}:{thread}")
    P = s.prepopulate
    if shared:
        own = list(range(1 + thread, P + 1, T))
    else:
        own = list(range(1, P + 1))
    keys = _Keys(own, s.schema, P)
    tables = s.table_names()
    ins_val, upd_val = record_value(s.record_size), record_value(s.record_size, update=True)
    sql_ins_auto = [f"INSERT INTO {t}(Value) VALUES(?)" for t in tables]
    sql_ins = [f"INSERT INTO {t}(id, Value) VALUES(?, ?)" for t in tables]
    sql_upd = [f"UPDATE {t} SET Value = ? WHERE id = ?" for t in tables]
    sql_del = [f"DELETE FROM {t} WHERE id = ?" for t in tables]
    sql_sel = [f"SELECT id, Value FROM {t} WHERE id = ?" for t in tables]

    # fresh ids for explicit inserts: above the pre-populated range, disjoint per thread
    n_ins_max = sum(_split(s.transactions, T, thread) * s.ops_per_txn for _ in s.phases)
    stride = T if shared else 1
    first = P + 1 + (thread if shared else 0)
    fresh = [first + i * stride for i in range(n_ins_max)]
    if s.key_order == "random":
        rng.shuffle(fresh)
    fresh_i = 0
    mix_ops = [o for o in OPERATIONS if s.mix.get(o, 0) > 0]
    mix_w = [s.mix[o] for o in mix_ops]
    ops = {o: 0 for o in OPERATIONS}
    changes = select_rows = 0
    updated: set = set()
    txns: List[Tuple[int, Tuple[Stmt, ...]]] = []
    for phase_i, phase in enumerate(s.phases):
        for _ in range(_split(s.transactions, T, thread)):
            stmts: List[Stmt] = []
            for _ in range(s.ops_per_txn):
                op = phase if phase != "mixed" else rng.choices(mix_ops, mix_w)[0]
                if op != "insert" and not keys.ids:
                    raise BenchError(
                        f"the workload runs out of rows: a {op} finds no row left in thread "
                        f"{thread}'s share (pre-populated {P} rows per table); "
                        f"raise --prepopulate")
                ops[op] += 1
                if op == "insert":
                    if s.insert_ids == "auto":
                        k = keys.next_auto()
                        stmts += [(q, (ins_val,), False) for q in sql_ins_auto]
                    else:
                        k = fresh[fresh_i]
                        fresh_i += 1
                        stmts += [(q, (k, ins_val), False) for q in sql_ins]
                    keys.add(k)
                    updated.discard(k)
                    changes += len(tables)
                elif op == "update":
                    k = keys.pick(rng, s.key_order)
                    stmts += [(q, (upd_val, k), False) for q in sql_upd]
                    updated.add(k)
                    changes += len(tables)
                elif op == "delete":
                    k = keys.take(rng, s.key_order)
                    stmts += [(q, (k,), False) for q in sql_del]
                    updated.discard(k)
                    changes += len(tables)
                else:
                    k = keys.pick(rng, s.key_order)
                    stmts += [(q, (k,), True) for q in sql_sel]
                    select_rows += len(tables)
            txns.append((phase_i, tuple(stmts)))
    return Plan(thread=thread, db_index=0 if s.shared_db else thread, txns=txns, ops=ops,
                expected_changes=changes, expected_select_rows=select_rows,
                final_ids=list(keys.ids), final_updated=len(updated))


# --------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------

def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("no values")
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def summarize(values: Sequence[float]) -> Optional[Dict[str, Any]]:
    """median, min, max, mean, stdev (sample), cov (stdev/mean), n; None if empty."""
    vals = sorted(float(v) for v in values)
    n = len(vals)
    if n == 0:
        return None
    mean = sum(vals) / n
    stdev = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    return {"n": n, "median": percentile(vals, 50), "min": vals[0], "max": vals[-1],
            "mean": mean, "stdev": stdev, "cov": (stdev / mean) if mean else None}


def latency_summary(lat_ns: Sequence[int]) -> Dict[str, Any]:
    vals = sorted(lat_ns)
    if not vals:
        return {"count": 0}
    return {"count": len(vals), "min_ns": vals[0], "p50_ns": percentile(vals, 50),
            "p90_ns": percentile(vals, 90), "p99_ns": percentile(vals, 99),
            "p999_ns": percentile(vals, 99.9), "max_ns": vals[-1],
            "mean_ns": sum(vals) / len(vals)}


def pair_ratios(reps: Sequence[Dict[str, Any]], base_reps: Sequence[Dict[str, Any]]
                ) -> Dict[str, Any]:
    """ops/s of repetition i over the baseline's repetition i (same round), measured only."""
    base = {r["index"]: r for r in base_reps if not r["warmup"] and r["ok"]}
    per_rep = []
    for r in reps:
        b = base.get(r["index"])
        if r["warmup"] or not r["ok"] or b is None or not b["ops_per_s"]:
            continue
        per_rep.append({"index": r["index"], "ratio": r["ops_per_s"] / b["ops_per_s"]})
    s = summarize([p["ratio"] for p in per_rep])
    return {"per_rep": per_rep,
            "median": s["median"] if s else None,
            "min": s["min"] if s else None,
            "max": s["max"] if s else None}


# --------------------------------------------------------------------------
# counters
# --------------------------------------------------------------------------

_STAT_FIELDS = ("read_ios", "read_merges", "read_sectors", "read_ticks", "write_ios",
                "write_merges", "write_sectors", "write_ticks", "in_flight", "io_ticks",
                "time_in_queue", "discard_ios", "discard_merges", "discard_sectors",
                "discard_ticks", "flush_ios", "flush_ticks")


@dataclass
class Device:
    name: str
    role: str               # "holds the database" / "holds the loop device's backing file"
    stat_path: str
    kind: str               # disk / partition / loop / ...


def _sysfs_name(majmin: str) -> Optional[str]:
    link = f"/sys/dev/block/{majmin}"
    return os.path.basename(os.path.realpath(link)) if os.path.exists(link) else None


def _kind_of(name: str) -> str:
    base = f"/sys/class/block/{name}"
    if os.path.isdir(f"{base}/loop"):
        return "loop"
    if os.path.isdir(f"{base}/dm"):
        return "dm"
    if os.path.exists(f"{base}/partition"):
        return "partition"
    return "disk"


def _device_of_path(path: str) -> Optional[str]:
    st = os.stat(path)
    majmin = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    name = _sysfs_name(majmin) if os.major(st.st_dev) != 0 else None
    if name:
        return name
    try:  # btrfs and other anonymous st_dev: the mount's source device
        src = _params.mount_of(path)["source"]
        if src.startswith("/dev/"):
            rdev = os.stat(src).st_rdev
            if rdev:
                return _sysfs_name(f"{os.major(rdev)}:{os.minor(rdev)}")
    except Exception:  # noqa: BLE001
        return None
    return None


def devices_for(path: str) -> List[Device]:
    """The block device holding ``path`` and, for a loop device, the one below it."""
    out: List[Device] = []
    name = _device_of_path(path)
    if not name:
        return out
    kind = _kind_of(name)
    out.append(Device(name, "holds the database", f"/sys/class/block/{name}/stat", kind))
    if kind == "loop":
        try:
            backing = _params._read_text(f"/sys/class/block/{name}/loop/backing_file")
            below = _device_of_path(backing.removesuffix(" (deleted)"))
            if below and below != name:
                out.append(Device(below, f"holds {name}'s backing file",
                                  f"/sys/class/block/{below}/stat", _kind_of(below)))
        except Exception:  # noqa: BLE001
            pass
    return out


def read_device(dev: Device) -> Dict[str, int]:
    with open(dev.stat_path) as f:
        vals = [int(x) for x in f.read().split()]
    return {k: v for k, v in zip(_STAT_FIELDS, vals)}


def read_proc_io() -> Dict[str, int]:
    out: Dict[str, int] = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k.strip()] = int(v)
    except OSError:
        pass
    return out


def _device_delta(a: Dict[str, int], b: Dict[str, int]) -> Dict[str, Any]:
    d = {k: b[k] - a[k] for k in a if k in b}
    return {"write_bytes": d.get("write_sectors", 0) * 512,
            "write_ios": d.get("write_ios", 0),
            "read_bytes": d.get("read_sectors", 0) * 512,
            "read_ios": d.get("read_ios", 0),
            "flushes": d["flush_ios"] if "flush_ios" in d else None,
            "discard_bytes": d.get("discard_sectors", 0) * 512}


def _proc_delta(a: Dict[str, int], b: Dict[str, int]) -> Dict[str, Any]:
    return {k: (b[k] - a[k]) if k in a and k in b else None
            for k in ("write_bytes", "wchar", "syscw", "read_bytes", "rchar", "syscr",
                      "cancelled_write_bytes")}


class _Snapshot:
    def __init__(self, devices: List[Device]) -> None:
        self.dev = [read_device(d) for d in devices]
        self.proc = read_proc_io()


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# SQLite connections (apsw or the system library)
# --------------------------------------------------------------------------

class _ApswConn:
    """apsw connection with the few calls the timed loop needs, and nothing more."""

    def __init__(self, db: Any) -> None:
        self.raw = db
        self.cur = db.cursor()

    def run(self, sql: str, params: Tuple[Any, ...] = ()) -> None:
        self.cur.execute(sql, params)

    def rows(self, sql: str, params: Tuple[Any, ...] = ()) -> List[tuple]:
        return [tuple(r) for r in self.cur.execute(sql, params)]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.cur.close(True)
        self.raw.close()


class _SysConn:
    """waldio.drivers system connection (re-prepares every statement)."""

    def __init__(self, conn: Any) -> None:
        self.raw = conn
        self.run = conn.execute
        self.rows = conn.execute

    def close(self) -> None:
        self.raw.close()


class SqliteEnv:
    """Loads libwaldio into the SQLite builds a run needs (a private copy for the system one)."""

    def __init__(self) -> None:
        self._apsw_loaded = False
        self._system: Any = None
        self._tmp: Optional[str] = None
        self.extensions: Dict[str, str] = {}

    def ensure(self, build: str) -> None:
        import waldio
        if build == "apsw" and not self._apsw_loaded:
            import apsw
            if waldio.VFS_NAME in apsw.vfs_names() and not getattr(waldio, "_loaded", False):
                # Another copy of waldio.so already registered the VFS in this process
                # (an embedding application, a test fixture): loading a second copy is
                # refused by libwaldio, so use the one that is there.  The read-back of
                # PRAGMA waldio in every repetition shows what it is.
                self.extensions["apsw"] = "already registered in this process (not loaded " \
                                          "by waldio bench)"
            else:
                waldio.load()
                self.extensions["apsw"] = str(waldio.extension_path())
            self._apsw_loaded = True
        elif build == "system" and self._system is None:
            from . import drivers
            try:
                drv = drivers.driver_by_name("system")
            except LookupError as e:
                raise BenchError(f"--sqlite system: {e}") from e
            self._tmp = tempfile.mkdtemp(prefix="waldio-bench-ext-")
            copy = os.path.join(self._tmp, "waldio-system.so")
            shutil.copyfile(waldio.extension_path(), copy)
            drv.load_extension(copy, waldio.ENTRY_POINT)
            self._system = drv
            self.extensions["system"] = f"copy of {waldio.extension_path()} at {copy}"

    def version(self, build: str) -> str:
        if build == "apsw":
            import apsw
            return str(apsw.sqlite_lib_version())
        self.ensure("system")
        return str(self._system.sqlite_version)

    def connect(self, build: str, path: str, vfs: str, options: Dict[str, Any]) -> Any:
        import waldio
        self.ensure(build)
        if build == "apsw":
            import apsw
            flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
            if vfs != "waldio":
                return _ApswConn(apsw.Connection(path, flags=flags, vfs="unix"))
            # waldio.connect() without its waldio.load() (see ensure())
            db = apsw.Connection(waldio.uri(path, **options), flags=flags | apsw.SQLITE_OPEN_URI,
                                 vfs="waldio")
            try:
                db.execute("PRAGMA schema_version").fetchall()
            except apsw.Error as e:
                db.close()
                detail = ""
                with contextlib.suppress(Exception):
                    probe = apsw.Connection(":memory:")
                    detail = str(probe.execute("SELECT waldio_last_error()").fetchall()[0][0])
                    probe.close()
                raise BenchError(f"{path}: {e}" + (f": {detail}" if detail else "")) from e
            return _ApswConn(db)
        if vfs == "waldio":
            return _SysConn(self._system.connect(waldio.uri(path, **options), vfs="waldio"))
        return _SysConn(self._system.connect(path, vfs="unix", uri=False))

    def waldio_last_error(self, build: str) -> str:
        """libwaldio's most recent error message in this SQLite build ('' if none)."""
        try:
            if build == "apsw":
                import apsw
                probe = apsw.Connection(":memory:")
                try:
                    return str(probe.execute("SELECT waldio_last_error()").fetchall()[0][0])
                finally:
                    probe.close()
            with self._system.connect(":memory:", uri=False) as probe:
                return str(probe.execute("SELECT waldio_last_error()")[0][0])
        except Exception:  # noqa: BLE001
            return ""

    def close(self) -> None:
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _busy(conn: Any, ms: int) -> None:
    raw = conn.raw
    if hasattr(raw, "set_busy_timeout"):
        raw.set_busy_timeout(ms)
    elif hasattr(raw, "setbusytimeout"):
        raw.setbusytimeout(ms)
    else:
        conn.rows(f"PRAGMA busy_timeout={int(ms)}")


class Opener:
    """Opens a connection for one mode with every setting applied, in a fixed order."""

    def __init__(self, spec: ModeSpec, s: Settings, env: SqliteEnv) -> None:
        self.spec, self.s, self.env = spec, s, env
        m = spec.mode
        self.vfs = "waldio" if m.kind == "waldio" else "unix"
        self.options: Dict[str, Any] = {}
        if m.kind == "waldio":
            self.options["layout"] = spec.layout
            if m.waldio_group not in (None, "off"):
                if s.group_ms is not None:
                    self.options["group_ms"] = s.group_ms
                if s.group_bytes is not None:
                    self.options["group_bytes"] = s.group_bytes
            if s.flush_ms is not None:
                self.options["flush_ms"] = s.flush_ms
            if s.prealloc is not None:
                self.options["prealloc"] = s.prealloc
        self.pragmas: List[str] = []
        if s.cache_size is not None:
            self.pragmas.append(f"PRAGMA cache_size={int(s.cache_size)}")
        if s.mmap_size is not None:
            self.pragmas.append(f"PRAGMA mmap_size={int(s.mmap_size)}")
        if s.locking_mode is not None:
            self.pragmas.append(f"PRAGMA locking_mode={s.locking_mode.upper()}")
        self.after: List[str] = [f"PRAGMA synchronous={m.synchronous}"]
        if s.wal_autocheckpoint is not None:
            self.after.append(f"PRAGMA wal_autocheckpoint={int(s.wal_autocheckpoint)}")
        if s.journal_size_limit is not None:
            self.after.append(f"PRAGMA journal_size_limit={int(s.journal_size_limit)}")
        self.after += list(m.pragmas)

    def statements(self) -> List[str]:
        return self.pragmas + [f"PRAGMA journal_mode={self.spec.mode.journal_mode}"] + self.after

    def open(self, path: str) -> Any:
        conn = self.env.connect(self.spec.sqlite or "apsw", path, self.vfs, self.options)
        try:
            _busy(conn, self.s.busy_timeout_ms)
            for p in self.pragmas:
                conn.rows(p)
            want = self.spec.mode.journal_mode or ""
            got = conn.rows(f"PRAGMA journal_mode={want}")
            got_mode = str(got[0][0]).lower() if got else UNKNOWN
            if got_mode != want.lower():
                raise BenchError(f"{self.spec.label}: PRAGMA journal_mode={want} left the "
                                 f"database in journal mode {got_mode!r}")
            for p in self.after:
                conn.rows(p)
            conn.rows("SELECT count(*) FROM sqlite_master")  # opens the WAL in WAL mode
        except Exception as e:
            conn.close()
            if self.vfs == "waldio" and not isinstance(e, BenchError):
                detail = self.env.waldio_last_error(self.spec.sqlite or "apsw")
                if detail:
                    raise BenchError(f"{type(e).__name__}: {e}: libwaldio: {detail}") from e
            raise
        except BaseException:
            conn.close()
            raise
        return conn


_SETTING_PRAGMAS = ("journal_mode", "synchronous", "page_size", "cache_size", "mmap_size",
                    "locking_mode", "wal_autocheckpoint", "journal_size_limit", "temp_store",
                    "auto_vacuum", "secure_delete")
_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def read_settings(conn: Any, is_waldio: bool) -> Dict[str, Any]:
    """The settings that define a mode, read back from the connection."""
    out: Dict[str, Any] = {}
    for p in _SETTING_PRAGMAS:
        try:
            v = conn.rows(f"PRAGMA {p}")[0][0]
            out[p] = _SYNC_NAMES.get(v, v) if p == "synchronous" else v
        except Exception as e:  # noqa: BLE001
            out[p] = f"{UNKNOWN} ({e})"
    try:
        out["reserve_bytes"] = int(_params._reserve_bytes(conn.raw, "main")[0])
    except Exception as e:  # noqa: BLE001
        out["reserve_bytes"] = f"{UNKNOWN} ({e})"
    if is_waldio:
        try:
            w = json.loads(conn.rows("PRAGMA waldio")[0][0])
            for k in ("sync", "group", "group_ms", "group_bytes", "layout", "io",
                      "preallocated_bytes", "flush_ms", "version"):
                out[f"waldio.{k}"] = w.get(k, UNKNOWN)
        except Exception as e:  # noqa: BLE001
            out["waldio"] = f"{UNKNOWN} ({e})"
    return out


# --------------------------------------------------------------------------
# target
# --------------------------------------------------------------------------

@dataclass
class Target:
    path: str                        # directory where the run's files go
    kind: str                        # "loop" or "dir"
    info: Dict[str, Any]
    note: str


def _odirect_ok(directory: str) -> Tuple[bool, str]:
    probe = os.path.join(directory, f".waldio-odirect-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
    except OSError as e:
        return False, f"O_DIRECT open failed: {e.strerror}"
    try:
        buf = mmap.mmap(-1, RAW_BLOCK)
        try:
            os.pwrite(fd, buf, 0)
        except OSError as e:
            return False, f"O_DIRECT write failed: {e.strerror}"
        finally:
            buf.close()
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return True, "O_DIRECT works"


def describe_fs(path: str) -> Tuple[Dict[str, Any], str]:
    fs = _params.filesystem_params(path)
    journals = fs.get("journals", UNKNOWN)
    evidence = fs.get("journal_evidence", "")
    fstype = fs.get("fstype", UNKNOWN)
    source = fs.get("source", UNKNOWN)
    if journals == "yes":
        j = f"it journals ({evidence})"
    elif journals == "no":
        j = (f"it does NOT journal ({evidence}): stock SQLite shows no journaling-of-journal "
             f"here, unlike on a phone's journaled ext4")
    else:
        j = f"whether it journals is unknown ({fs.get('_why', {}).get('journals', evidence)})"
    return fs, f"{fstype} on {source}; {j}"


@contextlib.contextmanager
def open_target(fs_kind: Optional[str], directory: Optional[str], size_mib: Optional[int],
                need_odirect: bool) -> Iterator[Target]:
    """Where the run happens: a fresh loop file system, or a private dir in ``directory``.

    fs_kind None and directory None: loop ext4 when it can be made here, else a
    temporary directory under the current directory (with a note saying why).
    """
    from . import fsimage
    reason = None
    if directory is None:
        kind = fs_kind or "ext4"
        if kind not in fsimage.KINDS:
            raise BenchError(f"--fs: unknown kind {kind!r} (accepted: {', '.join(fsimage.KINDS)})")
        reason = fsimage.unavailable_reason(kind)
        if reason and fs_kind is not None:
            raise BenchError(f"--fs {fs_kind}: cannot create it here: {reason}")
        if not reason:
            with fsimage.loop_filesystem(kind, size_mib) as lfs:
                base = lfs.path("bench")
                os.mkdir(base)
                fs, desc = describe_fs(base)
                info = {"kind": "loop", "fs_kind": kind, "loop": lfs.describe(),
                        "directory": base, "odirect": "yes"}
                note = (f"target: a fresh {kind} file system on {lfs.device} "
                        f"({lfs.size_mib} MiB sparse image {lfs.image_path}), mounted "
                        f"{lfs.mount_options}, created for this run and removed afterwards; "
                        f"{desc.split('; ', 1)[1]}")
                ok, why = _odirect_ok(base)
                info["odirect"] = "yes" if ok else f"no ({why})"
                yield Target(base, "loop", info, note)
            return
    parent = directory if directory is not None else os.getcwd()
    if not os.path.isdir(parent):
        raise BenchError(f"--dir {parent}: not a directory")
    base = tempfile.mkdtemp(prefix=f"waldio-bench-{os.getpid()}-", dir=parent)
    try:
        fs, desc = describe_fs(base)
        ok, why = _odirect_ok(base)
        if fs.get("fstype") in ("tmpfs", "ramfs"):
            # Linux >= 6.6 accepts O_DIRECT on tmpfs, but it is buffered I/O in
            # disguise there (and libwaldio refuses to open a log on it)
            ok, why = False, (f"{fs['fstype']} is memory-backed: O_DIRECT there is buffered "
                              "I/O in disguise")
        how = (f"--dir {directory}" if directory is not None else
               f"the current directory, because a loop file system cannot be made here "
               f"({reason})")
        note = (f"target: {base} (private sub-directory of {how}, removed afterwards) on {desc}")
        if not ok:
            note += f"; {why}"
            if need_odirect:
                raise BenchError(f"{base}: {why}; waldio and raw-dio modes need real direct "
                                 f"I/O to a block device: choose another --dir, e.g. /var/tmp")
        info = {"kind": "dir", "fs_kind": fs.get("fstype", UNKNOWN), "directory": base,
                "requested_dir": directory, "odirect": "yes" if ok else f"no ({why})",
                "loop_unavailable_reason": reason}
        yield Target(base, "dir", info, note)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def default_fs_size_mib(s: Settings, fs_kind: Optional[str] = None) -> int:
    """A loop image comfortably larger than template + copy + logs (sparse
    anyway), and never below what mkfs accepts for fs_kind."""
    from . import fsimage
    rows = s.prepopulate + s.transactions * s.ops_per_txn * len(s.phases)
    per_db = s.tables * rows * (s.record_size + 40) * 1.5 + 64 * 1024 * s.tables
    dbs = 1 if s.shared_db else s.threads
    need = (per_db * (2 + dbs) + dbs * 24 * (1 << 20)) / (1 << 20)
    floor = fsimage.minimum_size_mib(fs_kind) if fs_kind else 256
    return int(max(256, floor, math.ceil(need * 1.5 / 64) * 64))


# --------------------------------------------------------------------------
# provenance
# --------------------------------------------------------------------------

def tool_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {"name": "waldio bench", "command_line": list(sys.argv)}
    try:
        from importlib.metadata import version
        info["waldio_version"] = version("waldio")
    except Exception:  # noqa: BLE001
        info["waldio_version"] = UNKNOWN
    repo = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        # untracked files count: the code that ran may not be committed yet
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
        info["git_commit"] = head
        info["git_dirty"] = bool(dirty)
    except Exception as e:  # noqa: BLE001
        info["git_commit"] = f"{UNKNOWN} (not a git checkout: {type(e).__name__})"
        info["git_dirty"] = None
    return info


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------

ProgressFn = Callable[[Dict[str, Any]], None]


class Bench:
    """Runs every mode, interleaved, and returns the result document (see bench.schema.json)."""

    def __init__(self, settings: Settings, modes: Sequence[ModeSpec], *,
                 progress: Optional[ProgressFn] = None) -> None:
        if not modes:
            raise BenchError("no modes to run")
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
        self.env = SqliteEnv()
        self.devices: List[Device] = []
        self._templates: Dict[int, str] = {}
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

    def _build_template(self, reserve: int) -> str:
        """Schema + pre-populated rows, written once; every repetition copies it."""
        if reserve in self._templates:
            return self._templates[reserve]
        import apsw
        s = self.s
        d = os.path.join(self.root, "templates")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"template-r{reserve}.db")
        db = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE,
                             vfs="unix")
        try:
            if reserve:
                cell = ctypes.c_int(reserve)
                db.file_control("main", SQLITE_FCNTL_RESERVE_BYTES, ctypes.addressof(cell))
            db.execute(f"PRAGMA page_size={s.page_size}")
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("PRAGMA synchronous=OFF")
            db.execute("BEGIN")
            value = record_value(s.record_size)
            for t in s.table_names():
                db.execute(create_table_sql(s, t))
                if s.prepopulate:
                    db.executemany(f"INSERT INTO {t}(id, Value) VALUES(?, ?)",
                                   ((i, value) for i in range(1, s.prepopulate + 1)))
            if s.regime == "reused":
                n = self._walfill_rows
                db.execute(f"CREATE TABLE {WALFILL_TABLE}(x BLOB)")
                db.executemany(f"INSERT INTO {WALFILL_TABLE}(x) VALUES(zeroblob(?))",
                               ((s.page_size * 3 // 4,) for _ in range(n)))
            db.execute("COMMIT")
            pg = db.execute("PRAGMA page_size").fetchall()[0][0]
            if pg != s.page_size:
                raise BenchError(f"template: asked for page_size {s.page_size}, got {pg}")
        finally:
            db.close()
        with open(path, "rb") as f:
            header = f.read(100)
        if header[20] != reserve:
            raise BenchError(f"template: asked for {reserve} reserved bytes, got {header[20]}")
        os.sync()
        self._templates[reserve] = path
        return path

    def _reserve_for(self, spec: ModeSpec) -> int:
        if spec.mode.kind == "waldio":
            return RESERVE_FOR_EMBED if spec.layout == "embed" else 0
        return self.s.stock_reserve

    # ------------------------------------------------------------------- run

    def run(self, target: Target) -> Dict[str, Any]:
        s = self.s
        started, t_start = _now(), time.perf_counter()
        self.root = target.path
        self.devices = devices_for(self.root)
        for spec in self.modes:
            if spec.sqlite:
                self.env.ensure(spec.sqlite)
        import apsw
        probe = apsw.Connection(":memory:", vfs="unix")
        self._default_autockpt = probe.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0]
        probe.close()
        if s.regime == "reused":
            self._walfill_rows = self._walfill_frames()
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
        ok = all(r["ok"] for m in results.values() for r in m["repetitions"])
        common = self._common_params(results)
        doc = {
            "schema_version": SCHEMA_VERSION,
            "tool": dict(tool_info(), started_utc=started, finished_utc=_now(),
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
        d["clock"] = "time.perf_counter_ns around each transaction; wall = first start to last end"
        d["before_each_repetition"] = ("fresh files copied from a template; os.sync() and fsync "
                                       "of the directory; page cache not dropped")
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
                f"the template holds a table {WALFILL_TABLE} of {self._walfill_rows} one-page "
                f"rows (zero blobs); before timing, one UPDATE rewrites all of it with new bytes "
                f"(so the log holds more frames than the run writes), then PRAGMA "
                f"wal_checkpoint(RESTART), so the run overwrites the log from its start")
        d["plan"] = [{"thread": p.thread, "db": p.db_index, "transactions": len(p.txns),
                      "statements": p.statements, "ops": p.ops,
                      "expected_changes": p.expected_changes,
                      "expected_rows_left_per_table": len(p.final_ids)} for p in self.plans]
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
        template = self._build_template(self._reserve_for(spec))
        dbs = [os.path.join(d, "bench.db" if s.shared_db else f"bench-{i}.db") for i in range(ndb)]
        for p in dbs:
            shutil.copyfile(template, p)
        per_txn_open = s.regime == "open-close"
        timed_open = "open" in s.timed and not per_txn_open
        conns: List[Any] = [None] * T
        is_waldio = spec.mode.kind == "waldio"
        # libwaldio's counters belong to the log (one per database in this process),
        # not to the connection: read them through one connection per database.
        first_of_db = [next(t for t in range(T) if self.plans[t].db_index == i)
                       for i in range(ndb)]
        try:
            if not per_txn_open and not timed_open:
                for t in range(T):
                    conns[t] = opener.open(dbs[self.plans[t].db_index])
            if s.regime == "reused":
                for i, p in enumerate(dbs):
                    c = conns[first_of_db[i]]
                    # new bytes: SQLite skips writing a row whose content is unchanged
                    c.run(f"UPDATE {WALFILL_TABLE} SET x = ?", (b"\x01" * (s.page_size * 3 // 4),))
                    c.rows("PRAGMA wal_checkpoint(RESTART)")
            if conns[0] is not None:
                rep["settings"] = read_settings(conns[0], is_waldio)
                rep["settings"]["read_on"] = "the run connection, before timing"
                if is_waldio:
                    for t in first_of_db:
                        conns[t].rows("PRAGMA waldio_stats=reset")
            log_before = [_file_size(p + "-wal") for p in dbs]
            tc_before = [self._total_changes(c) for c in conns] if conns[0] is not None else None
            os.sync()
            _sync_dir(d)
            snap0 = _Snapshot(self.devices)

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
            t_open = pc()
            worker_args = [(t, conns[t], dbs[self.plans[t].db_index], lat[t], phase_span[t],
                            sel_rows, think_ns, errors) for t in range(T)]
            if T == 1:
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
                for t in range(T):
                    conns[t].close()
                    conns[t] = None
            t_end = pc()
            # ----------------------------------------------- end of timed region
            snap1 = _Snapshot(self.devices)
            tc_after = [self._total_changes(c) for c in conns] if conns[0] is not None else None
            if is_waldio:
                if conns[0] is not None:
                    stats = [json.loads(conns[t].rows("PRAGMA waldio_stats")[0][0])
                             for t in first_of_db]
                    rep["waldio_stats"] = _sum_stats(stats)
                    rep["waldio_stats_note"] = (
                        "PRAGMA waldio_stats of each database's log (summed over "
                        f"{ndb} database{'s' if ndb > 1 else ''}), reset before and read after "
                        "the timed region (excludes the untimed close)")
                else:
                    rep["waldio_stats_note"] = (
                        "unknown: PRAGMA waldio_stats needs an open connection to the log, and "
                        "the run's connections were closed inside the timed region"
                        + (" after every transaction (open-close regime)" if per_txn_open else ""))
            log_after = [_file_size(p + "-wal") for p in dbs]
            for t in range(T):
                if conns[t] is not None:
                    conns[t].close()
                    conns[t] = None
            os.sync()
            snap2 = _Snapshot(self.devices)

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
        finally:
            for c in conns:
                if c is not None:
                    with contextlib.suppress(Exception):
                        c.close()

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
        """The timed loop of one thread: nothing in here but the transactions."""
        s = self.s
        plan = self.plans[t].txns
        begin = {"begin": "BEGIN", "begin-immediate": "BEGIN IMMEDIATE"}.get(s.txn)
        think = s.think_ms / 1000.0
        pc = time.perf_counter_ns
        append = lat.append
        rows = 0
        slept = 0
        last = len(plan) - 1
        per_txn_open = conn is None
        for i, (phase, stmts) in enumerate(plan):
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
            sp = span.get(phase)
            if sp is None:
                span[phase] = [t0, t1, 1]
            else:
                sp[1] = t1
                sp[2] += 1
            if think and i != last:
                ts = pc()
                time.sleep(think)
                slept += pc() - ts
        sel_rows[t] = rows
        think_ns[t] = slept

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

    def _io_doc(self, s0: _Snapshot, s1: _Snapshot, s2: _Snapshot) -> Dict[str, Any]:
        devs = []
        for i, dv in enumerate(self.devices):
            devs.append({"name": dv.name, "role": dv.role, "kind": dv.kind,
                         "timed": _device_delta(s0.dev[i], s1.dev[i]),
                         "total": _device_delta(s0.dev[i], s2.dev[i])})
        return {"devices": devs,
                "process": {"timed": _proc_delta(s0.proc, s1.proc),
                            "total": _proc_delta(s0.proc, s2.proc)}}

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
                ic = [r[0] for r in c.rows("PRAGMA integrity_check")]
                item(f"{tag}PRAGMA integrity_check", ["ok"], ic)
                settings = read_settings(c, is_waldio)
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
        ring = max(1, _parse_size(s.prealloc) // RAW_BLOCK) if s.prealloc else \
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
        _sync_dir(d)
        fds: List[Optional[int]] = [None] * T
        bufs = [mmap.mmap(-1, RAW_BLOCK if dio else 8192) for _ in range(T)]
        try:
            if not per_txn_open and not timed_open:
                fds = [os.open(p, flags) for p in paths]
            os.sync()
            _sync_dir(d)
            snap0 = _Snapshot(self.devices)
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
                    sp = span.get(phase)
                    if sp is None:
                        span[phase] = [a, b, 1]
                    else:
                        sp[1] = b
                        sp[2] += 1
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
            snap1 = _Snapshot(self.devices)
            for t in range(T):
                if fds[t] is not None:
                    os.close(fds[t])  # type: ignore[arg-type]
                    fds[t] = None
            os.sync()
            snap2 = _Snapshot(self.devices)
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
            },
            "phases": phases,
            "ok": all(r["ok"] for r in mode["repetitions"]) and bool(mode["repetitions"]),
        }


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------

def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _sum_stats(stats: List[Dict[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for st in stats:
        for k, v in st.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    return out


def _parse_size(text: str) -> int:
    t = str(text).strip().upper()
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    return int(t) * mult


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


__all__ = [
    "Bench", "BenchError", "Mode", "ModeSpec", "MODES", "PRESETS", "Preset", "QUICK_MODES",
    "SCHEMA_VERSION", "SHORTCUTS", "Settings", "Target", "build_plan", "latency_summary",
    "open_target", "pair_ratios", "parse_modes", "percentile", "resolve_settings", "summarize",
    "default_fs_size_mib",
]
