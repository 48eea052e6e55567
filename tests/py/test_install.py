"""cmake --install for C users: the installed files, pkg-config and find_package(waldio).

README's CMake block ("Install") and its "Use it from C" block are run as
written, one after the other, in a scratch copy of the source tree with PREFIX
a temporary directory: they configure, build and install libwaldio, then
build examples/c/app.c against the *installed* files once with pkg-config and
once with CMake's find_package(waldio), and both programs must open a
database through waldio. The static library is
linked through the CMake package too.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict

import pytest

import readme

ROOT = Path(__file__).resolve().parents[2]
# Everything CMake may read; not python/ (a development build copies waldio.so
# there) nor build outputs.
SKIP = {".git", "build", "python", "results", "app"}


def sources() -> list:
    return [p for p in ROOT.iterdir() if p.name not in SKIP and not p.name.startswith("build-")]


def need(*programs: str) -> None:
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        pytest.skip("not installed: " + ", ".join(missing))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """README's C blocks, run in a copy of the source tree (symlinks)."""
    need("cmake", "cc", "pkg-config")
    work = tmp_path_factory.mktemp("c-users")
    for path in sources():
        (work / path.name).symlink_to(path)
    prefix = work / "prefix"
    (_, install), = [b for b in readme.blocks("Install") if "cmake --install" in b[1]]
    (_, use), = [b for b in readme.blocks("Use it from C") if b[0] == "sh"]
    code = install + use
    env = dict(os.environ, PREFIX=str(prefix))
    env.pop("PKG_CONFIG_PATH", None)
    r = subprocess.run(["nice", "bash", "-ec", code], cwd=work, env=env, capture_output=True,
                       text=True, timeout=540)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (work / "stdout.txt").write_text(r.stdout)
    return {"work": work, "prefix": prefix, "out": work / "stdout.txt"}


def test_installed_files(installed: Dict[str, Path]) -> None:
    p = installed["prefix"]
    for rel in ("include/waldio.h", "lib/libwaldio.so", "lib/libwaldio.a", "lib/waldio.so",
                "lib/libwaldio_preload.so", "lib/pkgconfig/waldio.pc",
                "lib/cmake/waldio/waldioConfig.cmake", "lib/cmake/waldio/waldioTargets.cmake",
                "lib/cmake/waldio/waldioConfigVersion.cmake"):
        assert (p / rel).exists(), rel


def test_pkg_config_program(installed: Dict[str, Path]) -> None:
    """./app app.db of the README: built with pkg-config against the installed files."""
    lines = installed["out"].read_text().splitlines()      # cmake's output, then ./app's
    i = lines.index("vfs: waldio/unix")
    status = json.loads(lines[i + 1])
    assert status["vfs"] == "waldio" and status["wal_open"] and status["layout"] == "standard"
    ldd = subprocess.run(["ldd", str(installed["work"] / "app")], capture_output=True,
                         text=True, check=True).stdout
    assert str(installed["prefix"] / "lib" / "libwaldio.so.0") in ldd


def test_find_package_program(installed: Dict[str, Path], dbdir: Path) -> None:
    app = installed["work"] / "build-app" / "app"
    out = subprocess.run([str(app), str(dbdir / "cmake.db")], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == "vfs: waldio/unix"
    assert json.loads(out[1])["wal_open"]


def test_find_package_static_library(installed: Dict[str, Path], dbdir: Path) -> None:
    src = installed["work"] / "static-app"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(static_app C)\n"
        "find_package(waldio REQUIRED)\nadd_executable(app %s)\n"
        "target_link_libraries(app PRIVATE waldio::waldio_static)\n"
        % (ROOT / "examples" / "c" / "app.c"))
    build = src / "build"
    subprocess.run(["cmake", "-S", str(src), "-B", str(build),
                    f"-DCMAKE_PREFIX_PATH={installed['prefix']}"], check=True,
                   capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    ldd = subprocess.run(["ldd", str(build / "app")], capture_output=True, text=True).stdout
    assert "libwaldio" not in ldd
    out = subprocess.run([str(build / "app"), str(dbdir / "static.db")], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == "vfs: waldio/unix"


def test_pkg_config_names_the_extension_and_preload(installed: Dict[str, Path], dbdir: Path) -> None:
    env = dict(os.environ, PKG_CONFIG_PATH=str(installed["prefix"] / "lib" / "pkgconfig"))
    paths = {v: subprocess.run(["pkg-config", f"--variable={v}", "waldio"], env=env,
                               capture_output=True, text=True, check=True).stdout.strip()
             for v in ("extension", "preload")}
    assert all(os.path.isfile(p) for p in paths.values()), paths
    if shutil.which("sqlite3"):
        r = subprocess.run(["sqlite3", ":memory:", f".load {paths['extension']}",
                            f".open {dbdir / 'shell.db'}", "PRAGMA journal_mode=WAL",
                            "CREATE TABLE t(x)", "PRAGMA waldio"],
                           capture_output=True, text=True, check=True)
        assert json.loads(r.stdout.splitlines()[-1])["vfs"] == "waldio"
