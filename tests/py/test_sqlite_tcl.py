"""SQLite's own TCL test suite (3.40.1 testfixture) with waldio as the default
VFS: DESIGN §0 makes it the judge of "correct everywhere stock SQLite is".

tests/sqlite-tcl/ owns the machinery (build.sh builds testfixture with
libwaldio linked in, cached in /var/tmp; tclsuite.py runs and judges files;
lists.py says which files and why; expected-differences.txt lists, per test
case, the differences that follow from waldio's design). This file runs
make test's plan (lists.make_test_plan) once, two files at a time, and asserts
for every (file, variant):

* the file ran to its end: no early end, no signal, no timeout;
* every failed case is listed in expected-differences.txt, or fails on stock
  SQLite too (the stock run of the same build is made only for files that need
  it to be judged).

And for the whole run: every listed difference still happens somewhere
(otherwise it hides nothing and must go), and each variant really runs waldio
with the layout it claims (or, stock, does not).

Why this plan (measured on this machine kind, 2 vCPU): every WAL test file with
default options (the 1024-byte-page testfixture as SQLite ships it), the cheap
pager/savepoint/backup/incrvacuum files, the fast WAL files again with pad4k
and pad8k forced and on a 4096-byte-page build (the embed layout), and the
files that never make small pages with embed forced. About 7 minutes on 2
cores, plus 3-4 minutes to build the two testfixtures on a fresh machine.
lists.py names what is left out (walcrash3's 700 s, files that stop at
test.db-shm by design, ...) and why; `tests/sqlite-tcl/run.py --list all` runs
everything.

KNOWN_BUGS: (file, variant) pairs that fail because of an open waldio bug
(issue 9), each a strict xfail naming its item, so that the fix turns it into
a failure that says to remove the entry. tests/sqlite-tcl/FINDINGS.md has the
diagnosis of each.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

HERE = Path(__file__).resolve().parent
TCL_DIR = HERE.parent / "sqlite-tcl"
sys.path.insert(0, str(TCL_DIR))

import lists  # noqa: E402
import tclsuite  # noqa: E402

PLAN: List[Tuple[str, str]] = lists.make_test_plan()
FILE_TIMEOUT = 900      # seconds; the slowest planned file (walfault) takes ~200
JOBS = 2

# (file, variant) -> the issue-9 item and a one-line diagnosis.
KNOWN_BUGS: Dict[Tuple[str, str], str] = {
}


def _build_problem() -> str:
    """Why testfixture cannot be built here, or ''."""
    if sys.platform != "linux":
        return "SQLite's TCL suite runs on Linux only"
    for tool in ("apt-get", "gcc", "make", "tclsh8.6", "xz", "flock"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (Debian packages: .ci/apt-packages)"
    if not Path("/usr/lib/tcl8.6/tclConfig.sh").exists():
        return "tcl8.6-dev is missing (.ci/apt-packages)"
    if not (HERE.parents[1] / "build" / "libwaldio.a").exists():
        return "build/libwaldio.a is missing (make build)"
    return ""


@pytest.fixture(scope="module")
def harness() -> tclsuite.Harness:
    problem = _build_problem()
    if problem:
        pytest.skip(problem)
    try:
        return tclsuite.harness_for({v for _, v in PLAN})
    except subprocess.CalledProcessError as e:
        pytest.fail(f"tests/sqlite-tcl/build.sh failed ({e.returncode}); "
                    "its messages are above")


@pytest.fixture(scope="module")
def expected() -> tclsuite.ExpectedList:
    return tclsuite.load_expected()


@pytest.fixture(scope="module")
def run(harness: tclsuite.Harness, expected: tclsuite.ExpectedList
        ) -> Tuple[List[tclsuite.FileResult], Dict[Tuple[str, str], tclsuite.Verdict]]:
    results = tclsuite.run_suite(harness, PLAN, FILE_TIMEOUT, expected,
                                 stock="needed", jobs=JOBS)
    verdicts = {(v.file, v.variant): v
                for v in tclsuite.judge_all(results, expected)}
    out = os.environ.get("WALDIO_TCL_JSON")
    if out:
        Path(out).write_text(json.dumps(
            tclsuite.to_json(results, list(verdicts.values())), indent=1))
    return results, verdicts


def _describe(v: tclsuite.Verdict) -> str:
    lines = [f"{v.file} [{v.variant}]: {v.status} (stock: {v.stock_status}, "
             f"{v.stock_errors} errors), waldio errors {v.waldio_errors}, "
             f"last case {v.last_case}"]
    if v.unexpected:
        lines.append("unexpected failures: " + " ".join(v.unexpected[:40])
                     + (" ..." if len(v.unexpected) > 40 else ""))
    lines += ["  | " + t for t in v.tail]
    return "\n".join(lines)


def _params() -> List:
    out = []
    for file, variant in PLAN:
        marks = []
        if (file, variant) in KNOWN_BUGS:
            marks.append(pytest.mark.xfail(strict=True,
                                           reason=KNOWN_BUGS[(file, variant)]))
        out.append(pytest.param(file, variant, marks=marks,
                                id=f"{variant}-{file}"))
    return out


@pytest.mark.parametrize("file,variant", _params())
def test_file(run, file: str, variant: str) -> None:
    """The file ran to its end, and each failure is by design or stock's."""
    v = run[1][(file, variant)]
    assert v.status == tclsuite.COMPLETE, _describe(v)
    assert not v.unexpected, _describe(v)


def test_every_listed_difference_still_happens(run, expected) -> None:
    """An entry of expected-differences.txt that no run needed hides nothing
    and must be removed (entries of files or variants outside the plan are
    not judged)."""
    results = [r for r in run[0]
               if tclsuite.VARIANTS[r.variant].stock != r.variant]
    stale = []
    for e in expected.entries:
        ran = [r for r in results if r.file == e.file
               and (not e.variants or r.variant in e.variants)]
        if not ran or any(r.status != tclsuite.COMPLETE for r in ran):
            continue
        if not any(e.matches(r.file, case, r.variant, r.why.get(case, ""))
                   for r in ran for case in r.failed):
            stale.append(f"{e.file} {e.case} ({e.group})")
    assert not stale, "listed but never failing: " + ", ".join(stale)


_LAYOUT_PROBE = """
sqlite3 db probe.db
db eval {CREATE TABLE t(x); PRAGMA journal_mode=WAL; INSERT INTO t VALUES(1)}
set vfs [lindex [sqlite3_vfs_list] 0]
set status [db eval {PRAGMA waldio}]
puts "VFS=$vfs"
puts "STATUS=$status"
db close
"""

# variant -> (default VFS, the "layout" the log reports; "" for stock)
_PROBE_EXPECT = {
    "stock": ("unix", ""), "stock-p4096": ("unix", ""),
    "default": ("waldio", "pad4k"),       # 1024-byte pages: auto pads
    "pad4k": ("waldio", "pad4k"), "pad8k": ("waldio", "pad8k"),
    "default-p4096": ("waldio", "embed"), "embed": ("waldio", "embed"),
}


@pytest.mark.parametrize("variant", sorted({v for _, v in PLAN}
                                           | {tclsuite.VARIANTS[v].stock
                                              for _, v in PLAN}))
def test_variant_runs_what_it_claims(harness, variant: str) -> None:
    """A variant that silently ran stock SQLite (or the wrong layout) would
    pass everything; probe each binary and environment once."""
    work = Path(tempfile.mkdtemp(prefix="waldio-tcl-probe-",
                                 dir=os.environ.get("WALDIO_TEST_DIR", "/var/tmp")))
    try:
        script = work / "probe.tcl"
        script.write_text(_LAYOUT_PROBE)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("WALDIO_TEST_")}
        env.update(tclsuite.VARIANTS[variant].env)
        out = subprocess.run([str(harness.binary(variant)), str(script)],
                             cwd=work, env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        vfs, layout = _PROBE_EXPECT[variant]
        assert f"VFS={vfs}\n" in out.stdout, out.stdout
        if layout:
            assert f'"layout":"{layout}"' in out.stdout, out.stdout
        else:
            assert '"layout"' not in out.stdout, out.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)
