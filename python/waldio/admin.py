"""`waldio info`, `detach`, `convert`, `recover`: managing waldio databases.

    waldio info app.db            what the database and its log look like
    waldio info --json app.db
    waldio detach app.db          checkpoint, leave WAL mode, delete the log:
                                  stock SQLite can open the database again
    waldio detach --keep-wal app.db
                                  the same, then put it back in (stock) WAL mode
    waldio convert app.db         to the embed layout: give the database the 24
                                  reserved bytes per page header embedding
                                  needs (reserve_bytes, VACUUM) and an embed log
    waldio convert --to standard app.db
                                  to the standard layout (SQLite's own -wal and
                                  -shm): checkpoint the log, replace it by an
                                  empty standard one
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


def _in_use(path: Path, what: str, e: Exception) -> waldio.WaldioError:
    return waldio.WaldioError("%s: cannot %s while other connections have it open "
                              "(%s); close them first" % (path, what, e))


def _layout_of(conn: Any) -> str:
    return str(conn.execute("PRAGMA waldio_layout").fetchall()[0][0])


def convert_to_embed(path: Path, reserve: int = EMBED_RESERVE) -> int:
    """Set the reserved bytes per page with stock SQLite and VACUUM, then
    give the database an (empty) embed log, which later opens keep. Returns
    the reserve the database has afterwards."""
    apsw = _apsw()
    info = describe_database(path)
    sb = info["wal_file"].get("superblock", {})
    if sb.get("holds_frames") or sb.get("in_use_guard"):
        raise waldio.WaldioError(
            "%s has a waldio log in use or holding frames; it was already opened "
            "through waldio. Run `waldio detach %s` first if you want to rebuild it"
            % (path, path))
    if info.get("reserve_bytes", 0) < reserve:
        # A standard log is SQLite's own: stock SQLite checkpoints it.
        conn = apsw.Connection(str(path), vfs="unix")
        try:
            cell = ctypes.c_int(reserve)
            conn.file_control("main", RESERVE_BYTES_FCNTL, ctypes.addressof(cell))
            conn.execute("VACUUM").fetchall()
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except apsw.BusyError as e:
            raise _in_use(path, "convert it", e) from e
        finally:
            conn.close()
    after = int(describe_database(path).get("reserve_bytes", 0))
    if after >= reserve and info.get("journal") == "wal":
        conn = waldio.connect(path, layout="embed")
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
            if _layout_of(conn) != "embed":
                raise waldio.WaldioError("%s: its log stays %s: another connection has "
                                         "it open" % (path, _layout_of(conn)))
        finally:
            conn.close()
    return after


def convert_to_standard(path: Path) -> str:
    """Checkpoint the log into the database and replace it by an empty
    standard one (SQLite's own format). Returns the layout afterwards."""
    apsw = _apsw()
    conn = waldio.connect(path)
    try:
        busy, log, done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
    except apsw.BusyError as e:
        raise _in_use(path, "checkpoint its log", e) from e
    finally:
        conn.close()
    if busy or log != done:
        raise waldio.WaldioError("%s: the checkpoint could not copy the whole log "
                                 "(%d of %d frames): other connections have it open"
                                 % (path, done, log))
    conn = waldio.connect(path, layout="standard")
    try:
        layout = _layout_of(conn)
    finally:
        conn.close()
    if layout != "standard":
        raise waldio.WaldioError("%s: its log stays %s: another connection has it open"
                                 % (path, layout))
    return layout


def cmd_convert(args: argparse.Namespace) -> int:
    path = Path(args.database)
    if args.to == "standard":
        convert_to_standard(path)
        print("%s: its log is in the standard layout (SQLite's own -wal and -shm): "
              "stock SQLite and Litestream can share it" % path)
        return 0
    before = describe_database(path).get("reserve_bytes")
    after = convert_to_embed(path, args.reserve)
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

    p = sub.add_parser("convert", help="move a database's log to another layout",
                       description="--to embed (the default): give an existing database "
                                   "24 reserved bytes per page (SQLITE_FCNTL_RESERVE_BYTES "
                                   "+ VACUUM, with stock SQLite) and an embed log, so "
                                   "waldio embeds frame headers. --to standard: "
                                   "checkpoint the log and replace it by an empty one in "
                                   "SQLite's own format. No other connection may have the "
                                   "database open.",
                       epilog="example:\n  waldio convert --to standard app.db",
                       formatter_class=ExampleFormatter)
    p.add_argument("database", type=_existing_file)
    p.add_argument("--to", choices=("embed", "standard"), default="embed",
                   help="the layout to convert to (default embed)")
    p.add_argument("--reserve", type=int, default=EMBED_RESERVE, choices=range(24, 256),
                   metavar="N", help="reserved bytes per page, 24..255 (default 24)")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("recover", help="rescue a log whose block 0 is damaged",
                       description="For a log that libwaldio refuses because its "
                                   "superblock is damaged: find SQLite's header and the "
                                   "log's geometry from what block 0 still proves, keep "
                                   "every frame SQLite's recovery would accept up to the "
                                   "last commit, write them as a standard SQLite WAL (which "
                                   "SQLite recovers as it is) and keep the damaged log "
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
