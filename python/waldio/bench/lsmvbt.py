"""LS-MVBT modes of ``waldio bench``: the bench's tables as lsmvbt virtual tables.

An lsmvbt mode (:mod:`.modes`, kind ``"lsmvbt"``) runs the bench's SQL
unchanged on ``CREATE VIRTUAL TABLE t USING lsmvbt(<the bench's columns>,
<the mode's options>)`` (lsmvbt/DESIGN.md §7).  This module owns what differs
from a stock table: loading the extension into every connection, the
``CREATE`` statement, the table's own file next to the database (copied with
the template), and the engine's counters and options.

Invariants: the extension is loaded into a connection before it touches a
table (SQLite reconnects a virtual table at its first use); a database and its
``.lsmvbt`` files are always copied together, so a repetition starts from a
byte copy of the template's rows, as the stock modes do.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Sequence

from waldio import library

from .modes import Mode
from .settings import Settings

ENTRY_POINT = "sqlite3_lsmvbt_init"


def extension_path() -> Path:
    """lsmvbt.so ($WALDIO_LSMVBT, the package's _lib/, build/lsmvbt/)."""
    return library.find(library.LSMVBT)


def load(raw: Any) -> None:
    """Load lsmvbt.so into one connection (an apsw.Connection or a waldio.drivers one)."""
    path = str(extension_path())
    if hasattr(raw, "enable_load_extension"):        # apsw
        raw.enable_load_extension(True)
        try:
            raw.load_extension(path, ENTRY_POINT)
        finally:
            raw.enable_load_extension(False)
    else:
        raw.load_extension(path, ENTRY_POINT)


def create_sql(s: Settings, table: str, mode: Mode) -> str:
    """The bench's table (settings.create_table_sql's columns) as an lsmvbt table."""
    key = "id INTEGER PRIMARY KEY AUTOINCREMENT" if s.schema == "autoincrement" \
        else "id INTEGER PRIMARY KEY"
    opts = ", ".join(mode.vtab + (f"page_size={s.page_size}",))
    return (f"CREATE VIRTUAL TABLE {table} USING lsmvbt({key}, Value TEXT not null, "
            f"creation_date long, {opts})")


def connect_tables(conn: Any, tables: Sequence[str]) -> None:
    """Make SQLite connect each table (open its file, run recovery) now, not at first use.

    Also what lsmvbt_stats/options/check need: they see the tables this connection opened."""
    for t in tables:
        conn.rows(f"SELECT 1 FROM {t} WHERE 0")


def table_file(db: str, table: str) -> str:
    """The table's file when no file= option is given: <database>-<table>.lsmvbt."""
    return f"{db}-{table}.lsmvbt"


def copy_files(template: str, db: str, tables: Sequence[str]) -> None:
    """Copy the template's table files next to db (the database itself is copied by the caller)."""
    for t in tables:
        shutil.copyfile(table_file(template, t), table_file(db, t))


def file_bytes(db: str, tables: Sequence[str]) -> int:
    return sum(os.path.getsize(table_file(db, t)) for t in tables
               if os.path.exists(table_file(db, t)))


def stats(conn: Any, tables: Sequence[str]) -> Dict[str, float]:
    """lsmvbt_stats of every table, numeric fields summed; ``flushes`` = fdatasyncs."""
    out: Dict[str, float] = {}
    connect_tables(conn, tables)
    for t in tables:
        st = json.loads(conn.rows("SELECT lsmvbt_stats(?)", (t,))[0][0])
        for k, v in st.items():
            if isinstance(v, list):
                for i, x in enumerate(v):
                    out[f"{k}_{i + 1}{'+' if i == len(v) - 1 else ''}"] = \
                        out.get(f"{k}_{i + 1}{'+' if i == len(v) - 1 else ''}", 0) + x
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    out["flushes"] = out.get("syncs", 0)
    return out


# Counters that describe the tree's state, not work done: not differenced.
_STATE = ("version", "page_size", "npages", "free_pages", "height", "last_commit_pages",
          "recovery_slots_scanned", "recovery_slots_cleaned", "recovery_usec")


def stats_delta(after: Dict[str, float], before: Dict[str, float]) -> Dict[str, float]:
    """Work done between two stats() readings (state fields as read after)."""
    return {k: v if k in _STATE else v - before.get(k, 0) for k, v in after.items()}


def options(conn: Any, table: str) -> Dict[str, Any]:
    """lsmvbt_options(table): the options in effect and the file."""
    connect_tables(conn, [table])
    return dict(json.loads(conn.rows("SELECT lsmvbt_options(?)", (table,))[0][0]))


def check(conn: Any, tables: Sequence[str]) -> List[str]:
    """lsmvbt_check of every table ('ok' or the problem)."""
    connect_tables(conn, tables)
    return [str(conn.rows("SELECT lsmvbt_check(?)", (t,))[0][0]) for t in tables]


_SWITCHES = ("lazy_split", "reserve", "lazy_gc", "embed_metadata", "redistribute")
_DEFAULTS: Dict[str, Any] = {"sync": "full", "lazy_split": True, "reserve": True,
                             "lazy_gc": True, "embed_metadata": True, "redistribute": False}


def settings(conn: Any, table: str) -> Dict[str, Any]:
    """The table's options in effect, as ``lsmvbt.<option>`` entries of a repetition's settings."""
    return {f"lsmvbt.{k}": v for k, v in options(conn, table).items()}


def expected(mode: Mode) -> Dict[str, Any]:
    """The sync option and the five switches the mode's CREATE options ask for."""
    want = dict(_DEFAULTS)
    for opt in mode.vtab:
        k, _, v = opt.partition("=")
        if k in want:
            want[k] = v if k == "sync" else v not in ("off", "0", "no", "false")
    return want


def effective(s: Dict[str, Any], mode: Mode) -> Dict[str, Any]:
    """The same, read back (settings() entries); reserve: any reserved bytes at all."""
    del mode
    out: Dict[str, Any] = {"sync": s.get("lsmvbt.sync")}
    for k in _SWITCHES:
        out[k] = bool(s.get(f"lsmvbt.{k}"))
    return out
