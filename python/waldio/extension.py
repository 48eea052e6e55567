"""Loading waldio.so into Python's SQLite libraries, and opening databases through it.

Two SQLite bindings are supported:

* **apsw** (a dependency of waldio): its own bundled SQLite; always able to
  load extensions. The default.
* **sqlite3**, Python's standard module: the SQLite it was built against
  (Debian's libsqlite3), *if* the module was compiled with extension loading
  (``sqlite3.Connection.enable_load_extension`` exists; Debian's
  ``/usr/bin/python3`` has it, a Python built from source without
  ``--enable-loadable-sqlite-extensions`` does not). Without it waldio cannot
  enter that SQLite, and :class:`WaldioError` says to use apsw.

Loading the extension registers the VFS "waldio" as the default VFS of that
SQLite library, for the whole process (what ``.load`` does in the sqlite3
shell). Each library gets its own copy of the file: one file loaded into two
SQLite libraries in one process would make them share the extension's
routine-table pointer.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Dict, Optional

from . import library

__all__ = ["VFS_NAME", "ENTRY_POINT", "OPTION_NAMES", "DRIVERS", "WaldioError",
           "extension_path", "load", "connect", "uri", "last_error"]

VFS_NAME = "waldio"
ENTRY_POINT = "sqlite3_waldio_init"
DRIVERS = ("apsw", "sqlite3")
# Python keyword -> URI parameter understood by libwaldio (waldio.h).
OPTION_NAMES = {
    "layout": "waldio_layout",
    "sync": "waldio_sync",
    "io": "waldio_io",
    "prealloc": "waldio_prealloc",
    "cache": "waldio_cache",
    "flush_ms": "waldio_flush_ms",
    "group": "waldio_group",
    "group_bytes": "waldio_group_bytes",
    "group_ms": "waldio_group_ms",
}

_load_lock = threading.Lock()
_loaded: Dict[str, bool] = {}


class WaldioError(Exception):
    """An SQLite error that libwaldio explained in words, or waldio cannot be
    used with the SQLite binding at hand."""


WaldioError.__module__ = "waldio"      # raised to users as waldio.WaldioError


def extension_path() -> Path:
    """Where waldio.so is ($WALDIO_EXTENSION, the package, the build tree)."""
    return library.find(library.EXTENSION)


# ------------------------------------------------------------------ apsw

def _load_apsw() -> None:
    import apsw
    if VFS_NAME in apsw.vfs_names():
        # Another copy of the extension (a test fixture, an application,
        # `waldio run`) already registered waldio in this SQLite: use it.
        return
    probe = apsw.Connection(":memory:")
    try:
        probe.enable_load_extension(True)
        probe.load_extension(str(extension_path()), ENTRY_POINT)
    finally:
        probe.close()


# --------------------------------------------------------------- sqlite3

def _sqlite3_has_waldio(sqlite3: Any) -> bool:
    try:
        sqlite3.connect("file::memory:?vfs=" + VFS_NAME, uri=True).close()
        return True
    except sqlite3.Error:
        return False


def _no_load_extension_error(sqlite3: Any) -> WaldioError:
    import sys
    return WaldioError(
        f"this Python's sqlite3 module cannot load extensions ({sys.executable}, SQLite "
        f"{sqlite3.sqlite_version}: it was built without --enable-loadable-sqlite-extensions, "
        "so sqlite3.Connection has no enable_load_extension). Use apsw instead: "
        "waldio.connect(path) returns an apsw.Connection (pip install apsw); or run the "
        "program under `waldio run -- python3 ...`, which reaches the system SQLite "
        "without loading extensions")


def _load_sqlite3(conn: Any) -> None:
    import sqlite3
    if not hasattr(conn, "enable_load_extension"):
        raise _no_load_extension_error(sqlite3)
    if _sqlite3_has_waldio(sqlite3):
        return
    # A private copy, named so that SQLite derives the entry point
    # (sqlite3_waldio_init) from the file name; unlinked once mapped.
    tmp = tempfile.mkdtemp(prefix="waldio-sqlite3-")
    try:
        copy = os.path.join(tmp, library.EXTENSION)
        shutil.copyfile(extension_path(), copy)
        conn.enable_load_extension(True)
        try:
            conn.load_extension(copy)
        except sqlite3.Error as e:
            raise WaldioError(f"cannot load {copy} into sqlite3's SQLite "
                              f"{sqlite3.sqlite_version}: {e}") from e
        finally:
            conn.enable_load_extension(False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _driver_of(conn: Any) -> str:
    module = type(conn).__module__.split(".")[0]
    if module in ("apsw", "sqlite3"):
        return module
    raise TypeError(f"waldio.load() takes an apsw.Connection or a sqlite3.Connection, "
                    f"not {type(conn).__module__}.{type(conn).__name__}")


def load(conn: Any = None) -> None:
    """Register waldio as the default VFS of the SQLite behind conn.

    conn: a ``sqlite3.Connection`` (Python's standard module) or an
    ``apsw.Connection``; None means apsw. Loading twice is harmless.
    Connections opened afterwards use waldio unless they name another VFS;
    conn itself keeps the VFS it was opened with.
    """
    driver = "apsw" if conn is None else _driver_of(conn)
    with _load_lock:
        if _loaded.get(driver):
            return
        if driver == "apsw":
            _load_apsw()
        else:
            _load_sqlite3(conn)
        _loaded[driver] = True


def last_error() -> str:
    """libwaldio's most recent error message in this process ('' if none)."""
    import apsw
    load()
    conn = apsw.Connection(":memory:")
    try:
        return str(conn.execute("SELECT waldio_last_error()").fetchall()[0][0])
    finally:
        conn.close()


def uri(path: str | os.PathLike[str], **options: Any) -> str:
    """A file: URI for path carrying waldio options as URI parameters."""
    params = {}
    for key, value in options.items():
        if value is None:
            continue
        if key not in OPTION_NAMES:
            raise TypeError("unknown waldio option %r (expected one of %s)"
                            % (key, ", ".join(sorted(OPTION_NAMES))))
        params[OPTION_NAMES[key]] = str(value)
    quoted = urllib.parse.quote(os.fspath(os.path.abspath(path)))
    query = urllib.parse.urlencode(params)
    return "file:" + quoted + ("?" + query if query else "")


def connect(path: str | os.PathLike[str], *, driver: str = "apsw", vfs: str = VFS_NAME,
            flags: Optional[int] = None, **options: Any) -> Any:
    """Open path through waldio.

    driver: "apsw" (default) returns an ``apsw.Connection``; "sqlite3"
    returns a ``sqlite3.Connection`` of Python's standard module (which must
    be able to load extensions; WaldioError names apsw otherwise).
    options: layout (auto|standard|embed|pad4k|pad8k), sync (auto|persistent),
    io (direct|auto|buffered), prealloc, cache (bytes, K/M/G suffixes),
    flush_ms, group (off|async|durable), group_bytes, group_ms.
    If the log cannot be opened, WaldioError carries libwaldio's explanation.
    flags: apsw open flags (apsw only).
    """
    if driver == "sqlite3":
        if flags is not None:
            raise TypeError("flags applies to driver='apsw' only")
        return _connect_sqlite3(path, vfs, options)
    if driver != "apsw":
        raise ValueError(f"unknown driver {driver!r} (accepted: {', '.join(DRIVERS)})")
    import apsw
    load()
    if flags is None:
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    conn = apsw.Connection(uri(path, **options), flags=flags | apsw.SQLITE_OPEN_URI,
                           vfs=vfs)
    try:
        # SQLite opens files lazily; touch the schema so errors surface here.
        conn.execute("PRAGMA schema_version").fetchall()
    except apsw.Error as e:
        conn.close()
        detail = last_error()
        raise WaldioError("%s: %s" % (e, detail) if detail else str(e)) from e
    return conn


def _connect_sqlite3(path: str | os.PathLike[str], vfs: str, options: Dict[str, Any]) -> Any:
    import sqlite3
    probe = sqlite3.connect(":memory:")
    try:
        load(probe)
    finally:
        probe.close()
    target = uri(path, **options)
    target += ("&" if "?" in target else "?") + urllib.parse.urlencode({"vfs": vfs})
    conn = None
    try:
        conn = sqlite3.connect(target, uri=True)
        conn.execute("PRAGMA schema_version").fetchall()
    except sqlite3.Error as e:
        if conn is not None:
            conn.close()
        with contextlib.closing(sqlite3.connect(":memory:")) as c:
            detail = str(c.execute("SELECT waldio_last_error()").fetchone()[0])
        raise WaldioError("%s: %s" % (e, detail) if detail else str(e)) from e
    return conn
