"""waldio with Python's standard sqlite3 module: waldio.load(conn) and connect(driver="sqlite3").

Each case runs in a fresh interpreter, the way a user's program would: the
sqlite3 module and the extension loaded into it are process-wide. Debian's
/usr/bin/python3 can load extensions; a Python built without
--enable-loadable-sqlite-extensions (the pyenv build on this machine kind)
cannot, and must get an error that names apsw.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAN_LOAD = "import sqlite3; print(hasattr(sqlite3.Connection, 'enable_load_extension'))"


def pythons() -> List[str]:
    seen, out = set(), []
    for py in (sys.executable, "/usr/bin/python3"):
        real = os.path.realpath(py)
        if os.path.exists(py) and real not in seen:
            seen.add(real)
            out.append(py)
    return out


def can_load(py: str) -> bool:
    r = subprocess.run([py, "-c", CAN_LOAD], capture_output=True, text=True, check=True)
    return r.stdout.strip() == "True"


def python_that(loads: bool) -> str:
    for py in pythons():
        if can_load(py) == loads:
            return py
    pytest.skip("no Python here whose sqlite3 module %s load extensions"
                % ("can" if loads else "cannot"))


def run(py: str, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    env.pop("LD_PRELOAD", None)
    return subprocess.run([py, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_load_into_a_sqlite3_connection(dbdir: Path) -> None:
    code = """
import json, sqlite3, waldio
conn = sqlite3.connect(":memory:")
waldio.load(conn)
waldio.load(conn)                            # twice is harmless
db = sqlite3.connect("app.db")               # waldio is now the default VFS
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE t(x)"); db.execute("INSERT INTO t VALUES (1)"); db.commit()
s = json.loads(db.execute("PRAGMA waldio").fetchone()[0])
other = sqlite3.connect("file:stock.db?vfs=unix", uri=True)
print(json.dumps([s["vfs"], s["wal_open"], s["layout"],
                  other.execute("PRAGMA waldio").fetchall()]))
"""
    r = run(python_that(loads=True), code, dbdir)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["waldio", True, "standard", []]


def test_connect_with_the_sqlite3_driver(dbdir: Path) -> None:
    code = """
import json, sqlite3, waldio
db = waldio.connect("pad.db", driver="sqlite3", layout="pad4k")
assert isinstance(db, sqlite3.Connection)
db.execute("PRAGMA journal_mode=WAL"); db.execute("CREATE TABLE t(x)")
db.execute("INSERT INTO t VALUES (1)"); db.commit()
print(json.loads(db.execute("PRAGMA waldio").fetchone()[0])["layout"])
try:
    waldio.connect("bad.db", driver="sqlite3", layout="pad2k")
except waldio.WaldioError as e:
    print("error:", e)
"""
    r = run(python_that(loads=True), code, dbdir)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "pad4k"
    assert out[1].startswith("error:") and "waldio_layout" in out[1] and "pad2k" in out[1]


def test_sqlite3_and_apsw_in_one_process(dbdir: Path) -> None:
    py = python_that(loads=True)
    if run(py, "import apsw", dbdir).returncode != 0:
        pytest.skip(f"apsw is not installed for {py}")
    code = """
import json, waldio
a = waldio.connect("a.db"); a.execute("PRAGMA journal_mode=WAL")
s = waldio.connect("s.db", driver="sqlite3"); s.execute("PRAGMA journal_mode=WAL")
print(json.loads(a.execute("PRAGMA waldio").fetchone()[0])["vfs"],
      json.loads(s.execute("PRAGMA waldio").fetchone()[0])["vfs"])
"""
    r = run(py, code, dbdir)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["waldio", "waldio"]


def test_without_extension_loading_the_error_names_apsw(dbdir: Path) -> None:
    code = """
import sqlite3, waldio
for attempt in (lambda: waldio.load(sqlite3.connect(":memory:")),
                lambda: waldio.connect("x.db", driver="sqlite3")):
    try:
        attempt()
    except waldio.WaldioError as e:
        print(e)
"""
    r = run(python_that(loads=False), code, dbdir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2
    assert all("apsw" in ln and "enable-loadable-sqlite-extensions" in ln for ln in lines)
    assert not (dbdir / "x.db").exists()


def test_load_rejects_other_objects() -> None:
    import waldio
    with pytest.raises(TypeError, match="apsw.Connection or a sqlite3.Connection"):
        waldio.load(object())
    with pytest.raises(ValueError, match="unknown driver"):
        waldio.connect("x.db", driver="odbc")
