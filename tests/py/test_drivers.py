"""Tests for waldio.drivers: the same workloads against apsw's SQLite and the system one."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

REPO = Path(__file__).resolve().parents[2]
PYDIR = REPO / "python"
if str(PYDIR) not in sys.path:
    sys.path.insert(0, str(PYDIR))

from waldio.drivers import (  # noqa: E402
    SQLITE_OPEN_READONLY,
    Connection,
    Driver,
    SQLiteError,
    available_drivers,
    driver_by_name,
)

KINDS = ["apsw", "system"]
EXPECTED_SYSTEM_VERSION = os.environ.get("WALDIO_EXPECT_SYSTEM_SQLITE", "3.40.1")


@pytest.fixture(params=KINDS)
def driver(request: pytest.FixtureRequest) -> Driver:
    return driver_by_name(request.param)


# ---------------------------------------------------------------- test extension

EXT_SOURCE = r"""
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#define EXPORT __attribute__((visibility("default")))

static void half_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) return; /* NULL in, NULL out */
  sqlite3_result_double(ctx, 0.5 * sqlite3_value_double(argv[0]));
}

/* Which SQLite library this extension's calls go to. */
static void libversion_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc; (void)argv;
  sqlite3_result_text(ctx, sqlite3_libversion(), -1, SQLITE_STATIC);
}

static int register_funcs(sqlite3 *db) {
  int rc = sqlite3_create_function(db, "half", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, 0,
                                   half_func, 0, 0);
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(db, "ext_libversion", 0, SQLITE_UTF8, 0, libversion_func, 0, 0);
  return rc;
}

static int half_auto(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  (void)pzErrMsg;
  SQLITE_EXTENSION_INIT2(pApi);
  return register_funcs(db);
}

/* Default entry point for half.so: functions on the loading connection only. */
EXPORT int sqlite3_half_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  (void)pzErrMsg;
  SQLITE_EXTENSION_INIT2(pApi);
  return register_funcs(db);
}

/* Process-wide: every connection opened later gets the functions. */
EXPORT int sqlite3_halfauto_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  int rc;
  (void)pzErrMsg;
  SQLITE_EXTENSION_INIT2(pApi);
  rc = sqlite3_auto_extension((void (*)(void))half_auto);
  if (rc == SQLITE_OK) rc = register_funcs(db);
  return rc == SQLITE_OK ? SQLITE_OK_LOAD_PERMANENTLY : rc;
}

EXPORT int sqlite3_halffail_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  (void)db;
  SQLITE_EXTENSION_INIT2(pApi);
  *pzErrMsg = sqlite3_mprintf("half: refusing to load");
  return SQLITE_ERROR;
}

/* A pass-through VFS "halfshim" over the default VFS that counts xOpen calls,
   registered the way waldio registers its VFS. */
static sqlite3_vfs shim_vfs;
static sqlite3_vfs *shim_base;
static int shim_opens;

static int shim_open(sqlite3_vfs *vfs, const char *zName, sqlite3_file *file, int flags,
                     int *pOutFlags) {
  (void)vfs;
  __atomic_add_fetch(&shim_opens, 1, __ATOMIC_SEQ_CST);
  return shim_base->xOpen(shim_base, zName, file, flags, pOutFlags);
}

EXPORT int halfshim_open_count(void) { return __atomic_load_n(&shim_opens, __ATOMIC_SEQ_CST); }

EXPORT int sqlite3_halfvfs_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  int rc;
  (void)db; (void)pzErrMsg;
  SQLITE_EXTENSION_INIT2(pApi);
  if (shim_base == 0) {
    shim_base = sqlite3_vfs_find(0);
    if (shim_base == 0) return SQLITE_ERROR;
    shim_vfs = *shim_base;
    shim_vfs.zName = "halfshim";
    shim_vfs.pNext = 0;
    shim_vfs.xOpen = shim_open;
  }
  rc = sqlite3_vfs_register(&shim_vfs, 0);
  return rc == SQLITE_OK ? SQLITE_OK_LOAD_PERMANENTLY : rc;
}
"""


@pytest.fixture(scope="session")
def half_ext_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """half.so compiled once; tests load per-test copies (see half_ext)."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the test extension"
    out = tmp_path_factory.mktemp("ext")
    src = out / "half.c"
    src.write_text(EXT_SOURCE)
    so = out / "half.so"
    # -fvisibility=hidden keeps sqlite3_api private to each copy: SQLite dlopens with
    # RTLD_GLOBAL, and a default-visibility sqlite3_api in a second copy would bind to
    # the first copy's variable (two SQLite builds live in this process).
    cmd = [gcc, "-shared", "-fPIC", "-fvisibility=hidden", "-O1", "-Wall", "-o", str(so), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return so


@pytest.fixture
def half_ext(half_ext_build: Path, tmp_path: Path) -> Path:
    """A fresh copy of half.so: one file is never loaded into both SQLite builds."""
    dest = tmp_path / "ext" / "half.so"
    dest.parent.mkdir()
    shutil.copyfile(half_ext_build, dest)
    return dest


def run_python(code: str, *args: str) -> str:
    """Run ``code`` in a fresh interpreter (for process-wide state such as auto-extensions)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PYDIR), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


# ------------------------------------------------------------------------ drivers


def test_both_drivers_available() -> None:
    drivers = available_drivers()
    assert [d.kind for d in drivers] == KINDS
    for d in drivers:
        assert isinstance(d, Driver)
        assert d.name == f"{d.kind}-{d.sqlite_version}"
        assert driver_by_name(d.name) is d
        assert driver_by_name(d.kind) is d
    with pytest.raises(LookupError):
        driver_by_name("nosuch")


def test_versions(driver: Driver) -> None:
    with driver.connect(":memory:") as conn:
        (reported,) = conn.execute("SELECT sqlite_version()")[0]
    assert reported == driver.sqlite_version
    if driver.kind == "system":
        assert driver.sqlite_version == EXPECTED_SYSTEM_VERSION
        assert driver.name == f"system-{EXPECTED_SYSTEM_VERSION}"
    else:
        import apsw

        assert driver.sqlite_version == apsw.sqlite_lib_version()
        assert driver.name == f"apsw-{apsw.sqlite_lib_version()}"


# ------------------------------------------------------------------------ values

VALUES: List[Any] = [
    0,
    1,
    -1,
    2**31,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    1.5,
    -0.25,
    1e308,
    5e-324,
    "",
    "plain",
    "h\u00e9llo \u2713 \U0001f600",
    "nul\x00inside",
    "x" * 100_000,
    b"",
    b"\x00",
    b"\x00\xff\x00",
    bytes(range(256)) * 400,
    None,
]
TYPEOF = {int: "integer", float: "real", str: "text", bytes: "blob", type(None): "null"}


def test_roundtrip_every_type(driver: Driver, tmp_path: Path) -> None:
    path = str(tmp_path / "types.db")
    with driver.connect(path) as conn:
        assert isinstance(conn, Connection)
        assert conn.filename == path
        conn.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v)")  # no affinity on v
        for k, value in enumerate(VALUES):
            assert conn.execute("INSERT INTO t(k, v) VALUES (?, ?)", (k, value)) == []
            assert conn.changes() == 1
        conn.execute("INSERT INTO t(k, v) VALUES (?, ?)", [1000, True])
        conn.execute("INSERT INTO t(k, v) VALUES (?, ?)", (1001, bytearray(b"ab")))
        conn.execute("INSERT INTO t(k, v) VALUES (?, ?)", (1002, memoryview(b"cd")))
    with driver.connect(path) as conn:  # read back from the file, new connection
        rows = conn.execute("SELECT k, v, typeof(v) FROM t ORDER BY k")
    assert len(rows) == len(VALUES) + 3
    for (key, got, typ), want in zip(rows, VALUES):
        assert type(got) is type(want), (key, got, want)
        assert got == want, key
        assert typ == TYPEOF[type(want)]
    assert rows[-3:] == [(1000, 1, "integer"), (1001, b"ab", "blob"), (1002, b"cd", "blob")]


def test_row_shapes(driver: Driver) -> None:
    with driver.connect(":memory:") as conn:
        assert conn.execute("SELECT 1, 'a', NULL, x'', 2.5") == [(1, "a", None, b"", 2.5)]
        assert conn.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<3) SELECT x FROM c") == [
            (1,),
            (2,),
            (3,),
        ]
        assert conn.execute("SELECT ?1, ?1, :b", (7, 8)) == [(7, 7, 8)]
        assert conn.execute("") == []
        assert conn.execute("  -- only a comment\n") == []


def test_bind_errors(driver: Driver) -> None:
    with driver.connect(":memory:") as conn:
        with pytest.raises(OverflowError):
            conn.execute("SELECT ?", (2**63,))
        with pytest.raises(OverflowError):
            conn.execute("SELECT ?", (-(2**63) - 1,))
        with pytest.raises(TypeError):
            conn.execute("SELECT ?", (object(),))  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            conn.execute("SELECT ?", "a")
        for sql, params in [("SELECT ?, ?", (1,)), ("SELECT ?", (1, 2)), ("SELECT 1", (1,)), ("", (1,))]:
            with pytest.raises(SQLiteError) as err:
                conn.execute(sql, params)
            assert (err.value.code, err.value.extended_code) == (25, 25)
        assert conn.execute("SELECT 1") == [(1,)]  # still usable


# ------------------------------------------------------------------------ errors


def test_syntax_error(driver: Driver) -> None:
    with driver.connect(":memory:") as conn:
        with pytest.raises(SQLiteError) as err:
            conn.execute("SELEC 1")
        assert err.value.code == 1
        assert err.value.extended_code == 1
        assert err.value.message == 'near "SELEC": syntax error'
        assert "syntax error" in str(err.value)
        with pytest.raises(SQLiteError) as err:
            conn.execute("SELECT * FROM nope")
        assert (err.value.code, err.value.message) == (1, "no such table: nope")


@pytest.mark.parametrize(
    "sql, extended, message",
    [
        ("INSERT INTO t(id, u, nn, c) VALUES (1, 9, 1, 1)", 1555, "UNIQUE constraint failed: t.id"),
        ("INSERT INTO t(id, u, nn, c) VALUES (2, 1, 1, 1)", 2067, "UNIQUE constraint failed: t.u"),
        ("INSERT INTO t(id, u, nn, c) VALUES (2, 2, NULL, 1)", 1299, "NOT NULL constraint failed: t.nn"),
        ("INSERT INTO t(id, u, nn, c) VALUES (2, 2, 1, -1)", 275, "CHECK constraint failed: c > 0"),
    ],
)
def test_constraint_violation(driver: Driver, tmp_path: Path, sql: str, extended: int, message: str) -> None:
    with driver.connect(str(tmp_path / "c.db")) as conn:
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, u UNIQUE, nn NOT NULL, c CHECK (c > 0))")
        conn.execute("INSERT INTO t VALUES (1, 1, 1, 1)")
        with pytest.raises(SQLiteError) as err:
            conn.execute(sql)
        assert err.value.code == 19
        assert err.value.extended_code == extended
        assert err.value.message == message
        assert conn.execute("SELECT count(*) FROM t") == [(1,)]


def test_execute_runs_one_statement(driver: Driver) -> None:
    with driver.connect(":memory:") as conn:
        with pytest.raises(ValueError):
            conn.execute("CREATE TABLE a(x); CREATE TABLE b(x)")
        # refused before anything ran
        assert conn.execute("SELECT count(*) FROM sqlite_master") == [(0,)]
        assert conn.execute("SELECT 'a;b' ;; -- trailing; comment\n /* c; */ ") == [("a;b",)]
        assert conn.execute("SELECT ?; ", (3,)) == [(3,)]


def test_executescript(driver: Driver, tmp_path: Path) -> None:
    script = """
        -- a comment; with a semicolon
        CREATE TABLE t(x INTEGER, s TEXT);
        CREATE TABLE log(x);
        CREATE TRIGGER tr AFTER INSERT ON t BEGIN
            INSERT INTO log VALUES (new.x);
            INSERT INTO log VALUES (-new.x);
        END;
        /* block; comment */
        INSERT INTO t VALUES (1, 'a;b');
        SELECT * FROM t;
        INSERT INTO t VALUES (2, 'c')
    """
    with driver.connect(str(tmp_path / "s.db")) as conn:
        conn.executescript(script)
        assert conn.execute("SELECT x, s FROM t ORDER BY x") == [(1, "a;b"), (2, "c")]
        assert conn.execute("SELECT x FROM log ORDER BY rowid") == [(1,), (-1,), (2,), (-2,)]
        conn.executescript("")
        conn.executescript("-- nothing\n;;")
        # An error stops the script; statements before it have run (autocommit).
        with pytest.raises(SQLiteError) as err:
            conn.executescript("INSERT INTO t VALUES (3, 'd'); INSERT INTO nope VALUES (1); INSERT INTO t VALUES (4, 'e');")
        assert (err.value.code, err.value.message) == (1, "no such table: nope")
        assert conn.execute("SELECT max(x) FROM t") == [(3,)]
        with pytest.raises(SQLiteError) as err:
            conn.executescript("SELECT ?")
        assert err.value.code == 25


def test_changes(driver: Driver) -> None:
    with driver.connect(":memory:") as conn:
        conn.executescript("CREATE TABLE t(x); INSERT INTO t SELECT value FROM json_each('[1,2,3,4,5]');")
        assert conn.changes() == 5
        conn.execute("UPDATE t SET x = x + 1 WHERE x > ?", (2,))
        assert conn.changes() == 3
        conn.execute("DELETE FROM t")
        assert conn.changes() == 5


def test_close_and_context_manager(driver: Driver) -> None:
    with driver.connect(":memory:") as conn:
        assert not conn.closed
    assert conn.closed
    conn.close()  # twice is fine
    for call in (lambda: conn.execute("SELECT 1"), lambda: conn.executescript("SELECT 1"), conn.changes):
        with pytest.raises(SQLiteError) as err:
            call()
        assert err.value.code == 21


def test_open_flags_uri_and_vfs(driver: Driver, tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    with driver.connect(str(path)) as conn:
        conn.execute("CREATE TABLE t(x)")
    with driver.connect(str(path), flags=SQLITE_OPEN_READONLY) as conn:
        assert conn.execute("SELECT count(*) FROM t") == [(0,)]
        with pytest.raises(SQLiteError) as err:
            conn.execute("INSERT INTO t VALUES (1)")
        assert err.value.code == 8
    with driver.connect(f"file:{path}?mode=ro") as conn:
        with pytest.raises(SQLiteError) as err:
            conn.execute("INSERT INTO t VALUES (1)")
        assert err.value.code == 8
    with pytest.raises(SQLiteError) as err:
        driver.connect(str(tmp_path / "no" / "such" / "dir.db"))
    assert err.value.code == 14
    with pytest.raises(SQLiteError) as err:
        driver.connect(str(tmp_path / "v.db"), vfs="nosuchvfs")
    assert (err.value.code, err.value.message) == (1, "no such vfs: nosuchvfs")


# ----------------------------------------------------------------------- threads


def test_wal_two_threads(driver: Driver, tmp_path: Path) -> None:
    path = str(tmp_path / "wal.db")
    with driver.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode=WAL") == [("wal",)]
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, worker INTEGER, n INTEGER, payload BLOB)")

    errors: List[BaseException] = []
    start = threading.Barrier(2)

    def worker(w: int) -> None:
        try:
            with driver.connect(path, timeout_ms=20_000) as conn:
                start.wait(10)
                for n in range(200):
                    conn.execute("INSERT INTO t(worker, n, payload) VALUES (?, ?, ?)", (w, n, os.urandom(100)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    with driver.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM t") == [(400,)]
        assert conn.execute("SELECT worker, count(*), sum(n) FROM t GROUP BY worker") == [
            (1, 200, 19900),
            (2, 200, 19900),
        ]
        assert conn.execute("PRAGMA integrity_check") == [("ok",)]
        assert conn.execute("PRAGMA journal_mode") == [("wal",)]


def test_busy_timeout_waits_without_holding_the_gil(driver: Driver, tmp_path: Path) -> None:
    """A writer blocked in SQLite's busy handler must let this thread run and commit."""
    path = str(tmp_path / "busy.db")
    holder = driver.connect(path)
    try:
        holder.execute("PRAGMA journal_mode=WAL")
        holder.execute("CREATE TABLE t(x)")
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO t VALUES (1)")
        result: Dict[str, Any] = {}

        def waiter() -> None:
            try:
                with driver.connect(path, timeout_ms=30_000) as conn:
                    t0 = time.monotonic()
                    conn.execute("INSERT INTO t VALUES (2)")
                    result["waited"] = time.monotonic() - t0
            except BaseException as exc:
                result["error"] = exc

        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.5)  # returns only if the waiter released the GIL
        assert thread.is_alive()
        holder.execute("COMMIT")
        thread.join(60)
        assert "error" not in result, result
        assert 0.3 <= result["waited"] < 25
        assert holder.execute("SELECT x FROM t ORDER BY x") == [(1,), (2,)]

        holder.execute("BEGIN IMMEDIATE")
        with driver.connect(path, timeout_ms=0) as impatient:
            with pytest.raises(SQLiteError) as err:
                impatient.execute("INSERT INTO t VALUES (3)")
            assert err.value.code == 5
        holder.execute("ROLLBACK")
    finally:
        holder.close()


# -------------------------------------------------------------------- extensions


def test_connection_load_extension(driver: Driver, half_ext: Path, tmp_path: Path) -> None:
    path = str(tmp_path / "ext.db")
    with driver.connect(path) as conn, driver.connect(path) as other:
        with pytest.raises(SQLiteError) as err:
            conn.execute("SELECT half(1)")
        assert (err.value.code, err.value.message) == (1, "no such function: half")
        conn.load_extension(str(half_ext))  # default entry point: sqlite3_half_init
        assert conn.execute("SELECT half(7), half(?), half(NULL)", (3,)) == [(3.5, 1.5, None)]
        assert conn.execute("SELECT ext_libversion()") == [(driver.sqlite_version,)]
        # loaded into that connection only
        with pytest.raises(SQLiteError) as err:
            other.execute("SELECT half(1)")
        assert err.value.code == 1
        # the SQL function load_extension() stays disabled
        with pytest.raises(SQLiteError) as err:
            conn.execute("SELECT load_extension(?)", (str(half_ext),))
        assert err.value.code == 1


def test_load_extension_errors(driver: Driver, half_ext: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing.so"
    with pytest.raises(SQLiteError) as err:
        driver.load_extension(str(missing))
    assert err.value.code == 1
    assert str(missing) in err.value.message
    with pytest.raises(SQLiteError) as err:
        driver.load_extension(str(half_ext), "sqlite3_halffail_init")
    assert err.value.code == 1
    assert "half: refusing to load" in err.value.message
    with driver.connect(":memory:") as conn:
        with pytest.raises(SQLiteError) as err:
            conn.load_extension(str(half_ext), "sqlite3_nosuch_init")
        assert err.value.code == 1
        assert "sqlite3_nosuch_init" in err.value.message
        assert conn.execute("SELECT 1") == [(1,)]


def test_driver_load_extension_vfs(driver: Driver, half_ext: Path, tmp_path: Path) -> None:
    """Driver.load_extension of a VFS extension: the VFS outlives the throwaway connection."""
    driver.load_extension(str(half_ext), "sqlite3_halfvfs_init")
    opens = ctypes.CDLL(str(half_ext)).halfshim_open_count  # same handle SQLite loaded
    path = tmp_path / "vfs.db"
    before = opens()
    with driver.connect(str(path), vfs="halfshim") as conn:
        assert conn.execute("PRAGMA journal_mode=WAL") == [("wal",)]
        conn.execute("CREATE TABLE t(x)")
        conn.execute("INSERT INTO t VALUES (?)", (42,))
    assert opens() >= before + 2  # database and WAL at least
    with driver.connect(f"file:{path}?vfs=halfshim") as conn:
        assert conn.execute("SELECT x FROM t") == [(42,)]
    assert opens() >= before + 3


def test_driver_load_extension_auto(driver: Driver, half_ext: Path) -> None:
    """Driver.load_extension registering an auto-extension (own process: it is process-wide)."""
    out = run_python(
        """
        import sys
        from waldio.drivers import driver_by_name, SQLiteError
        d = driver_by_name(sys.argv[1])
        with d.connect(":memory:") as before:
            d.load_extension(sys.argv[2], "sqlite3_halfauto_init")
            try:
                before.execute("SELECT half(1)")
                print("unexpected: half() on a connection opened before loading")
            except SQLiteError as e:
                assert e.code == 1, e
        with d.connect(":memory:") as conn:
            print(conn.execute("SELECT half(9), ext_libversion()"))
        """,
        driver.kind,
        str(half_ext),
    )
    assert out.strip() == str([(4.5, driver.sqlite_version)])


def test_both_builds_in_one_process(half_ext_build: Path, tmp_path: Path) -> None:
    """Separate copies of one extension, one per SQLite build, each calling its own build."""
    copies = []
    for kind in KINDS:
        dest = tmp_path / kind / "half.so"
        dest.parent.mkdir()
        shutil.copyfile(half_ext_build, dest)
        copies.append(str(dest))
    out = run_python(
        """
        import sys
        from waldio.drivers import driver_by_name
        drivers = [driver_by_name("apsw"), driver_by_name("system")]
        for d, so in zip(drivers, sys.argv[1:]):
            d.load_extension(so, "sqlite3_halfauto_init")
            d.load_extension(so, "sqlite3_halfvfs_init")
        conns = [d.connect(":memory:") for d in drivers]  # interleaved on purpose
        conns += [d.connect(":memory:", vfs="halfshim") for d in drivers]
        for c in conns:
            print(c.driver_name, c.execute("SELECT half(5), ext_libversion(), sqlite_version()")[0])
            c.close()
        """,
        *copies,
    )
    lines = out.strip().splitlines()
    assert len(lines) == 4
    for line in lines:
        name, rest = line.split(" ", 1)
        version = name.split("-", 1)[1]
        assert rest == str((2.5, version, version)), line
