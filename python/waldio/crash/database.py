"""Opening a database in a mode, building its starting state, running a workload.

Also where the crash tools' compiled parts are (:func:`recorder_path`,
:func:`fuzz_binary_path`) and where crash states are materialized
(:func:`state_dir_base`: a file system with O_DIRECT).
"""
from __future__ import annotations

import ctypes
import os
import urllib.parse
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

from waldio import library

from . import lsmvbt
from .modes import Mode
from .workload import SCHEMA, Step, apsw_module, make_steps, setup_sql


def recorder_path() -> Path:
    """recorder.so (waldio.library: $WALDIO_RECORDER, the package, build/crash/)."""
    return library.find(library.RECORDER)


def load_recorder() -> None:
    """Register the recorder VFS in apsw's SQLite (below waldio: load it first)."""
    apsw = apsw_module()
    c = apsw.Connection(":memory:")
    c.enable_load_extension(True)
    c.load_extension(str(recorder_path()), "sqlite3_recorder_init")
    c.close()


def control_connection() -> Any:
    """An in-memory connection to call the recorder's SQL functions on."""
    return apsw_module().Connection(":memory:")


# During a recording on the real kernel (`waldio crash --real`, real/record.py)
# this names the block recorder's control file: every mark is also logged
# there, so each acknowledgement has its place in the block log too.
BLOCK_CTL_ENV = "WALDIO_CRASH_BLOCK_CTL"


def mark(ctl: Any, name: str, value: int) -> None:
    """Log a mark (recorder_mark) in the event log, and in the block log when
    $WALDIO_CRASH_BLOCK_CTL names one: after the event-log mark, so both
    follow whatever the mark stands for."""
    ctl.execute("SELECT recorder_mark(?, ?)", (name, value)).fetchall()
    block_ctl = os.environ.get(BLOCK_CTL_ENV)
    if block_ctl:
        fd = os.open(block_ctl, os.O_WRONLY)
        try:
            os.write(fd, ("%s %d\n" % (name, value)).encode())
        finally:
            os.close(fd)


def make_base_durable(live: Path, ctl: Any) -> None:
    """On the real kernel: the base database is durable before the run (a
    syncfs of its file system), and the block log marks where the run begins
    (after the marks of what the base already holds)."""
    if not os.environ.get(BLOCK_CTL_ENV):
        return
    fd = os.open(live, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs(%s)" % live)
    finally:
        os.close(fd)
    mark(ctl, "base", 0)


def fuzz_binary_path() -> Optional[Path]:
    """The libFuzzer target (build/crash/fuzz_recovery; $WALDIO_FUZZ_BINARY)."""
    env = os.environ.get("WALDIO_FUZZ_BINARY")
    root = library.checkout_root()
    p = Path(env) if env else (root / "build" / "crash" / "fuzz_recovery" if root else None)
    return p if p is not None and p.is_file() else None


def state_dir_base() -> Path:
    """Where crash states are materialized: a file system with O_DIRECT."""
    return Path(os.environ.get("WALDIO_CRASH_DIR", os.environ.get("WALDIO_TEST_DIR", "/var/tmp")))


def open_db(mode: Mode, path: Path, *, vfs: Optional[str] = None) -> Any:
    """A connection to path in mode (vfs: override, e.g. "recorder")."""
    apsw = apsw_module()
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI
    if mode.waldio:
        query = urllib.parse.urlencode({"waldio_" + k: v for k, v in mode.uri})
        name = "file:" + urllib.parse.quote(os.path.abspath(path)) + ("?" + query if query else "")
        conn = apsw.Connection(name, flags=flags, vfs=vfs or "waldio")
    else:
        conn = apsw.Connection("file:" + os.path.abspath(path), flags=flags, vfs=vfs or "unix")
    if mode.lsmvbt:
        lsmvbt.load(conn)
    conn.setbusytimeout(5000)
    return conn


def configure(conn: Any, mode: Mode) -> None:
    if mode.exclusive:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE").fetchall()
    conn.execute("PRAGMA journal_mode=%s" % mode.journal).fetchall()
    conn.execute("PRAGMA synchronous=%s" % mode.synchronous)
    conn.execute("PRAGMA wal_autocheckpoint=%d" % mode.autocheckpoint)


def create_stock_base(path: Path) -> None:
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
    # frames, which waldio adopts (standard) or converts (a slotted layout)
    # at its first open.
    stock = Mode("stock", False, "FULL")
    create_stock_base(db)
    cut = next(i for i, st in enumerate(steps) if st.kind == "txn" and st.n > txns // 3)
    first, rest = steps[:cut], steps[cut:]
    r = Runner(stock, db, vfs="unix")
    r.conn.execute("PRAGMA wal_autocheckpoint=0")
    r.run([st for st in first if st.kind in ("txn", "rollback")])
    apsw = apsw_module()
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
    conn.execute(lsmvbt.schema(mode.lsmvbt) if mode.lsmvbt else SCHEMA)
    with conn:
        for sql, params in setup_sql():
            conn.execute(sql, params)
    conn.close()


class Runner:
    """Runs workload steps on a connection; calls on_ack(n) after each
    acknowledged transaction."""

    # Called with (connection, step) right before a transaction's COMMIT
    # (the multi-process workloads mark it and read its position).
    before_commit: Optional[Callable[[Any, Step], None]] = None

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
        self.set_busy(conn)
        configure(conn, self.mode)
        return conn

    def set_busy(self, conn: Any) -> None:
        """How a writer waits for a lock (open_db's busy timeout)."""
        conn.setbusytimeout(5000)

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
                    if self.before_commit is not None:
                        self.before_commit(conn, step)
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
        apsw = apsw_module()
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
            elif self.mode.exclusive and step.kind.startswith("reader"):
                continue          # a second connection cannot read
            elif step.kind == "checkpoint":
                # Never wait for a reader (RESTART and TRUNCATE would).
                self.conn.setbusytimeout(0)
                try:
                    self.conn.execute("PRAGMA wal_checkpoint(%s)" % step.arg).fetchall()
                finally:
                    self.set_busy(self.conn)
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
