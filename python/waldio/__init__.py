"""waldio: SQLite's WAL written with direct I/O into a preallocated file.

The C library (libwaldio, loaded here as the SQLite extension ``waldio.so``)
does the work; this package loads it into apsw and holds the command-line
tools (``waldio bench``, ``detach``, ``convert``, ``info``...).

    import waldio
    conn = waldio.connect("app.db", layout="embed", sync="auto")
    conn.execute("PRAGMA journal_mode=WAL")

Loading the extension registers the VFS "waldio" as the process's default
VFS (that is what ``.load`` does in the sqlite3 shell too). Connections that
must not use it pass ``vfs="unix"``.
"""
from __future__ import annotations

import os
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Optional

__all__ = ["connect", "load", "extension_path", "last_error", "WaldioError",
           "VFS_NAME", "OPTION_NAMES", "uri"]

VFS_NAME = "waldio"
ENTRY_POINT = "sqlite3_waldio_init"
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
_loaded = False


class WaldioError(Exception):
    """An SQLite error that libwaldio explained in words."""


def extension_path() -> Path:
    """Where waldio.so is: $WALDIO_EXTENSION, else next to this package."""
    env = os.environ.get("WALDIO_EXTENSION")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve().parent
    candidates += [here / "_lib" / "waldio.so",
                   here.parent.parent / "build" / "waldio.so"]
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(
        "waldio.so not found (looked in: %s); build it with `make` or set "
        "WALDIO_EXTENSION" % ", ".join(str(c) for c in candidates))


def load() -> None:
    """Load libwaldio into apsw's SQLite once per process."""
    global _loaded
    import apsw
    with _load_lock:
        if _loaded:
            return
        if VFS_NAME in apsw.vfs_names():
            # Another copy of the extension (a test fixture, an application)
            # already registered waldio in this SQLite: use that one.
            _loaded = True
            return
        probe = apsw.Connection(":memory:")
        try:
            probe.enable_load_extension(True)
            probe.load_extension(str(extension_path()), ENTRY_POINT)
        finally:
            probe.close()
        _loaded = True


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


def connect(path: str | os.PathLike[str], *, vfs: str = VFS_NAME,
            flags: Optional[int] = None, **options: Any) -> Any:
    """Open path through waldio and return an apsw.Connection.

    options: layout (embed|pad4k|pad8k), sync (auto|persistent),
    io (direct|auto|buffered), prealloc, cache (bytes, K/M/G suffixes),
    flush_ms, group (off|async|durable), group_bytes, group_ms.
    The database's first statement raises WaldioError with
    libwaldio's explanation if the log cannot be opened.
    """
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
