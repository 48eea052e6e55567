"""Template databases, and the steady state of the log.

Every repetition of ``waldio bench`` (and every cell of ``--processes``) starts from
a byte copy of a template: an ordinary SQLite database written once through the
``unix`` VFS (journal_mode DELETE, synchronous OFF, one transaction) with the page
size and the reserved bytes per page of its page format (0 for stock SQLite, or
``--stock-reserve``; 24 for waldio's header embedding), the workload's schema and
rows, and, for the steady state, a fill table.

Invariant: a template that does not read back the page size and the reserved bytes
asked for is an error (:class:`~.settings.BenchError`), never a silent difference
between modes.

The steady state (``--regime reused``, and every ``--processes`` cell):
:func:`steady_state` rewrites every row of the fill table with new bytes (more
frames than one checkpoint interval), then ``PRAGMA wal_checkpoint(RESTART)``, so
the log is grown and the run overwrites it from its start.  A RESTART that stays
busy is an error.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Iterator

from .modes import ModeSpec
from .settings import BenchError
from .sqlite_env import RESERVE_FOR_EMBED, SQLITE_FCNTL_RESERVE_BYTES

FILL_TABLE = "_bench_walfill"


def reserve_for(spec: ModeSpec, stock_reserve: int) -> int:
    """Reserved bytes per page of the mode's page format."""
    if spec.mode.kind == "waldio":
        return RESERVE_FOR_EMBED if spec.layout == "embed" else 0
    return stock_reserve


def fill_bytes(page_size: int) -> int:
    """One fill row: three quarters of a page, so every row takes a page of its own."""
    return page_size * 3 // 4


@contextlib.contextmanager
def building(path: str, page_size: int, reserve: int) -> Iterator[Any]:
    """An apsw connection to a new template at ``path``, inside its one transaction;
    committed and checked when the block ends."""
    import apsw
    db = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE,
                         vfs="unix")
    try:
        if reserve:
            cell = ctypes.c_int(reserve)
            db.file_control("main", SQLITE_FCNTL_RESERVE_BYTES, ctypes.addressof(cell))
        db.execute(f"PRAGMA page_size={page_size}")
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("BEGIN")
        yield db
        db.execute("COMMIT")
        got = db.execute("PRAGMA page_size").fetchall()[0][0]
        if got != page_size:
            raise BenchError(f"template: asked for page_size {page_size}, got {got}")
    finally:
        db.close()
    with open(path, "rb") as f:
        header = f.read(100)
    if header[20] != reserve:
        raise BenchError(f"template: asked for {reserve} reserved bytes, got {header[20]}")


def add_fill_table(db: Any, rows: int, page_size: int) -> None:
    db.execute(f"CREATE TABLE {FILL_TABLE}(x BLOB)")
    db.executemany(f"INSERT INTO {FILL_TABLE}(x) VALUES(zeroblob(?))",
                   ((fill_bytes(page_size),) for _ in range(rows)))


def steady_state(conn: Any, page_size: int) -> None:
    """Grow the log past one checkpoint interval, then restart it (see the header).
    ``conn`` is a bench connection (``run``, ``rows``)."""
    # new bytes: SQLite skips writing a row whose content is unchanged
    conn.run(f"UPDATE {FILL_TABLE} SET x = ?", (b"\x01" * fill_bytes(page_size),))
    busy, log, done = conn.rows("PRAGMA wal_checkpoint(RESTART)")[0]
    if busy:
        raise BenchError(f"the steady state: wal_checkpoint(RESTART) stayed busy ({log} "
                         f"frames in the log, {done} checkpointed)")
