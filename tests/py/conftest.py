"""Shared fixtures of waldio's Python tests.

`sqlite` is parametrized over both SQLite builds (apsw's bundled SQLite and
Debian's system SQLite through ctypes), each with its own copy of waldio.so
loaded into it (loading one file into two SQLite libraries in one process
would make them share the extension's routine-table pointer). A test marked
second_layout_on_apsw runs its layouts other than the default (standard) on
apsw's SQLite only.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict

import pytest

ROOT = Path(__file__).resolve().parents[2]
# An editable install maps `waldio` to the checkout it was made from through a
# meta path finder, which wins over sys.path: without it, this checkout's
# python/ is the one tested (make build puts its libraries in python/waldio/_lib).
sys.meta_path[:] = [f for f in sys.meta_path
                    if type(f).__name__ != "ScikitBuildRedirectingFinder"]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import waldio  # noqa: E402
from waldio import drivers  # noqa: E402

RESERVE_BYTES = 38          # SQLITE_FCNTL_RESERVE_BYTES
_EXT_COPIES = Path(tempfile.mkdtemp(prefix="waldio-ext-"))
_loaded: Dict[str, Any] = {}


@dataclass
class Sqlite:
    """One SQLite build with waldio loaded into it."""
    driver: Any
    name: str

    def waldio(self, path: Path | str, **options: Any) -> drivers.Connection:
        """A connection through the waldio VFS, options as URI parameters."""
        return self.driver.connect(waldio.uri(path, **options), vfs="waldio")

    def last_error(self) -> str:
        """waldio's last error message in this SQLite build (waldio_last_error())."""
        c = self.driver.connect(":memory:", uri=False)
        try:
            return str(c.execute("SELECT waldio_last_error()")[0][0])
        finally:
            c.close()

    def stock(self, path: Path | str, reserve: int = 0) -> drivers.Connection:
        """A connection through SQLite's own unix VFS. reserve: reserved bytes
        per page for a new database (24 makes its B-trees identical to a
        waldio database's, frame for frame)."""
        conn = self.driver.connect(str(path), vfs="unix", uri=False)
        if reserve:
            conn.file_control_int(RESERVE_BYTES, reserve)
        return conn


def load_waldio(driver: Any) -> Any:
    """waldio in this SQLite build: a copy loaded here, or the one a test
    that ran waldio bench in this process loaded first (a second copy would
    be refused: "a VFS named waldio exists and is not waldio")."""
    if driver.name not in _loaded:
        if not driver.has_vfs(waldio.VFS_NAME):
            copy = _EXT_COPIES / ("waldio-%s.so" % driver.kind)
            shutil.copyfile(waldio.extension_path(), copy)
            driver.load_extension(str(copy), waldio.ENTRY_POINT)
        _loaded[driver.name] = driver
    return _loaded[driver.name]


@pytest.fixture(scope="session", params=[d.name for d in drivers.available_drivers()])
def sqlite(request: pytest.FixtureRequest) -> Sqlite:
    driver = drivers.driver_by_name(request.param)
    return Sqlite(load_waldio(driver), request.param)


@pytest.fixture(scope="session")
def apsw_sqlite() -> Sqlite:
    driver = drivers.driver_by_name("apsw")
    return Sqlite(load_waldio(driver), driver.name)


@pytest.fixture
def dbdir() -> Path:
    """A fresh directory on a file system with O_DIRECT (not tmpfs)."""
    base = os.environ.get("WALDIO_TEST_DIR", "/var/tmp")
    d = Path(tempfile.mkdtemp(prefix="waldio-test-", dir=base))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "second_layout_on_apsw: the test's layouts other than the default "
        "(standard) run on apsw's SQLite only (the default on both builds), to keep "
        "make test within its time")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Deselect, for tests marked second_layout_on_apsw, the cases of a
    non-default layout on the system SQLite."""
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if (item.get_closest_marker("second_layout_on_apsw")
                and params.get("layout", "standard") != "standard"
                and not str(params.get("sqlite", "apsw")).startswith("apsw")):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_EXT_COPIES, ignore_errors=True)
