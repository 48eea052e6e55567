"""The log left beside a database: bounded, whatever the transactions were.

After the last connection anywhere closes, the log (<db>-wal) keeps at most
the idle bound that PRAGMA waldio reports (idle_log_bytes: the default, or
less with a smaller prealloc or PRAGMA journal_size_limit); a TRUNCATE
checkpoint leaves 0 bytes at once, as stock SQLite does (the slotted layouts
keep their header block). While any other connection -- in this process or
another -- has the database open, nothing it may still need is cut. Each
test runs with the default layout of a new log, standard, and with embed
(the cut differs: src/layout_standard.c, src/log_superblock.c).
(docs/durability.md, "The log left beside an idle database"; src/log_open.c
close_clean, src/wal_log.c log_truncate, src/wal_file.c truncate_floor.)
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import workloads as wl
from sql_peer import Peer
from users import USERS, Workspace, user

HEADER_BLOCK = 4096
LAYOUTS = ["standard", "embed"]
# What a TRUNCATE checkpoint leaves: nothing (SQLite's own WAL), or block 0.
AFTER_TRUNCATE = {"standard": 0, "embed": HEADER_BLOCK}
CEILING = 4 << 20              # issue 20: the default bound is at most 4 MiB


def wal(path: Path) -> int:
    return Path(str(path) + "-wal").stat().st_size


def status(conn: Any) -> Any:
    return json.loads(conn.execute("SELECT waldio FROM pragma_waldio")[0][0])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("who", USERS)
def test_idle_log_is_bounded_whatever_the_transactions(who: str, dbdir: Path,
                                                       layout: str) -> None:
    """Small commits, a 12 MB transaction, reopen/write/checkpoint, a TRUNCATE
    checkpoint and journal_size_limit, as root and as an unprivileged user."""
    u = user(who)
    ws = Workspace(dbdir, u)
    r = ws.run(u, "footprint", ws.dir / "f.db", str(1 << 20),
               env={"WALDIO_TEST_LAYOUT": layout})
    assert r["uid"] == u.uid
    bound = r["idle_log_bytes"]
    assert 0 < bound <= CEILING
    # Each part really grew the log beyond the bound: the cut is what is tested.
    assert r["open_after_small_commits"] > bound, r
    assert r["closed_after_small_commits"] <= bound, r
    assert r["open_after_big_transaction"] > 2 * bound, r
    assert r["closed_after_big_transaction"] <= bound, r
    assert r["closed_after_reopen_write_checkpoint"] <= bound, r
    assert r["truncate_checkpoint"] == [0, 0, 0], r
    assert r["after_truncate_checkpoint"] == AFTER_TRUNCATE[layout], r
    assert r["closed_with_journal_size_limit"] <= 1 << 20, r
    assert r["rows"] == 2000 + 12_000 + 1 + 3000 + 300 and r["integrity"] == "ok", r


def grow(conn: Any, rows: int = 6000) -> None:
    """One transaction of ~6 MB: the log grows beyond the 4 MiB bound."""
    conn.execute("BEGIN")
    for _ in range(rows):
        conn.execute("INSERT INTO t(k, v) VALUES (1, randomblob(1000))")
    conn.execute("COMMIT")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_only_the_last_connection_of_the_process_cuts(sqlite: Any, dbdir: Path,
                                                      layout: str) -> None:
    path = dbdir / "two.db"
    a = sqlite.waldio(path, layout=layout)
    wl.setup(a)
    b = sqlite.waldio(path)
    assert b.execute("SELECT count(*) FROM t")[0][0] == 0   # b uses it (SQLite opens lazily)
    bound = status(a)["idle_log_bytes"]
    grow(a)
    grown = wal(path)
    assert grown > bound
    a.close()
    assert wal(path) == grown              # b has the database open: nothing cut
    assert b.execute("SELECT count(*) FROM t")[0][0] == 6000
    b.close()
    assert wal(path) <= bound
    c = sqlite.waldio(path)
    assert c.execute("SELECT count(*) FROM t")[0][0] == 6000 and wl.integrity(c) == "ok"
    c.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_another_process_keeps_the_log_whole_until_it_closes(sqlite: Any, dbdir: Path,
                                                             layout: str) -> None:
    path = dbdir / "peer.db"
    conn = sqlite.waldio(path, layout=layout)
    wl.setup(conn)
    bound = status(conn)["idle_log_bytes"]
    peer = Peer(sqlite.name, path)
    try:
        assert peer.sql("SELECT count(*) FROM t")["rows"] == [[0]]   # the peer uses it
        grow(conn)
        grown = wal(path)
        conn.close()
        assert wal(path) == grown          # the peer may still read those frames
        assert peer.sql("SELECT count(*) FROM t")["rows"] == [[6000]]
        assert peer.sql("PRAGMA integrity_check")["rows"] == [["ok"]]
    finally:
        peer.close()
    assert wal(path) <= bound               # the peer was the last: it cut


@pytest.mark.parametrize("layout", LAYOUTS)
def test_truncate_checkpoint_with_another_process_open(sqlite: Any, dbdir: Path,
                                                       layout: str) -> None:
    """The cut (to nothing; embed: to the header block) happens under the
    locks of a TRUNCATE checkpoint (no reader, the write lock held). The
    other process then notices the new generation and zero-fills again
    before its own direct commits, instead of writing past the end of what
    it knew durable (L1)."""
    path = dbdir / "trunc.db"
    conn = sqlite.waldio(path, layout=layout)
    wl.setup(conn)
    peer = Peer(sqlite.name, path)
    try:
        assert "error" not in peer.sql("INSERT INTO t(k, v) VALUES (2, randomblob(100))")
        grow(conn, 3000)
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")[0] == (0, 0, 0)
        assert wal(path) == AFTER_TRUNCATE[layout]
        assert "error" not in peer.sql("PRAGMA waldio_stats=reset")
        for i in range(50):
            assert "error" not in peer.sql(f"INSERT INTO t(k, v) VALUES ({100 + i}, randomblob(300))")
        st = json.loads(peer.sql("PRAGMA waldio_stats")["rows"][0][0])
        assert st["prealloc_extends"] >= 1 and st["frames_written"] >= 50, st
        assert conn.execute("SELECT count(*) FROM t")[0][0] == 3051
        assert wl.integrity(conn) == "ok"
    finally:
        peer.close()
    conn.close()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("limit", [0, 64 << 10, 200_000, 1 << 20])
def test_journal_size_limit_bounds_the_idle_log(sqlite: Any, dbdir: Path, limit: int,
                                                layout: str) -> None:
    path = dbdir / "jsl.db"
    conn = sqlite.waldio(path, layout=layout)
    wl.setup(conn)
    default = status(conn)["idle_log_bytes"]
    conn.execute(f"PRAGMA journal_size_limit={limit}")
    bound = min(default, limit)            # the limit only ever lowers the bound
    assert status(conn)["idle_log_bytes"] == bound
    wl.inserts(conn, 3, n=400, size=3000)   # ~2 MB of small direct commits
    assert wal(path) > max(bound, HEADER_BLOCK)
    conn.close()
    assert wal(path) <= max(bound, AFTER_TRUNCATE[layout])
    conn = sqlite.waldio(path)
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 400
    assert wl.integrity(conn) == "ok"
    conn.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kept_log_makes_the_next_sessions_first_commit_allocate_nothing(sqlite: Any,
                                                                        dbdir: Path,
                                                                        layout: str) -> None:
    """What the close keeps is allocated and written: the next session's
    first direct commits zero-fill nothing and flush no more than stock SQLite
    (its sync of the new generation's header makes the log durable, L1)."""
    path = dbdir / "keep.db"
    conn = sqlite.waldio(path, layout=layout)
    wl.setup(conn)
    wl.inserts(conn, 4, n=20)
    conn.close()
    kept = wal(path)
    assert kept > HEADER_BLOCK
    conn = sqlite.waldio(path)
    conn.execute("PRAGMA waldio_stats=reset")
    wl.inserts(conn, 5, n=10)
    st = json.loads(conn.execute("PRAGMA waldio_stats")[0][0])
    assert st["prealloc_extends"] == 0 and st["prealloc_syncs"] == 0, st
    assert st["flushes"] == 10 + 1, st
    assert wal(path) == kept
    conn.close()
