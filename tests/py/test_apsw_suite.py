"""apsw's own test suite (``python -m apsw.tests``, 239 tests in apsw 3.54.1)
run twice in subprocesses: stock, and with waldio loaded first as the
process's default VFS (apsw_suite_runner.py says how, including
re-registration after ``apsw.initialize()``). waldio's outcome of every test
must equal stock's, except

* EXPECTED_DIFFERENCES: differences that follow from waldio's design, one
  per test with its reason (each must still differ, or it is removed);
* KNOWN_BUGS: failures caused by open waldio bugs (issue 9), each a strict
  xfail that names its item, so that the fix turns it into a failure to
  remove from the table.

Each entry carries a regular expression that the test's traceback must
match: a listed test that fails for another reason is a difference again.

A test during which the process dies by a signal (or hangs past the timeout)
is recorded as "crash" and the suite continues in a new process without it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

RUNNER = str(Path(__file__).resolve().parent / "apsw_suite_runner.py")
PROCESS_TIMEOUT = 900        # seconds for one process; the whole suite takes ~1.5 min
MAX_PROCESSES = 20           # restarts after crashes, per mode

# apsw test id -> (regular expression the failure's traceback must match,
# why waldio's outcome differs from stock's by design). Line numbers are
# apsw 3.54.1's.
EXPECTED_DIFFERENCES: Dict[str, Tuple[str, str]] = {
    # testVFS and testVFSWithWAL pass: the standard layout, the default,
    # reports the lower file's characteristics, as stock SQLite, from the
    # pager's first question on (db_file.c; testVFS was listed here while
    # waldio answered "power-safe" until its WAL was open).
}

# apsw test id -> (regular expression the failure's traceback matches while
# the bug is there, the issue-9 item and what goes wrong). A test may be in
# both tables: a known bug can fail it before the expected difference shows.
KNOWN_BUGS: Dict[str, Tuple[str, str]] = {
}


@dataclass
class SuiteResult:
    """Outcomes of one mode's run: test id -> outcome, detail, default VFS."""
    mode: str
    outcomes: Dict[str, str] = field(default_factory=dict)
    details: Dict[str, str] = field(default_factory=dict)
    default_vfs: Dict[str, str] = field(default_factory=dict)
    processes: int = 0

    def count(self, *outcomes: str) -> int:
        return sum(1 for o in self.outcomes.values() if o in outcomes)

    def summary(self) -> str:
        return ("apsw suite, %s: ran %d, failed %d, errors %d, crashed %d, skipped %d"
                " (%d process%s)" % (
                    self.mode, len(self.outcomes), self.count("fail"), self.count("error"),
                    self.count("crash"), self.count("skip"), self.processes,
                    "" if self.processes == 1 else "es"))


def read_records(path: Path) -> Iterator[dict]:
    if not path.exists():
        return
    with path.open(encoding="utf8") as f:
        for line in f:
            if line.endswith("\n"):
                yield json.loads(line)


def absorb(result: SuiteResult, records: Path, died_how: str) -> Tuple[bool, bool]:
    """Add one process's records to result. Returns (finished, progressed)."""
    finished = progressed = False
    running = None
    for r in read_records(records):
        if r.get("event") == "start":
            running = r["test"]
            result.default_vfs[running] = r.get("vfs", "")
            progressed = True
        elif r.get("event") == "end":
            finished = True
        elif "outcome" in r:
            result.outcomes[r["test"]] = r["outcome"]
            result.details[r["test"]] = r["detail"]
            running = None
    if running is not None and not finished:
        result.outcomes[running] = "crash"
        result.details[running] = died_how
    return finished, progressed


def run_process(mode: str, workdir: Path, index: int, done: List[str]) -> Tuple[Path, str]:
    """One runner process in a fresh scratch directory; returns its records
    file and how it ended."""
    scratch = workdir / ("%s-%d" % (mode, index))
    scratch.mkdir()
    records = workdir / ("%s-%d.jsonl" % (mode, index))
    cmd = [sys.executable, RUNNER, mode, str(records)]
    if done:
        exclude = workdir / ("%s-%d.exclude" % (mode, index))
        exclude.write_text("\n".join(done) + "\n")
        cmd += ["--exclude", str(exclude)]
    with open(workdir / ("%s-%d.out" % (mode, index)), "w") as out:
        try:
            proc = subprocess.run(cmd, cwd=scratch, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=PROCESS_TIMEOUT)
            how = "exit status %d" % proc.returncode
        except subprocess.TimeoutExpired:
            how = "timed out after %d s" % PROCESS_TIMEOUT
    shutil.rmtree(scratch, ignore_errors=True)
    return records, how


def run_suite(mode: str, workdir: Path) -> SuiteResult:
    """The whole suite, continued in a new process after each crash."""
    result = SuiteResult(mode)
    for index in range(MAX_PROCESSES):
        records, how = run_process(mode, workdir, index, sorted(result.outcomes))
        result.processes += 1
        finished, progressed = absorb(result, records, how)
        if finished or not progressed:
            break
    print(result.summary())
    return result


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    base = os.environ.get("WALDIO_TEST_DIR", "/var/tmp")
    d = Path(tempfile.mkdtemp(prefix="waldio-apsw-suite-", dir=base))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def stock(workdir: Path) -> SuiteResult:
    return run_suite("stock", workdir)


@pytest.fixture(scope="module")
def with_waldio(workdir: Path) -> SuiteResult:
    return run_suite("waldio", workdir)


def describe(result: SuiteResult, test: str) -> str:
    return "%s: %s\n%s" % (test, result.outcomes.get(test, "not run"),
                           result.details.get(test, "")[-1500:])


def test_stock_suite_passes(stock: SuiteResult) -> None:
    """The yardstick itself: stock runs every test and none fails."""
    assert len(stock.outcomes) >= 200, stock.summary()
    bad = [describe(stock, t) for t, o in stock.outcomes.items()
           if o in ("fail", "error", "crash")]
    assert not bad, "\n".join(bad)


def test_waldio_is_the_default_vfs_in_every_test(with_waldio: SuiteResult) -> None:
    not_waldio = {t: v for t, v in with_waldio.default_vfs.items() if v != "waldio"}
    assert not not_waldio


def listed_reason(table: Dict[str, Tuple[str, str]], result: SuiteResult,
                  test: str) -> Optional[str]:
    """The table's reason for test if its failure matches the listed signature."""
    if test not in table or result.outcomes.get(test) not in ("fail", "error", "crash"):
        return None
    signature, reason = table[test]
    return reason if re.search(signature, result.details.get(test, ""), re.S) else None


def test_waldio_outcomes_equal_stock(stock: SuiteResult, with_waldio: SuiteResult) -> None:
    print(stock.summary())
    print(with_waldio.summary())
    differ = []
    for test in sorted(set(stock.outcomes) | set(with_waldio.outcomes)):
        if stock.outcomes.get(test) == with_waldio.outcomes.get(test):
            continue
        if listed_reason(EXPECTED_DIFFERENCES, with_waldio, test) \
                or listed_reason(KNOWN_BUGS, with_waldio, test):
            continue
        differ.append("stock %s / waldio %s" % (stock.outcomes.get(test),
                                                describe(with_waldio, test)))
    assert not differ, "\n\n".join(differ)


@pytest.mark.parametrize("test", sorted(EXPECTED_DIFFERENCES))
def test_expected_difference_still_differs(stock: SuiteResult, with_waldio: SuiteResult,
                                           test: str) -> None:
    """A listed difference that no longer differs must leave the table."""
    assert stock.outcomes.get(test) == "ok", describe(stock, test)
    assert with_waldio.outcomes.get(test) != "ok", EXPECTED_DIFFERENCES[test][1]


@pytest.mark.parametrize("test", [
    pytest.param(t, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[t][1]))
    for t in sorted(KNOWN_BUGS)])
def test_known_bug(with_waldio: SuiteResult, test: str) -> None:
    """Fails while the bug's signature is in waldio's outcome (strict xfail)."""
    assert listed_reason(KNOWN_BUGS, with_waldio, test) is None, describe(with_waldio, test)
