"""SQLite's own TCL test suite (3.40.1 testfixture) with waldio as the default
VFS: DESIGN §0 makes it the judge of "correct everywhere stock SQLite is".

tests/sqlite-tcl/ owns the machinery (build.sh builds testfixture with
libwaldio linked in, cached in /var/tmp; tclsuite.py runs files; expected.py
judges them against expected-differences.txt, which lists every case that
may fail with exactly what it prints; prove.py re-derives its by-design
groups; lists.py says which files and why). This file runs make test's plan
(lists.make_test_plan) once, two files at a time, and asserts for every
(file, variant):

* every failure is listed for the variant and printed what the list says
  (a case listed as stock's: and stock printed the same); a fault loop with
  fewer rounds than on stock, or a run that did not reach its end, is a
  failure like any other (`<rounds:LOOP>`, `<end>`);
* no listed case passes (a stale line hides nothing and must go);

and for the whole list: the reserve, wal-kept, shm-name and wal-size groups
prove themselves (prove.py: stock references, -wal-shm renames, stock's -wal
sizes replayed), and each variant really runs what it claims (waldio with its
layout, or stock; as root or not).

Why this plan (measured on this machine kind, 2 vCPU: about 5.5 minutes for
the plan and 3.5 for the proofs, plus 3-4 minutes to build the two
testfixtures on a fresh machine): every WAL test file
and the fault-injection files with WAL loops, with default options (the
1024-byte-page testfixture as SQLite ships it), the cheap
pager/savepoint/backup/incrvacuum files, the fast WAL files again with pad4k
and pad8k forced and on a 4096-byte-page build (the embed layout), the files
that never make small pages with embed forced, and the read-only and
permission files as an unprivileged user. lists.py names what is left out
and why; `tests/sqlite-tcl/run.py --list all` runs everything.

KNOWN_BUGS: (file, variant) pairs that fail because of an open waldio bug,
each a strict xfail naming its item, so that the fix turns it into a failure
that says to remove the entry. tests/sqlite-tcl/FINDINGS.md has the
diagnosis of each.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

HERE = Path(__file__).resolve().parent
TCL_DIR = HERE.parent / "sqlite-tcl"
sys.path.insert(0, str(TCL_DIR))

import expected  # noqa: E402
import lists  # noqa: E402
import prove  # noqa: E402
import tclsuite  # noqa: E402

PLAN: List[Tuple[str, str]] = lists.make_test_plan()
PLAN_VARIANTS = sorted({v for _, v in PLAN})
REFERENCES = sorted({tclsuite.reference_of(v, kind) for v in PLAN_VARIANTS
                     for kind in ("stock", "stock-reserve", "stock-persist-wal")})
FILE_TIMEOUT = 900      # seconds; the slowest planned file (walthread) takes ~150
JOBS = 2
# Files whose proofs make test leaves to `tests/sqlite-tcl/prove.py`, and why.
PROVED_BY_COMMAND_ONLY: Dict[str, str] = {
    "pagerfault.test": "one shm-name case (pagerfault-28-pre) needs a 50-70 s "
                       "run of the whole file with -wal-shm",
}

# (file, variant) -> the item and a one-line diagnosis.
KNOWN_BUGS: Dict[Tuple[str, str], str] = {
}


def _build_problem() -> str:
    """Why testfixture cannot be built here, or ''."""
    if sys.platform != "linux":
        return "SQLite's TCL suite runs on Linux only"
    for tool in ("apt-get", "gcc", "make", "tclsh8.6", "xz", "flock", "setpriv"):
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
        return tclsuite.harness_for(PLAN_VARIANTS)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"tests/sqlite-tcl/build.sh failed ({e.returncode}); "
                    "its messages are above")


@pytest.fixture(scope="module")
def exp() -> expected.ExpectedList:
    return expected.load()


@pytest.fixture(scope="module")
def run(harness: tclsuite.Harness, exp: expected.ExpectedList
        ) -> Tuple[List[tclsuite.FileResult],
                   Dict[Tuple[str, str], expected.Verdict]]:
    results = tclsuite.run_suite(
        harness, PLAN, FILE_TIMEOUT, lambda r: expected.needs_stock(r, exp),
        stock="needed", jobs=JOBS, ioerr_loops=lists.IOERR_LOOPS)
    verdicts = {(v.file, v.variant): v
                for v in expected.judge_all(results, exp)}
    out = os.environ.get("WALDIO_TCL_JSON")
    if out:
        Path(out).write_text(json.dumps(
            {"results": [asdict(r) for r in results],
             "verdicts": [asdict(v) for v in verdicts.values()]}, indent=1))
    return results, verdicts


def _describe(v: expected.Verdict) -> str:
    lines = [f"{v.file} [{v.variant}]: {v.status} (stock: {v.stock_status}, "
             f"{v.stock_errors} errors), waldio errors {v.waldio_errors}, "
             f"last case {v.last_case}"]
    for case, why in list(v.unexpected.items())[:40]:
        lines.append(f"unexpected {case}: {why}")
    if v.status != tclsuite.COMPLETE:
        lines += ["  | " + t for t in v.tail]
    lines.append("new values by design: tests/sqlite-tcl/regenerate.py "
                 "(review its diff); a bug: FINDINGS.md")
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
    """Every failure (and an early end) is listed with what it printed."""
    v = run[1][(file, variant)]
    assert v.ok, _describe(v)


def test_no_listed_case_passes(run) -> None:
    """A line of expected-differences.txt whose case did not fail hides
    nothing and must go (regenerate.py drops it)."""
    stale = [f"{v.file} {case} [{v.variant}]"
             for v in run[1].values() for case in v.stale]
    assert not stale, "listed but not failing: " + ", ".join(stale)


def test_the_groups_prove_themselves(harness, exp) -> None:
    """prove.py over make test's variants: every reserve, wal-kept, shm-name
    and wal-size case (but those of PROVED_BY_COMMAND_ONLY) is re-derived
    from runs made for the purpose."""
    fixtures = {}

    def harness_for(variants) -> tclsuite.Harness:
        fixtures.update(tclsuite.harness_for(variants).testfixtures)
        return tclsuite.Harness(dict(fixtures), harness.testdir)

    files = {e.file for e in exp.entries} - set(PROVED_BY_COMMAND_ONLY)
    proofs = prove.prove_all(exp, set(prove.PROVED_GROUPS), files,
                             set(PLAN_VARIANTS), harness_for, FILE_TIMEOUT, JOBS)
    assert proofs, "nothing to prove: the groups are empty?"
    unproved = [f"{p.group} {p.file} {p.case} [{p.variant}]: {p.how}"
                for p in proofs if not p.proved]
    assert not unproved, "not proved:\n" + "\n".join(unproved)


_PROBE = """
sqlite3 db probe.db
db eval {CREATE TABLE t(x); PRAGMA journal_mode=WAL; INSERT INTO t VALUES(1)}
set vfs [lindex [sqlite3_vfs_list] 0]
set status [db eval {PRAGMA waldio}]
puts "VFS=$vfs"
puts "STATUS=$status"
puts "UID=[exec id -u]"
puts "RESERVE=[hexio_read probe.db 20 1]"
puts "PERSIST=[file_control_persist_wal db -1]"
db close
"""

# variant -> (default VFS, the "layout" the log reports ("" for stock),
# reserved bytes of a new database ("" where it is not checked), PERSIST_WAL
# as a connection reads it)
_PROBE_EXPECT = {
    "stock": ("unix", "", "00", "0 0"), "stock-p4096": ("unix", "", "00", "0 0"),
    "stock-user": ("unix", "", "00", "0 0"),
    "stock-reserve": ("unix", "", "18", "0 0"),
    "stock-reserve-p4096": ("unix", "", "18", "0 0"),
    "stock-reserve-user": ("unix", "", "18", "0 0"),
    "stock-persist-wal": ("unix", "", "00", "0 1"),
    "stock-persist-wal-p4096": ("unix", "", "00", "0 1"),
    "stock-persist-wal-user": ("unix", "", "00", "0 1"),
    # waldio's default (auto) gives a new log the standard layout, whatever
    # the page size, and a new database no reserved bytes
    "default": ("waldio", "standard", "00", "0 1"),
    "default-user": ("waldio", "standard", "00", "0 1"),
    "default-p4096": ("waldio", "standard", "00", "0 1"),
    "pad4k": ("waldio", "pad4k", "", "0 1"),
    "pad8k": ("waldio", "pad8k", "", "0 1"),
    "embed": ("waldio", "embed", "18", "0 1"),
}


@pytest.mark.parametrize("variant", sorted(set(PLAN_VARIANTS) | set(REFERENCES)))
def test_variant_runs_what_it_claims(harness, variant: str) -> None:
    """A variant that silently ran stock SQLite (or the wrong layout, as
    root instead of unprivileged, or without the reference's setting) would
    pass or prove everything; probe each binary and environment once."""
    v = tclsuite.VARIANTS[variant]
    binary = tclsuite.harness_for([variant]).binary(variant)
    top = Path(tempfile.mkdtemp(prefix="waldio-tcl-probe-",
                                dir=tclsuite.work_root()))
    try:
        work = top / "work"
        work.mkdir()
        (top / "probe.tcl").write_text(_PROBE)
        env = {k: val for k, val in os.environ.items()
               if not k.startswith("WALDIO_TEST_")}
        env.update(v.env)
        prefix = tclsuite.unprivileged_prefix(work, [top]) if v.unprivileged else []
        out = subprocess.run(prefix + [str(binary), str(top / "probe.tcl")],
                             cwd=work, env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        vfs, layout, reserve, persist = _PROBE_EXPECT[variant]
        assert f"VFS={vfs}\n" in out.stdout, out.stdout
        if layout:
            assert f'"layout":"{layout}"' in out.stdout, out.stdout
        else:
            assert '"layout"' not in out.stdout, out.stdout
        if reserve:
            assert f"RESERVE={reserve}\n" in out.stdout, out.stdout
        assert f"PERSIST={persist}\n" in out.stdout, out.stdout
        uid = int(out.stdout.split("UID=")[1].split()[0])
        assert (uid != 0) == (v.unprivileged or os.geteuid() != 0), out.stdout
    finally:
        shutil.rmtree(top, ignore_errors=True)
