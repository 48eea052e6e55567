"""Every command of README.md and docs/README.md runs as written.

The quick and safe shell blocks carry the mark `runnable` in their info string
(```` ```sh runnable ````): each runs here as written, as one `bash -e` script,
in a fresh directory on a file system with direct I/O, with `waldio` on PATH
being this checkout's (readme.shell). Every other shell block is run by the
test this file names for its section (OTHERS); a new shell block that is
neither marked nor named fails here, so no command of the two files is left
untested.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import readme

SHELLS = ("sh", "bash", "shell", "console")
# Section (file, heading) -> who runs its shell blocks that are not `runnable`.
OTHERS: Dict[Tuple[str, str], str] = {
    ("README.md", "Install"): "tests/py/test_wheel.py (pip), .ci/run (make build), "
                              "tests/py/test_install.py (CMake)",
    ("README.md", "Two commands"): ".ci/run (make test); make demo's bench is the "
                                   "default run of tests/py/test_bench_output.py",
    ("README.md", "Use it from C"): "tests/py/test_install.py",
    ("README.md", "Back it up with Litestream"): "tests/py/test_litestream.py",
}


def runnable() -> List[readme.Block]:
    return [b for path in (readme.README, readme.DOCS_README) for b in readme.fenced(path)
            if b.lang in SHELLS and "runnable" in b.marks]


def test_every_shell_block_is_run_by_some_test() -> None:
    """Each shell block is `runnable` or in a section OTHERS names, and OTHERS
    names no section that has no such block any more."""
    assert runnable(), "no block is marked runnable"
    unmarked = set()
    for path in (readme.README, readme.DOCS_README):
        for b in readme.fenced(path):
            if b.lang in SHELLS and "runnable" not in b.marks:
                assert (path.name, b.section) in OTHERS, (
                    f"{path.name}, '## {b.section}': a shell block neither marked "
                    f"`sh runnable` nor run by a test named in OTHERS:\n{b.code}")
                unmarked.add((path.name, b.section))
    assert unmarked == set(OTHERS)


@pytest.mark.parametrize("block", runnable(), ids=lambda b: b.section or "top")
def test_runnable_block(block: readme.Block, dbdir: Path) -> None:
    if shutil.which("sqlite3") is None and "sqlite3 " in block.code:
        pytest.skip("the sqlite3 shell is not installed")
    r = subprocess.run(["bash", "-e", "-c", block.code], cwd=dbdir,
                       env=readme.shell(dbdir / ".bin"), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{block.code}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-2000:]}"
