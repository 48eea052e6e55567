"""A new database gets reserved bytes only when its log layout uses them.

Header embedding keeps each frame header in the last 24 bytes of its page,
so a new database that asks for the embed layout gets 24 reserved bytes per
page; pages smaller than a block cannot embed, and embed is then refused
with the reason. The default (auto) gives a new log the standard layout,
SQLite's own WAL, which needs no reserve: reserved bytes would only cost
space and change SQLite's page counts. The reserve is decided at the last
moment the page size may still change: the SHARED lock of the first
transaction on the empty file (src/vfs.c).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import pytest

from waldio.drivers import SQLiteError


def header(path: Path) -> tuple:
    h = path.read_bytes()[:100]
    page = int.from_bytes(h[16:18], "big")
    return 65536 if page == 1 else page, h[20]


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


@pytest.mark.parametrize("asked,page,reserve,want", [
    ("embed", None, 24, "embed"), ("embed", 4096, 24, "embed"), ("embed", 8192, 24, "embed"),
    ("embed", 16384, 24, "embed"),
    ("auto", None, 0, "standard"), ("auto", 4096, 0, "standard"), ("auto", 1024, 0, "standard"),
    ("auto", 512, 0, "standard"), ("auto", 65536, 0, "standard"),
])
def test_reserve_follows_the_layout(sqlite: Any, dbdir: Path, asked: str, page: Any,
                                    reserve: int, want: str) -> None:
    path = dbdir / "new.db"
    conn = create(sqlite, path, [f"PRAGMA page_size={page}"] if page else [], layout=asked)
    assert layout(conn) == want
    assert conn.execute("PRAGMA integrity_check")[0][0] == "ok"
    conn.close()
    assert header(path) == (page or 4096, reserve)


@pytest.mark.parametrize("page", [512, 1024, 2048])
def test_embed_refuses_pages_smaller_than_a_block(sqlite: Any, dbdir: Path, page: int) -> None:
    """The reserve is not given (a page cannot carry its frame header in whole
    blocks), and the log's open names the reason and the way out."""
    path = dbdir / "small.db"
    with pytest.raises(SQLiteError) as e:
        create(sqlite, path, [f"PRAGMA page_size={page}"], layout="embed")
    assert e.value.code == 14                                 # SQLITE_CANTOPEN
    msg = sqlite.last_error()
    assert f"page size {page}" in msg and "waldio_layout at auto" in msg, msg
    assert header(path) == (page, 0)


def test_page_size_changed_twice_before_the_first_write(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "twice.db"
    conn = create(sqlite, path, ["PRAGMA page_size=1024", "PRAGMA page_size=8192"],
                  layout="embed")
    assert layout(conn) == "embed"
    conn.close()
    assert header(path) == (8192, 24)


def test_tables_made_before_wal_mode_still_embed(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "late.db"
    conn = create(sqlite, path, ["CREATE TABLE a(x)", "INSERT INTO a VALUES (1)"],
                  layout="embed")
    assert layout(conn) == "embed"
    conn.close()
    assert header(path) == (4096, 24)


def test_a_forced_padding_layout_reserves_nothing(sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "pad.db"
    conn = create(sqlite, path, [], layout="pad4k")
    assert layout(conn) == "pad4k"
    conn.close()
    assert header(path) == (4096, 0)


@pytest.mark.parametrize("asked,want", [("auto", "standard"), ("pad4k", "pad4k")])
def test_an_existing_database_keeps_its_reserve(sqlite: Any, dbdir: Path, asked: str,
                                                want: str) -> None:
    path = dbdir / "old.db"
    stock = sqlite.stock(path)
    stock.execute("CREATE TABLE t(x)")
    stock.close()
    conn = create(sqlite, path, [], layout=asked)
    assert layout(conn) == want
    conn.close()
    assert header(path) == (4096, 0)
