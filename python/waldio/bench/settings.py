"""The workload settings of a run: presets, options, validation.

:class:`Settings` holds every option that shapes the workload (phases, mix,
transactions, ops per transaction, record size, pre-population, regime,
threads, page size, cache, checkpoints...); :data:`PRESETS` are named
starting points (Mobibench 2015 and current); :func:`resolve_settings` applies
command-line overrides to a preset and rejects contradictions with a
:class:`BenchError` that names the option.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .modes import LAYOUTS, SQLITE_BUILDS

REGIMES = ("growing", "reused", "open-close")


TIMED_PARTS = ("open", "checkpoint", "close")


CHECKPOINT_MODES = ("passive", "full", "restart", "truncate")


KEY_ORDERS = ("seq", "random")


OPERATIONS = ("insert", "update", "delete", "select")


# Whole-database statements, one per transaction (large transactions, issue 10):
# VACUUM rewrites every page; create-index builds one new index per transaction.
STATEMENT_WORKLOADS = ("vacuum", "create-index")


WORKLOADS = OPERATIONS + ("mixed",) + STATEMENT_WORKLOADS


DEFAULT_STATEMENT_ROWS = 100_000   # pre-population of vacuum / create-index by default


TXN_STYLES = ("auto", "autocommit", "begin", "begin-immediate")


SCHEMAS = ("autoincrement", "rowid")


INSERT_IDS = ("auto", "explicit")


LOCKING_MODES = ("normal", "exclusive")


PAGE_SIZES = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


DEFAULT_PREALLOC = 4 << 20  # libwaldio's default log preallocation (waldio.h)


class BenchError(Exception):
    """A configuration or environment problem, explained in words."""


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
    reader_scans: int = 0               # after the timed region: scans by another process
    drop_caches: bool = False           # echo 3 > /proc/sys/vm/drop_caches before timing
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
        if any(p in STATEMENT_WORKLOADS for p in s.phases):
            s.prepopulate = DEFAULT_STATEMENT_ROWS
            s.notes.append(f"pre-populated {s.prepopulate} rows per table (the default of the "
                           f"{', '.join(p for p in s.phases if p in STATEMENT_WORKLOADS)} "
                           f"workload)")
        elif _needs_rows(s.phases, s.mix):
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
        if p == "speedtest1":
            bad("--workload", "speedtest1 is SQLite's own benchmark program: it runs as "
                              "`waldio bench --workload speedtest1` alone")
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
                            ("--max-latency-samples", s.max_latency_samples, 1),
                            ("--reader-scans", s.reader_scans, 0)):
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
            gb = parse_size(s.group_bytes)
        except ValueError:
            gb = -1
        if not 4096 <= gb <= 16 << 20:
            bad("--group-bytes", f"expected 4K..16M (bytes, optional K/M suffix), got "
                                 f"{s.group_bytes!r}")
    if "vacuum" in s.phases:
        if s.ops_per_txn != 1:
            bad("--ops-per-txn", "the vacuum workload runs one VACUUM per transaction (VACUUM "
                                 "cannot run inside BEGIN ... COMMIT)")
        if s.threads > 1:
            bad("--threads", "the vacuum workload runs in one thread")
    if s.reader_scans:
        if s.regime == "open-close":
            bad("--reader-scans", "the reader runs while the writer's connection stays open; "
                                  "the open-close regime closes it after every transaction")
        if "close" in s.timed:
            bad("--reader-scans", "the reader runs while the writer's connection stays open, "
                                  "after the timed region: do not time 'close'")
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


def parse_size(text: str) -> int:
    t = str(text).strip().upper()
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    return int(t) * mult
