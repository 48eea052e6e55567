"""The SQLite builds a run uses, and how a mode's connection is opened and configured.

:class:`SqliteEnv` loads waldio into apsw's SQLite and (through
:mod:`waldio.drivers`) into the system SQLite, each with its own copy of
waldio.so; :class:`Opener` opens a connection for a mode (VFS, URI options,
PRAGMAs in a fixed order; lsmvbt modes: lsmvbt.so loaded first) and
:func:`read_settings` reads back every setting as in effect.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from waldio import params as _params

from .modes import ModeSpec
from .provenance import UNKNOWN
from .settings import BenchError, Settings

RESERVE_FOR_EMBED = 24    # waldio's header embedding needs 24 reserved bytes per page


SQLITE_FCNTL_RESERVE_BYTES = 38


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


def child_env() -> Dict[str, str]:
    """The environment of a Python child of the bench (a reader, a worker process): it
    imports this copy of the package and loads the same waldio.so as this process."""
    import waldio
    env = dict(os.environ)
    env["WALDIO_EXTENSION"] = str(waldio.extension_path())
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
    return env


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
            from waldio import drivers
            try:
                drv = drivers.driver_by_name("system")
            except LookupError as e:
                raise BenchError(f"--sqlite system: {e}") from e
            if drv.has_vfs(waldio.VFS_NAME):
                # As for apsw above: a copy is there already (a test fixture).
                self.extensions["system"] = "already registered in this process (not " \
                                            "loaded by waldio bench)"
            else:
                self._tmp = tempfile.mkdtemp(prefix="waldio-bench-ext-")
                copy = os.path.join(self._tmp, "waldio-system.so")
                shutil.copyfile(waldio.extension_path(), copy)
                drv.load_extension(copy, waldio.ENTRY_POINT)
                self.extensions["system"] = f"copy of {waldio.extension_path()} at {copy}"
            self._system = drv

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
            if self.spec.mode.kind == "lsmvbt":   # before the first use of a table
                from . import lsmvbt
                lsmvbt.load(conn.raw)
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
            if self.spec.mode.kind == "lsmvbt":   # connect (open + recover) each table now
                from . import lsmvbt
                lsmvbt.connect_tables(conn, self.s.table_names())
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
        out["reserve_bytes"] = int(_params.reserve_bytes(conn.raw, "main")[0])
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
