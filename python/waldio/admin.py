"""`waldio info`, `detach`, `convert`, `recover`: managing waldio databases.

    waldio info app.db            what the database and its log look like
    waldio info --json app.db
    waldio detach app.db          checkpoint, leave WAL mode, delete the log:
                                  stock SQLite can open the database again
    waldio detach --keep-wal app.db
                                  the same, then put it back in (stock) WAL mode
    waldio convert app.db         give an existing database the 24 reserved
                                  bytes per page that header embedding needs
                                  (sets reserve_bytes, runs VACUUM)
    waldio recover app.db         a log whose block 0 is damaged: keep every
                                  frame that can be proven committed, as a
                                  standard WAL, and say how many were dropped
                                  (recover.py; --dry-run only reports)

`info` only reads files (block 0 of the log, the database header); it never
opens the database through SQLite, so it works on a log no SQLite will open.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
from pathlib import Path
from typing import Any, Dict

import waldio

from . import recover as recovery
from .cli import ExampleFormatter
from .logformat import EMBED_RESERVE, RESERVE_BYTES_FCNTL, describe_database


def cmd_info(args: argparse.Namespace) -> int:
    info = describe_database(Path(args.database))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0

    def show(d: Dict[str, Any], indent: str = "") -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                print("%s%s:" % (indent, k))
                show(v, indent + "  ")
            else:
                print("%s%-16s %s" % (indent, k + ":", v))
    show(info)
    return 0


def _apsw() -> Any:
    import apsw
    return apsw


def detach(path: Path, keep_wal: bool = False) -> None:
    """Checkpoint everything, leave WAL mode (the log is deleted), and
    optionally re-enter WAL mode with stock SQLite."""
    apsw = _apsw()
    conn = waldio.connect(path)
    try:
        mode = conn.execute("PRAGMA journal_mode=DELETE").fetchall()[0][0]
    except apsw.BusyError as e:
        raise waldio.WaldioError("%s is in use by other connections; close them "
                                 "first (%s)" % (path, e)) from e
    finally:
        conn.close()
    if mode != "delete":
        raise waldio.WaldioError("%s: could not leave WAL mode (journal_mode is "
                                 "still %r): other connections have it open" % (path, mode))
    if keep_wal:
        stock = apsw.Connection(str(path), vfs="unix")
        stock.execute("PRAGMA journal_mode=WAL").fetchall()
        stock.close()


def cmd_detach(args: argparse.Namespace) -> int:
    detach(Path(args.database), args.keep_wal)
    print("%s: detached from waldio%s; stock SQLite can open it" %
          (args.database, " (back in WAL mode)" if args.keep_wal else ""))
    return 0


def convert(path: Path, reserve: int = EMBED_RESERVE) -> int:
    """Set the reserved bytes per page with stock SQLite and VACUUM.
    Returns the reserve the database has afterwards."""
    apsw = _apsw()
    info = describe_database(path)
    sb = info["wal_file"].get("superblock", {})
    if sb.get("holds_frames") or sb.get("in_use_guard"):
        raise waldio.WaldioError(
            "%s has a waldio log in use or holding frames; it was already opened "
            "through waldio. Run `waldio detach %s` first if you want to rebuild it"
            % (path, path))
    if info.get("reserve_bytes", 0) >= reserve:
        return int(info["reserve_bytes"])
    conn = apsw.Connection(str(path), vfs="unix")
    try:
        cell = ctypes.c_int(reserve)
        conn.file_control("main", RESERVE_BYTES_FCNTL, ctypes.addressof(cell))
        conn.execute("VACUUM").fetchall()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()
    return int(describe_database(path).get("reserve_bytes", 0))


def cmd_convert(args: argparse.Namespace) -> int:
    before = describe_database(Path(args.database)).get("reserve_bytes")
    after = convert(Path(args.database), args.reserve)
    if after < args.reserve:
        print("%s: reserve is %s, wanted %d" % (args.database, after, args.reserve))
        return 1
    print("%s: %s reserved bytes per page (was %s): ready for header embedding"
          % (args.database, after, before))
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    rep = recovery.recover(Path(args.database), dry_run=args.dry_run, force=args.force)
    if args.json:
        print(json.dumps(recovery.as_json(rep), indent=2))
    else:
        print("\n".join(recovery.summary(rep)))
    return 0


def _existing_file(value: str) -> str:
    if not os.path.isfile(value):
        raise argparse.ArgumentTypeError("no such database file: %s" % value)
    return value


def register(sub: Any) -> None:
    p = sub.add_parser("info", help="describe a database and its waldio log",
                       description="Read the database header and block 0 of its "
                                   "log and say what they are (no SQLite needed).",
                       epilog="example:\n  waldio info app.db --json",
                       formatter_class=ExampleFormatter)
    p.add_argument("database", type=_existing_file)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("detach", help="hand a database back to stock SQLite",
                       description="Checkpoint the whole log into the database, "
                                   "leave WAL mode and delete the log. Fails while "
                                   "other connections have the database open.",
                       epilog="example:\n  waldio detach app.db",
                       formatter_class=ExampleFormatter)
    p.add_argument("database", type=_existing_file)
    p.add_argument("--keep-wal", action="store_true",
                   help="afterwards, put the database back in WAL mode with stock SQLite")
    p.set_defaults(func=cmd_detach)

    p = sub.add_parser("convert", help="add the reserved bytes header embedding needs",
                       description="Give an existing database 24 reserved bytes per "
                                   "page (SQLITE_FCNTL_RESERVE_BYTES + VACUUM, with "
                                   "stock SQLite), so waldio can embed frame headers.",
                       epilog="example:\n  waldio convert app.db",
                       formatter_class=ExampleFormatter)
    p.add_argument("database", type=_existing_file)
    p.add_argument("--reserve", type=int, default=EMBED_RESERVE, choices=range(24, 256),
                   metavar="N", help="reserved bytes per page, 24..255 (default 24)")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("recover", help="rescue a log whose block 0 is damaged",
                       description="For a log that libwaldio refuses because its "
                                   "superblock is damaged: find SQLite's header and the "
                                   "log's geometry from what block 0 still proves, keep "
                                   "every frame SQLite's recovery would accept up to the "
                                   "last commit, write them as a standard SQLite WAL (the "
                                   "next waldio open converts it) and keep the damaged log "
                                   "as DATABASE-wal.damaged. Reports how many frames it "
                                   "dropped. No process may have the database open.",
                       epilog="example:\n  waldio recover --dry-run app.db",
                       formatter_class=ExampleFormatter)
    p.add_argument("database", type=_existing_file)
    p.add_argument("--dry-run", action="store_true", help="report only, write nothing")
    p.add_argument("--force", action="store_true",
                   help="rewrite a log whose block 0 is intact too")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_recover)
