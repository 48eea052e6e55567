"""One small SQLite connection interface over two SQLite builds.

This module owns how waldio's Python side talks to SQLite. Its tests and tools run
the same SQL workloads against two builds of SQLite living in one process:

* ``apsw``: the SQLite that the apsw wheel bundles (3.54.x here), driven through apsw;
* ``system``: the distribution's shared library (Debian's libsqlite3.so.0, 3.40.1 here),
  driven directly through ctypes, because Python's stdlib ``sqlite3`` module cannot
  load extensions on this machine.

Public API:

* :class:`Driver` (protocol): ``name``, ``kind``, ``sqlite_version``, ``connect()``,
  ``load_extension()``;
* :class:`Connection`: ``execute()``, ``executescript()``, ``changes()``,
  ``load_extension()``, ``sqlite3_pointer()``, ``close()``, context manager, ``filename``;
* :class:`SQLiteError`: the one exception class both backends raise for errors
  SQLite reports (primary code, extended code, message);
* :func:`available_drivers` and :func:`driver_by_name`.

Semantics shared by both backends:

* ``execute(sql, params)`` runs exactly one statement and returns all rows as tuples.
  Trailing whitespace, ``;`` and comments are allowed; a second statement raises
  ``ValueError`` before anything runs. Parameters are positional and may be ``int``
  (64-bit; larger raises ``OverflowError``), ``float``, ``str``, ``bytes``/``bytearray``/
  ``memoryview`` or ``None``; anything else raises ``TypeError``. A wrong number of
  parameters raises ``SQLiteError`` with code ``SQLITE_RANGE`` (25).
* Values come back as ``int``, ``float``, ``str``, ``bytes`` (a zero-length blob is
  ``b""``, never ``None``) or ``None``.
* Using a closed connection raises ``SQLiteError`` with code ``SQLITE_MISUSE`` (21).

Threads: every connection is opened with ``SQLITE_OPEN_FULLMUTEX`` (serialized mode)
unless the caller's ``flags`` already say ``SQLITE_OPEN_NOMUTEX`` or ``FULLMUTEX``, and
each :class:`Connection` also holds a Python lock around each call so that a
statement's error code and message can't be mixed up with another thread's. The
intended use is one connection per thread: ctypes releases the GIL during every
foreign call (``ctypes.CDLL``, not ``PyDLL``) and apsw releases it too, so a thread
waiting in SQLite's busy handler does not block the others.

Extensions: ``Driver.load_extension`` loads through a throwaway ``:memory:`` connection
that is closed right after. SQLite unloads (``dlclose``) an extension when the
connection that loaded it closes, unless its init function returned
``SQLITE_OK_LOAD_PERMANENTLY``; so an extension loaded this way that registers a VFS
or an auto-extension *must* return that code, or SQLite is left holding pointers into
unmapped code. ``Connection.load_extension`` loads into that one connection (functions
registered on that connection only).

Both SQLite builds in one process: an extension's ``SQLITE_EXTENSION_INIT1`` defines
a global ``sqlite3_api`` pointer. Loading the *same file* into both builds gives one
``dlopen`` handle, hence one pointer, which the second load overwrites: calls from
the first build would then go into the other library. Load a separate copy of the
file per build, and build extensions with ``-fvisibility=hidden`` (exporting only the
init functions), since SQLite ``dlopen``s with ``RTLD_GLOBAL`` and a default-visibility
``sqlite3_api`` in the second copy may bind to the first copy's variable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from types import TracebackType
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

try:  # Python >= 3.8
    from typing import Protocol, runtime_checkable
except ImportError:  # pragma: no cover
    from typing_extensions import Protocol, runtime_checkable  # type: ignore[assignment]

__all__ = [
    "Connection",
    "Driver",
    "Param",
    "Row",
    "SQLiteError",
    "SQLITE_OPEN_CREATE",
    "SQLITE_OPEN_FULLMUTEX",
    "SQLITE_OPEN_MEMORY",
    "SQLITE_OPEN_NOMUTEX",
    "SQLITE_OPEN_READONLY",
    "SQLITE_OPEN_READWRITE",
    "SQLITE_OPEN_URI",
    "SYSTEM_SQLITE_ENV",
    "available_drivers",
    "driver_by_name",
]

Param = Union[int, float, str, bytes, bytearray, memoryview, None]
Value = Union[int, float, str, bytes, None]
Row = Tuple[Value, ...]

# Result codes (primary).
SQLITE_OK = 0
SQLITE_ERROR = 1
SQLITE_BUSY = 5
SQLITE_MISUSE = 21
SQLITE_RANGE = 25
SQLITE_ROW = 100
SQLITE_DONE = 101

# Column types.
SQLITE_INTEGER = 1
SQLITE_FLOAT = 2
SQLITE_TEXT = 3
SQLITE_BLOB = 4
SQLITE_NULL = 5

SQLITE_UTF8 = 1

# sqlite3_open_v2 flags.
SQLITE_OPEN_READONLY = 0x00000001
SQLITE_OPEN_READWRITE = 0x00000002
SQLITE_OPEN_CREATE = 0x00000004
SQLITE_OPEN_URI = 0x00000040
SQLITE_OPEN_MEMORY = 0x00000080
SQLITE_OPEN_NOMUTEX = 0x00008000
SQLITE_OPEN_FULLMUTEX = 0x00010000

#: Environment variable naming the system libsqlite3 to load instead of the default.
SYSTEM_SQLITE_ENV = "WALDIO_SYSTEM_SQLITE"
_DEFAULT_SYSTEM_LIBS = ("/lib/x86_64-linux-gnu/libsqlite3.so.0", "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0")

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

_CODE_NAMES = {
    0: "SQLITE_OK", 1: "SQLITE_ERROR", 2: "SQLITE_INTERNAL", 3: "SQLITE_PERM", 4: "SQLITE_ABORT",
    5: "SQLITE_BUSY", 6: "SQLITE_LOCKED", 7: "SQLITE_NOMEM", 8: "SQLITE_READONLY",
    9: "SQLITE_INTERRUPT", 10: "SQLITE_IOERR", 11: "SQLITE_CORRUPT", 12: "SQLITE_NOTFOUND",
    13: "SQLITE_FULL", 14: "SQLITE_CANTOPEN", 15: "SQLITE_PROTOCOL", 16: "SQLITE_EMPTY",
    17: "SQLITE_SCHEMA", 18: "SQLITE_TOOBIG", 19: "SQLITE_CONSTRAINT", 20: "SQLITE_MISMATCH",
    21: "SQLITE_MISUSE", 22: "SQLITE_NOLFS", 23: "SQLITE_AUTH", 24: "SQLITE_FORMAT",
    25: "SQLITE_RANGE", 26: "SQLITE_NOTADB", 27: "SQLITE_NOTICE", 28: "SQLITE_WARNING",
}


class SQLiteError(Exception):
    """An error reported by SQLite, from either backend.

    ``code`` is the primary result code (``extended_code & 0xff``), ``extended_code``
    the extended result code (equal to ``code`` when there is no extended one) and
    ``message`` SQLite's error message.
    """

    def __init__(self, code: int, extended_code: int, message: str) -> None:
        super().__init__(code, extended_code, message)
        self.code = code
        self.extended_code = extended_code
        self.message = message

    @property
    def code_name(self) -> str:
        """Symbolic name of the primary code, e.g. ``"SQLITE_CONSTRAINT"``."""
        return _CODE_NAMES.get(self.code, f"SQLITE_{self.code}")

    def __str__(self) -> str:
        return f"{self.message} [{self.code_name}, extended code {self.extended_code}]"


def _closed_error() -> SQLiteError:
    return SQLiteError(SQLITE_MISUSE, SQLITE_MISUSE, "the connection is closed")


def _bindings_error(wanted: int, got: int) -> SQLiteError:
    return SQLiteError(
        SQLITE_RANGE,
        SQLITE_RANGE,
        f"incorrect number of bindings: the statement uses {wanted} and {got} were supplied",
    )


def _multiple_statements_error() -> ValueError:
    return ValueError("execute() runs one statement; use executescript() for several")


def _is_trivia(text: str) -> bool:
    """True when ``text`` holds only whitespace, ``;`` and SQL comments."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace() or ch == ";":
            i += 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            return False
    return True


def _open_flags(flags: Optional[int], uri: bool) -> int:
    f = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE if flags is None else flags
    if uri:
        f |= SQLITE_OPEN_URI
    if not f & (SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_FULLMUTEX):
        f |= SQLITE_OPEN_FULLMUTEX
    return f


class Connection(ABC):
    """A connection to one database, the same for both backends.

    Open with :meth:`Driver.connect`. Every method holds the connection's lock, so
    one connection may be shared between threads (calls are serialized), though one
    connection per thread is what gives concurrency.
    """

    def __init__(self, filename: str, driver_name: str) -> None:
        self.filename = filename
        self.driver_name = driver_name
        self._lock = threading.RLock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def execute(self, sql: str, params: Sequence[Param] = ()) -> List[Row]:
        """Run one statement with positional ``params`` and return all its rows."""
        with self._lock:
            if self._closed:
                raise _closed_error()
            if isinstance(params, (str, bytes, bytearray, memoryview)):
                raise TypeError("params must be a tuple or list of values, not a single value")
            return self._execute(sql, tuple(params))

    def executescript(self, sql: str) -> None:
        """Run every statement in ``sql`` in order (no parameters; rows discarded)."""
        with self._lock:
            if self._closed:
                raise _closed_error()
            self._executescript(sql)

    def changes(self) -> int:
        """Rows changed by the most recent INSERT, UPDATE or DELETE (sqlite3_changes)."""
        with self._lock:
            if self._closed:
                raise _closed_error()
            return self._changes()

    def load_extension(self, path: str, entry_point: Optional[str] = None) -> None:
        """Load an extension into this connection only; raise SQLiteError on failure.

        Loading is enabled just for this call (sqlite3_enable_load_extension), so the
        SQL function ``load_extension()`` stays disabled.
        """
        with self._lock:
            if self._closed:
                raise _closed_error()
            self._load_extension(os.fspath(path), entry_point)

    def file_control_int(self, op: int, value: int, dbname: str = "main") -> int:
        """sqlite3_file_control() with an int argument (e.g. 38, RESERVE_BYTES);
        returns the int SQLite leaves there. Raises SQLiteError on failure."""
        with self._lock:
            if self._closed:
                raise _closed_error()
            return self._file_control_int(dbname, op, value)

    def sqlite3_pointer(self) -> int:
        """The address of the ``sqlite3*`` handle, for C code that drives this connection
        (waldio bench's C transaction loop). The caller must not close it, and must not
        use it while another call on this connection runs."""
        with self._lock:
            if self._closed:
                raise _closed_error()
            return self._sqlite3_pointer()

    def close(self) -> None:
        """Close the connection; closing twice is harmless."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.driver_name} {self.filename!r} {state}>"

    @abstractmethod
    def _execute(self, sql: str, params: Tuple[Param, ...]) -> List[Row]: ...

    @abstractmethod
    def _executescript(self, sql: str) -> None: ...

    @abstractmethod
    def _changes(self) -> int: ...

    @abstractmethod
    def _load_extension(self, path: str, entry_point: Optional[str]) -> None: ...

    @abstractmethod
    def _file_control_int(self, dbname: str, op: int, value: int) -> int: ...

    @abstractmethod
    def _sqlite3_pointer(self) -> int: ...

    @abstractmethod
    def _close(self) -> None: ...


@runtime_checkable
class Driver(Protocol):
    """One SQLite build: how to open connections to it and load extensions into it."""

    @property
    def name(self) -> str:
        """``"<kind>-<sqlite version>"``, e.g. ``"apsw-3.54.1"`` or ``"system-3.40.1"``."""
        ...

    @property
    def kind(self) -> str:
        """``"apsw"`` or ``"system"``."""
        ...

    @property
    def sqlite_version(self) -> str:
        """The SQLite library version, e.g. ``"3.40.1"``."""
        ...

    def connect(
        self,
        filename: str,
        *,
        vfs: Optional[str] = None,
        uri: bool = True,
        flags: Optional[int] = None,
        timeout_ms: int = 5000,
    ) -> Connection:
        """Open ``filename`` (``flags`` default READWRITE|CREATE; URI and FULLMUTEX added)."""
        ...

    def load_extension(self, path: str, entry_point: Optional[str] = None) -> None:
        """Load an extension into the process through a throwaway ``:memory:`` connection."""
        ...

    def has_vfs(self, name: str) -> bool:
        """Whether a VFS of that name is registered in this SQLite library (an
        extension loaded earlier in the process, by any caller)."""
        ...


# --------------------------------------------------------------------------- apsw


def _apsw_error(exc: BaseException) -> SQLiteError:
    import apsw

    message = str(exc)
    prefix = type(exc).__name__ + ": "
    if message.startswith(prefix):  # ExtensionLoadingError and older apsw versions
        message = message[len(prefix):]
    code = getattr(exc, "result", None)
    extended = getattr(exc, "extendedresult", None)
    if isinstance(exc, apsw.BindingsError):
        code = extended = SQLITE_RANGE
    elif not isinstance(code, int) or code < 0:
        misuse = tuple(
            getattr(apsw, n)
            for n in ("ConnectionClosedError", "CursorClosedError", "ThreadingViolationError", "ExecutionCompleteError")
            if hasattr(apsw, n)
        )
        code = SQLITE_MISUSE if isinstance(exc, misuse) else SQLITE_ERROR
        extended = code
    if not isinstance(extended, int) or extended < 0 or extended & 0xFF != code:
        extended = code
    return SQLiteError(code, extended, message)


def _call(obj: Any, new: str, old: str, *args: Any) -> Any:
    """Call apsw's PEP 8 method name, falling back to the old one (apsw < 3.42)."""
    return getattr(obj, new if hasattr(obj, new) else old)(*args)


class _ApswConnection(Connection):
    def __init__(self, db: Any, filename: str, driver_name: str) -> None:
        super().__init__(filename, driver_name)
        self._db = db

    def _execute(self, sql: str, params: Tuple[Param, ...]) -> List[Row]:
        import apsw

        cursor = self._db.cursor()
        too_many: List[bool] = []
        core = sql.rstrip().rstrip(";")
        if ";" in core:
            # Maybe several statements: the exec tracer sees each statement's exact
            # text before it runs, so a second statement is refused before the first runs.
            def tracer(_cursor: Any, stmt_sql: str, _bindings: Any) -> bool:
                if sql.startswith(stmt_sql) and not _is_trivia(sql[len(stmt_sql):]):
                    too_many.append(True)
                    return False
                return True

            if hasattr(cursor, "exec_trace"):
                cursor.exec_trace = tracer
            else:  # pragma: no cover - apsw < 3.42
                cursor.setexectrace(tracer)
        try:
            return [tuple(row) for row in cursor.execute(sql, params)]
        except apsw.Error as exc:
            if too_many and isinstance(exc, apsw.ExecTraceAbort):
                raise _multiple_statements_error() from None
            raise _apsw_error(exc) from None
        finally:
            cursor.close(True)

    def _executescript(self, sql: str) -> None:
        import apsw

        cursor = self._db.cursor()
        try:
            for _ in cursor.execute(sql):
                pass
        except apsw.Error as exc:
            raise _apsw_error(exc) from None
        finally:
            cursor.close(True)

    def _changes(self) -> int:
        return int(self._db.changes())

    def _load_extension(self, path: str, entry_point: Optional[str]) -> None:
        import apsw

        try:
            _call(self._db, "enable_load_extension", "enableloadextension", True)
            try:
                _call(self._db, "load_extension", "loadextension", path, entry_point)
            finally:
                _call(self._db, "enable_load_extension", "enableloadextension", False)
        except apsw.Error as exc:
            raise _apsw_error(exc) from None

    def _file_control_int(self, dbname: str, op: int, value: int) -> int:
        import apsw

        cell = ctypes.c_int(value)
        try:
            self._db.file_control(dbname, op, ctypes.addressof(cell))
        except apsw.Error as exc:
            raise _apsw_error(exc) from None
        return cell.value

    def _sqlite3_pointer(self) -> int:
        return int(self._db.sqlite3pointer())

    def _close(self) -> None:
        self._db.close(True)


class ApswDriver:
    """The SQLite bundled in apsw."""

    kind = "apsw"

    def __init__(self) -> None:
        import apsw

        self._apsw = apsw
        self._version: str = apsw.sqlite_lib_version()

    @property
    def name(self) -> str:
        return f"{self.kind}-{self._version}"

    @property
    def sqlite_version(self) -> str:
        return self._version

    def connect(
        self,
        filename: str,
        *,
        vfs: Optional[str] = None,
        uri: bool = True,
        flags: Optional[int] = None,
        timeout_ms: int = 5000,
    ) -> Connection:
        apsw = self._apsw
        filename = os.fspath(filename)
        try:
            db = apsw.Connection(filename, flags=_open_flags(flags, uri), vfs=vfs)
        except apsw.Error as exc:
            raise _apsw_error(exc) from None
        _call(db, "set_busy_timeout", "setbusytimeout", int(timeout_ms))
        return _ApswConnection(db, filename, self.name)

    def load_extension(self, path: str, entry_point: Optional[str] = None) -> None:
        with self.connect(":memory:", uri=False) as conn:
            conn.load_extension(path, entry_point)

    def has_vfs(self, name: str) -> bool:
        return name in self._apsw.vfs_names()

    def __repr__(self) -> str:
        return f"<ApswDriver {self.name}>"


# ------------------------------------------------------------------ system (ctypes)

_c_void_p_p = ctypes.POINTER(ctypes.c_void_p)
_TRANSIENT = ctypes.c_void_p(-1)  # SQLITE_TRANSIENT: SQLite copies the bound buffer

_PROTOTYPES: Dict[str, Tuple[Any, List[Any]]] = {
    "sqlite3_libversion": (ctypes.c_char_p, []),
    "sqlite3_vfs_find": (ctypes.c_void_p, [ctypes.c_char_p]),
    "sqlite3_open_v2": (ctypes.c_int, [ctypes.c_char_p, _c_void_p_p, ctypes.c_int, ctypes.c_char_p]),
    "sqlite3_close_v2": (ctypes.c_int, [ctypes.c_void_p]),
    # zSql is passed as an address (c_void_p) so the tail can be walked.
    "sqlite3_prepare_v2": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, _c_void_p_p, _c_void_p_p]),
    "sqlite3_step": (ctypes.c_int, [ctypes.c_void_p]),
    "sqlite3_finalize": (ctypes.c_int, [ctypes.c_void_p]),
    "sqlite3_reset": (ctypes.c_int, [ctypes.c_void_p]),
    "sqlite3_bind_parameter_count": (ctypes.c_int, [ctypes.c_void_p]),
    "sqlite3_bind_null": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "sqlite3_bind_int64": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]),
    "sqlite3_bind_double": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_double]),
    "sqlite3_bind_text64": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_ubyte],
    ),
    "sqlite3_bind_blob64": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p],
    ),
    "sqlite3_column_count": (ctypes.c_int, [ctypes.c_void_p]),
    "sqlite3_column_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "sqlite3_column_int64": (ctypes.c_int64, [ctypes.c_void_p, ctypes.c_int]),
    "sqlite3_column_double": (ctypes.c_double, [ctypes.c_void_p, ctypes.c_int]),
    "sqlite3_column_text": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
    "sqlite3_column_blob": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
    "sqlite3_column_bytes": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "sqlite3_errmsg": (ctypes.c_char_p, [ctypes.c_void_p]),
    "sqlite3_errstr": (ctypes.c_char_p, [ctypes.c_int]),
    "sqlite3_extended_errcode": (ctypes.c_int, [ctypes.c_void_p]),
    "sqlite3_changes": (ctypes.c_int, [ctypes.c_void_p]),
    "sqlite3_busy_timeout": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "sqlite3_enable_load_extension": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "sqlite3_load_extension": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, _c_void_p_p]),
    "sqlite3_free": (None, [ctypes.c_void_p]),
    "sqlite3_file_control": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p]),
}


class _SystemLib:
    """A libsqlite3 loaded with ctypes, with every function used given its prototype."""

    def __init__(self, path: str) -> None:
        self.path = path
        # CDLL (not PyDLL): the GIL is released during each foreign call.
        lib = ctypes.CDLL(path)
        self.lib = lib
        for fname, (restype, argtypes) in _PROTOTYPES.items():
            func = getattr(lib, fname)
            func.restype = restype
            func.argtypes = argtypes
        self.version: str = lib.sqlite3_libversion().decode("ascii")

    def errmsg(self, db: Optional[int]) -> str:
        raw = self.lib.sqlite3_errmsg(db)
        return raw.decode("utf-8", "replace") if raw else ""

    def error(self, db: Optional[int], rc: int) -> SQLiteError:
        """The SQLiteError for ``rc`` just returned by a call on ``db``."""
        code = rc & 0xFF
        if not db:
            raw = self.lib.sqlite3_errstr(rc)
            return SQLiteError(code, rc, raw.decode("utf-8", "replace") if raw else "")
        extended = self.lib.sqlite3_extended_errcode(db)
        if extended & 0xFF != code:
            extended = rc
        return SQLiteError(code, extended, self.errmsg(db))


def _system_lib_path() -> Optional[str]:
    env = os.environ.get(SYSTEM_SQLITE_ENV)
    if env:
        return env
    for candidate in _DEFAULT_SYSTEM_LIBS:
        if os.path.exists(candidate):
            return candidate
    return ctypes.util.find_library("sqlite3")


class _CtypesConnection(Connection):
    """A system-library connection. ``execute()`` keeps the last :data:`STATEMENT_CACHE`
    single statements prepared (keyed by their exact text), as apsw's statement cache
    does: a statement is reset after every use, so a cached one holds no lock, and all
    are finalized before the connection closes."""

    STATEMENT_CACHE = 32

    def __init__(self, lib: _SystemLib, db: int, filename: str, driver_name: str) -> None:
        super().__init__(filename, driver_name)
        self._lib = lib
        self._db: Optional[int] = db
        self._cache: "OrderedDict[str, int]" = OrderedDict()

    # -- helpers

    def _prepare(self, base: int, offset: int, total: int) -> Tuple[Optional[int], int]:
        """Prepare the statement at ``base + offset``; return (stmt or None, next offset)."""
        stmt = ctypes.c_void_p()
        tail = ctypes.c_void_p()
        rc = self._lib.lib.sqlite3_prepare_v2(
            self._db, base + offset, total - offset, ctypes.byref(stmt), ctypes.byref(tail)
        )
        if rc != SQLITE_OK:
            raise self._lib.error(self._db, rc)
        next_offset = (tail.value - base) if tail.value else total
        return stmt.value, next_offset

    def _bind(self, stmt: int, params: Tuple[Param, ...]) -> None:
        lib = self._lib.lib
        wanted = lib.sqlite3_bind_parameter_count(stmt)
        if wanted != len(params):
            raise _bindings_error(wanted, len(params))
        for i, value in enumerate(params, 1):
            if value is None:
                rc = lib.sqlite3_bind_null(stmt, i)
            elif isinstance(value, int):
                if not _INT64_MIN <= value <= _INT64_MAX:
                    raise OverflowError(f"parameter {i}: int too big to convert to a 64-bit integer")
                rc = lib.sqlite3_bind_int64(stmt, i, int(value))
            elif isinstance(value, float):
                rc = lib.sqlite3_bind_double(stmt, i, value)
            elif isinstance(value, str):
                data = value.encode("utf-8")
                rc = lib.sqlite3_bind_text64(stmt, i, data, len(data), _TRANSIENT, SQLITE_UTF8)
            elif isinstance(value, (bytes, bytearray, memoryview)):
                data = bytes(value)
                # A non-NULL pointer even for b"": a NULL pointer would bind NULL.
                rc = lib.sqlite3_bind_blob64(stmt, i, data, len(data), _TRANSIENT)
            else:
                raise TypeError(f"parameter {i}: unsupported type {type(value).__name__}")
            if rc != SQLITE_OK:
                raise self._lib.error(self._db, rc)

    def _column(self, stmt: int, i: int) -> Value:
        lib = self._lib.lib
        ctype = lib.sqlite3_column_type(stmt, i)
        if ctype == SQLITE_INTEGER:
            return int(lib.sqlite3_column_int64(stmt, i))
        if ctype == SQLITE_FLOAT:
            return float(lib.sqlite3_column_double(stmt, i))
        if ctype == SQLITE_TEXT:
            ptr = lib.sqlite3_column_text(stmt, i)  # before column_bytes, as documented
            size = lib.sqlite3_column_bytes(stmt, i)
            return ctypes.string_at(ptr, size).decode("utf-8") if ptr and size else ""
        if ctype == SQLITE_BLOB:
            ptr = lib.sqlite3_column_blob(stmt, i)
            size = lib.sqlite3_column_bytes(stmt, i)
            return ctypes.string_at(ptr, size) if ptr and size else b""
        return None

    def _run(self, stmt: int, collect: bool) -> List[Row]:
        lib = self._lib.lib
        rows: List[Row] = []
        ncol = lib.sqlite3_column_count(stmt)
        while True:
            rc = lib.sqlite3_step(stmt)
            if rc == SQLITE_ROW:
                if collect:
                    rows.append(tuple(self._column(stmt, i) for i in range(ncol)))
            elif rc == SQLITE_DONE:
                return rows
            else:
                raise self._lib.error(self._db, rc)

    # -- Connection

    def _execute(self, sql: str, params: Tuple[Param, ...]) -> List[Row]:
        stmt = self._cache.get(sql)
        if stmt is not None:
            self._cache.move_to_end(sql)
            return self._run_cached(stmt, params)
        data = sql.encode("utf-8")
        buf = ctypes.create_string_buffer(data)  # NUL-terminated copy, kept alive here
        base = ctypes.addressof(buf)
        stmt, offset = self._prepare(base, 0, len(data) + 1)
        if stmt is None:  # only whitespace and comments
            if params:
                raise _bindings_error(0, len(params))
            return []
        if not _is_trivia(data[offset:].decode("utf-8")):
            self._lib.lib.sqlite3_finalize(stmt)
            raise _multiple_statements_error()
        self._cache[sql] = stmt
        if len(self._cache) > self.STATEMENT_CACHE:
            _old, evicted = self._cache.popitem(last=False)
            self._lib.lib.sqlite3_finalize(evicted)
        return self._run_cached(stmt, params)

    def _run_cached(self, stmt: int, params: Tuple[Param, ...]) -> List[Row]:
        """Bind, step to the end, and always reset (a reset statement holds no lock)."""
        try:
            self._bind(stmt, params)
            return self._run(stmt, collect=True)
        finally:
            self._lib.lib.sqlite3_reset(stmt)

    def _executescript(self, sql: str) -> None:
        data = sql.encode("utf-8")
        buf = ctypes.create_string_buffer(data)
        base = ctypes.addressof(buf)
        total = len(data) + 1
        offset = 0
        while offset < len(data):
            stmt, next_offset = self._prepare(base, offset, total)
            if stmt is not None:
                try:
                    wanted = self._lib.lib.sqlite3_bind_parameter_count(stmt)
                    if wanted:
                        raise _bindings_error(wanted, 0)
                    self._run(stmt, collect=False)
                finally:
                    self._lib.lib.sqlite3_finalize(stmt)
            if next_offset <= offset:
                break
            offset = next_offset

    def _changes(self) -> int:
        return int(self._lib.lib.sqlite3_changes(self._db))

    def _load_extension(self, path: str, entry_point: Optional[str]) -> None:
        lib = self._lib.lib
        err = ctypes.c_void_p()
        rc = lib.sqlite3_enable_load_extension(self._db, 1)
        if rc != SQLITE_OK:
            raise self._lib.error(self._db, rc)
        try:
            rc = lib.sqlite3_load_extension(
                self._db,
                os.fsencode(path),
                entry_point.encode("utf-8") if entry_point is not None else None,
                ctypes.byref(err),
            )
        finally:
            lib.sqlite3_enable_load_extension(self._db, 0)
        if rc != SQLITE_OK:
            message = ""
            if err.value:
                message = ctypes.string_at(err.value).decode("utf-8", "replace")
                lib.sqlite3_free(err)
            raise SQLiteError(rc & 0xFF, rc, message or self._lib.errmsg(self._db))

    def _file_control_int(self, dbname: str, op: int, value: int) -> int:
        cell = ctypes.c_int(value)
        rc = self._lib.lib.sqlite3_file_control(self._db, dbname.encode("utf-8"), op,
                                                ctypes.byref(cell))
        if rc != SQLITE_OK:
            raise self._lib.error(self._db, rc)
        return cell.value

    def _sqlite3_pointer(self) -> int:
        assert self._db is not None
        return int(self._db)

    def _close(self) -> None:
        while self._cache:
            _sql, stmt = self._cache.popitem()
            self._lib.lib.sqlite3_finalize(stmt)
        db, self._db = self._db, None
        rc = self._lib.lib.sqlite3_close_v2(db)
        if rc != SQLITE_OK:
            raise SQLiteError(rc & 0xFF, rc, "sqlite3_close_v2 failed")

    def __del__(self) -> None:
        try:
            if not self._closed:
                self.close()
        except Exception:  # interpreter shutdown: best effort
            pass


class SystemDriver:
    """The distribution's libsqlite3, driven through ctypes."""

    kind = "system"

    def __init__(self, path: Optional[str] = None) -> None:
        path = path or _system_lib_path()
        if not path:
            raise OSError("no system libsqlite3 found")
        self._lib = _SystemLib(path)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self._lib.version}"

    @property
    def sqlite_version(self) -> str:
        return self._lib.version

    @property
    def library_path(self) -> str:
        return self._lib.path

    def connect(
        self,
        filename: str,
        *,
        vfs: Optional[str] = None,
        uri: bool = True,
        flags: Optional[int] = None,
        timeout_ms: int = 5000,
    ) -> Connection:
        lib = self._lib.lib
        filename = os.fspath(filename)
        db = ctypes.c_void_p()
        rc = lib.sqlite3_open_v2(
            filename.encode("utf-8"),
            ctypes.byref(db),
            _open_flags(flags, uri),
            vfs.encode("utf-8") if vfs is not None else None,
        )
        if rc != SQLITE_OK:
            error = self._lib.error(db.value, rc)
            if db.value:
                lib.sqlite3_close_v2(db)
            raise error
        rc = lib.sqlite3_busy_timeout(db, int(timeout_ms))
        if rc != SQLITE_OK:  # pragma: no cover - cannot fail on an open handle
            error = self._lib.error(db.value, rc)
            lib.sqlite3_close_v2(db)
            raise error
        assert db.value is not None
        return _CtypesConnection(self._lib, db.value, filename, self.name)

    def load_extension(self, path: str, entry_point: Optional[str] = None) -> None:
        with self.connect(":memory:", uri=False) as conn:
            conn.load_extension(path, entry_point)

    def has_vfs(self, name: str) -> bool:
        return bool(self._lib.lib.sqlite3_vfs_find(name.encode("utf-8")))

    def __repr__(self) -> str:
        return f"<SystemDriver {self.name} {self._lib.path}>"


# ------------------------------------------------------------------------ lookup


_drivers_lock = threading.Lock()
_drivers_found: Optional[Tuple[Driver, ...]] = None


def _drivers() -> Tuple[Driver, ...]:
    """The drivers, created once per process (one instance each, whatever the thread)."""
    global _drivers_found
    with _drivers_lock:
        if _drivers_found is None:
            found: List[Driver] = []
            try:
                found.append(ApswDriver())
            except ImportError:
                pass
            try:
                found.append(SystemDriver())
            except OSError:
                pass
            _drivers_found = tuple(found)
        return _drivers_found


def available_drivers() -> List[Driver]:
    """The drivers usable in this process: apsw first, then the system library.

    The system library is ``$WALDIO_SYSTEM_SQLITE`` if set, else Debian's
    ``libsqlite3.so.0``, else whatever ``ctypes.util.find_library`` finds.
    """
    return list(_drivers())


def driver_by_name(name: str) -> Driver:
    """The available driver whose ``name`` (``"apsw-3.54.1"``) or ``kind`` (``"apsw"``) is ``name``."""
    drivers = _drivers()
    for driver in drivers:
        if name in (driver.name, driver.kind):
            return driver
    have = ", ".join(d.name for d in drivers) or "none"
    raise LookupError(f"no SQLite driver named {name!r} (available: {have})")
