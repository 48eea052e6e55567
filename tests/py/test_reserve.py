"""A new database gets reserved bytes only when its log layout uses them.

Header embedding keeps each frame header in the last 24 bytes of its page,
so a new database whose pages fill whole blocks gets 24 reserved bytes per
page; with smaller pages the auto layout pads, and reserved bytes would
only cost space and change SQLite's page counts. The reserve is decided at
the last moment the page size may still change: the SHARED lock of the
first transaction on the empty file (src/vfs.c).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import pytest


def header(path: Path) -> tuple:
    h = path.read_bytes()[:100]
    return int.from_bytes(h[16:18], "big") or 65536, h[20]


def layout(conn: Any) -> str:
    return json.loads(conn.execute("PRAGMA waldio")[0][0])["layout"]


def create(sqlite: Any, path: Path, before: List[str], **uri: Any) -> Any:
    conn = sqlite.waldio(path, **uri)
    for sql in before:
        conn.execute(sql)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t(x)")
    conn.execute("INSERT INTO t VALUES (randomblob(3000))")
    return conn


@pytest.mark.parametrize("page,reserve,want", [
    (None, 24, "embed"), (4096, 24, "embed"), (8192, 24, "embed"), (16384, 24, "embed"),
    (1024, 0, "pad4k"), (2048, 0, "pad4k"), (512, 0, "pad4k"),
])
def test_reserve_follows_the_layout(sqlite: Any, dbdir: Path, page: Any, reserve: int,
                                    want: str) -> None:
    path = dbdir / "new.db"
    conn = create(sqlite, path, [f"PRAGMA page_size={page}"] if page else [])
    assert layout(conn) == want
    assert conn.execute("PRAGMA integrity_check")[0][0] == "ok"
    conn.close()
    assert header(path) == (page or 4096, reserve)


def test_page_size_changed_twice_before_the_first_write(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "twice.db"
    conn = create(sqlite, path, ["PRAGMA page_size=8192", "PRAGMA page_size=1024"])
    conn.close()
    assert header(path) == (1024, 0)


def test_tables_made_before_wal_mode_still_embed(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "late.db"
    conn = create(sqlite, path, ["CREATE TABLE a(x)", "INSERT INTO a VALUES (1)"])
    assert layout(conn) == "embed"
    conn.close()
    assert header(path) == (4096, 24)


def test_a_forced_padding_layout_reserves_nothing(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "pad.db"
    conn = create(sqlite, path, [], layout="pad4k")
    assert layout(conn) == "pad4k"
    conn.close()
    assert header(path) == (4096, 0)


def test_an_existing_database_keeps_its_reserve(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "old.db"
    stock = sqlite.stock(path)
    stock.execute("CREATE TABLE t(x)")
    stock.close()
    conn = create(sqlite, path, [])
    assert layout(conn) == "pad4k"
    conn.close()
    assert header(path) == (4096, 0)
