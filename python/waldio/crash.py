"""waldio crash: crash-consistency checking of every journal mode.

The pieces (docs/crash.md has the model in full):

* **Recording.** A workload runs in a child process with the crash recorder
  (``build/crash/recorder.so``) loaded below waldio: every write (buffered,
  direct, FUA), sync, truncate, create, rename and delete of the database,
  its journal and its log is logged with its bytes, in completion order,
  together with an ``ack`` mark after each acknowledged transaction.
* **Crash states.** :class:`Recording` replays the log into file images with
  two cache layers: a page cache per file (buffered writes, made durable by
  that file's fsync/fdatasync) and one volatile device write cache shared by
  all files (direct writes; any flush makes everything in it durable; an
  RWF_DSYNC write is durable by itself). Crash models: process kill (every
  completed call survives), OS crash (the device cache survives, unsynced
  page-cache data may be lost), power loss (only durable data, plus any
  subset of the volatile writes, survives; the write in flight may tear at
  512-byte sectors).
* **Oracle.** Each state is materialized in a directory and opened (through
  waldio for waldio modes, through stock SQLite's unix VFS for stock modes).
  It must pass ``PRAGMA integrity_check``, equal the database after exactly
  the first k acknowledged transactions (a prefix, no holes), and k must
  cover every transaction the mode's contract makes durable at that point.
* **Reproducers.** Every state has an id; ``waldio crash --replay ID``
  rebuilds exactly that state from the saved recording and re-checks it.

Also here: real process kills (SIGKILL), corruption of the physical log
(bit flips, zeroed blocks, stale frames, truncation), fault injection
(EIO/ENOSPC through the recorder) and the fuzz-target runner.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import waldio

# ------------------------------------------------------------------ modes


@dataclass(frozen=True)
class Mode:
    """A journal mode and its durability contract (docs/durability.md)."""
    name: str
    waldio: bool                 # opened through the waldio VFS
    synchronous: str             # PRAGMA synchronous
    journal: str = "WAL"         # PRAGMA journal_mode
    uri: Tuple[Tuple[str, str], ...] = ()
    # Which acknowledged transactions must survive each crash model:
    #   "all"    every transaction acknowledged before the crash
    #   "flush"  those acknowledged before the last completed device flush
    #   "walsync" those acknowledged before the last completed sync of the WAL
    #   "committed" those whose commit frame had reached the log (kill, os)
    #            or durable media (power) at the crash: group async, whose
    #            commits return before their frames are written. Its time
    #            bound (group_ms) is measured from the recording and reported
    #   "none"   nothing (a mode without guarantees; used to show the
    #            checker fails when it should)
    os_contract: str = "all"
    power_contract: str = "all"
    kill_contract: str = "all"
    testonly: bool = False
    # The run starts from a standard WAL left by stock SQLite (the first
    # third of the transactions, never checkpointed); waldio converts it at
    # its first open (format.md §7), during the recording.
    from_stock: bool = False

    def uri_options(self) -> Dict[str, str]:
        return dict(self.uri)


LOG_PREALLOC = "256K"

MODES: Dict[str, Mode] = {m.name: m for m in [
    Mode("wal-full", False, "FULL"),
    Mode("wal-normal", False, "NORMAL", os_contract="walsync", power_contract="walsync"),
    Mode("waldio-full", True, "FULL", uri=(("prealloc", LOG_PREALLOC),)),
    Mode("waldio-persistent", True, "FULL",
         uri=(("prealloc", LOG_PREALLOC), ("sync", "persistent"))),
    Mode("waldio-normal", True, "NORMAL",
         uri=(("prealloc", LOG_PREALLOC), ("flush_ms", "10")),
         power_contract="flush"),
    Mode("waldio-group-durable", True, "FULL",
         uri=(("prealloc", LOG_PREALLOC), ("group", "durable"))),
    Mode("waldio-from-stock", True, "FULL", uri=(("prealloc", LOG_PREALLOC),), from_stock=True),
    Mode("waldio-group-async", True, "FULL",
         uri=(("prealloc", LOG_PREALLOC), ("group", "async"), ("group_ms", "2")),
         kill_contract="committed", os_contract="committed", power_contract="committed"),
    # Rollback journal with synchronous=OFF: SQLite promises nothing under
    # power loss. Included to prove that the checker finds corruption, holes
    # and losses when they happen (tests/py/test_crash.py).
    Mode("delete-off", False, "OFF", journal="DELETE", testonly=True,
         os_contract="none", power_contract="none"),
]}
DEFAULT_MODES = [m for m in MODES if not MODES[m].testonly]
LAYOUTS = ("embed", "pad4k", "pad8k")


def get_mode(name: str) -> Mode:
    """A mode by name; "waldio-...+pad4k" is that waldio mode with the
    pad4k (or pad8k, embed) log layout."""
    base, _, layout = name.partition("+")
    if base not in MODES:
        raise KeyError("unknown mode %r (expected one of %s)" % (name, ", ".join(MODES)))
    m = MODES[base]
    if not layout:
        return m
    if not m.waldio or layout not in LAYOUTS:
        raise KeyError("mode %r: a layout (%s) applies to waldio modes only"
                       % (name, ", ".join(LAYOUTS)))
    return Mode(name, m.waldio, m.synchronous, m.journal, m.uri + (("layout", layout),),
                m.os_contract, m.power_contract, m.kill_contract, m.testonly, m.from_stock)


# Stock-mode states are also opened through waldio, which must convert the
# standard WAL and recover exactly what stock SQLite recovers (format.md §7).
# The stock databases have no reserved bytes, so the padding layout is used.
CONVERT_MODE = Mode("waldio-convert", True, "FULL", uri=(("prealloc", LOG_PREALLOC),
                                                        ("layout", "pad4k")))
MODELS = ("kill", "os", "power")

# ----------------------------------------------------------- the workload

DB_NAME = "c.db"
ACCOUNTS = 20

SCHEMA = """
CREATE TABLE kv(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v BLOB);
CREATE INDEX kv_k ON kv(k);
CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL);
CREATE TABLE meta(id INTEGER PRIMARY KEY, txn INTEGER NOT NULL);
"""
TABLES = ("kv", "acct", "meta")


@dataclass
class Step:
    """One step of a workload. kind: txn (acknowledged, numbered), rollback,
    checkpoint, reader_begin, reader_end, reopen."""
    kind: str
    n: int = 0                                   # transaction number (txn)
    sql: List[Tuple[str, Tuple[Any, ...]]] = field(default_factory=list)
    arg: str = ""
    spill: bool = False                          # run with a tiny page cache
    who: int = 0                                 # which writer connection


def setup_sql() -> List[Tuple[str, Tuple[Any, ...]]]:
    rng = random.Random(12345)
    out: List[Tuple[str, Tuple[Any, ...]]] = []
    for i in range(ACCOUNTS):
        out.append(("INSERT INTO acct VALUES(?, 1000)", (i,)))
    for i in range(1, 41):
        out.append(("INSERT INTO kv VALUES(?, ?, ?)", (i, rng.randrange(1000),
                                                        rng.randbytes(rng.choice([30, 300, 1500])))))
    out.append(("INSERT INTO meta VALUES(1, 0)", ()))
    return out


def make_steps(workload: str, seed: int, txns: int) -> List[Step]:
    """The deterministic steps of a workload.

    workloads:
      mixed  inserts, updates, deletes and money transfers of many sizes;
             transactions bigger than the page cache (spilled frames,
             checksum rewrites); rolled-back transactions; checkpoints of
             every kind; readers that pin the log (it must grow); closing
             and reopening the writer (log reset / WAL deletion at close)
      bank   only transfers between accounts (one small transaction each)
      two-writers  mixed, with transactions and rollbacks spread over two
             writer connections of the process (taking turns)
    """
    if workload not in WORKLOADS:
        raise ValueError("unknown workload %r (expected one of %s)"
                         % (workload, ", ".join(WORKLOADS)))
    rng = random.Random("%s:%d" % ("mixed" if workload == "two-writers" else workload, seed))
    live = list(range(1, 41))
    next_id = [41]
    steps: List[Step] = []
    reader_open = False

    def new_id() -> int:
        next_id[0] += 1
        live.append(next_id[0] - 1)
        return next_id[0] - 1

    def blob() -> bytes:
        return rng.randbytes(rng.choice([16, 64, 200, 700, 1800, 3500, 5000]))

    def transfer(sql: List[Tuple[str, Tuple[Any, ...]]]) -> None:
        a, b = rng.randrange(ACCOUNTS), rng.randrange(ACCOUNTS)
        amt = rng.randrange(1, 50)
        sql.append(("UPDATE acct SET bal = bal - ? WHERE id = ?", (amt, a)))
        sql.append(("UPDATE acct SET bal = bal + ? WHERE id = ?", (amt, b)))

    def body(kind: str) -> Tuple[List[Tuple[str, Tuple[Any, ...]]], bool]:
        sql: List[Tuple[str, Tuple[Any, ...]]] = []
        spill = False
        if kind == "bank":
            transfer(sql)
            sql.append(("INSERT INTO kv VALUES(?, ?, ?)", (new_id(), rng.randrange(1000),
                                                           rng.randbytes(48))))
        elif kind == "insert":
            for _ in range(rng.randrange(1, 5)):
                sql.append(("INSERT INTO kv VALUES(?, ?, ?)", (new_id(), rng.randrange(1000), blob())))
        elif kind == "update":
            for _ in range(rng.randrange(1, 4)):
                sql.append(("UPDATE kv SET k = k + 1, v = ? WHERE id = ?",
                            (blob(), rng.choice(live))))
        elif kind == "delete":
            for _ in range(rng.randrange(1, 3)):
                if len(live) > 10:
                    victim = live.pop(rng.randrange(len(live)))
                    sql.append(("DELETE FROM kv WHERE id = ?", (victim,)))
        elif kind == "big":
            spill = True
            for _ in range(rng.randrange(25, 50)):
                sql.append(("INSERT INTO kv VALUES(?, ?, ?)",
                            (new_id(), rng.randrange(1000), rng.randbytes(700))))
            sql.append(("UPDATE kv SET k = k + 7 WHERE id % 5 = ?", (rng.randrange(5),)))
        else:  # multi
            for _ in range(rng.randrange(2, 6)):
                sub = rng.choice(["bank", "insert", "update", "delete"])
                s, _sp = body(sub)
                sql.extend(s)
        return sql, spill

    for i in range(1, txns + 1):
        if workload in ("mixed", "two-writers"):
            r = rng.random()
            if r < (0.04 if workload == "mixed" else 0.12):
                # A rolled-back transaction, sometimes bigger than the cache:
                # its frames reach the log and must never be recovered.
                sql = [("INSERT INTO kv VALUES(?, ?, ?)",
                        (10_000_000 + j, 1, rng.randbytes(900))) for j in range(rng.randrange(5, 40))]
                if workload == "mixed":
                    sql.append(("UPDATE acct SET bal = bal + 1000000", ()))
                steps.append(Step("rollback", sql=sql, spill=True))
            elif r < 0.08:
                steps.append(Step("checkpoint", arg=rng.choice(
                    ["PASSIVE", "FULL", "RESTART", "TRUNCATE"])))
            elif reader_open and r < 0.30:
                steps.append(Step("reader_end"))      # readers stay a few transactions
                reader_open = False
            elif r < 0.10 and not reader_open:
                steps.append(Step("reader_begin"))
                reader_open = True
            elif r < 0.115 and not reader_open:
                steps.append(Step("reopen"))
            kind = rng.choices(["bank", "insert", "update", "delete", "big", "multi"],
                               [30, 25, 15, 10, 4, 16])[0]
        else:
            kind = "bank"
        sql, spill = body(kind)
        sql.append(("UPDATE meta SET txn = ? WHERE id = 1", (i,)))
        steps.append(Step("txn", n=i, sql=sql, spill=spill))
    if reader_open:
        steps.append(Step("reader_end"))
    if workload == "two-writers":
        # Rolled-back (spilled) transactions on the second writer, commits on
        # either: the other writer's next commit reuses the rolled-back
        # transaction's frame slots.
        for st in steps:
            if st.kind == "rollback":
                st.who = 1
            elif st.kind == "txn":
                st.who = rng.randrange(2)
    return steps


WORKLOADS = ("mixed", "bank", "two-writers")


def digest(conn: Any) -> str:
    """A hash of every row of every table, in primary-key order."""
    h = hashlib.sha256()
    for t in TABLES:
        parts: List[bytes] = []
        add = parts.append
        for row in conn.execute("SELECT * FROM %s ORDER BY id" % t):
            for v in row:
                if isinstance(v, bytes):
                    add(b"b%d:" % len(v))
                    add(v)
                else:
                    add(b"v%r;" % (v,))
            add(b"\n")
        add(b"|")
        h.update(b"".join(parts))
    return h.hexdigest()


def _apsw() -> Any:
    import apsw
    return apsw


def reference_digests(workload: str, seed: int, txns: int) -> List[str]:
    """digests[k]: the database after exactly the first k transactions,
    computed on a plain in-memory database (no waldio, no recording)."""
    apsw = _apsw()
    conn = apsw.Connection(":memory:")
    conn.execute(SCHEMA)
    with conn:
        for sql, params in setup_sql():
            conn.execute(sql, params)
    out = [digest(conn)]
    for step in make_steps(workload, seed, txns):
        if step.kind != "txn":
            continue
        with conn:
            for sql, params in step.sql:
                conn.execute(sql, params)
        out.append(digest(conn))
    conn.close()
    return out


def reference_rows(workload: str, seed: int, txns: int, k: int) -> Dict[str, List[Tuple[Any, ...]]]:
    """The rows of every table after the first k transactions."""
    apsw = _apsw()
    conn = apsw.Connection(":memory:")
    conn.execute(SCHEMA)
    with conn:
        for sql, params in setup_sql():
            conn.execute(sql, params)
    for step in make_steps(workload, seed, txns):
        if step.kind == "txn" and step.n <= k:
            with conn:
                for sql, params in step.sql:
                    conn.execute(sql, params)
    rows = {t: list(conn.execute("SELECT * FROM %s ORDER BY id" % t)) for t in TABLES}
    conn.close()
    return rows


# --------------------------------------------------------- opening a db


def _package_root() -> Path:
    return Path(__file__).resolve().parent


def _repo_root() -> Path:
    return _package_root().parent.parent


def recorder_path() -> Path:
    """build/crash/recorder.so ($WALDIO_RECORDER overrides)."""
    env = os.environ.get("WALDIO_RECORDER")
    cands = [Path(env)] if env else []
    cands += [_repo_root() / "build" / "crash" / "recorder.so",
              _package_root() / "_lib" / "recorder.so"]
    for c in cands:
        if c.is_file():
            return c
    raise FileNotFoundError("recorder.so not found (looked in: %s); build it with "
                            "`make build` (crash/CMakeLists.txt)" % ", ".join(map(str, cands)))


def fuzz_binary_path() -> Optional[Path]:
    env = os.environ.get("WALDIO_FUZZ_BINARY")
    p = Path(env) if env else _repo_root() / "build" / "crash" / "fuzz_recovery"
    return p if p.is_file() else None


def state_dir_base() -> Path:
    """Where crash states are materialized: a file system with O_DIRECT."""
    return Path(os.environ.get("WALDIO_CRASH_DIR", os.environ.get("WALDIO_TEST_DIR", "/var/tmp")))


def open_db(mode: Mode, path: Path, *, vfs: Optional[str] = None) -> Any:
    """A connection to path in mode (vfs: override, e.g. "recorder")."""
    apsw = _apsw()
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI
    if mode.waldio:
        query = urllib.parse.urlencode({"waldio_" + k: v for k, v in mode.uri})
        name = "file:" + urllib.parse.quote(os.path.abspath(path)) + ("?" + query if query else "")
        conn = apsw.Connection(name, flags=flags, vfs=vfs or "waldio")
    else:
        conn = apsw.Connection("file:" + os.path.abspath(path), flags=flags, vfs=vfs or "unix")
    conn.setbusytimeout(5000)
    return conn


def configure(conn: Any, mode: Mode) -> None:
    conn.execute("PRAGMA journal_mode=%s" % mode.journal).fetchall()
    conn.execute("PRAGMA synchronous=%s" % mode.synchronous)
    conn.execute("PRAGMA wal_autocheckpoint=32")


def _create_reserved(path: Path) -> None:
    """The base database made by stock SQLite with 24 reserved bytes per
    page (SQLITE_FCNTL_RESERVE_BYTES before the first write)."""
    from waldio import drivers
    drv = drivers.driver_by_name("apsw")
    c = drv.connect(str(path), vfs="unix", uri=False)
    c.file_control_int(38, 24)
    c.execute("PRAGMA page_size=4096")
    c.execute("PRAGMA journal_mode=WAL")
    c.executescript(SCHEMA)
    c.execute("BEGIN")
    for sql, params in setup_sql():
        c.execute(sql, params)
    c.execute("COMMIT")
    c.close()


def make_base(mode: Mode, db: Path, workload: str, seed: int, txns: int,
              vfs: Optional[str] = None) -> Tuple[List[Step], int]:
    """Create the database a run starts from; returns the steps left to run
    and how many transactions the base already holds."""
    steps = make_steps(workload, seed, txns)
    if not mode.from_stock:
        create_base(mode, db, vfs=vfs)
        return steps, 0
    # Stock SQLite (the unix VFS) commits the first third and closes
    # without a checkpoint: the base holds a standard WAL with committed
    # frames, which waldio converts at its first open.
    stock = Mode("stock", False, "FULL")
    _create_reserved(db)
    cut = next(i for i, st in enumerate(steps) if st.kind == "txn" and st.n > txns // 3)
    first, rest = steps[:cut], steps[cut:]
    r = Runner(stock, db, vfs="unix")
    r.conn.execute("PRAGMA wal_autocheckpoint=0")
    r.run([st for st in first if st.kind in ("txn", "rollback")])
    apsw = _apsw()
    for c in (r.reader, r.conn):
        if c is not None:
            c.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            c.close()
    return rest, max(st.n for st in first if st.kind == "txn")


def create_base(mode: Mode, path: Path, vfs: Optional[str] = None) -> None:
    """The database every run starts from: schema and setup rows, closed
    cleanly (so it holds no log frames)."""
    conn = open_db(mode, path, vfs=vfs)
    conn.execute("PRAGMA page_size=4096")
    configure(conn, mode)
    conn.execute(SCHEMA)
    with conn:
        for sql, params in setup_sql():
            conn.execute(sql, params)
    conn.close()


class Runner:
    """Runs workload steps on a connection; calls on_ack(n) after each
    acknowledged transaction."""

    def __init__(self, mode: Mode, path: Path, vfs: Optional[str] = None,
                 on_ack: Optional[Callable[[int], None]] = None,
                 retry_failed: bool = False) -> None:
        self.mode, self.path, self.vfs = mode, path, vfs
        self.on_ack = on_ack or (lambda n: None)
        self.retry_failed = retry_failed
        self.errors: List[str] = []
        self.conn = self._open()
        self.conn2: Any = None                 # second writer (two-writers)
        self.reader: Any = None

    def _open(self) -> Any:
        conn = open_db(self.mode, self.path, vfs=self.vfs)
        configure(conn, self.mode)
        return conn

    def _txn(self, step: Step) -> None:
        conn = self.conn
        if step.who:
            # The second writer always runs with a tiny page cache, so it
            # spills without a statement before or after the transaction.
            if self.conn2 is None:
                self.conn2 = self._open()
                self.conn2.execute("PRAGMA cache_size=5")
            self._txn_on(self.conn2, step, spill=False)
            return
        self._txn_on(conn, step, step.spill)

    def _txn_on(self, conn: Any, step: Step, spill: bool) -> None:
        if spill:
            conn.execute("PRAGMA cache_size=5")
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in step.sql:
                    conn.execute(sql, params)
                if step.kind == "rollback":
                    conn.execute("ROLLBACK")
                else:
                    conn.execute("COMMIT")
            except BaseException:
                if not conn.getautocommit():
                    try:
                        conn.execute("ROLLBACK")
                    except Exception:
                        pass
                raise
        finally:
            if spill:
                conn.execute("PRAGMA cache_size=-2000")

    def run(self, steps: Sequence[Step]) -> None:
        apsw = _apsw()
        for step in steps:
            if step.kind in ("txn", "rollback"):
                while True:
                    try:
                        self._txn(step)
                        break
                    except apsw.Error as e:
                        if not self.retry_failed:
                            raise
                        self.errors.append("%s: %s" % (type(e).__name__, e))
                        if len(self.errors) > 50:
                            raise
                if step.kind == "txn":
                    self.on_ack(step.n)
            elif self.mode.journal != "WAL" and step.kind != "reopen":
                continue          # readers would block a rollback-journal writer
            elif step.kind == "checkpoint":
                # Never wait for a reader (RESTART and TRUNCATE would).
                self.conn.setbusytimeout(0)
                try:
                    self.conn.execute("PRAGMA wal_checkpoint(%s)" % step.arg).fetchall()
                finally:
                    self.conn.setbusytimeout(5000)
            elif step.kind == "reader_begin":
                self.reader = open_db(self.mode, self.path, vfs=self.vfs)
                self.reader.execute("BEGIN")
                self.reader.execute("SELECT count(*), sum(bal) FROM kv, acct WHERE kv.id = 1").fetchall()
            elif step.kind == "reader_end":
                if self.reader is not None:
                    self.reader.execute("COMMIT")
                    self.reader.close()
                    self.reader = None
            elif step.kind == "reopen":
                self.conn.close()
                self.conn = self._open()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        if self.conn2 is not None:
            self.conn2.close()
            self.conn2 = None
        self.conn.close()


# ------------------------------------------------------- checking a state


@dataclass
class Outcome:
    """What opening one materialized state gave."""
    ok: bool                      # opened and read without error
    integrity: str = ""
    k: Optional[int] = None       # prefix length whose digest matches
    meta_txn: Optional[int] = None
    error: str = ""
    digest: str = ""
    converted: Any = None         # stock states: the same files through waldio


def check_files(mode: Mode, directory: Path, digests: Sequence[str],
                vfs: Optional[str] = None) -> Outcome:
    """Open the database in directory as mode says, check integrity and find
    which prefix of the acknowledged transactions it holds."""
    apsw = _apsw()
    path = directory / DB_NAME
    out = Outcome(ok=False)
    conn = None
    try:
        conn = open_db(mode, path, vfs=vfs)
        # The state is thrown away: no checkpoint and no sync at close.
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.execute("PRAGMA synchronous=OFF")
        out.integrity = ";".join(str(r[0]) for r in conn.execute("PRAGMA integrity_check"))
        if out.integrity == "ok":
            try:
                out.meta_txn = conn.execute("SELECT txn FROM meta WHERE id = 1").fetchall()[0][0]
            except (apsw.Error, IndexError):
                out.meta_txn = None
            out.digest = digest(conn)
            out.k = _digest_index(digests).get(out.digest)
        out.ok = True
    except apsw.Error as e:
        out.error = "%s: %s" % (type(e).__name__, e)
        if mode.waldio:
            detail = _waldio_error()
            if detail:
                out.error += " (waldio: %s)" % detail
    finally:
        if conn is not None:
            try:
                conn.close()
            except apsw.Error as e:
                if out.ok and not out.error:
                    out.error = "close: %s" % e
    return out


_index_cache: Dict[int, Dict[str, int]] = {}


def _digest_index(digests: Sequence[str]) -> Dict[str, int]:
    key = id(digests)
    idx = _index_cache.get(key)
    if idx is None or len(idx) == 0:
        idx = {}
        for k, d in enumerate(digests):
            idx.setdefault(d, k)
        _index_cache[key] = idx
    return idx


def _waldio_error() -> str:
    try:
        return waldio.last_error()
    except Exception:
        return ""


def verdict(out: Outcome, required: int, upper: int) -> Tuple[bool, str]:
    """(passed, reason) for one state against its requirement."""
    if not out.ok:
        return False, "unreadable: " + out.error
    if out.integrity != "ok":
        return False, "integrity_check: " + out.integrity[:200]
    if out.k is None:
        return False, ("not a prefix of the acknowledged transactions (a hole or a torn "
                       "transaction; meta.txn=%s)" % out.meta_txn)
    if out.k < required:
        return False, "lost transactions: holds %d, the contract requires %d" % (out.k, required)
    if out.k > upper:
        return False, ("holds %d transactions but only %d had started at the crash point "
                       "(a recorder or model bug)" % (out.k, upper))
    return True, "ok (k=%d, required %d)" % (out.k, required)


# ----------------------------------------------------- the event log

REC_MAGIC = b"WALDIOREC1\n\0\0\0\0\0"
HDR = struct.Struct("<BBHiqqQQII")
(REC_OPEN, REC_CLOSE, REC_WRITE, REC_ZERO, REC_TRUNC, REC_SYNC_BEGIN, REC_SYNC_END,
 REC_UNLINK, REC_RENAME, REC_DIRSYNC, REC_MARK, REC_FAULT, REC_FALLOC) = range(1, 14)
PAGE, DEV, FUA = 0, 1, 2
EVENT_NAMES = {1: "open", 2: "close", 3: "write", 4: "zero", 5: "trunc", 6: "sync-begin",
               7: "sync-end", 8: "unlink", 9: "rename", 10: "dirsync", 11: "mark",
               12: "fault", 13: "fallocate"}
CLS_NAMES = {PAGE: "page-cache", DEV: "direct", FUA: "fua"}


@dataclass
class Event:
    type: int
    cls: int
    fid: int
    a: int
    b: int
    t_ns: int
    seq: int
    payload: memoryview


def parse_events(path: Path) -> List[Event]:
    data = path.read_bytes()
    if data[:16] != REC_MAGIC:
        raise ValueError("%s is not a waldio crash recording" % path)
    mv = memoryview(data)
    pos, out = 16, []
    n = len(data)
    while pos + HDR.size <= n:
        typ, cls, _p, fid, a, b, t, seq, ln, _p2 = HDR.unpack_from(data, pos)
        pos += HDR.size
        if pos + ln > n:
            break                       # a torn tail (recorder killed): ignore
        out.append(Event(typ, cls, fid, a, b, t, seq, mv[pos:pos + ln]))
        pos += ln
    return out


# Item kinds (things that change what is on disk).
W, T, FA, CR, UL, RN = "W", "T", "F", "C", "U", "R"
INF = 1 << 62


@dataclass
class Item:
    idx: int                 # event index
    op: str                  # W T F C U R
    cls: int                 # PAGE DEV FUA; namespace items use PAGE
    ino: int = -1
    off: int = 0
    length: int = 0
    data: Optional[memoryview] = None   # None: zeros
    name: str = ""
    name2: str = ""
    mode: int = 0            # fallocate mode
    durable_at: int = INF    # event index at which it became durable
    ns: bool = False         # a namespace (directory) item

    def describe(self) -> str:
        if self.op == W:
            return "#%d %s write %s@%d+%d" % (self.idx, CLS_NAMES[self.cls], self.name,
                                             self.off, self.length)
        if self.op == T:
            return "#%d truncate %s to %d" % (self.idx, self.name, self.length)
        if self.op == FA:
            return "#%d fallocate(0x%x) %s@%d+%d" % (self.idx, self.mode, self.name, self.off, self.length)
        if self.op == CR:
            return "#%d create %s" % (self.idx, self.name)
        if self.op == UL:
            return "#%d unlink %s" % (self.idx, self.name)
        return "#%d rename %s -> %s" % (self.idx, self.name, self.name2)


FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE, FALLOC_ZERO_RANGE, FALLOC_WRITE_ZEROES = 0x1, 0x2, 0x10, 0x80


@dataclass(frozen=True)
class StateKey:
    """One crash state: model, crash point (after event t), kind, parameter.

    kinds: kill/all; os/lose (every unsynced page-cache write lost), os/prefix
    j (the first j unsynced page-cache items survive, in order), os/rand r;
    power/prefix j (the first j volatile items survive, in order), power/drop
    i (all volatile items but the i-th), power/rand r (a seeded subset);
    os/torn and power/torn r: the write that completed at event t was in
    flight at the crash and landed partly (512-byte sectors: new, old or,
    for power loss, garbage)."""
    model: str
    t: int
    kind: str
    param: int = 0

    def text(self) -> str:
        return "%s:%d:%s:%d" % (self.model, self.t, self.kind, self.param)

    @staticmethod
    def parse(s: str) -> "StateKey":
        model, t, kind, param = s.split(":")
        return StateKey(model, int(t), kind, int(param))


class Recording:
    """A recorded run: base files, events, acks, and the crash-state model."""

    def __init__(self, rec_dir: Path) -> None:
        self.dir = Path(rec_dir)
        self.meta = json.loads((self.dir / "meta.json").read_text())
        self.mode = get_mode(self.meta["mode"])
        self.digests: List[str] = self.meta["digests"]
        self.events = parse_events(self.dir / "events.bin")
        self.live_dir = self.meta["live_dir"]
        self.base_ns: Dict[str, int] = {}
        self.base_img: Dict[int, bytes] = {}
        for i, name in enumerate(sorted(self.meta["base_files"])):
            self.base_ns[name] = i
            self.base_img[i] = (self.dir / "base" / name).read_bytes()
        self._build()

    # ---- building the item list
    def _name(self, path: str) -> Optional[str]:
        d, base = os.path.split(path)
        return base if os.path.normpath(d) == os.path.normpath(self.live_dir) else None

    def _build(self) -> None:
        ns = dict(self.base_ns)
        ino_name: Dict[int, str] = {v: k for k, v in ns.items()}
        next_ino = len(ns)
        fid_ino: Dict[int, int] = {}
        items: List[Item] = []
        syncs: List[Tuple[int, int, int]] = []         # (begin, end, ino)
        sync_begin: Dict[int, Tuple[int, int]] = {}
        dirsyncs: List[int] = []
        acks: List[Tuple[int, int]] = []
        self.faults: List[Tuple[int, str, int]] = []
        self.n_by_type: Dict[str, int] = {}
        self.write_bytes = {PAGE: 0, DEV: 0, FUA: 0}
        for e_idx, ev in enumerate(self.events):
            tname = EVENT_NAMES.get(ev.type, str(ev.type))
            self.n_by_type[tname] = self.n_by_type.get(tname, 0) + 1
            if ev.type == REC_OPEN:
                name = self._name(bytes(ev.payload).decode())
                if name is None:
                    continue
                if name not in ns:
                    ino = next_ino
                    next_ino += 1
                    ns[name] = ino
                    ino_name[ino] = name
                    items.append(Item(e_idx, CR, PAGE, ino=ino, name=name, ns=True))
                fid_ino[ev.fid] = ns[name]
            elif ev.type in (REC_WRITE, REC_ZERO):
                ino = fid_ino.get(ev.fid)
                if ino is None:
                    continue
                data = ev.payload if ev.type == REC_WRITE else None
                items.append(Item(e_idx, W, ev.cls, ino=ino, off=ev.a, length=ev.b, data=data,
                                  name=ino_name.get(ino, "?")))
                self.write_bytes[ev.cls] += ev.b
            elif ev.type == REC_TRUNC:
                ino = fid_ino.get(ev.fid)
                if ino is not None:
                    items.append(Item(e_idx, T, PAGE, ino=ino, length=ev.a, name=ino_name.get(ino, "?")))
            elif ev.type == REC_FALLOC:
                ino = fid_ino.get(ev.fid)
                if ino is None:
                    continue
                mode = struct.unpack("<I", bytes(ev.payload[:4]))[0]
                cls = DEV if mode & FALLOC_WRITE_ZEROES else PAGE
                items.append(Item(e_idx, FA, cls, ino=ino, off=ev.a, length=ev.b, mode=mode,
                                  name=ino_name.get(ino, "?")))
            elif ev.type == REC_SYNC_BEGIN:
                ino = fid_ino.get(ev.fid)
                if ino is not None:
                    sync_begin[ev.a] = (e_idx, ino)
            elif ev.type == REC_SYNC_END:
                got = sync_begin.pop(ev.a, None)
                if got is not None and ev.b == 0:
                    syncs.append((got[0], e_idx, got[1]))
            elif ev.type == REC_UNLINK:
                name = self._name(bytes(ev.payload).decode())
                if name is not None and name in ns:
                    items.append(Item(e_idx, UL, PAGE, ino=ns[name], name=name, ns=True))
                    del ns[name]
            elif ev.type == REC_RENAME:
                a, b = bytes(ev.payload).decode().split("\0")
                na, nb = self._name(a), self._name(b)
                if na is not None and nb is not None and na in ns:
                    items.append(Item(e_idx, RN, PAGE, ino=ns[na], name=na, name2=nb, ns=True))
                    ns[nb] = ns.pop(na)
                    ino_name[ns[nb]] = nb
            elif ev.type == REC_DIRSYNC:
                d = bytes(ev.payload).decode()
                if os.path.normpath(d) == os.path.normpath(self.live_dir):
                    dirsyncs.append(e_idx)
            elif ev.type == REC_MARK:
                name = bytes(ev.payload).decode()
                if name == "ack":
                    acks.append((e_idx, ev.a))
            elif ev.type == REC_FAULT:
                self.faults.append((e_idx, bytes(ev.payload).decode(), ev.a))
        self.items = items
        self.syncs = syncs
        self.ino_name = ino_name
        self.n = len(self.events)
        self._durability(syncs, dirsyncs)
        self._acks(acks, syncs)
        self.item_idx = [it.idx for it in items]
        self._commit_frames()
        self.write_events = [it.idx for it in items if it.op == W]
        self.dev_write_events = [it.idx for it in items if it.op == W and it.cls == DEV]
        self._volatile_counts()

    def _durability(self, syncs: List[Tuple[int, int, int]], dirsyncs: List[int]) -> None:
        """When each item becomes durable (docs/crash.md, "the model")."""
        # Any completed flush makes every device-cache item that completed
        # before the flush began durable; a file's sync also writes back that
        # file's page cache first.
        by_begin = sorted(syncs)
        begins = [s[0] for s in by_begin]
        suf = [INF] * (len(by_begin) + 1)
        for i in range(len(by_begin) - 1, -1, -1):
            suf[i] = min(suf[i + 1], by_begin[i][1])
        per_ino: Dict[int, Tuple[List[int], List[int]]] = {}
        for ino in {s[2] for s in syncs}:
            own = sorted(s for s in syncs if s[2] == ino)
            b = [s[0] for s in own]
            sm = [INF] * (len(own) + 1)
            for i in range(len(own) - 1, -1, -1):
                sm[i] = min(sm[i + 1], own[i][1])
            per_ino[ino] = (b, sm)
        for it in self.items:
            if it.ns:
                j = bisect.bisect_right(dirsyncs, it.idx)
                it.durable_at = dirsyncs[j] if j < len(dirsyncs) else INF
            elif it.cls == FUA:
                it.durable_at = it.idx
            elif it.cls == DEV:
                j = bisect.bisect_right(begins, it.idx)
                it.durable_at = suf[j]
            else:
                b, sm = per_ino.get(it.ino, ([], [INF]))
                j = bisect.bisect_right(b, it.idx)
                it.durable_at = sm[j]

    def _acks(self, acks: List[Tuple[int, int]], syncs: List[Tuple[int, int, int]]) -> None:
        n = self.n
        A = [0] * n
        ai, cur = 0, 0
        for t in range(n):
            while ai < len(acks) and acks[ai][0] <= t:
                cur = max(cur, acks[ai][1])
                ai += 1
            A[t] = cur
        self.A = A
        self.acks = acks
        self.n_acked = cur
        self.ack_events = [a[0] for a in acks]

        def last_flush_req(pred: Callable[[int], bool]) -> List[int]:
            req = [0] * n
            ends = sorted((e, b) for (b, e, ino) in syncs if pred(ino))
            best, j = 0, 0
            for t in range(n):
                while j < len(ends) and ends[j][0] <= t:
                    best = max(best, A[ends[j][1]] if ends[j][1] >= 0 else 0)
                    j += 1
                req[t] = best
            return req

        wal_inos = {ino for ino, name in self.ino_name.items() if name.endswith("-wal")}
        self.req_flush = last_flush_req(lambda ino: True)
        self.req_walsync = last_flush_req(lambda ino: ino in wal_inos)
        self.flush_events = sorted(e for (b, e, ino) in syncs)

    def _commit_frames(self) -> None:
        """For waldio logs: which log write carried each transaction's commit
        frame (a frame header with nTruncate != 0), decoded from the
        recorded bytes. commit_items[j-1] is the write holding the j-th."""
        self.commit_items: List[Item] = []
        self.commit_frames_ok = False
        wal = [n for n in self.base_ns if n.endswith("-wal")]
        if not self.mode.waldio or not wal:
            return
        g = log_geometry(self.base_img[self.base_ns[wal[0]]])
        if g is None:
            return
        page, slot, area, block = g["page"] or 4096, g["slot"] or 4096, g["area"], g["block"]
        hdr_at = page - FRAME_HDR if g["layout"] == 1 else 0
        log_inos = {ino for ino, name in self.ino_name.items() if name.endswith("-wal")}
        # A spilled transaction's frames are first written with zero salts
        # and checksums and then rewritten with both, the commit frame last
        # (SQLite's walEncodeFrame with iReCksum, walRewriteChecksums): a
        # commit frame counts once written with its salts. Frames are keyed
        # by (slot, salts), which name one frame of one generation; the last
        # write of a frame is the one that counts.
        latest: Dict[Tuple[int, int, int], Item] = {}
        order: List[Tuple[int, int, int]] = []
        for it in self.items:
            if it.op != W or it.ino not in log_inos or it.data is None or it.off < area:
                continue
            # Every slot whose 24-byte frame header lies inside this write (a
            # padding layout rewrites a header's block alone).
            first = (it.off - area) // slot
            last = (it.off + it.length - area) // slot + 1
            for i in range(first, last):
                h = area + i * slot + hdr_at - it.off
                if h < 0 or h + FRAME_HDR > it.length:
                    continue
                pgno, ntrunc, s1, s2 = struct.unpack_from(">IIII", it.data, h)
                if pgno and ntrunc and (s1 or s2):
                    k = (i, s1, s2)
                    if k not in latest:
                        order.append(k)
                    latest[k] = it
        self.commit_items = [latest[k] for k in order]
        self.commit_frames_ok = len(self.commit_items) == self.n_acked
        self.commit_written = [it.idx for it in self.commit_items]
        self.commit_durable = sorted(it.durable_at for it in self.commit_items)

    def _committed(self, t: int, durable: bool) -> int:
        """Transactions whose commit frame was written (durable: and durable)
        by crash point t."""
        if not self.commit_frames_ok:
            return 0
        if durable:
            return bisect.bisect_right(self.commit_durable, t)
        return bisect.bisect_right(self.commit_written, t)

    def commit_delays_ms(self) -> List[float]:
        """ms from each acknowledgement to its commit frame being durable."""
        if not self.commit_frames_ok:
            return []
        out = []
        for (e, n), it in zip(self.acks, self.commit_items):
            if it.durable_at < INF:
                out.append((self.events[it.durable_at].t_ns - self.events[e].t_ns) / 1e6)
        return out

    def _volatile_counts(self) -> None:
        """For every crash point, how many items are volatile (all, and
        page-cache/namespace only)."""
        n = self.n
        d_all = [0] * (n + 1)
        d_page = [0] * (n + 1)
        for it in self.items:
            end = min(it.durable_at, n)
            if end > it.idx:
                d_all[it.idx] += 1
                d_all[end] -= 1
                if it.cls == PAGE:
                    d_page[it.idx] += 1
                    d_page[end] -= 1
        self.nvol = [0] * n
        self.nvol_page = [0] * n
        a = p = 0
        for t in range(n):
            a += d_all[t]
            p += d_page[t]
            self.nvol[t] = a
            self.nvol_page[t] = p

    # ---- requirements
    def required(self, key: StateKey) -> int:
        t = self.effective_t(key)
        if t < 0:
            return 0
        contract = {"kill": self.mode.kill_contract, "os": self.mode.os_contract,
                    "power": self.mode.power_contract}[key.model]
        if contract == "committed":
            return self._committed(t, durable=key.model == "power")
        if contract == "all" or contract == "none":
            return self.A[t]
        if contract == "flush":
            return self.req_flush[t]
        if contract == "walsync":
            return self.req_walsync[t]
        raise ValueError(contract)

    def upper(self, key: StateKey) -> int:
        t = self.effective_t(key)
        return min((self.A[t] if t >= 0 else 0) + 1, len(self.digests) - 1)

    @staticmethod
    def effective_t(key: StateKey) -> int:
        # A torn write was still in flight: the crash came before it completed.
        return key.t - 1 if key.kind == "torn" else key.t

    # ---- choosing states
    def interesting_points(self) -> List[int]:
        pts = set()
        for e in self.flush_events:
            pts.add(e - 1)
            pts.add(e)
        for e in self.ack_events:
            pts.add(e)
        for it in self.items:
            if it.cls == FUA:
                pts.add(it.idx)
        return sorted(p for p in pts if 0 <= p < self.n)

    def sample(self, n_states: int, seed: int, models: Sequence[str] = MODELS,
               weights: Optional[Dict[str, float]] = None,
               exclude: Optional[set] = None) -> List[StateKey]:
        """n_states distinct crash states, chosen deterministically by seed."""
        rng = random.Random("states:%d" % seed)
        w = weights or {"kill": 0.2, "os": 0.3, "power": 0.5}
        models = [m for m in models if w.get(m, 0) > 0]
        mw = [w[m] for m in models]
        interesting = self.interesting_points()
        out: List[StateKey] = []
        seen = set(exclude or ())
        attempts = 0
        while len(out) < n_states and attempts < 60 * n_states + 1000:
            attempts += 1
            model = rng.choices(models, mw)[0]
            key = self._draw(rng, model, interesting)
            if key is None or key in seen:
                continue
            seen.add(key)
            out.append(key)
        return out

    def _draw(self, rng: random.Random, model: str, interesting: List[int]) -> Optional[StateKey]:
        n = self.n
        if n == 0:
            return None

        def point() -> int:
            if interesting and rng.random() < 0.6:
                return rng.choice(interesting)
            return rng.randrange(n)

        if model == "kill":
            return StateKey("kill", point(), "all", 0)
        if model == "os":
            kind = rng.choices(["lose", "prefix", "rand", "torn"], [2, 3, 3, 2])[0]
            if kind == "torn":
                if not self.dev_write_events:
                    return None
                return StateKey("os", rng.choice(self.dev_write_events), "torn", rng.randrange(1 << 30))
            t = point()
            v = self.nvol_page[t]
            if kind == "lose" or v == 0:
                return StateKey("os", t, "lose", 0)
            if kind == "prefix":
                return StateKey("os", t, "prefix", rng.randrange(1, v + 1))
            return StateKey("os", t, "rand", rng.randrange(1 << 30))
        kind = rng.choices(["prefix", "drop", "rand", "torn"], [3, 2, 3, 3])[0]
        if kind == "torn":
            if not self.write_events:
                return None
            return StateKey("power", rng.choice(self.write_events), "torn", rng.randrange(1 << 30))
        t = point()
        v = self.nvol[t]
        if v == 0:
            return StateKey("power", t, "prefix", 0)
        if kind == "prefix":
            return StateKey("power", t, "prefix", rng.randrange(0, v + 1))
        if kind == "drop":
            return StateKey("power", t, "drop", rng.randrange(v))
        return StateKey("power", t, "rand", rng.randrange(1 << 30))

    # ---- materializing states
    def states(self, keys: Iterable[StateKey]) -> Iterable[Tuple[StateKey, "Image"]]:
        """Yield (key, image) for each key, in crash-point order."""
        order = sorted(keys, key=lambda k: (self.effective_t(k), k.model, k.kind, k.param))
        base = Image(dict(self.base_ns), {i: bytearray(b) for i, b in self.base_img.items()})
        frontier = 0                      # items[:frontier] are in base
        items = self.items
        for key in order:
            t = self.effective_t(key)
            while (frontier < len(items) and items[frontier].idx <= t
                   and items[frontier].durable_at <= t):
                base.apply(items[frontier])
                frontier += 1
            hi = bisect.bisect_right(self.item_idx, t)
            window = items[frontier:hi]
            img = base.fork()
            self._build_state(key, t, window, img)
            yield key, img

    def _build_state(self, key: StateKey, t: int, window: List[Item], img: "Image") -> None:
        rng = random.Random("%s" % key.text())
        volatile = [it for it in window if it.durable_at > t]
        keep: set = set()
        if key.model == "kill":
            keep = {id(it) for it in volatile}
        elif key.model == "os":
            page = [it for it in volatile if it.cls == PAGE]
            keep = {id(it) for it in volatile if it.cls != PAGE}
            if key.kind == "prefix":
                keep |= {id(it) for it in page[:key.param]}
            elif key.kind == "rand":
                keep |= {id(it) for it in page if rng.random() < 0.5}
            elif key.kind == "torn":
                keep |= {id(it) for it in page if rng.random() < 0.5}
        else:
            if key.kind == "prefix":
                keep = {id(it) for it in volatile[:key.param]}
            elif key.kind == "drop":
                keep = {id(it) for i, it in enumerate(volatile) if i != key.param}
            elif key.kind == "rand":
                p = rng.choice([0.2, 0.5, 0.8])
                keep = {id(it) for it in volatile if rng.random() < p}
            elif key.kind == "torn":
                if rng.random() < 0.5:
                    keep = {id(it) for it in volatile}
                else:
                    keep = {id(it) for it in volatile if rng.random() < 0.5}
        img.kept = []
        for it in window:
            if it.durable_at <= t or id(it) in keep:
                img.apply(it)
                if it.durable_at > t:
                    img.kept.append(it)
        img.dropped = [it for it in volatile if id(it) not in keep]
        if key.kind == "torn":
            torn = self._item_at(key.t)
            if torn is not None and torn.op == W:
                img.apply_torn(torn, rng, garbage=(key.model == "power"))

    def _item_at(self, idx: int) -> Optional[Item]:
        j = bisect.bisect_left(self.item_idx, idx)
        if j < len(self.items) and self.items[j].idx == idx:
            return self.items[j]
        return None

    def state_id(self, key: StateKey) -> str:
        m = self.meta
        return "%s/%s/seed=%d/txns=%d/%s" % (m["mode"], m["workload"], m["seed"], m["txns"], key.text())

    def summary(self) -> Dict[str, Any]:
        return {"events": self.n, "by_type": self.n_by_type, "items": len(self.items),
                "acked": self.n_acked, "flushes": len(self.flush_events),
                "bytes": {CLS_NAMES[k]: v for k, v in self.write_bytes.items()},
                "faults": len(self.faults)}

    def flush_delays_ms(self) -> List[float]:
        """For each direct write, ms from its completion to the completion of
        the flush that made it durable (waldio normal's bound, as measured)."""
        out = []
        for it in self.items:
            if it.cls == DEV and it.durable_at < INF:
                out.append((self.events[it.durable_at].t_ns - self.events[it.idx].t_ns) / 1e6)
        return out


class Image:
    """The files of one crash state: namespace (name -> inode) and contents.
    Inode images are shared with the base until first written (fork)."""

    def __init__(self, ns: Dict[str, int], data: Dict[int, bytearray]) -> None:
        self.ns = ns
        self.data = data
        self.owned: set = set(data)
        self.kept: List[Item] = []
        self.dropped: List[Item] = []
        self.torn_desc = ""

    def fork(self) -> "Image":
        img = Image(dict(self.ns), dict(self.data))
        img.owned = set()
        return img

    def _mut(self, ino: int) -> bytearray:
        if ino not in self.owned:
            self.data[ino] = bytearray(self.data.get(ino, b""))
            self.owned.add(ino)
        return self.data[ino]

    def apply(self, it: Item) -> None:
        if it.op == W:
            buf = self._mut(it.ino)
            end = it.off + it.length
            if len(buf) < end:
                buf.extend(bytes(end - len(buf)))
            if it.data is None:
                buf[it.off:end] = bytes(it.length)
            else:
                buf[it.off:end] = it.data
        elif it.op == T:
            buf = self._mut(it.ino)
            if it.length < len(buf):
                del buf[it.length:]
            else:
                buf.extend(bytes(it.length - len(buf)))
        elif it.op == FA:
            buf = self._mut(it.ino)
            end = it.off + it.length
            if not it.mode & FALLOC_KEEP_SIZE and len(buf) < end:
                buf.extend(bytes(end - len(buf)))
            if it.mode & (FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE | FALLOC_WRITE_ZEROES):
                hi = min(end, len(buf))
                if hi > it.off:
                    buf[it.off:hi] = bytes(hi - it.off)
        elif it.op == CR:
            self.ns[it.name] = it.ino
            if it.ino not in self.data:
                self.data[it.ino] = bytearray()
                self.owned.add(it.ino)
        elif it.op == UL:
            if self.ns.get(it.name) == it.ino:
                del self.ns[it.name]
        elif it.op == RN:
            if it.name in self.ns:
                self.ns[it.name2] = self.ns.pop(it.name)

    def apply_torn(self, it: Item, rng: random.Random, garbage: bool) -> None:
        """The write it, torn at 512-byte sectors."""
        buf = self._mut(it.ino)
        first, last = it.off // 512, (it.off + it.length - 1) // 512
        nsec = last - first + 1
        style = rng.choice(["prefix", "suffix", "random"] + (["garbage"] if garbage else []))
        if style == "prefix":
            cut = rng.randrange(0, nsec)
            choice = ["new"] * cut + ["old"] * (nsec - cut)
        elif style == "suffix":
            cut = rng.randrange(1, nsec + 1)
            choice = ["old"] * cut + ["new"] * (nsec - cut)
        elif style == "random":
            choice = [rng.choice(["new", "old"]) for _ in range(nsec)]
        else:
            choice = [rng.choice(["new", "old", "garbage"]) for _ in range(nsec)]
        if all(c == "new" for c in choice) and nsec > 0:
            choice[rng.randrange(nsec)] = "old" if not garbage else rng.choice(["old", "garbage"])
        for i, c in enumerate(choice):
            lo = max(it.off, (first + i) * 512)
            hi = min(it.off + it.length, (first + i + 1) * 512)
            if c == "old":
                continue
            if len(buf) < hi:
                buf.extend(bytes(hi - len(buf)))
            if c == "new":
                buf[lo:hi] = bytes(hi - lo) if it.data is None else it.data[lo - it.off:hi - it.off]
            else:
                buf[lo:hi] = rng.randbytes(hi - lo)
        self.torn_desc = "%s: %s" % (it.describe(), "".join(c[0] for c in choice))

    def files(self) -> Dict[str, bytearray]:
        return {name: self.data.get(ino, bytearray()) for name, ino in self.ns.items()}

    def content_hash(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for name, buf in sorted(self.files().items()):
            h.update(name.encode() + b"\0" + len(buf).to_bytes(8, "little"))
            h.update(buf)
        return h.hexdigest()

    def write_to(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for p in directory.iterdir():
            if p.is_file():
                p.unlink()
        for name, buf in self.files().items():
            write_sparse(directory / name, buf)


def write_sparse(path: Path, buf: bytes) -> None:
    """Write buf, leaving runs of zero 4 KiB blocks as holes (read as zeros)."""
    mv = memoryview(buf)
    n = len(buf)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, n)
        blk = 65536
        zero = bytes(blk)
        for off in range(0, n, blk):
            chunk = mv[off:off + blk]
            if chunk != zero[:len(chunk)]:
                os.pwrite(fd, chunk, off)
    finally:
        os.close(fd)


# ------------------------------------------------------------ recording


def _child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    root = str(_package_root().parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def _load_recorder() -> None:
    apsw = _apsw()
    c = apsw.Connection(":memory:")
    c.enable_load_extension(True)
    c.load_extension(str(recorder_path()), "sqlite3_recorder_init")
    c.close()


def _control() -> Any:
    return _apsw().Connection(":memory:")


class RecordingError(RuntimeError):
    """The workload failed while it was being recorded (before any crash)."""

    def __init__(self, msg: str, log_path: Path) -> None:
        super().__init__(msg)
        self.log_path = log_path

    def short(self) -> str:
        lines = [l for l in str(self).splitlines() if l.strip()]
        return lines[-1] if lines else str(self)


def record(mode_name: str, workload: str, seed: int, txns: int, out_dir: Path,
           timeout: float = 600) -> Path:
    """Record one run into out_dir (events.bin, meta.json, base/).
    Runs in a child process: the recorder must load before waldio."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    args = {"mode": mode_name, "workload": workload, "seed": seed, "txns": txns,
            "out": str(out_dir)}
    proc = subprocess.run([sys.executable, "-m", "waldio.crash", "_record", json.dumps(args)],
                          capture_output=True, text=True, timeout=timeout,
                          env=_child_env({"WALDIO_RECORDER_SEED": str(seed)}))
    if proc.returncode != 0:
        (out_dir / "record.log").write_text(proc.stdout + proc.stderr)
        raise RecordingError("recording %s/%s failed (exit %d):\n%s%s" % (
            mode_name, workload, proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:]),
            out_dir / "record.log")
    meta = json.loads((out_dir / "meta.json").read_text())
    meta["digests"] = reference_digests(workload, seed, txns)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    return out_dir


def _role_record(args: Dict[str, Any]) -> None:
    mode = get_mode(args["mode"])
    out = Path(args["out"])
    live = out / "live"
    live.mkdir()
    _load_recorder()
    vfs = "recorder"
    if mode.waldio:
        waldio.load()
        ctl = _control()
        hooked = ctl.execute("SELECT recorder_hook_waldio('waldio')").fetchall()[0][0]
        if hooked < 10:
            raise SystemExit("recorder_hook_waldio hooked only %s system calls" % hooked)
        vfs = "waldio"
    else:
        ctl = _control()
    db = live / DB_NAME
    steps, done_before = make_base(mode, db, args["workload"], args["seed"], args["txns"], vfs)
    (out / "base").mkdir()
    base_files = []
    for p in sorted(live.iterdir()):
        if p.name.endswith("-shm"):
            continue
        shutil.copyfile(p, out / "base" / p.name)
        base_files.append(p.name)
    ctl.execute("SELECT recorder_start(?)", (str(out / "events.bin"),)).fetchall()
    if done_before:
        # Acknowledged (and durable) before the recording: in the base.
        ctl.execute("SELECT recorder_mark('ack', ?)", (done_before,)).fetchall()

    def ack(n: int) -> None:
        ctl.execute("SELECT recorder_mark('ack', ?)", (n,)).fetchall()

    runner = Runner(mode, db, vfs=vfs, on_ack=ack)
    runner.run(steps)
    runner.close()
    ctl.execute("SELECT recorder_mark('end', 0)").fetchall()
    n_events = ctl.execute("SELECT recorder_stop()").fetchall()[0][0]
    apsw = _apsw()
    meta = {"mode": mode.name, "workload": args["workload"], "seed": args["seed"],
            "txns": args["txns"], "live_dir": str(live.resolve()), "base_files": base_files,
            "events": n_events, "sqlite": apsw.sqlite_lib_version(), "apsw": apsw.apsw_version(),
            "recorder_seed": os.environ.get("WALDIO_RECORDER_SEED")}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


def events_hash(rec_dir: Path) -> str:
    return hashlib.blake2b((Path(rec_dir) / "events.bin").read_bytes(), digest_size=6).hexdigest()


# ------------------------------------------------------------- campaigns


@dataclass
class StateResult:
    key: StateKey
    passed: bool
    reason: str
    k: Optional[int]
    required: int
    content: str


@dataclass
class CampaignResult:
    mode: str
    workload: str
    seed: int
    txns: int
    rec_dir: str
    summary: Dict[str, Any]
    tried: Dict[str, int] = field(default_factory=dict)
    passed: Dict[str, int] = field(default_factory=dict)
    distinct: int = 0
    failures: List[Dict[str, Any]] = field(default_factory=list)
    kinds: Dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    record_seconds: float = 0.0
    lost_allowed_max: int = 0
    flush_delay_ms: Optional[Dict[str, float]] = None
    commit_delay_ms: Optional[Dict[str, float]] = None

    @property
    def total_tried(self) -> int:
        return sum(self.tried.values())

    @property
    def total_passed(self) -> int:
        return sum(self.passed.values())

    def to_json(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["total_tried"] = self.total_tried
        d["total_passed"] = self.total_passed
        return d


def check_states(rec: Recording, keys: Sequence[StateKey], workdir: Path,
                 progress: Optional[Callable[[int], None]] = None,
                 mutate: str = "") -> List[StateResult]:
    """Materialize and check each state (one process)."""
    waldio.load()
    cache: Dict[str, Outcome] = {}
    results: List[StateResult] = []
    sdir = workdir / ("state-%d" % os.getpid())
    convert = not rec.mode.waldio and rec.mode.journal == "WAL"
    for i, (key, img) in enumerate(rec.states(keys)):
        h = img.content_hash()
        out = cache.get(h)
        if out is None:
            img.write_to(sdir)
            out = check_files(rec.mode, sdir, rec.digests)
            if convert:
                out.converted = check_files(CONVERT_MODE, sdir, rec.digests)
            cache[h] = out
        req, up = rec.required(key), rec.upper(key)
        ok, reason = verdict(out, req, up)
        if ok and convert:
            c = out.converted
            if not (c.ok and c.integrity == "ok" and c.k == out.k):
                ok = False
                reason = ("waldio's conversion of the standard WAL differs: stock SQLite "
                          "recovered k=%s, waldio %s" % (out.k, ("k=%s" % c.k) if c.ok else c.error))
        results.append(StateResult(key, ok, reason, out.k, req, h))
        if progress and (i + 1) % 200 == 0:
            progress(i + 1)
    shutil.rmtree(sdir, ignore_errors=True)
    return results


def _worker_check(args: Tuple[str, List[str], str]) -> List[Tuple[str, bool, str, Optional[int], int, str]]:
    rec_dir, keys, workdir = args
    # A checker process of its own: its files are thrown away, so waldio's
    # own flushes (log creation, conversion) are skipped (recorder no_sync).
    _load_recorder()
    waldio.load()
    ctl = _control()
    ctl.execute("SELECT recorder_hook_waldio('waldio')").fetchall()
    ctl.execute("SELECT recorder_config('no_sync', 1)").fetchall()
    rec = Recording(Path(rec_dir))
    res = check_states(rec, [StateKey.parse(k) for k in keys], Path(workdir))
    return [(r.key.text(), r.passed, r.reason, r.k, r.required, r.content) for r in res]


def run_campaign(mode_name: str, *, workload: str = "mixed", states: int = 1000, seed: int = 1,
                 txns: int = 200, out_root: Optional[Path] = None, jobs: int = 1,
                 models: Sequence[str] = MODELS, rec_dir: Optional[Path] = None,
                 log: Callable[[str], None] = lambda s: None,
                 drop_syncs: bool = False) -> CampaignResult:
    """Record (unless rec_dir is given) and check `states` crash states."""
    out_root = Path(out_root or state_dir_base() / "waldio-crash")
    t0 = time.monotonic()
    if rec_dir is None:
        rec_dir = out_root / ("%s-%s-s%d-n%d" % (mode_name, workload, seed, txns))
        log("recording %s (%s, %d transactions, seed %d) ..." % (mode_name, workload, txns, seed))
        record(mode_name, workload, seed, txns, rec_dir)
    t_rec = time.monotonic() - t0
    rec = Recording(rec_dir)
    if drop_syncs:
        _drop_syncs(rec)
    if "committed" in (rec.mode.kill_contract, rec.mode.os_contract, rec.mode.power_contract) \
            and not rec.commit_frames_ok:
        raise RuntimeError("%s: found %d commit frames in the recorded log writes for %d "
                           "acknowledged transactions; cannot check the group contract"
                           % (mode_name, len(rec.commit_items), rec.n_acked))
    keys = rec.sample(states, seed, models)
    log("%s: %d events, %d acknowledged transactions; checking %d states ..."
        % (mode_name, rec.n, rec.n_acked, len(keys)))
    res = CampaignResult(mode_name, workload, seed, txns, str(rec_dir), rec.summary(),
                         record_seconds=round(t_rec, 1))
    workdir = Path(tempfile.mkdtemp(prefix="waldio-crash-", dir=state_dir_base()))
    try:
        if jobs > 1 and not drop_syncs:
            import multiprocessing as mp
            chunks = [[k.text() for k in keys[w::jobs]] for w in range(jobs)]
            ctx = mp.get_context("spawn")
            with ctx.Pool(jobs) as pool:
                parts = pool.map(_worker_check, [(str(rec_dir), c, str(workdir)) for c in chunks])
            flat = [StateResult(StateKey.parse(a), b, c, d, e, f) for part in parts
                    for (a, b, c, d, e, f) in part]
        else:
            flat = check_states(rec, keys, workdir,
                                progress=lambda i: log("  %d/%d states" % (i, len(keys))))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    contents = set()
    for r in flat:
        m = r.key.model
        res.tried[m] = res.tried.get(m, 0) + 1
        res.passed[m] = res.passed.get(m, 0) + (1 if r.passed else 0)
        kind = "%s/%s" % (m, r.key.kind)
        res.kinds[kind] = res.kinds.get(kind, 0) + 1
        contents.add(r.content)
        if r.k is not None:
            res.lost_allowed_max = max(res.lost_allowed_max, rec.upper(r.key) - 1 - r.k)
        if not r.passed:
            res.failures.append({"id": rec.state_id(r.key), "reason": r.reason,
                                 "k": r.k, "required": r.required})
    res.distinct = len(contents)
    if rec.mode.waldio and rec.mode.power_contract == "flush":
        d = sorted(rec.flush_delays_ms())
        bound = float(rec.mode.uri_options().get("flush_ms", "100"))
        never = sum(1 for it in rec.items if it.cls == DEV and it.durable_at >= INF)
        if d:
            res.flush_delay_ms = {"median": round(d[len(d) // 2], 2), "max": round(d[-1], 2),
                                  "writes": len(d), "bound": bound,
                                  "over_bound": sum(1 for x in d if x > bound),
                                  "never_flushed": never}
    if rec.mode.waldio:
        d = sorted(rec.commit_delays_ms())
        if d:
            res.commit_delay_ms = {"median": round(d[len(d) // 2], 2), "max": round(d[-1], 2),
                                   "commits": len(d)}
            if "group_ms" in rec.mode.uri_options():
                bound = float(rec.mode.uri_options()["group_ms"])
                res.commit_delay_ms["bound"] = bound
                res.commit_delay_ms["over_bound"] = sum(1 for x in d if x > bound)
    res.seconds = round(time.monotonic() - t0, 1)
    return res


def _drop_syncs(rec: Recording) -> None:
    """Mutation (tests only): pretend no sync ever reached the device, so the
    checker must report lost transactions for a mode that relies on them."""
    for it in rec.items:
        if it.cls != FUA:
            it.durable_at = INF
    rec.items.sort(key=lambda it: it.idx)
    rec._volatile_counts()


def replay(state_id: str, out_root: Optional[Path] = None, keep: Optional[Path] = None,
           rec_dir: Optional[Path] = None) -> Tuple[bool, str]:
    """Rebuild and re-check one state; returns (passed, report text)."""
    parts = state_id.split("/")
    if len(parts) != 5:
        raise ValueError("a state id looks like MODE/WORKLOAD/seed=S/txns=N/MODEL:T:KIND:P")
    mode_name, workload, s, n, keytext = parts
    seed, txns = int(s.split("=")[1]), int(n.split("=")[1])
    key = StateKey.parse(keytext)
    out_root = Path(out_root or state_dir_base() / "waldio-crash")
    lines: List[str] = []
    if rec_dir is None:
        rec_dir = out_root / ("%s-%s-s%d-n%d" % (mode_name, workload, seed, txns))
        if not (rec_dir / "events.bin").exists():
            lines.append("no saved recording at %s: recording again (seeded; exact for "
                         "single-threaded modes)" % rec_dir)
            record(mode_name, workload, seed, txns, rec_dir)
    rec = Recording(Path(rec_dir))
    lines.append("recording: %s (%d events, events hash %s)" % (rec_dir, rec.n, events_hash(rec_dir)))
    (k2, img), = list(rec.states([key]))
    waldio.load()
    sdir = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="waldio-replay-", dir=state_dir_base()))
    img.write_to(sdir)
    out = check_files(rec.mode, sdir, rec.digests)
    req, up = rec.required(key), rec.upper(key)
    ok, reason = verdict(out, req, up)
    t = rec.effective_t(key)
    lines.append("state %s" % rec.state_id(key))
    if 0 <= key.t < rec.n:
        ev = rec.events[key.t]
        lines.append("crash point: after event #%d (%s), %d transactions acknowledged by then"
                     % (key.t, EVENT_NAMES.get(ev.type), rec.A[t] if t >= 0 else 0))
    lines.append("files: " + ", ".join("%s (%d bytes)" % (nm, len(b)) for nm, b in sorted(img.files().items())))
    lines.append("volatile items kept: %d, dropped: %d" % (len(img.kept), len(img.dropped)))
    for it in img.dropped[:12]:
        lines.append("  dropped " + it.describe())
    if img.torn_desc:
        lines.append("torn: " + img.torn_desc + "  (n=new o=old g=garbage per 512-byte sector)")
    lines.append("content hash %s" % img.content_hash())
    lines.append("outcome: integrity=%r k=%s meta.txn=%s error=%r" % (out.integrity, out.k, out.meta_txn, out.error))
    lines.append("verdict: %s — %s" % ("PASS" if ok else "FAIL", reason))
    if not ok and out.ok and out.integrity == "ok" and (out.k is None or out.k < req):
        lines.extend(_diff(rec, sdir, req))
    if keep:
        lines.append("state files kept in %s" % sdir)
    else:
        shutil.rmtree(sdir, ignore_errors=True)
    return ok, "\n".join(lines)


def _diff(rec: Recording, sdir: Path, k: int, limit: int = 12) -> List[str]:
    """Rows that differ between the state and the database after k transactions."""
    m = rec.meta
    want = reference_rows(m["workload"], m["seed"], m["txns"], k)
    conn = open_db(rec.mode, sdir / DB_NAME)
    lines = ["diff against the database after %d transactions (- expected, + found):" % k]
    shown = 0
    try:
        for t in TABLES:
            have = {r[0]: r for r in conn.execute("SELECT * FROM %s ORDER BY id" % t)}
            exp = {r[0]: r for r in want[t]}
            for rid in sorted(set(have) | set(exp)):
                if have.get(rid) != exp.get(rid) and shown < limit:
                    shown += 1
                    if rid in exp:
                        lines.append("  - %s %s" % (t, _short(exp[rid])))
                    if rid in have:
                        lines.append("  + %s %s" % (t, _short(have[rid])))
    finally:
        conn.close()
    return lines


def _short(row: Tuple[Any, ...]) -> str:
    return "(" + ", ".join(("<%d-byte blob %s>" % (len(v), hashlib.md5(v).hexdigest()[:6])
                            if isinstance(v, bytes) else repr(v)) for v in row) + ")"


# ----------------------------------------------------- process kills


ASYNC_SLACK_MS = 200      # scheduling slack on top of group_ms (kill tests)


def run_kills(mode_name: str, rounds: int, seed: int, *, workload: str = "mixed", txns: int = 60,
              workdir: Optional[Path] = None,
              log: Callable[[str], None] = lambda s: None) -> Dict[str, Any]:
    """Kill a writer with SIGKILL at seeded random points, `rounds` times;
    reopen each time and check the prefix oracle (everything the writer
    acknowledged must be there)."""
    mode = get_mode(mode_name)
    digests = reference_digests(workload, seed, txns)
    rng = random.Random("kill:%s:%d" % (mode_name, seed))
    workdir = Path(workdir or tempfile.mkdtemp(prefix="waldio-kill-", dir=state_dir_base()))
    base = workdir / "base"
    base.mkdir(parents=True, exist_ok=True)
    waldio.load()
    rest, done_before = make_base(mode, base / DB_NAME, workload, seed, txns)
    skip = len(make_steps(workload, seed, txns)) - len(rest)
    result: Dict[str, Any] = {"mode": mode_name, "rounds": 0, "passed": 0, "failures": [],
                              "acked_total": 0}
    try:
        for r in range(rounds):
            rdir = workdir / ("round-%d" % r)
            if rdir.exists():
                shutil.rmtree(rdir)
            shutil.copytree(base, rdir)
            target = rng.randrange(done_before, txns + 1)
            extra_us = rng.randrange(0, 3000)
            args = {"mode": mode_name, "workload": workload, "seed": seed, "txns": txns,
                    "db": str(rdir / DB_NAME), "skip": skip}
            # Unbuffered: readline must not read ahead of what communicate() sees.
            proc = subprocess.Popen([sys.executable, "-m", "waldio.crash", "_writer", json.dumps(args)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env(),
                                    bufsize=0)
            acked = done_before
            seen: List[Tuple[float, int]] = []          # (when the parent read it, n)
            assert proc.stdout is not None
            while True:
                line = proc.stdout.readline()
                if not line:
                    break
                if line.startswith(b"ack "):
                    acked = int(line.split()[1])
                    seen.append((time.monotonic(), acked))
                    if acked >= target:
                        time.sleep(extra_us / 1e6)
                        break
                elif line.startswith(b"ready") and target <= done_before:
                    time.sleep(extra_us / 1e6)
                    break
            proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            rest, err = proc.communicate()
            for line in rest.splitlines():
                if line.startswith(b"ack "):
                    acked = int(line.split()[1])
            required = acked
            if mode.kill_contract == "committed":
                # Group async may lose what was acknowledged in the last
                # group_ms: require what was acknowledged (read by us) at
                # least group_ms + ASYNC_SLACK_MS before the kill.
                bound = (int(mode.uri_options().get("group_ms", "2")) + ASYNC_SLACK_MS) / 1000
                required = max([n for (when, n) in seen if when <= killed_at - bound] or [done_before])
            out = check_files(mode, rdir, digests)
            ok, reason = verdict(out, required, acked + 1)
            result["rounds"] += 1
            result["acked_total"] += acked
            if ok:
                result["passed"] += 1
            else:
                result["failures"].append({"round": r, "acked": acked, "reason": reason,
                                           "dir": str(rdir), "stderr": err.decode()[-500:]})
            if ok:
                shutil.rmtree(rdir, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if not result["failures"]:
            shutil.rmtree(workdir, ignore_errors=True)
    return result


def _role_writer(args: Dict[str, Any]) -> None:
    mode = get_mode(args["mode"])
    waldio.load()
    steps = make_steps(args["workload"], args["seed"], args["txns"])[args.get("skip", 0):]

    def ack(n: int) -> None:
        sys.stdout.write("ack %d\n" % n)
        sys.stdout.flush()

    runner = Runner(mode, Path(args["db"]), on_ack=ack)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    runner.run(steps)
    sys.stdout.write("done\n")
    sys.stdout.flush()
    if args.get("exit_dirty"):
        os._exit(0)
    runner.close()


# ------------------------------------------------------------ corruption

WAL_HDR, FRAME_HDR = 32, 24


def log_geometry(log: bytes) -> Optional[Dict[str, int]]:
    """Block 0 of a waldio log (docs/format.md §2), or None."""
    if len(log) < 112 or log[32:40] != b"WALDIOSB":
        return None
    u = lambda o: struct.unpack_from(">I", log, o)[0]
    return {"layout": u(44), "block": u(48), "area": u(52), "page": u(56), "slot": u(60),
            "flags": u(64)}


def log_to_standard(log: bytes) -> Optional[bytes]:
    """The standard SQLite WAL that a waldio log holds: its SQLite header
    followed by every slot decoded back into a logical frame. None when
    block 0 holds no generation (then the log is empty)."""
    g = log_geometry(log)
    if g is None or not g["flags"] & 1 or g["slot"] == 0:
        return None
    hdr = bytes(log[72:104])
    page, slot, area = g["page"], g["slot"], g["area"]
    out = bytearray(hdr)
    i = 0
    while area + (i + 1) * slot <= len(log):
        s = log[area + i * slot: area + (i + 1) * slot]
        if g["layout"] == 1:
            fh = s[page - FRAME_HDR:page]
            pg = bytes(s[:page - FRAME_HDR]) + bytes(FRAME_HDR)
        else:
            fh = s[:FRAME_HDR]
            pg = s[g["block"]:g["block"] + page]
        out += fh + pg
        i += 1
    return bytes(out)


CORRUPTIONS = ("none", "bitflip", "zero_sector", "zero_block", "stale_same_slot",
               "stale_other_slot", "truncate")


def run_corruptions(cases: int, seed: int, *, layouts: Sequence[str] = ("embed", "pad4k"),
                    workdir: Optional[Path] = None, timeout: float = 900) -> Dict[str, Any]:
    """Corrupt real waldio logs `cases` times (per layout) and check that
    waldio recovers exactly what stock SQLite recovers from the same
    corruption of the equivalent standard WAL, or fails cleanly."""
    args = {"cases": cases, "seed": seed, "layouts": list(layouts),
            "workdir": str(workdir or tempfile.mkdtemp(prefix="waldio-corrupt-", dir=state_dir_base()))}
    proc = subprocess.run([sys.executable, "-m", "waldio.crash", "_corrupt", json.dumps(args)],
                          capture_output=True, text=True, timeout=timeout, env=_child_env())
    results = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    summary: Dict[str, Any] = {"cases": 0, "passed": 0, "clean_errors": 0, "by_kind": {},
                               "failures": [], "exit": proc.returncode, "damaged": 0}
    started = [l for l in proc.stdout.splitlines() if l.startswith("case ")]
    if proc.returncode != 0:
        summary["failures"].append({"reason": "checker process died (exit %d) during %s: %s"
                                    % (proc.returncode, started[-1] if started else "setup",
                                       proc.stderr[-3000:])})
    for r in results:
        summary["cases"] += 1
        k = summary["by_kind"].setdefault(r["kind"], [0, 0])
        k[0] += 1
        if r["passed"]:
            summary["passed"] += 1
            k[1] += 1
        else:
            summary["failures"].append(r)
        if r.get("waldio_error"):
            summary["clean_errors"] += 1
        if r.get("waldio_error") or (r.get("waldio_k") is not None and r["waldio_k"] < r["full"]):
            summary["damaged"] += 1
    if proc.returncode == 0 and not summary["failures"]:
        shutil.rmtree(args["workdir"], ignore_errors=True)
    return summary


def _role_corrupt(args: Dict[str, Any]) -> None:
    waldio.load()
    rng = random.Random("corrupt:%d" % args["seed"])
    work = Path(args["workdir"])
    stock = MODES["wal-full"]
    txns = 40
    digests = reference_digests("mixed", args["seed"], txns)
    for layout in args["layouts"]:
        lmode = Mode("waldio-" + layout, True, "FULL",
                     uri=(("prealloc", LOG_PREALLOC), ("layout", layout)))
        src = work / ("src-" + layout)
        if src.exists():
            shutil.rmtree(src)
        src.mkdir(parents=True)
        create_base(lmode, src / DB_NAME)
        # Generation 1 (snapshot kept), a RESTART checkpoint, generation 2;
        # the writer dies without closing, so the log holds both.
        steps = make_steps("mixed", args["seed"], txns)
        steps = [s for s in steps if s.kind in ("txn", "rollback")]
        conn = open_db(lmode, src / DB_NAME)
        configure(conn, lmode)
        conn.execute("PRAGMA wal_autocheckpoint=0")
        r = Runner.__new__(Runner)          # a Runner on the connection made above
        r.mode, r.path, r.vfs, r.conn, r.reader = lmode, src / DB_NAME, None, conn, None
        r.conn2 = None
        r.on_ack, r.retry_failed, r.errors = (lambda n: None), False, []
        first = [s for s in steps if s.kind != "txn" or s.n <= 25]
        r.run(first)
        stale = (src / (DB_NAME + "-wal")).read_bytes()
        conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        db_after_ckpt = (src / DB_NAME).read_bytes()
        r.run([s for s in steps if s.kind == "txn" and s.n > 25])
        log = (src / (DB_NAME + "-wal")).read_bytes()
        db = db_after_ckpt
        # Do not close: copy the files as a crash would leave them.
        g = log_geometry(log)
        assert g is not None and g["flags"] & 1, "the log holds no generation"
        slot, area = g["slot"], g["area"]
        nslots = (len(log) - area) // slot
        used = max(i for i in range(nslots) if any(log[area + i * slot: area + (i + 1) * slot])) + 1
        used_stale = max(i for i in range(nslots) if any(stale[area + i * slot: area + (i + 1) * slot])) + 1
        end = area + used * slot
        nvalid = _valid_frames(log)
        vend = area + max(1, nvalid) * slot           # the current generation
        print("layout %s: %d slots used, %d frames in the current generation, %d in the stale one"
              % (layout, used, nvalid, used_stale), flush=True)

        def where(lo: int = 0) -> int:
            # Mostly inside the frames recovery will read; sometimes anywhere.
            return rng.randrange(lo, vend) if rng.random() < 0.8 else rng.randrange(lo, end)
        for c in range(args["cases"]):
            kind = CORRUPTIONS[c % len(CORRUPTIONS)]
            bad = bytearray(log)
            desc = ""
            if kind == "none":
                desc = "intact"
            elif kind == "bitflip":
                off = where() if rng.random() < 0.9 else rng.randrange(0, 512)
                bit = rng.randrange(8)
                bad[off] ^= 1 << bit
                desc = "bit %d of byte %d" % (bit, off)
            elif kind == "zero_sector":
                s = where() // 512
                bad[s * 512:(s + 1) * 512] = bytes(512)
                desc = "sector %d" % s
            elif kind == "zero_block":
                b = where(4096) // 4096
                bad[b * 4096:(b + 1) * 4096] = bytes(4096)
                desc = "block %d" % b
            elif kind == "stale_same_slot":
                i = rng.randrange(0, max(1, min(nvalid + 1, used_stale)))
                bad[area + i * slot: area + (i + 1) * slot] = stale[area + i * slot: area + (i + 1) * slot]
                desc = "slot %d from generation 1" % (i + 1)
            elif kind == "stale_other_slot":
                i = rng.randrange(0, used_stale)
                j = rng.randrange(0, nvalid + 2) if rng.random() < 0.8 else rng.randrange(0, used + 2)
                bad[area + j * slot: area + (j + 1) * slot] = stale[area + i * slot: area + (i + 1) * slot]
                desc = "generation-1 slot %d into slot %d" % (i + 1, j + 1)
            else:
                cut = where() if rng.random() < 0.9 else rng.randrange(0, 4096)
                del bad[cut:]
                desc = "truncated to %d bytes" % cut
            print("case %s %d %s %s" % (layout, c, kind, desc), flush=True)
            res = _corruption_case(lmode, stock, work / "case", db, bytes(bad), digests)
            res.update({"layout": layout, "case": c, "kind": kind, "desc": desc, "full": txns})
            if kind == "none" and (res["waldio_k"] != txns or res["stock_k"] != txns):
                res["passed"] = False
                res["reason"] = "the intact log does not give all %d transactions" % txns
            print(json.dumps(res), flush=True)
        conn.close()


def _valid_frames(log: bytes) -> int:
    """Frames of the log's current generation (salts match its header),
    counted from the first slot."""
    std = log_to_standard(log)
    if std is None:
        return 0
    page = struct.unpack_from(">I", std, 8)[0]
    salts = std[16:24]
    n, pos = 0, WAL_HDR
    while pos + FRAME_HDR + page <= len(std) and std[pos + 8:pos + 16] == salts:
        n += 1
        pos += FRAME_HDR + page
    return n


def _corruption_case(lmode: Mode, stock: Mode, cdir: Path, db: bytes, bad: bytes,
                     digests: Sequence[str]) -> Dict[str, Any]:
    if cdir.exists():
        shutil.rmtree(cdir)
    wdir, sdir = cdir / "waldio", cdir / "stock"
    wdir.mkdir(parents=True)
    sdir.mkdir(parents=True)
    (wdir / DB_NAME).write_bytes(db)
    (wdir / (DB_NAME + "-wal")).write_bytes(bad)
    w = check_files(lmode, wdir, digests)
    res: Dict[str, Any] = {"waldio_k": w.k, "waldio_error": w.error, "integrity": w.integrity}
    block0_ok = bad[:512] == b"" or (log_geometry(bad) is not None)
    std = log_to_standard(bad) if block0_ok else None
    (sdir / DB_NAME).write_bytes(db)
    if std is not None:
        (sdir / (DB_NAME + "-wal")).write_bytes(std)
    s = check_files(stock, sdir, digests)
    res["stock_k"] = s.k
    if not w.ok:
        # A clean refusal is acceptable only when block 0 itself is damaged.
        res["passed"] = log_geometry(bad) is None or _superblock_damaged(bad)
        res["reason"] = "clean error" if res["passed"] else "refused a log whose block 0 is intact"
    elif w.integrity != "ok" or w.k is None:
        res["passed"] = False
        res["reason"] = "integrity %r, prefix %s" % (w.integrity, w.k)
    elif std is not None and s.ok and s.k is not None and s.k != w.k:
        res["passed"] = False
        res["reason"] = "waldio recovered %d transactions, stock SQLite %d" % (w.k, s.k)
    else:
        res["passed"] = True
        res["reason"] = "ok"
    return res


def _superblock_damaged(log: bytes) -> bool:
    from waldio.admin import describe_superblock
    sb = describe_superblock(bytes(log[:512]))
    return (not sb.get("present")) or not sb.get("checksum_ok", False)


# --------------------------------------------------------------- faults

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
                          capture_output=True, text=True, timeout=timeout, env=_child_env())
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
        apsw = _apsw()
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
                    self.errors.append("%s: %s | %s" % (type(e).__name__, e, _waldio_error()))
                    if step.kind not in ("txn", "rollback"):
                        break                 # a failed checkpoint is not redone
                    self._reopen()
                    if step.kind == "txn" and self._has(step.n):
                        self.on_ack(step.n)   # it committed after all
                        break
            else:
                raise RuntimeError("transaction %d kept failing" % step.n)

    def _reopen(self) -> None:
        apsw = _apsw()
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


def _role_fault(args: Dict[str, Any]) -> None:
    apsw = _apsw()
    _load_recorder()
    waldio.load()
    ctl = _control()
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
            report["message"] = _waldio_error()
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


# ----------------------------------------------------------------- fuzz


def run_fuzz(seconds: int, *, corpus: Optional[Path] = None, workdir: Optional[Path] = None) -> Dict[str, Any]:
    """Run the libFuzzer target for `seconds`; returns runs, exit status and
    the tail of its output. Skips (ran=False) when it was not built."""
    binary = fuzz_binary_path()
    if binary is None:
        return {"ran": False, "reason": "build/crash/fuzz_recovery was not built (needs clang)"}
    seeds = corpus or (_repo_root() / "crash" / "corpus")
    work = Path(workdir or tempfile.mkdtemp(prefix="waldio-fuzz-", dir=state_dir_base()))
    live = work / "corpus"
    live.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([str(binary), "-max_total_time=%d" % seconds, "-max_len=131072",
                           "-timeout=20", "-rss_limit_mb=4096", "-print_final_stats=1",
                           "-artifact_prefix=%s/" % work, str(live), str(seeds)],
                          capture_output=True, text=True, timeout=seconds + 300,
                          env=dict(os.environ, WALDIO_FUZZ_DIR=str(work)))
    text = proc.stderr
    runs = 0
    for line in text.splitlines():
        if line.startswith("stat::number_of_executed_units:"):
            runs = int(line.split(":")[-1])
    crashes = [p.name for p in work.iterdir() if p.name.startswith(("crash-", "leak-", "timeout-", "oom-"))]
    res = {"ran": True, "exit": proc.returncode, "runs": runs, "seconds": seconds,
           "artifacts": crashes, "workdir": str(work), "tail": text[-3000:]}
    if proc.returncode == 0 and not crashes:
        shutil.rmtree(work, ignore_errors=True)
    return res


# ---------------------------------------------------------------- entry


def _main(argv: List[str]) -> None:
    role, args = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    if role == "_record":
        _role_record(args)
    elif role == "_writer":
        _role_writer(args)
    elif role == "_corrupt":
        _role_corrupt(args)
    elif role == "_fault":
        _role_fault(args)
    else:
        raise SystemExit("unknown role %r" % role)


if __name__ == "__main__":
    _main(sys.argv[1:])
