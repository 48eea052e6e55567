"""tclsuite — runs SQLite's own TCL test files against waldio and judges them.

The engine of tests/sqlite-tcl (run.py is its command line, and
tests/py/test_sqlite_tcl.py its pytest face). It owns:

* the lists of test files and why each list is what it is;
* the variants: stock SQLite and waldio with default or forced options, all
  one testfixture binary told apart by environment variables (waldio_init.c);
* running one test file in its own testfixture process, in its own fresh
  directory, with a timeout, and parsing what tester.tcl printed;
* the expected-differences file and the comparison of a waldio run with the
  stock run of the same file.

Nothing here prints; callers get dataclasses and present them.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from fnmatch import fnmatchcase
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD_SCRIPT = HERE / "build.sh"
EXPECTED_FILE = HERE / "expected-differences.txt"

# ----------------------------------------------------------------- variants

@dataclass(frozen=True)
class Variant:
    """How a file is run: which testfixture build (its default page size) and
    which environment for waldio_init.c (inherited by every testfixture
    process a test spawns)."""
    name: str
    page_size: int            # SQLITE_DEFAULT_PAGE_SIZE of the build
    env: Dict[str, str]

    @property
    def stock(self) -> str:
        """The stock variant of the same build: what this one is judged by."""
        return "stock" if self.page_size == 1024 else f"stock-p{self.page_size}"


# testfixture as SQLite ships it makes 1024-byte pages unless a test asks for
# another size; with those waldio's automatic layout is pad4k. The embed layout
# needs pages of whole blocks, so its variant runs the 4096 build.
VARIANTS: Dict[str, Variant] = {v.name: v for v in [
    Variant("stock", 1024, {"WALDIO_TEST_VFS": "stock"}),
    Variant("default", 1024, {"WALDIO_TEST_VFS": "waldio"}),
    Variant("pad4k", 1024, {"WALDIO_TEST_VFS": "waldio",
                            "WALDIO_TEST_LAYOUT": "pad4k"}),
    Variant("pad8k", 1024, {"WALDIO_TEST_VFS": "waldio",
                            "WALDIO_TEST_LAYOUT": "pad8k"}),
    Variant("stock-p4096", 4096, {"WALDIO_TEST_VFS": "stock"}),
    Variant("default-p4096", 4096, {"WALDIO_TEST_VFS": "waldio"}),
    Variant("embed", 4096, {"WALDIO_TEST_VFS": "waldio",
                            "WALDIO_TEST_LAYOUT": "embed"}),
]}
WALDIO_VARIANTS = [n for n, v in VARIANTS.items() if v.stock != n]


# ------------------------------------------------------------------ results

# How a file's run ended.
COMPLETE = "complete"        # tester.tcl printed "N errors out of M tests"
ENDED_EARLY = "ended-early"  # exited without that line (a Tcl error)
SIGNAL = "signal"            # killed by a signal (segfault, abort, ...)
TIMEOUT = "timeout"          # still running at the timeout; killed
NOT_RUN = "not-run"          # stock side not run: nothing needed it

# Pseudo case names for errors tester.tcl adds after its summary line.
UNFREED_MEMORY = "<unfreed-memory>"
FILES_LEFT_OPEN = "<files-left-open>"


@dataclass
class FileResult:
    """One test file run in one variant."""
    file: str
    variant: str
    status: str
    errors: Optional[int]          # N of "N errors out of M tests"
    tests: Optional[int]           # M
    failed: List[str]              # failed case names, first-failure order
    why: Dict[str, str]            # case -> what it printed: "got: [...]" or
                                   # "Error: ...", first failure of the name
    returncode: int
    seconds: float
    last_case: Optional[str]       # the last case that started
    tail: List[str] = field(default_factory=list)  # last lines of output
    log: Optional[str] = None      # full output, when kept


_SUMMARY = re.compile(r"^(\d+) errors out of (\d+) tests")
_FAIL_LINE = re.compile(r"^! (\S+) expected: ")
_GOT_LINE = re.compile(r"^! (\S+) got: +(.*)$")
_FAILURES = re.compile(r"^!Failures on these tests:(.*)$")
_CASE_START = re.compile(r"^(\S+)\.\.\.")
_GIVING_UP = "*** Giving up..."
_UNFREED = re.compile(r"^Unfreed memory: ")
_LEFT_OPEN = re.compile(r"^\d+ files were left open")


def parse_output(text: str) -> Dict[str, object]:
    """What tester.tcl printed: summary counts (None if absent), failed case
    names, the last case that started."""
    errors: Optional[int] = None
    tests: Optional[int] = None
    gave_up = False
    failed: List[str] = []
    why: Dict[str, str] = {}
    last_case: Optional[str] = None
    pending: Optional[str] = None   # "name..." seen, outcome not yet

    def fail(name: str, text: str = "") -> None:
        if name not in failed:
            failed.append(name)
        if text and not why.get(name):
            why[name] = text[:2000]

    for line in text.splitlines():
        m = _SUMMARY.match(line)
        if m:
            errors, tests = int(m.group(1)), int(m.group(2))
            continue
        m = _FAILURES.match(line)
        if m:
            for name in m.group(1).split():
                fail(name)
            continue
        m = _FAIL_LINE.match(line)
        if m:
            fail(m.group(1))
            continue
        m = _GOT_LINE.match(line)
        if m:
            fail(m.group(1), "got: " + m.group(2))
            continue
        if line.startswith(_GIVING_UP):
            gave_up = True
            continue
        if line.startswith("Error: ") and pending:
            fail(pending, line)    # do_test's command raised a Tcl error
            continue
        if _UNFREED.match(line):
            fail(UNFREED_MEMORY, line)
            continue
        if _LEFT_OPEN.match(line):
            fail(FILES_LEFT_OPEN, line)
            continue
        m = _CASE_START.match(line)
        if m:
            last_case = pending = m.group(1)
    return {"errors": errors, "tests": tests, "failed": failed, "why": why,
            "last_case": last_case, "gave_up": gave_up}


@dataclass(frozen=True)
class Harness:
    """The testfixture of each build (by default page size) and SQLite's
    test/ directory they run files from."""
    testfixtures: Dict[int, Path]
    testdir: Path

    def binary(self, variant: str) -> Path:
        size = VARIANTS[variant].page_size
        if size not in self.testfixtures:
            raise KeyError(f"variant {variant} needs the {size}-byte-page "
                           "testfixture, which was not built")
        return self.testfixtures[size]


def run_file(harness: Harness, name: str, variant: str, timeout: float,
             workroot: Path, keep_log: bool = False) -> FileResult:
    """Run test/<name> in a fresh directory under workroot (which must allow
    O_DIRECT: not tmpfs), in its own process group so that a timeout also
    ends the processes the test spawned."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("WALDIO_TEST_")}
    env.update(VARIANTS[variant].env)
    work = Path(tempfile.mkdtemp(prefix=f"{variant}-{name}-", dir=workroot))
    start = time.monotonic()
    # No arguments after the file: tester.tcl parses them with `foreach a
    # $argv`, and a global `a` left behind breaks wal2.test. (So tester.tcl's
    # limit of 1000 failures per file stays: "*** Giving up..." counts as an
    # early end.)
    proc = subprocess.Popen(
        [str(harness.binary(variant)), str(harness.testdir / name)],
        cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        out, _ = proc.communicate()
    finally:
        _kill_group(proc.pid)      # leftovers a test spawned and abandoned
    seconds = time.monotonic() - start
    text = out.decode("utf-8", errors="replace")
    parsed = parse_output(text)
    if timed_out:
        status = TIMEOUT
    elif proc.returncode < 0:
        status = SIGNAL
    elif parsed["tests"] is None or parsed["gave_up"]:
        status = ENDED_EARLY
    else:
        status = COMPLETE
    shutil.rmtree(work, ignore_errors=True)
    lines = text.splitlines()
    return FileResult(
        file=name, variant=variant, status=status,
        errors=parsed["errors"], tests=parsed["tests"],  # type: ignore[arg-type]
        failed=parsed["failed"], why=parsed["why"],  # type: ignore[arg-type]
        returncode=proc.returncode,
        seconds=round(seconds, 2), last_case=parsed["last_case"],  # type: ignore[arg-type]
        tail=[t[:300] for t in lines[-15:]], log=text if keep_log else None)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_many(harness: Harness, tasks: Sequence[tuple], timeout: float,
             jobs: int = 1, keep_log: bool = False,
             progress: Optional[Callable[[FileResult], None]] = None
             ) -> List[FileResult]:
    """Every (file, variant) task, `jobs` processes at a time; results in
    task order whatever order they finished in."""
    root = Path(os.environ.get("WALDIO_TEST_DIR", "/var/tmp"))
    base = Path(tempfile.mkdtemp(prefix="waldio-tcl-", dir=root))
    try:
        def one(task: tuple) -> FileResult:
            r = run_file(harness, task[0], task[1], timeout, base, keep_log)
            if progress:
                progress(r)
            return r
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(one, tasks))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def needs_stock(r: FileResult, expected: "ExpectedList") -> bool:
    """Whether judging a waldio result needs the stock run of its file: only
    failures not listed as expected, or a run that did not end normally, can
    be excused or explained by stock failing too."""
    if r.status != COMPLETE:
        return True
    return any(not expected.find(r.file, case, r.variant, r.why.get(case, ""))
               for case in r.failed)


def run_suite(harness: Harness, plan: Sequence[tuple], timeout: float,
              expected: "ExpectedList", stock: str = "always",
              jobs: int = 1, keep_log: bool = False,
              progress: Optional[Callable[[FileResult], None]] = None
              ) -> List[FileResult]:
    """plan: (file, waldio variant) pairs. Runs them, and the stock variant of
    the same build: for every file (stock="always"), or only where a waldio
    result needs it to be judged ("needed", see needs_stock)."""
    if stock not in ("always", "needed"):
        raise ValueError(f"stock must be 'always' or 'needed', not {stock!r}")
    stock_tasks = list(dict.fromkeys((f, VARIANTS[v].stock) for f, v in plan))
    if stock == "always":
        return run_many(harness, stock_tasks + list(plan), timeout, jobs,
                        keep_log, progress)
    results = run_many(harness, plan, timeout, jobs, keep_log, progress)
    want = list(dict.fromkeys((r.file, VARIANTS[r.variant].stock)
                              for r in results if needs_stock(r, expected)))
    return results + run_many(harness, want, timeout, jobs, keep_log, progress)


# --------------------------------------------------- expected differences

@dataclass(frozen=True)
class Expected:
    """One line of expected-differences.txt. `case` is a test case name, or a
    glob (fnmatch) for the cases one loop of a test file generates with one
    and the same assertion (walcrash2-1.2.*: 1023 cases, each the -wal size).
    `variants` empty: every waldio variant; else only those. `pattern`: a
    regular expression that what the case printed must contain (re.search),
    where the name alone is not specific enough (fault-injection loops)."""
    file: str
    case: str
    group: str
    reason: str
    variants: tuple = ()
    pattern: str = ""

    def matches(self, file: str, case: str, variant: str,
                why: str = "") -> bool:
        return (self.file == file and fnmatchcase(case, self.case)
                and (not self.variants or variant in self.variants)
                and (not self.pattern or re.search(self.pattern, why) is not None))


class ExpectedList:
    """The expected differences: by-design reasons for a waldio run to fail
    a case that stock SQLite passes. Never a bug."""

    def __init__(self, entries: Sequence[Expected]) -> None:
        self.entries = list(entries)
        self._by_file: Dict[str, List[Expected]] = {}
        for e in self.entries:
            self._by_file.setdefault(e.file, []).append(e)

    def find(self, file: str, case: str, variant: str,
             why: str = "") -> Optional[Expected]:
        for e in self._by_file.get(file, []):
            if e.matches(file, case, variant, why):
                return e
        return None

    def groups(self) -> Dict[str, List[Expected]]:
        out: Dict[str, List[Expected]] = {}
        for e in self.entries:
            out.setdefault(e.group, []).append(e)
        return out


def load_expected(path: Path = EXPECTED_FILE) -> ExpectedList:
    """The expected-differences file, one line per case:
        FILE[@VARIANT,...]  CASE-OR-GLOB  GROUP  [~REGEX]  REASON...
    whitespace-separated (a REGEX has no spaces: write \\s), `#` comments."""
    entries: List[Expected] = []
    seen: set = set()
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 3)
        if len(parts) < 4:
            raise ValueError(f"{path}:{lineno}: want `file case group reason`")
        file, _, scope = parts[0].partition("@")
        variants = tuple(v for v in scope.split(",") if v)
        for v in variants:
            if v not in WALDIO_VARIANTS:
                raise ValueError(f"{path}:{lineno}: unknown variant {v!r}")
        reason, pattern = parts[3], ""
        if reason.startswith("~"):
            pattern, _, reason = reason[1:].partition(" ")
            re.compile(pattern)
            if not reason.strip():
                raise ValueError(f"{path}:{lineno}: a pattern needs a reason")
        e = Expected(file, parts[1], parts[2], reason.strip(), variants,
                     pattern)
        if (e.file, e.case, e.variants, e.pattern) in seen:
            raise ValueError(f"{path}:{lineno}: {e.file} {e.case} listed twice")
        seen.add((e.file, e.case, e.variants, e.pattern))
        entries.append(e)
    return ExpectedList(entries)


@dataclass
class Verdict:
    """A waldio run of one file judged against the stock run of that file."""
    file: str
    variant: str
    status: str
    stock_status: str
    stock_errors: Optional[int]
    waldio_errors: Optional[int]
    expected: List[str]            # waldio failures listed as by design
    also_stock: List[str]          # waldio failures stock has too
    unexpected: List[str]          # everything else: bugs until shown not
    seconds: float
    stock_seconds: float
    last_case: Optional[str]
    tail: List[str]

    @property
    def ok(self) -> bool:
        """No unexpected failure, and the file ran to its end."""
        return not self.unexpected and self.status == COMPLETE


def judge(waldio: FileResult, stock: FileResult,
          expected: ExpectedList) -> Verdict:
    exp: List[str] = []
    both: List[str] = []
    unexp: List[str] = []
    stock_failed = set(stock.failed)
    for case in waldio.failed:
        if expected.find(waldio.file, case, waldio.variant,
                         waldio.why.get(case, "")):
            exp.append(case)
        elif case in stock_failed:
            both.append(case)
        else:
            unexp.append(case)
    return Verdict(
        file=waldio.file, variant=waldio.variant, status=waldio.status,
        stock_status=stock.status, stock_errors=stock.errors,
        waldio_errors=waldio.errors, expected=exp, also_stock=both,
        unexpected=unexp, seconds=waldio.seconds, stock_seconds=stock.seconds,
        last_case=waldio.last_case, tail=waldio.tail)


def judge_all(results: Iterable[FileResult],
              expected: ExpectedList) -> List[Verdict]:
    """Verdicts for every waldio result, each against the stock run of the
    same file and build. Where stock was not run (nothing needed it: see
    needs_stock) its side is reported as not run."""
    results = list(results)
    stock = {(r.file, r.variant): r for r in results
             if VARIANTS[r.variant].stock == r.variant}
    out = []
    for r in results:
        sv = VARIANTS[r.variant].stock
        if sv == r.variant:
            continue
        s = stock.get((r.file, sv)) or FileResult(
            file=r.file, variant=sv, status=NOT_RUN, errors=None,
            tests=None, failed=[], why={}, returncode=0, seconds=0.0,
            last_case=None)
        out.append(judge(r, s, expected))
    return out


def to_json(results: Sequence[FileResult], verdicts: Sequence[Verdict]) -> dict:
    return {"results": [asdict(r) for r in results],
            "verdicts": [dict(asdict(v), ok=v.ok) for v in verdicts]}


# ---------------------------------------------------------------- building

def build(lib: Optional[Path] = None, page_size: int = 1024) -> Path:
    """Run build.sh (cached; rebuilds when libwaldio.a changed) and return the
    testfixture path. Raises CalledProcessError; build.sh's messages go to
    stderr."""
    cmd = [str(BUILD_SCRIPT), "--page-size", str(page_size)]
    if lib:
        cmd += ["--lib", str(lib)]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return Path(done.stdout.strip().splitlines()[-1])


def harness_for(variants: Iterable[str], lib: Optional[Path] = None,
                testfixture: Optional[Path] = None) -> Harness:
    """Build what the variants need. testfixture: use this binary for the
    1024-byte-page build instead of building it."""
    sizes = sorted({VARIANTS[v].page_size for v in variants})
    fixtures: Dict[int, Path] = {}
    if 1024 in sizes and testfixture:
        fixtures[1024] = testfixture
    todo = [size for size in sizes if size not in fixtures]
    if todo:
        # Each testfixture is one single-threaded compiler run: build the
        # page-size flavours side by side (build.sh locks each separately;
        # the first download is shared under one lock).
        with ThreadPoolExecutor(max_workers=len(todo)) as pool:
            for size, path in zip(todo, pool.map(lambda n: build(lib, n), todo)):
                fixtures[size] = path
    return Harness(fixtures, source_testdir(next(iter(fixtures.values()))))


def source_testdir(testfixture: Path) -> Path:
    """SQLite's test/ directory next to the build directory of testfixture."""
    cache = testfixture.resolve().parent.parent
    dirs = sorted(cache.glob("sqlite3-*/test"))
    if not dirs:
        raise FileNotFoundError(f"no sqlite3-*/test under {cache}")
    return dirs[-1]
