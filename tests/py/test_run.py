"""waldio run: waldio inside unmodified programs (libwaldio_preload.so, src/preload.c).

Each program here is run exactly as a user would run it, under `waldio run`,
and the database it wrote is then examined: its log must be a waldio log
(it outlives the program's last close, which stock SQLite's WAL does not; a
slotted layout's block 0 names it), or PRAGMA waldio must answer through the
program's own SQLite. Programs: the Debian sqlite3 shell, a C program
linked with -lsqlite3, /usr/bin/python3's sqlite3 module; a program with its
own static SQLite must be refused, and programs that never use SQLite must
run as without waldio.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

import readme
from waldio import logformat

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = r"""
#include <sqlite3.h>
#include <stdio.h>
/* An application that knows nothing of waldio: opens a database in WAL mode,
** writes a row and says which VFS its connection uses. */
int main(int argc, char **argv){
  sqlite3 *db; char *err = 0; const char *vfs = 0;
  if( sqlite3_open(argc > 1 ? argv[1] : "app.db", &db) ) return 1;
  if( sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS t(x);"
                       "INSERT INTO t VALUES (1);", 0, 0, &err) ){
    fprintf(stderr, "%s\n", err); return 1;
  }
  sqlite3_file_control(db, "main", SQLITE_FCNTL_VFSNAME, &vfs);
  printf("%s\n", vfs ? vfs : "?");
  sqlite3_free((void*)vfs);
  return sqlite3_close(db);
}
"""
STATIC_SQLITE = "/usr/lib/x86_64-linux-gnu/libsqlite3.a"


def env() -> Dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + (
        [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    for var in ("LD_PRELOAD", "WALDIO_LAYOUT", "WALDIO_PRELOAD_VERBOSE", "WALDIO_VERBOSE"):
        e.pop(var, None)
    return e


def waldio_run(*args: str, cwd: Path, extra: Dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "waldio", "run", *args], cwd=cwd,
                          env={**env(), **(extra or {})}, capture_output=True, text=True,
                          timeout=120)


def log_layout(db: Path) -> str:
    """The layout of db's log, from the files alone, after the program ended:
    a waldio log outlives the last close (stock SQLite deletes its WAL)."""
    wal = logformat.describe_database(db)["wal_file"]
    assert wal["exists"], f"{db}-wal is gone: not a waldio log"
    return str(wal["layout"])


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """The C program built two ways: against libsqlite3.so, and with SQLite inside."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("programs")
    (d / "app.c").write_text(PROGRAM)
    out = {"dynamic": d / "app"}
    subprocess.run(["cc", str(d / "app.c"), "-o", str(out["dynamic"]), "-lsqlite3"], check=True)
    if os.path.exists(STATIC_SQLITE):
        out["static"] = d / "app-static"
        subprocess.run(["cc", str(d / "app.c"), "-o", str(out["static"]), STATIC_SQLITE,
                        "-lm", "-lpthread", "-ldl"], check=True)
    return out


def test_sqlite3_shell(dbdir: Path) -> None:
    if shutil.which("sqlite3") is None:
        pytest.skip("the sqlite3 shell is not installed (Debian package sqlite3)")
    r = waldio_run("--", "sqlite3", "app.db", "PRAGMA journal_mode=WAL; CREATE TABLE t(x);"
                   " INSERT INTO t VALUES (1); PRAGMA waldio;", cwd=dbdir)
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout.splitlines()[-1])
    assert status["vfs"] == "waldio" and status["wal_open"] and status["layout"] == "standard"
    assert log_layout(dbdir / "app.db") == "standard"
    # Closed cleanly, it is an ordinary SQLite database for the shell without waldio.
    stock = subprocess.run(["sqlite3", "app.db", "SELECT count(*) FROM t"], cwd=dbdir,
                           env=env(), capture_output=True, text=True)
    assert (stock.returncode, stock.stdout) == (0, "1\n"), stock.stderr


def test_c_program_linked_with_libsqlite3(dbdir: Path, programs: Dict[str, Path]) -> None:
    plain = subprocess.run([str(programs["dynamic"]), "plain.db"], cwd=dbdir, env=env(),
                           capture_output=True, text=True, check=True)
    assert plain.stdout.strip() == "unix"
    r = waldio_run("-v", "--", str(programs["dynamic"]), "app.db", cwd=dbdir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "waldio/unix"
    assert "waldio: default VFS of SQLite" in r.stderr
    assert log_layout(dbdir / "app.db") == "standard"


def test_options_as_flags_and_environment_variables(dbdir: Path, programs: Dict[str, Path]) -> None:
    r = waldio_run("--layout", "pad4k", "--", str(programs["dynamic"]), "flag.db", cwd=dbdir)
    assert r.returncode == 0, r.stderr
    assert log_layout(dbdir / "flag.db") == "pad4k"
    r = waldio_run("--", str(programs["dynamic"]), "env.db", cwd=dbdir,
                   extra={"WALDIO_LAYOUT": "pad8k"})
    assert r.returncode == 0, r.stderr
    assert log_layout(dbdir / "env.db") == "pad8k"
    # A flag overrides the environment variable.
    r = waldio_run("--layout", "pad4k", "--", str(programs["dynamic"]), "both.db", cwd=dbdir,
                   extra={"WALDIO_LAYOUT": "pad8k"})
    assert log_layout(dbdir / "both.db") == "pad4k"


def test_bad_option_values_are_named(dbdir: Path, programs: Dict[str, Path]) -> None:
    r = waldio_run("--layout", "pad2k", "--", str(programs["dynamic"]), cwd=dbdir)
    assert r.returncode == 2 and "pad2k" in r.stderr
    # Set by hand, the preload library names the variable and leaves SQLite stock.
    r = waldio_run("--", str(programs["dynamic"]), "bad.db", cwd=dbdir,
                   extra={"WALDIO_SYNC": "sometimes"})
    assert "WALDIO_SYNC=sometimes" in r.stderr and "stock SQLite" in r.stderr
    assert r.stdout.strip() == "unix"


def python_with_sqlite3() -> str:
    py = "/usr/bin/python3"
    if not os.path.exists(py):
        pytest.skip("no /usr/bin/python3")
    return py


def test_python_sqlite3_module(dbdir: Path) -> None:
    script = ("import sqlite3, json\n"
              "c = sqlite3.connect('py.db')\n"
              "c.execute('PRAGMA journal_mode=WAL'); c.execute('CREATE TABLE t(x)')\n"
              "c.execute('INSERT INTO t VALUES (1)'); c.commit()\n"
              "print(json.loads(c.execute('PRAGMA waldio').fetchone()[0])['vfs'])\n")
    r = waldio_run("--", python_with_sqlite3(), "-c", script, cwd=dbdir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "waldio"
    assert log_layout(dbdir / "py.db") == "standard"


def test_static_sqlite_is_refused_not_ignored(dbdir: Path, programs: Dict[str, Path]) -> None:
    if "static" not in programs:
        pytest.skip(f"{STATIC_SQLITE} not installed (libsqlite3-dev)")
    r = waldio_run("--", str(programs["static"]), "static.db", cwd=dbdir)
    assert r.returncode == 3
    assert "statically linked SQLite" in r.stderr and "waldio.so" in r.stderr
    assert not (dbdir / "static.db").exists()        # it did not run at all


def test_programs_without_sqlite_run_unchanged(tmp_path: Path) -> None:
    r = waldio_run("--", "sh", "-c", "echo out; echo err >&2; exit 7", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n")
    r = waldio_run("--", "nosuchprogram-waldio", cwd=tmp_path)
    assert r.returncode == 127 and "not found" in r.stderr
    r = waldio_run(cwd=tmp_path)
    assert r.returncode == 2 and "no command" in r.stderr


def test_readme_existing_program(dbdir: Path) -> None:
    """README's "Use it with an existing program", as written and as one shell
    script (its `eval` lines change the shell they run in): every database write
    goes through waldio, and the shell ends with waldio out of its environment."""
    (_, code), = [b for b in readme.blocks("Use it with an existing program")]
    e = readme.shell(dbdir / "bin")
    r = subprocess.run(["bash", "-ec", code + '\necho "LD_PRELOAD=${LD_PRELOAD-}"\n'],
                       cwd=dbdir, env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "LD_PRELOAD=", r.stdout
    assert log_layout(dbdir / "app.db") == "standard"       # written through waldio
    out = subprocess.run(["sqlite3", "app.db", "SELECT count(*) FROM t"], cwd=dbdir,
                         env=env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == 2
