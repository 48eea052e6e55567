"""What waldio leaves beside a database, driven in a process of its own.

    python3 files_worker.py WALDIO_SO SCENARIO DB [ARG]

Runs as whoever starts it -- root, or an unprivileged user through setpriv
(test_footprint.py, test_permissions.py) -- on Debian's /usr/bin/python3 with
nothing but its standard library: the sqlite3 module (the system SQLite) and
a copy of waldio.so loaded into it, so that a user without access to the
checkout or to root's Python packages can run it. Prints one JSON object.
WALDIO_TEST_LAYOUT in the environment names the log layout to ask for (as
the C tests take it); without it, the default (auto).

Scenarios:
  footprint   small commits, one large transaction, reopen/write/checkpoint,
              a TRUNCATE checkpoint and journal_size_limit: the log's size
              after each step (ARG: journal_size_limit for the last part)
  write       open DB (creating it in WAL mode if new), insert a row with
              'secret', report the modes and owners of the database, its log
              and the wal-index (the standard layout's is SQLite's -shm,
              the slotted layouts' waldio's -wal-shm) while open and after
              the close
"""
from __future__ import annotations

import json
import os
import sqlite3
import sys
import urllib.parse
from typing import Any, Dict

BIG_ROWS = 12_000          # ~12 MB in one transaction: three times the idle bound


def connect(so: str, db: str) -> sqlite3.Connection:
    """A connection through waldio (loading waldio.so makes it the default VFS)."""
    boot = sqlite3.connect(":memory:")
    boot.enable_load_extension(True)
    boot.load_extension(so)             # entry point from the name: sqlite3_waldio_init
    boot.close()
    layout = os.environ.get("WALDIO_TEST_LAYOUT")
    if layout:
        uri = "file:%s?waldio_layout=%s" % (urllib.parse.quote(db), layout)
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    else:
        conn = sqlite3.connect(db, isolation_level=None)
    vfs = conn.execute("SELECT json_extract(waldio, '$.vfs') FROM pragma_waldio").fetchone()
    assert vfs == ("waldio",), vfs
    return conn


def wal_size(db: str) -> int:
    return os.path.getsize(db + "-wal")


def files(db: str) -> Dict[str, Any]:
    out = {}
    for suffix in ("", "-wal", "-shm", "-wal-shm"):
        try:
            st = os.stat(db + suffix)
            out[suffix or "db"] = {"mode": st.st_mode & 0o777, "uid": st.st_uid, "gid": st.st_gid,
                                   "size": st.st_size}
        except FileNotFoundError:
            out[suffix or "db"] = None
    return out


def footprint(so: str, db: str, limit: int) -> Dict[str, Any]:
    r: Dict[str, Any] = {}
    c = connect(so, db)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)")
    r["idle_log_bytes"] = c.execute(
        "SELECT json_extract(waldio, '$.idle_log_bytes') FROM pragma_waldio").fetchone()[0]
    for i in range(2000):                               # small FULL commits
        c.execute("INSERT INTO t(v) VALUES (randomblob(200))")
    r["open_after_small_commits"] = wal_size(db)
    c.close()
    r["closed_after_small_commits"] = wal_size(db)
    c = connect(so, db)
    c.execute("BEGIN")
    c.executemany("INSERT INTO t(v) VALUES (randomblob(1000))", [()] * BIG_ROWS)
    c.execute("COMMIT")
    r["open_after_big_transaction"] = wal_size(db)
    c.close()
    r["closed_after_big_transaction"] = wal_size(db)
    c = connect(so, db)                                  # reopen, write, checkpoint, close
    c.execute("INSERT INTO t(v) VALUES (x'00')")
    c.execute("PRAGMA wal_checkpoint")
    c.close()
    r["closed_after_reopen_write_checkpoint"] = wal_size(db)
    c = connect(so, db)
    c.execute("BEGIN")
    c.executemany("INSERT INTO t(v) VALUES (randomblob(1000))", [()] * 3000)
    c.execute("COMMIT")
    r["truncate_checkpoint"] = c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    r["after_truncate_checkpoint"] = wal_size(db)
    c.execute(f"PRAGMA journal_size_limit={limit}")
    for i in range(300):
        c.execute("INSERT INTO t(v) VALUES (randomblob(200))")
    c.close()
    r["closed_with_journal_size_limit"] = wal_size(db)
    c = connect(so, db)
    r["rows"] = c.execute("SELECT count(*) FROM t").fetchone()[0]
    r["integrity"] = c.execute("PRAGMA integrity_check").fetchone()[0]
    c.close()
    r["uid"] = os.geteuid()
    return r


def write(so: str, db: str) -> Dict[str, Any]:
    r: Dict[str, Any] = {"uid": os.geteuid()}
    c = connect(so, db)
    if c.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE IF NOT EXISTS t(v TEXT)")
    c.execute("INSERT INTO t VALUES ('secret row')")
    r["open"] = files(db)
    r["rows"] = c.execute("SELECT count(*) FROM t").fetchone()[0]
    c.close()
    r["closed"] = files(db)
    return r


def main() -> None:
    so, scenario, db = sys.argv[1:4]
    arg = sys.argv[4] if len(sys.argv) > 4 else ""
    if scenario == "footprint":
        out = footprint(so, db, int(arg or "1048576"))
    elif scenario == "write":
        out = write(so, db)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
