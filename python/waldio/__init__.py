"""waldio: SQLite's WAL written with direct I/O into a preallocated file.

The C library (libwaldio, loaded here as the SQLite extension ``waldio.so``)
does the work; this package loads it into Python's SQLite bindings and holds
the command-line tools.

    import waldio
    conn = waldio.connect("app.db")                     # an apsw.Connection
    conn = waldio.connect("app.db", driver="sqlite3")   # a sqlite3.Connection

    import sqlite3
    waldio.load(sqlite3.connect(":memory:"))   # waldio is now sqlite3's default VFS

Loading the extension registers the VFS "waldio" as the default VFS of that
SQLite library (what ``.load`` does in the sqlite3 shell too). Connections
that must not use it name ``vfs="unix"``.

The package, by tool (``waldio COMMAND``; each tool's package says more):

    extension.py, library.py   loading waldio.so; where the compiled files are
    cli.py                     the ``waldio`` command: one parser, subcommands
    admin.py                   waldio info / detach / convert
    run.py                     waldio run -- CMD (unmodified programs)
    drivers.py                 one connection interface over apsw and the
                               system SQLite (ctypes), for the tools and tests
    logformat.py               reading the log's block 0 and the db header
    fs/                        throw-away loop file systems; external commands
    params/                    the parameters a result was measured under
    bench/                     waldio bench, waldio report
    trace/                     waldio trace (block-level attribution)
    crash/                     waldio crash (crash-consistency checking)
    device/                    waldio device; the emulated phone storage of
                               waldio bench --device (devmodel/device_model.c)
"""
from __future__ import annotations

from .extension import (DRIVERS, ENTRY_POINT, OPTION_NAMES, VFS_NAME, WaldioError,
                        connect, extension_path, last_error, load, uri)

__all__ = ["connect", "load", "extension_path", "last_error", "WaldioError",
           "VFS_NAME", "OPTION_NAMES", "ENTRY_POINT", "DRIVERS", "uri"]
