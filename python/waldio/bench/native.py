"""The C transaction loop (bench/txnloop/txnloop.c) seen from Python.

This module owns the bridge between a planned workload (:mod:`.plan`) and the
native loop ``waldio_txnloop.so``: it compiles a :class:`~.plan.Plan` into the
flat C arrays the loop reads (:class:`CompiledPlan`), finds the SQLite routine
table of each build (:class:`TxnLoop`), prepares a plan's statements on one
connection (:class:`Prepared`) and runs it (:meth:`TxnLoop.run`), handing
back one (start, end) ``CLOCK_MONOTONIC`` pair per transaction, the clock of
``time.perf_counter_ns``.

Invariants:

* the C loop reads only memory this module keeps alive: a :class:`CompiledPlan`
  owns its SQL texts, parameter bytes and arrays for its whole life;
* a :class:`Prepared` is finalized (:meth:`Prepared.close`) before the
  connection it was prepared on is closed;
* nothing here prints or decides what is timed: :mod:`.runner` does.

Statement styles (:data:`STATEMENT_STYLES`): ``prepared`` prepares every
distinct SQL text once and binds the planned parameters per transaction (what
an application does); ``exec`` renders one SQL text per transaction with the
values as literals and runs it with ``sqlite3_exec()``, which parses it every
time (what Mobibench's ``exec_sql()`` does).
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

from . import histogram
from .plan import Stmt

STATEMENT_STYLES = ("prepared", "exec")
LOOPS = ("native", "python")
LIBRARY_NAME = "waldio_txnloop.so"
ENTRY_POINT = "sqlite3_waldiotxnloop_init"

_NULL, _INT, _TEXT, _BLOB = 0, 1, 2, 3
_STYLE_CODE = {"prepared": 0, "exec": 1}


class _Value(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("len", ctypes.c_int32), ("i", ctypes.c_int64),
                ("p", ctypes.c_void_p)]


class _Op(ctypes.Structure):
    _fields_ = [("stmt", ctypes.c_int32), ("first_param", ctypes.c_int32),
                ("nparam", ctypes.c_int32), ("is_select", ctypes.c_int32)]


class _Txn(ctypes.Structure):
    _fields_ = [("first_op", ctypes.c_int32), ("nop", ctypes.c_int32),
                ("begin_stmt", ctypes.c_int32), ("commit_stmt", ctypes.c_int32),
                ("kind", ctypes.c_int32)]


class _Job(ctypes.Structure):
    _fields_ = [("api", ctypes.c_void_p), ("db", ctypes.c_void_p), ("style", ctypes.c_int32),
                ("ntxn", ctypes.c_int32), ("stamps", ctypes.c_int32),
                ("reserved", ctypes.c_int32), ("stmts", ctypes.c_void_p), ("sql", ctypes.c_void_p),
                ("txns", ctypes.c_void_p), ("ops", ctypes.c_void_p),
                ("params", ctypes.c_void_p), ("think_ns", ctypes.c_int64),
                ("t_start", ctypes.c_void_p), ("t_end", ctypes.c_void_p),
                ("rows", ctypes.c_int64), ("slept_ns", ctypes.c_int64),
                ("done", ctypes.c_int32), ("rc", ctypes.c_int32),
                ("errmsg", ctypes.c_char * 512),
                ("start_at_ns", ctypes.c_int64), ("deadline_ns", ctypes.c_int64),
                ("max_txns", ctypes.c_int64), ("hist", ctypes.c_void_p), ("nkind", ctypes.c_int32),
                ("reserved2", ctypes.c_int32),
                ("first_start_ns", ctypes.c_int64), ("last_end_ns", ctypes.c_int64)]


class TxnLoopError(Exception):
    """SQLite failed inside the C loop: which transaction, result code, message."""

    def __init__(self, txn: int, rc: int, message: str) -> None:
        super().__init__(f"transaction {txn}: {message} [SQLite result code {rc}]")
        self.txn, self.rc, self.message = txn, rc, message


def begin_sql(txn_style: str) -> Optional[str]:
    """The statement that opens a transaction of ``--txn`` style (None: autocommit)."""
    return {"begin": "BEGIN", "begin-immediate": "BEGIN IMMEDIATE"}.get(txn_style)


def literal(value: Any) -> str:
    """``value`` as an SQL literal (the exec style's text, as Mobibench writes it)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "X'" + bytes(value).hex() + "'"
    return "'" + str(value).replace("'", "''") + "'"


def render(sql: str, params: Sequence[Any]) -> str:
    """Replace each ``?`` of ``sql`` with the literal of its parameter (plan SQL has no
    ``?`` inside string literals)."""
    parts = sql.split("?")
    if len(parts) != len(params) + 1:
        raise ValueError(f"{sql!r}: {len(parts) - 1} placeholders, {len(params)} parameters")
    out = [parts[0]]
    for value, tail in zip(params, parts[1:]):
        out += [literal(value), tail]
    return "".join(out)


class Planned(Protocol):
    """What the C loop needs of a plan (a :class:`~.plan.Plan`, or one process's plan
    of ``waldio bench --processes``): its transactions as (kind, statements), where
    kind is the phase (index into ``phases``) and the histogram row of a timed run."""

    txns: List[Tuple[int, Tuple[Stmt, ...]]]


class CompiledPlan:
    """One thread's plan as the C loop's arrays, in one statement style.

    ``phase_begins[phase]`` is the BEGIN of that phase's transactions (VACUUM runs
    outside any transaction), as in the Python loop of :mod:`.runner`.
    """

    def __init__(self, plan: Planned, style: str, txn_style: str, phases: Sequence[str]) -> None:
        if style not in STATEMENT_STYLES:
            raise ValueError(f"unknown statement style {style!r}")
        self.style = style
        self.plan = plan
        self.ntxn = len(plan.txns)
        self._keep: List[Any] = []
        begin = begin_sql(txn_style)
        phase_begin = [None if p == "vacuum" else begin for p in phases]
        if style == "prepared":
            self._compile_prepared(phase_begin)
        else:
            self._compile_exec(phase_begin)

    # -- prepared: distinct texts, ops with bound parameters

    def _compile_prepared(self, phase_begin: List[Optional[str]]) -> None:
        texts: Dict[str, int] = {}

        def index(sql: str) -> int:
            if sql not in texts:
                texts[sql] = len(texts)
            return texts[sql]

        blobs: Dict[bytes, int] = {}
        values: List[Tuple[int, int, int, int]] = []    # kind, len, i, blob index
        ops: List[Tuple[int, int, int, int]] = []
        txns: List[Tuple[int, int, int, int, int]] = []
        commit = index("COMMIT") if any(phase_begin) else -1
        for phase, stmts in self.plan.txns:
            b = phase_begin[phase]
            first = len(ops)
            for sql, params, is_select in stmts:
                ops.append((index(sql), len(values), len(params), int(is_select)))
                for v in params:
                    values.append(self._value(v, blobs))
            txns.append((first, len(ops) - first, index(b) if b else -1, commit if b else -1,
                         phase))
        self.sql = list(texts)
        self._sql_array = self._c_strings(self.sql)
        buffers = [ctypes.create_string_buffer(data, len(data) or 1) for data in blobs]
        self._keep.append(buffers)
        val_arr = (_Value * max(1, len(values)))()
        for k, (kind, n, i, bi) in enumerate(values):
            val_arr[k].kind, val_arr[k].len, val_arr[k].i = kind, n, i
            val_arr[k].p = ctypes.addressof(buffers[bi]) if bi >= 0 else None
        self.values = val_arr
        self.ops = self._ops(ops)
        self.txns = self._txns(txns)

    @staticmethod
    def _value(v: Any, blobs: Dict[bytes, int]) -> Tuple[int, int, int, int]:
        if v is None:
            return (_NULL, 0, 0, -1)
        if isinstance(v, int):
            return (_INT, 0, int(v), -1)
        if isinstance(v, str):
            data, kind = v.encode("utf-8"), _TEXT
        elif isinstance(v, (bytes, bytearray, memoryview)):
            data, kind = bytes(v), _BLOB
        else:
            raise TypeError(f"plan parameter of type {type(v).__name__}: the C loop binds "
                            f"int, str, bytes and None")
        if data not in blobs:
            blobs[data] = len(blobs)
        return (kind, len(data), 0, blobs[data])

    # -- exec: one text per transaction, values as literals

    def _compile_exec(self, phase_begin: List[Optional[str]]) -> None:
        texts: List[str] = []
        ops: List[Tuple[int, int, int, int]] = []
        txns: List[Tuple[int, int, int, int, int]] = []
        for phase, stmts in self.plan.txns:
            b = phase_begin[phase]
            body = ";".join(render(sql, params) for sql, params, _ in stmts)
            selects = any(s for _, _, s in stmts)
            texts.append(f"{b};{body};COMMIT;" if b else body + ";")
            ops.append((len(texts) - 1, 0, 0, int(selects)))
            txns.append((len(ops) - 1, 1, -1, -1, phase))
        self.sql = texts
        self._sql_array = self._c_strings(texts)
        self.values = (_Value * 1)()
        self.ops = self._ops(ops)
        self.txns = self._txns(txns)

    # -- arrays

    def _c_strings(self, texts: List[str]) -> Any:
        encoded = [t.encode("utf-8") for t in texts]
        self._keep.append(encoded)
        arr = (ctypes.c_char_p * max(1, len(encoded)))()
        for k, e in enumerate(encoded):
            arr[k] = e
        return arr

    @staticmethod
    def _ops(ops: List[Tuple[int, int, int, int]]) -> Any:
        arr = (_Op * max(1, len(ops)))()
        for k, (s, fp, n, sel) in enumerate(ops):
            arr[k].stmt, arr[k].first_param, arr[k].nparam, arr[k].is_select = s, fp, n, sel
        return arr

    @staticmethod
    def _txns(txns: List[Tuple[int, int, int, int, int]]) -> Any:
        arr = (_Txn * max(1, len(txns)))()
        for k, (f, n, b, c, kind) in enumerate(txns):
            arr[k].first_op, arr[k].nop, arr[k].begin_stmt, arr[k].commit_stmt = f, n, b, c
            arr[k].kind = kind
        return arr

    def head(self, n: int) -> "CompiledPlan":
        """A view of the first ``n`` transactions (calibration): shares every array."""
        view = object.__new__(CompiledPlan)
        view.__dict__.update(self.__dict__)
        view.ntxn = min(n, self.ntxn)
        return view


def db_handle(conn: Any) -> int:
    """The ``sqlite3*`` behind a bench connection (apsw or waldio.drivers)."""
    raw = getattr(conn, "raw", conn)
    if hasattr(raw, "sqlite3pointer"):          # apsw.Connection
        return int(raw.sqlite3pointer())
    return int(raw.sqlite3_pointer())           # waldio.drivers.Connection


@dataclass
class Result:
    """What one run of the C loop hands back: the timestamp arrays stay ctypes arrays
    until asked for, so that converting them is never inside a timed region."""

    t_start_c: Any
    t_end_c: Any
    n: int
    rows: int
    slept_ns: int

    @property
    def t_start(self) -> List[int]:
        return self.t_start_c[:self.n]

    @property
    def t_end(self) -> List[int]:
        return self.t_end_c[:self.n]


@dataclass
class TimedResult:
    """What one timed run hands back: transactions done, rows the SELECTs returned, one
    latency histogram per transaction kind (:mod:`.histogram`'s sparse form), and the
    start of the first and the end of the last transaction (CLOCK_MONOTONIC ns)."""

    done: int
    rows: int
    hist: List[histogram.Sparse]
    first_start_ns: int
    last_end_ns: int


class Prepared:
    """A compiled plan's statements prepared on one connection (prepared style)."""

    def __init__(self, loop: "TxnLoop", api: int, db: int, cplan: CompiledPlan) -> None:
        self.loop, self.api, self.db, self.cplan = loop, api, db, cplan
        n = len(cplan.sql) if cplan.style == "prepared" else 0
        self.n = n
        self.stmts = (ctypes.c_void_p * max(1, n))()
        if n:
            err = ctypes.create_string_buffer(512)
            rc = loop.lib.wbr_prepare(api, db, n, cplan._sql_array, self.stmts, err, 512)
            if rc != 0:
                raise TxnLoopError(-1, rc, "preparing the plan: " +
                                   err.value.decode("utf-8", "replace"))

    def close(self) -> None:
        if self.n:
            self.loop.lib.wbr_finalize(self.api, self.n, self.stmts)
            self.n = 0


class TxnLoop:
    """``waldio_txnloop.so`` loaded once per process, and the routine table of each build."""

    _lock = threading.Lock()
    _instance: Optional["TxnLoop"] = None

    def __init__(self, path: str) -> None:
        self.path = path
        lib = ctypes.CDLL(path)      # CDLL: the GIL is released while the loop runs
        lib.wbr_run.restype = ctypes.c_int
        lib.wbr_run.argtypes = [ctypes.POINTER(_Job)]
        lib.wbr_prepare.restype = ctypes.c_int
        lib.wbr_prepare.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                                    ctypes.c_int]
        lib.wbr_finalize.restype = None
        lib.wbr_finalize.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        lib.waldio_txnloop_last_api.restype = ctypes.c_void_p
        lib.waldio_txnloop_last_api.argtypes = []
        lib.wbr_now_ns.restype = ctypes.c_int64
        lib.wbr_run_timed.restype = ctypes.c_int
        lib.wbr_run_timed.argtypes = [ctypes.POINTER(_Job)]
        lib.wbr_hist_buckets.restype = ctypes.c_int
        if lib.wbr_hist_buckets() != histogram.BUCKETS:
            raise RuntimeError(f"{path}: {lib.wbr_hist_buckets()} histogram buckets, "
                               f"waldio.bench.histogram expects {histogram.BUCKETS} (rebuild)")
        self.lib = lib
        self._apis: Dict[str, int] = {}

    @classmethod
    def get(cls) -> "TxnLoop":
        """The process-wide instance (FileNotFoundError says how to build the library)."""
        with cls._lock:
            if cls._instance is None:
                from waldio import library
                cls._instance = TxnLoop(str(library.find(LIBRARY_NAME)))
            return cls._instance

    def api(self, build: str) -> int:
        """The sqlite3_api_routines* of ``build`` ("apsw" or "system")."""
        with self._lock:
            if build not in self._apis:
                self._apis[build] = self._load_into(build)
            return self._apis[build]

    def _load_into(self, build: str) -> int:
        # The extension records the routine table it is given; read it right after.
        if build == "apsw":
            import apsw
            db = apsw.Connection(":memory:")
            try:
                db.enable_load_extension(True)
                db.load_extension(self.path, ENTRY_POINT)
            finally:
                db.close()
        else:
            from waldio import drivers
            with drivers.driver_by_name("system").connect(":memory:", uri=False) as conn:
                conn.load_extension(self.path, ENTRY_POINT)
        api = self.lib.waldio_txnloop_last_api()
        if not api:
            raise RuntimeError(f"{self.path}: loaded into {build} but recorded no routine table")
        return int(api)

    def prepare(self, build: str, conn: Any, cplan: CompiledPlan) -> Prepared:
        return Prepared(self, self.api(build), db_handle(conn), cplan)

    def run(self, prepared: Prepared, think_ns: int = 0, stamps: bool = True) -> Result:
        """Run every transaction of the prepared plan; TxnLoopError on the first failure.

        ``stamps=False`` is the bare loop: one timestamp before the first transaction
        (``t_start[0]``) and one after the last (``t_end[0]``), nothing in between."""
        cp = prepared.cplan
        n = cp.ntxn
        t0 = (ctypes.c_int64 * max(1, n))()
        t1 = (ctypes.c_int64 * max(1, n))()
        job = _Job(api=prepared.api, db=prepared.db, style=_STYLE_CODE[cp.style], ntxn=n,
                   stamps=int(stamps), stmts=ctypes.addressof(prepared.stmts),
                   sql=ctypes.addressof(cp._sql_array),
                   txns=ctypes.addressof(cp.txns), ops=ctypes.addressof(cp.ops),
                   params=ctypes.addressof(cp.values), think_ns=int(think_ns),
                   t_start=ctypes.addressof(t0), t_end=ctypes.addressof(t1))
        rc = self.lib.wbr_run(ctypes.byref(job))
        if rc != 0:
            raise TxnLoopError(job.done, job.rc, job.errmsg.decode("utf-8", "replace"))
        return Result(t_start_c=t0, t_end_c=t1, n=n if stamps else min(n, 1), rows=int(job.rows),
                      slept_ns=int(job.slept_ns))

    def run_timed(self, prepared: Prepared, nkind: int, start_at_ns: int,
                  deadline_ns: int, max_txns: int = 0) -> "TimedResult":
        """One process's timed run (``wbr_run_timed``): wait until ``start_at_ns``
        (CLOCK_MONOTONIC), then repeat the plan until a transaction ends at or after
        ``deadline_ns`` (0: no deadline) or ``max_txns`` are done (0: no count; one of
        the two is needed).  TxnLoopError on the first failure."""
        cp = prepared.cplan
        hist = (ctypes.c_int64 * (histogram.BUCKETS * nkind))()
        job = _Job(api=prepared.api, db=prepared.db, style=_STYLE_CODE[cp.style], ntxn=cp.ntxn,
                   stamps=0, stmts=ctypes.addressof(prepared.stmts),
                   sql=ctypes.addressof(cp._sql_array),
                   txns=ctypes.addressof(cp.txns), ops=ctypes.addressof(cp.ops),
                   params=ctypes.addressof(cp.values), start_at_ns=int(start_at_ns),
                   deadline_ns=int(deadline_ns), max_txns=int(max_txns),
                   hist=ctypes.addressof(hist), nkind=nkind)
        rc = self.lib.wbr_run_timed(ctypes.byref(job))
        if rc != 0:
            raise TxnLoopError(job.done, job.rc, job.errmsg.decode("utf-8", "replace"))
        rows = [histogram.sparse(hist[k * histogram.BUCKETS:(k + 1) * histogram.BUCKETS])
                for k in range(nkind)]
        return TimedResult(done=int(job.done), rows=int(job.rows), hist=rows,
                           first_start_ns=int(job.first_start_ns),
                           last_end_ns=int(job.last_end_ns))

    def now_ns(self) -> int:
        return int(self.lib.wbr_now_ns())
