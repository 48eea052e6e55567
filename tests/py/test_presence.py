"""How to tell that waldio is on, and how many short programs get it.

  SELECT * FROM pragma_waldio      a row (JSON, as PRAGMA waldio) when the
                                   database goes through waldio, none when it
                                   does not; no such table without waldio
  eval "$(waldio env)"             every program started from that shell uses
                                   waldio, with no Python started per call
  waldio env --measure             what that costs per call
(src/pragma_vtab.c, python/waldio/env.py)
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

import workloads as wl
from waldio import logformat

ROOT = Path(__file__).resolve().parents[2]
PRAGMAS = ("waldio", "waldio_stats", "waldio_sync", "waldio_flush_ms", "waldio_group",
           "waldio_group_bytes", "waldio_group_ms", "waldio_layout")


def test_pragma_tables_answer_as_the_pragmas(sqlite: Any, dbdir: Path) -> None:
    conn = sqlite.waldio(dbdir / "p.db")
    wl.setup(conn)
    conn.execute(f"ATTACH '{dbdir / 'aux.db'}' AS aux")
    status = json.loads(conn.execute("SELECT waldio FROM pragma_waldio")[0][0])
    assert status["vfs"] == "waldio" and status["wal_open"] is True
    assert conn.execute("SELECT schema, json_extract(waldio, '$.layout') FROM pragma_waldio")[0] \
        == ("main", "standard")
    aux = json.loads(conn.execute("SELECT waldio FROM pragma_waldio('aux')")[0][0])
    assert aux["wal_open"] is False                        # aux is not in WAL mode
    assert conn.execute("SELECT count(*) FROM pragma_waldio('nosuch')")[0][0] == 0
    for name in PRAGMAS[2:]:
        assert conn.execute(f"SELECT * FROM pragma_{name}")[0][0] == \
            str(conn.execute(f"PRAGMA {name}")[0][0]), name
    stats = json.loads(conn.execute("SELECT * FROM pragma_waldio_stats")[0][0])
    assert stats["frames_written"] > 0
    # Reading never sets: a value argument is the schema, not a new setting.
    assert conn.execute("SELECT count(*) FROM pragma_waldio_sync('normal')")[0][0] == 0
    assert conn.execute("PRAGMA waldio_sync")[0][0] == "full"
    conn.close()
    stock = sqlite.stock(dbdir / "s.db")
    assert stock.execute("SELECT count(*) FROM pragma_waldio")[0][0] == 0
    stock.close()


def shell() -> str:
    path = shutil.which("sqlite3")
    if path is None:
        pytest.skip("the sqlite3 shell is not installed (Debian package sqlite3)")
    return path


def cli_env() -> Dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("WALDIO_")}
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + (
        [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    return e


def waldio_cmd() -> str:
    return f"{sys.executable} -m waldio"


def test_env_gives_every_program_of_the_shell_waldio(dbdir: Path) -> None:
    sh = shell()
    script = f"""
set -e
eval "$({waldio_cmd()} env)"
{sh} app.db "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);"
{sh} app.db "SELECT json_extract(waldio, '$.vfs') FROM pragma_waldio;"
eval "$({waldio_cmd()} env --unset)"
echo "LD_PRELOAD=${{LD_PRELOAD-}}"
"""
    p = subprocess.run(["sh", "-c", script], cwd=dbdir, env=cli_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["wal", "waldio", "LD_PRELOAD="], p.stdout
    # The log outlived the last close (stock SQLite deletes its WAL then).
    wal = logformat.describe_database(dbdir / "app.db")["wal_file"]
    assert wal["exists"] and wal["layout"] == "standard", wal


def test_env_lines_carry_the_options(dbdir: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "waldio", "env", "--sync", "persistent",
                        "--layout", "pad4k", "-v"], env=cli_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("export LD_PRELOAD=") and "libwaldio_preload.so" in lines[0]
    assert {"export WALDIO_SYNC=persistent", "export WALDIO_LAYOUT=pad4k",
            "export WALDIO_VERBOSE=1"} <= set(lines), lines


def test_env_measure_reports_medians_spreads_and_parameters(dbdir: Path) -> None:
    shell()
    out = dbdir / "cost.json"
    p = subprocess.run([sys.executable, "-m", "waldio", "env", "--measure", "--runs", "3",
                        "--warmup", "0", "--dir", str(dbdir), "--json", str(out)],
                       env=cli_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "median (min–max)" in p.stdout and "write cache" in p.stdout, p.stdout
    report = json.loads(out.read_text())
    assert [m["name"] for m in report["programs"]] == ["read", "write"]
    for m in report["programs"]:
        assert len(m["samples"]["direct_ms"]) == len(m["samples"]["waldio_ms"]) == 3
        assert m["added_ms"]["n"] == 3 and m["direct_ms"]["min"] > 0
        assert m["command_direct"] != m["command_waldio"]   # a database of its own each
    params = report["parameters"]
    assert params["runs"] == 3 and "sqlite3_shell" in params
    assert params["filesystem"]["fstype"] and params["device"]["chain"]
    assert params["system"]["kernel"]
