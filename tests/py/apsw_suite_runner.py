"""Run apsw's own test suite (``python -m apsw.tests``) in this process,
optionally with waldio loaded first so that its VFS is the process default,
and record every test's outcome as one JSON line in a results file.

    python3 apsw_suite_runner.py {stock|waldio} RESULTS.jsonl [--exclude FILE] [TEST...]

--exclude FILE lists test ids, one a line, that are not run: how a caller
continues the suite after a process died by a signal in one test. TEST
arguments (e.g. APSW.testVFS) run only those tests, as unittest's own do.

Run it in an empty scratch directory: apsw's suite creates its files
(testdb, testdb2, ...) in the working directory.

SQLite's initialization registers the unix VFS as the default again, so after
every ``apsw.initialize()`` (some tests shut SQLite down and initialize it
again) and before every test, the runner loads waldio again when it is not the
default: what ``SQLITE_EXTRA_INIT`` does in SQLite's own test harness, and
what an application that re-initializes SQLite must do.

Each test writes {"test": ID, "event": "start", "vfs": DEFAULT-VFS} before it
runs (after the re-registration) and
{"test": ID, "outcome": OUTCOME, "detail": TEXT} after, flushed at once, so
a process that dies by a signal still names the test it died in. OUTCOME is
one of ok, fail, error, skip, xfail, uxpass. The last line is
{"event": "end", "ran": N}. The suite's own module runs as ``__main__``,
exactly as ``python -m apsw.tests`` runs it.
"""
from __future__ import annotations

import json
import runpy
import sys
import unittest
from pathlib import Path
from typing import Any, Optional, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))


class _Recorder:
    """The results file: one flushed JSON line per event."""

    out: Optional[TextIO] = None

    @classmethod
    def write(cls, record: dict[str, Any]) -> None:
        assert cls.out is not None
        cls.out.write(json.dumps(record) + "\n")
        cls.out.flush()


class RecordingResult(unittest.TextTestResult):
    """unittest's text result that also records each outcome in the file."""

    waldio = False

    def startTest(self, test: unittest.TestCase) -> None:
        if self.waldio:
            ensure_waldio_default()
        _Recorder.write({"test": test.id(), "event": "start", "vfs": default_vfs()})
        super().startTest(test)

    def _record(self, test: Any, outcome: str, detail: str = "") -> None:
        _Recorder.write({"test": test.id(), "outcome": outcome, "detail": detail[-4000:]})

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._record(test, "ok")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._record(test, "fail", self.failures[-1][1])

    def addError(self, test: Any, err: Any) -> None:
        super().addError(test, err)
        self._record(test, "error", self.errors[-1][1])

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._record(test, "skip", reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._record(test, "xfail")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._record(test, "uxpass")

    def stopTestRun(self) -> None:
        super().stopTestRun()
        _Recorder.write({"event": "end", "ran": self.testsRun})


def default_vfs() -> str:
    import apsw
    return str(apsw.vfs_names()[0])


def ensure_waldio_default() -> None:
    """Load waldio.so (again) unless its VFS is already the default."""
    import apsw
    import waldio
    if default_vfs() == waldio.VFS_NAME:
        return
    probe = apsw.Connection(":memory:")
    try:
        probe.enable_load_extension(True)
        probe.load_extension(str(waldio.extension_path()), waldio.ENTRY_POINT)
    finally:
        probe.close()


def hook_initialize() -> None:
    """Make apsw.initialize() register waldio again, as SQLITE_EXTRA_INIT would."""
    import apsw
    real = apsw.initialize

    def initialize() -> None:
        real()
        ensure_waldio_default()

    apsw.initialize = initialize


def without(suite: unittest.TestSuite, excluded: set[str]) -> unittest.TestSuite:
    """suite with the tests whose id is in excluded left out."""
    kept = unittest.TestSuite()
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            kept.addTest(without(item, excluded))
        elif item.id() not in excluded:
            kept.addTest(item)
    return kept


def exclude_tests(excluded: set[str]) -> None:
    """Make unittest's text runner leave out the excluded tests."""
    real = unittest.TextTestRunner.run

    def run(self: unittest.TextTestRunner, test: Any) -> Any:
        return real(self, without(test, excluded))

    unittest.TextTestRunner.run = run  # type: ignore[method-assign]


def main() -> int:
    mode, results = sys.argv[1], sys.argv[2]
    if mode not in ("stock", "waldio"):
        raise SystemExit("mode must be stock or waldio, not %r" % mode)
    _Recorder.out = open(results, "w", encoding="utf8")
    rest = sys.argv[3:]
    if rest[:1] == ["--exclude"]:
        exclude_tests(set(Path(rest[1]).read_text().split()))
        rest = rest[2:]
    if mode == "waldio":
        ensure_waldio_default()
        hook_initialize()
        RecordingResult.waldio = True
    unittest.TextTestRunner.resultclass = RecordingResult
    sys.argv = ["apsw.tests"] + rest
    try:
        runpy.run_module("apsw.tests", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return int(e.code or 0) if isinstance(e.code, int) or e.code is None else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
