"""Where the tests of `waldio bench` run (imported by tests/py/test_bench*.py).

``rundir``: a private directory under $WALDIO_TEST_DIR (default /var/tmp: the root
file system has O_DIRECT, tmpfs has not), removed afterwards.  ``in_tmp`` (autouse
where imported): the current directory is the test's tmp_path, because a run
without --json writes its record under ./results, which must not land in the
checkout.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

BASE = os.environ.get("WALDIO_TEST_DIR", "/var/tmp")


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def rundir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="waldio-benchtest-", dir=BASE)
    yield d
    shutil.rmtree(d, ignore_errors=True)
