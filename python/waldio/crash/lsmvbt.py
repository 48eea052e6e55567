"""LS-MVBT under ``waldio crash``: the workload's three tables kept in one LS-MVBT table.

The crash workload (:mod:`.workload`) writes ``kv``, ``acct`` and ``meta`` in
one transaction.  Each LS-MVBT virtual table is its own file with its own
commit, and SQLite syncs several virtual tables one after the other, so a
transaction spanning two of them is not atomic across a crash (lsmvbt/DESIGN.md
§9).  So the workload's rows live in **one** table, ``store``, and the three
tables are views over key ranges of it, written through ``INSTEAD OF``
triggers: the workload's SQL and its digest run unchanged, and every
transaction is one LS-MVBT commit.

Invariants: a row of table i (``TABLE_BASES``) with id x is the store row with
key ``base_i + x``, 0 <= x < 2**40, columns (a, b) = the table's non-key
columns in order; the lsmvbt.so extension is loaded into every connection
before the views are used; the database file itself is written only when the
base is created (schema), never by the workload.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence

from waldio import library

ENTRY_POINT = "sqlite3_lsmvbt_init"


SPAN = 1 << 40


TABLE_BASES: Dict[str, int] = {"kv": 1 * SPAN, "acct": 2 * SPAN, "meta": 3 * SPAN}


# (table, its columns other than id)
_COLUMNS = {"kv": ("k", "v"), "acct": ("bal",), "meta": ("txn",)}


def load(conn: Any) -> None:
    """Load lsmvbt.so into an apsw connection (it registers the module per connection)."""
    conn.enable_load_extension(True)
    try:
        conn.load_extension(str(library.find(library.LSMVBT)), ENTRY_POINT)
    finally:
        conn.enable_load_extension(False)


def schema(options: Sequence[str]) -> str:
    """The store, the three views and their triggers (replaces workload.SCHEMA)."""
    parts = ["CREATE VIRTUAL TABLE store USING lsmvbt(key INTEGER PRIMARY KEY, a, b%s);"
             % "".join(", " + o for o in options)]
    for t, cols in _COLUMNS.items():
        base = TABLE_BASES[t]
        sel = ", ".join(("a", "b")[i] for i in range(len(cols)))
        parts.append("CREATE VIEW %s(id, %s) AS SELECT key - %d, %s FROM store "
                     "WHERE key >= %d AND key < %d;"
                     % (t, ", ".join(cols), base, sel, base, base + SPAN))
        new = ", ".join("NEW.%s" % c for c in cols)
        sets = ", ".join("%s = NEW.%s" % (("a", "b")[i], c) for i, c in enumerate(cols))
        parts.append("CREATE TRIGGER %s_ins INSTEAD OF INSERT ON %s BEGIN "
                     "INSERT INTO store(key, %s) VALUES(NEW.id + %d, %s); END;"
                     % (t, t, sel, base, new))
        parts.append("CREATE TRIGGER %s_upd INSTEAD OF UPDATE ON %s BEGIN "
                     "UPDATE store SET key = NEW.id + %d, %s WHERE key = OLD.id + %d; END;"
                     % (t, t, base, sets, base))
        parts.append("CREATE TRIGGER %s_del INSTEAD OF DELETE ON %s BEGIN "
                     "DELETE FROM store WHERE key = OLD.id + %d; END;" % (t, t, base))
    return "\n".join(parts)


def check(conn: Any) -> str:
    """lsmvbt_check of the store: 'ok' or the problem (connects the table first)."""
    conn.execute("SELECT 1 FROM store WHERE 0").fetchall()
    return str(conn.execute("SELECT lsmvbt_check('store')").fetchall()[0][0])
