"""Errors say why, where people look.

Every refusal or failure returns the most specific SQLite code and reaches
sqlite3_log with its reason (src/errors.c); with WALDIO_VERBOSE=1 (`waldio
run -v`) the reason is on stderr too, for programs that install no log
callback: the sqlite3 shell, scripts. A refusal comes at once, not after a
busy timeout. The refusal here is of the embed layout (asked for by name: a
URI parameter, WALDIO_LAYOUT) for a database stock SQLite has open; the
default layout, standard, shares it (test_safety.py).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

import waldio
import workloads as wl
from waldio.drivers import SQLiteError

ROOT = Path(__file__).resolve().parents[2]
REASON = "the database is open in SQLite without waldio"


def shell() -> str:
    path = shutil.which("sqlite3")
    if path is None:
        pytest.skip("the sqlite3 shell is not installed (Debian package sqlite3)")
    return path


def clean_env(**extra: str) -> Dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("WALDIO_")}
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + (
        [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    e.update(extra)
    return e


@pytest.fixture
def held_by_stock(sqlite: Any, dbdir: Path) -> Any:
    """A WAL database that stock SQLite (this process, unix VFS) holds open."""
    path = dbdir / "held.db"
    stock = sqlite.stock(path)
    stock.execute("PRAGMA journal_mode=WAL")
    stock.execute("CREATE TABLE t(x)")
    stock.execute("INSERT INTO t VALUES (1)")
    yield path
    stock.close()


@pytest.mark.parametrize("verbose", [False, True])
def test_shell_extension_shows_the_reason_when_asked(held_by_stock: Path, verbose: bool) -> None:
    so = held_by_stock.parent / "waldio.so"
    shutil.copyfile(waldio.extension_path(), so)
    p = subprocess.run([shell(), ":memory:", f".load {so}",
                        f".open file:{held_by_stock}?waldio_layout=embed",
                        "SELECT count(*) FROM t;"], capture_output=True, text=True, timeout=60,
                       env=clean_env(**({"WALDIO_VERBOSE": "1"} if verbose else {})))
    assert p.returncode != 0
    assert (REASON in p.stderr) == verbose, p.stderr
    if verbose:
        assert f"waldio: {held_by_stock}: {REASON}" in p.stderr, p.stderr


def test_waldio_run_v_shows_the_reason(held_by_stock: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "waldio", "run", "-v", "--", shell(),
                        str(held_by_stock), "SELECT count(*) FROM t;"],
                       capture_output=True, text=True, timeout=60,
                       env=clean_env(WALDIO_LAYOUT="embed"))
    assert p.returncode != 0
    assert REASON in p.stderr and "database is locked" in p.stderr, p.stderr


def test_refusal_is_busy_and_immediate(sqlite: Any, held_by_stock: Path) -> None:
    """Refused by sqlite3_open itself: at the first statement, SQLite would
    retry a BUSY for the connection's whole busy timeout first."""
    with pytest.raises(SQLiteError) as e:
        sqlite.driver.connect(waldio.uri(held_by_stock, layout="embed"), vfs="waldio",
                              timeout_ms=60_000)
    assert e.value.code == 5                                   # SQLITE_BUSY


def test_a_connection_used_across_fork_is_misuse(apsw_sqlite: Any, dbdir: Path) -> None:
    conn = apsw_sqlite.waldio(dbdir / "fork.db")
    wl.setup(conn)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # the child: never back into pytest
        code = 0
        try:
            os.close(r)
            try:
                conn.execute("INSERT INTO t(k) VALUES (1)")
            except SQLiteError as e:
                code = e.code
            os.write(w, json.dumps({"code": code}).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = json.loads(f.read() or "{}")
    os.waitpid(pid, 0)
    assert got.get("code") == 21, got                         # SQLITE_MISUSE
    c = apsw_sqlite.driver.connect(":memory:", uri=False)
    msg = str(c.execute("SELECT waldio_last_error()")[0][0])
    c.close()
    # The child's message stays in the child; the parent's connection works on.
    assert "fork" not in msg
    wl.inserts(conn, 1, n=3)
    assert conn.execute("SELECT count(*) FROM t")[0][0] == 3
    conn.close()


def test_a_symbolic_link_at_the_log_path_is_refused_with_its_reason(sqlite: Any,
                                                                    dbdir: Path) -> None:
    db = dbdir / "link.db"
    (dbdir / "elsewhere").write_bytes(b"")
    os.symlink(dbdir / "elsewhere", str(db) + "-wal")
    conn = sqlite.waldio(db)
    with pytest.raises(SQLiteError) as e:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t(x)")
    assert e.value.code & 0xff == 14                          # SQLITE_CANTOPEN
    c = sqlite.driver.connect(":memory:", uri=False)
    msg = str(c.execute("SELECT waldio_last_error()")[0][0])
    c.close()
    assert "cannot open log" in msg and "symbolic links" in msg, msg
    conn.close()
