"""The wheel: built from the checkout, installed into a fresh venv, used outside the checkout.

`pip wheel` compiles libwaldio with the project's own CMake (scikit-build-core)
and the wheel must carry every compiled piece; installed into a new virtual
environment (no PYTHONPATH, no `make`, working directory outside the checkout)
`import waldio; waldio.connect(...)`, README's "Use it from Python" block,
`waldio info`, `waldio bench` and `waldio run` must work from it alone.

This is the slowest test of the suite: it compiles the C library once more
and installs apsw and rich into the venv (pip's cache makes that a copy on a
machine that has installed them before).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict

import pytest

import readme

ROOT = Path(__file__).resolve().parents[2]
COMPILED = {"waldio/_lib/waldio.so", "waldio/_lib/libwaldio.so",
            "waldio/_lib/libwaldio_preload.so", "waldio/_lib/recorder.so",
            "waldio/_lib/waldio_txnloop.so"}


def venv_python() -> str:
    """Debian's python3 when it can make a venv and its sqlite3 can load
    extensions (the README block uses the sqlite3 driver); else this one."""
    deb = "/usr/bin/python3"
    if os.path.exists(deb):
        r = subprocess.run([deb, "-c", "import ensurepip, venv, sqlite3; "
                            "assert hasattr(sqlite3.Connection, 'enable_load_extension')"],
                           capture_output=True)
        if r.returncode == 0:
            return deb
    return sys.executable


def clean_env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_PRELOAD", "VIRTUAL_ENV") and not k.startswith("WALDIO_")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cmake") is None or shutil.which("cc") is None:
        pytest.skip("cmake and a C compiler are needed to build the wheel")
    dist = tmp_path_factory.mktemp("dist")
    r = subprocess.run(["nice", sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                        "--disable-pip-version-check", "-w", str(dist), str(ROOT)],
                       env=clean_env(), capture_output=True, text=True, timeout=540)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    wheels = list(dist.glob("waldio-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("venv")
    subprocess.run([venv_python(), "-m", "venv", str(home)], check=True, env=clean_env())
    r = subprocess.run([str(home / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        str(wheel)], env=clean_env(), capture_output=True, text=True, timeout=540)
    assert r.returncode == 0, r.stderr[-2000:]
    return home


def in_venv(venv: Path, argv: list, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = clean_env(PATH=f"{venv / 'bin'}:{os.environ['PATH']}", VIRTUAL_ENV=str(venv))
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_wheel_carries_the_compiled_library(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert COMPILED <= names
    assert "waldio/bench/runner.py" in names and "waldio/schemas/bench.schema.json" in names
    assert wheel.name.endswith("-py3-none-linux_x86_64.whl")


def test_import_and_connect_outside_the_checkout(venv: Path, dbdir: Path) -> None:
    code = ("import json, waldio\n"
            "conn = waldio.connect('app.db')\n"
            "conn.execute('PRAGMA journal_mode=WAL')\n"
            "conn.execute('CREATE TABLE t(x)')\n"
            "print(waldio.__file__)\n"
            "print(waldio.extension_path())\n"
            "print(json.loads(conn.execute('PRAGMA waldio').fetchone()[0])['vfs'])\n")
    r = in_venv(venv, ["python", "-c", code], dbdir)
    assert r.returncode == 0, r.stderr
    module, ext, vfs = r.stdout.splitlines()
    assert module.startswith(str(venv)) and ext.startswith(str(venv)), r.stdout
    assert vfs == "waldio"


def test_readme_python_block_and_info(venv: Path, dbdir: Path) -> None:
    (lang, code), = [b for b in readme.blocks("Use it from Python") if b[0] == "python"]
    if "driver=\"sqlite3\"" in code and venv_python() == sys.executable:
        r = in_venv(venv, ["python", "-c", "import sqlite3; sqlite3.Connection.enable_load_extension"], dbdir)
        if r.returncode != 0:
            pytest.skip("no Python with a sqlite3 module that loads extensions for the venv")
    r = in_venv(venv, ["python", "-c", code], dbdir)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["vfs"] == "waldio"
    info = in_venv(venv, ["waldio", "info", "--json", "app.db"], dbdir)
    assert info.returncode == 0, info.stderr
    wal = json.loads(info.stdout)["wal_file"]
    assert wal["exists"] and wal["layout"] == "standard", wal


def test_waldio_bench_from_the_wheel(venv: Path, dbdir: Path) -> None:
    r = in_venv(venv, ["waldio", "bench", "--dir", str(dbdir), "--modes", "wal-full,waldio-full",
                       "--transactions", "50", "--repetitions", "1", "--warmup", "0",
                       "--json", "bench.json"], dbdir)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((dbdir / "bench.json").read_text())
    assert {m["label"] for m in doc["modes"]} == {"wal-full", "waldio-full"}


def test_waldio_run_from_the_wheel(venv: Path, dbdir: Path) -> None:
    if shutil.which("sqlite3") is None:
        pytest.skip("the sqlite3 shell is not installed")
    r = in_venv(venv, ["waldio", "run", "--", "sqlite3", "run.db",
                       "PRAGMA journal_mode=WAL; CREATE TABLE t(x); PRAGMA waldio"], dbdir)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["vfs"] == "waldio"
