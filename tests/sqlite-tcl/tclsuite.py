"""tclsuite — runs SQLite's own TCL test files against waldio.

The engine of tests/sqlite-tcl (run.py, regenerate.py and prove.py are its
command lines, tests/py/test_sqlite_tcl.py its pytest face; expected.py
judges what it returns). It owns:

* the variants: stock SQLite and waldio with default or forced options, all
  one testfixture binary told apart by environment variables (waldio_init.c),
  some run as an unprivileged user;
* running one test file in its own testfixture process, in its own fresh
  directory, with a timeout, optionally as an unprivileged user, on a copy of
  the file with `test.db-shm` renamed to waldio's `test.db-wal-shm`, or with
  the -wal sizes recorded or replayed (wal_sizes.tcl);
* parsing what tester.tcl printed: every failure with what it printed (the
  "Got"), and the number of rounds of each fault-injection loop.

Nothing here prints; callers get dataclasses and present them.
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD_SCRIPT = HERE / "build.sh"
WAL_SIZES_TCL = HERE / "wal_sizes.tcl"
UNPRIVILEGED_USER = "nobody"

# ----------------------------------------------------------------- variants


@dataclass(frozen=True)
class Variant:
    """How a file is run: which testfixture build (its default page size),
    which environment for waldio_init.c (inherited by every testfixture
    process a test spawns), as whom, and whether the file is copied with
    test.db-shm renamed to test.db-wal-shm first. A waldio variant names the
    stock variant it is judged by (`reference`); a stock variant has none."""
    name: str
    page_size: int            # SQLITE_DEFAULT_PAGE_SIZE of the build
    env: Dict[str, str]
    reference: str = ""
    unprivileged: bool = False
    shm_subst: bool = False


_WALDIO = {"WALDIO_TEST_VFS": "waldio"}
_STOCK = {"WALDIO_TEST_VFS": "stock"}

# testfixture as SQLite ships it makes 1024-byte pages unless a test asks for
# another size. waldio's default (auto) gives a new log the standard layout,
# SQLite's own -wal and -shm: the default* variants run it, with 1024- and
# 4096-byte pages and unprivileged. The slotted layouts run forced: pad4k and
# pad8k on the 1024 build, embed (pages of whole blocks) on the 4096 build.
# The *-user pair runs the read-only and permission files as an unprivileged
# user (as root, permissions are not enforced). stock-reserve and
# stock-persist-wal are the references prove.py compares two groups with.
VARIANTS: Dict[str, Variant] = {v.name: v for v in [
    Variant("stock", 1024, _STOCK),
    Variant("default", 1024, _WALDIO, "stock"),
    Variant("pad4k", 1024, dict(_WALDIO, WALDIO_TEST_LAYOUT="pad4k"), "stock"),
    Variant("pad8k", 1024, dict(_WALDIO, WALDIO_TEST_LAYOUT="pad8k"), "stock"),
    Variant("stock-p4096", 4096, _STOCK),
    Variant("default-p4096", 4096, _WALDIO, "stock-p4096"),
    Variant("embed", 4096, dict(_WALDIO, WALDIO_TEST_LAYOUT="embed"),
            "stock-p4096"),
    Variant("stock-user", 1024, _STOCK, unprivileged=True),
    Variant("default-user", 1024, _WALDIO, "stock-user", unprivileged=True),
    Variant("stock-reserve", 1024, {"WALDIO_TEST_VFS": "stock-reserve"}),
    Variant("stock-reserve-p4096", 4096, {"WALDIO_TEST_VFS": "stock-reserve"}),
    Variant("stock-persist-wal", 1024, {"WALDIO_TEST_VFS": "stock-persist-wal"}),
    Variant("stock-persist-wal-p4096", 4096,
            {"WALDIO_TEST_VFS": "stock-persist-wal"}),
    Variant("stock-reserve-user", 1024, {"WALDIO_TEST_VFS": "stock-reserve"},
            unprivileged=True),
    Variant("stock-persist-wal-user", 1024,
            {"WALDIO_TEST_VFS": "stock-persist-wal"}, unprivileged=True),
]}
WALDIO_VARIANTS = [n for n, v in VARIANTS.items() if v.reference]


def reference_of(variant: str, kind: str = "stock") -> str:
    """The stock variant of the same build and user that a waldio variant is
    compared with: plain ("stock"), or one of prove.py's references
    ("stock-reserve", "stock-persist-wal")."""
    v = VARIANTS[variant]
    if kind == "stock":
        return v.reference or variant
    name = (kind + ("-p4096" if v.page_size == 4096 else "")
            + ("-user" if v.unprivileged else ""))
    if name not in VARIANTS:
        raise KeyError(f"no {kind} reference for variant {variant}")
    return name


@dataclass(frozen=True)
class RunOptions:
    """What is done to the test file before it runs (all off: SQLite's file
    as it is). The -wal sizes: record every `file size X-wal` answer to a
    file, or replay such a record (wal_sizes.tcl)."""
    shm_subst: bool = False
    record_wal_sizes: Optional[Path] = None
    replay_wal_sizes: Optional[Path] = None

    @property
    def plain(self) -> bool:
        return not (self.shm_subst or self.record_wal_sizes
                    or self.replay_wal_sizes)


# ------------------------------------------------------------------ results

# How a file's run ended.
COMPLETE = "complete"        # tester.tcl printed "N errors out of M tests"
ENDED_EARLY = "ended-early"  # exited without that line (a Tcl error)
SIGNAL = "signal"            # killed by a signal (segfault, abort, ...)
TIMEOUT = "timeout"          # still running at the timeout; killed
NOT_RUN = "not-run"          # not run: nothing needed it

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
    failures: List[Tuple[str, str]]  # (case, what it printed), output order;
                                   # a case may fail more than once
    rounds: Dict[str, int]         # fault-injection loop -> rounds it ran
    returncode: int
    seconds: float
    last_case: Optional[str]       # the last case that started
    tail: List[str] = field(default_factory=list)  # last lines of output
    log: Optional[str] = None      # full output, when kept
    replay_diverged: bool = False  # wal_sizes.tcl replay left its record

    @property
    def failed(self) -> List[str]:
        """Failed case names, each once, first-failure order."""
        return list(dict.fromkeys(case for case, _ in self.failures))

    def gots(self, case: str) -> List[str]:
        """What each failure of `case` printed, in order."""
        return [got for c, got in self.failures if c == case]


def not_run(file: str, variant: str) -> FileResult:
    return FileResult(file=file, variant=variant, status=NOT_RUN, errors=None,
                      tests=None, failures=[], rounds={}, returncode=0,
                      seconds=0.0, last_case=None)


_SUMMARY = re.compile(r"^(\d+) errors out of (\d+) tests")
_GOT_LINE = re.compile(r"^! (\S+) got: +(.*)$")
_FAILURES = re.compile(r"^!Failures on these tests:(.*)$")
_CASE_START = re.compile(r"^(\S+)\.\.\.")
_GIVING_UP = "*** Giving up..."
_UNFREED = re.compile(r"^Unfreed memory: ")
_LEFT_OPEN = re.compile(r"^\d+ files were left open")
_DIVERGED = "waldio-replay: diverged"
# A round of a fault-injection loop: malloc_common.tcl do_faultsim_test
# names them NAME-FAULT.N; tester.tcl do_ioerr_test NAME.N.1/.2/.3.
FAULTSIM_ROUND = re.compile(
    r"^(.+-(?:oom|ioerr|full|shmerr|cantopen|interrupt)"
    r"(?:-(?:transient|persistent))?)\.(\d+)$")
_IOERR_ROUND = re.compile(r"^(.+)\.(\d+)\.2$")


def parse_output(text: str, ioerr_loops: bool = False) -> Dict[str, object]:
    """What tester.tcl printed: summary counts (None if absent), every
    failure with what it printed, the last case that started, the rounds of
    each fault loop (do_ioerr_test loops only where ioerr_loops: elsewhere
    NAME.N.2 is an ordinary case name)."""
    errors: Optional[int] = None
    tests: Optional[int] = None
    gave_up = diverged = False
    failures: List[Tuple[str, str]] = []
    rounds: Dict[str, int] = {}
    last_case: Optional[str] = None
    pending: Optional[str] = None   # "name..." seen, outcome not yet
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        m = _SUMMARY.match(line)
        if m:
            errors, tests = int(m.group(1)), int(m.group(2))
            continue
        m = _FAILURES.match(line)
        if m:
            named = {case for case, _ in failures}
            failures += [(n, "") for n in m.group(1).split() if n not in named]
            continue
        m = _GOT_LINE.match(line)
        if m:
            got = m.group(2)
            # A result with newlines continues up to the line ending in "]".
            while not got.endswith("]") and i < len(lines) \
                    and not _CASE_START.match(lines[i]):
                got += "\n" + lines[i]
                i += 1
            failures.append((m.group(1), "got: " + got))
            continue
        if line.startswith(_GIVING_UP):
            gave_up = True
            continue
        if line.startswith(_DIVERGED):
            diverged = True
            continue
        if line.startswith("Error: ") and pending:
            failures.append((pending, line))   # do_test's command raised
            pending = None
            continue
        if _UNFREED.match(line):
            failures.append((UNFREED_MEMORY, line))
            continue
        if _LEFT_OPEN.match(line):
            failures.append((FILES_LEFT_OPEN, line))
            continue
        m = _CASE_START.match(line)
        if m:
            last_case = pending = m.group(1)
            r = FAULTSIM_ROUND.match(pending) or (
                _IOERR_ROUND.match(pending) if ioerr_loops else None)
            if r:
                rounds[r.group(1)] = max(rounds.get(r.group(1), 0),
                                         int(r.group(2)))
    return {"errors": errors, "tests": tests, "failures": failures,
            "rounds": rounds, "last_case": last_case, "gave_up": gave_up,
            "diverged": diverged}


# ------------------------------------------------------------------ running

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


def substitute_shm(script: str) -> str:
    """The test script with the wal-index names of stock SQLite (test.db-shm,
    test.db2-shm, sv_test.db-shm) turned into waldio's (test.db-wal-shm, ...)."""
    return re.sub(r"\.db(2?)-shm", r".db\1-wal-shm", script)


def _script_dir(harness: Harness, name: str, opts: RunOptions,
                where: Path) -> Path:
    """SQLite's test/ directory, or for a changed file a directory of links
    to every file in it and the changed copy of `name` (tester.tcl finds its
    helpers next to the script it runs)."""
    if opts.plain:
        return harness.testdir
    farm = where / "test"
    farm.mkdir()
    for entry in harness.testdir.iterdir():
        if entry.name != name:
            (farm / entry.name).symlink_to(entry)
    script = (harness.testdir / name).read_text(errors="surrogateescape")
    if opts.shm_subst:
        script = substitute_shm(script)
    if opts.record_wal_sizes or opts.replay_wal_sizes:
        script = WAL_SIZES_TCL.read_text() + "\n" + script
    (farm / name).write_text(script, errors="surrogateescape")
    return farm


def unprivileged_prefix(work: Path, dirs: Sequence[Path]) -> List[str]:
    """The command prefix that drops root to UNPRIVILEGED_USER (setpriv,
    util-linux), after handing it the work directory; nothing when this
    process is not root (it is unprivileged already)."""
    if os.geteuid() != 0:
        return []
    user = pwd.getpwnam(UNPRIVILEGED_USER)
    os.chown(work, user.pw_uid, user.pw_gid)
    for d in dirs:
        d.chmod(0o755)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise FileNotFoundError("setpriv (util-linux) is needed to run as "
                                f"{UNPRIVILEGED_USER}")
    return [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
            "--clear-groups", "--"]


def run_file(harness: Harness, name: str, variant: str, timeout: float,
             workroot: Path, keep_log: bool = False,
             opts: RunOptions = RunOptions(),
             ioerr_loops: bool = False) -> FileResult:
    """Run test/<name> in a fresh directory under workroot (which must allow
    O_DIRECT: not tmpfs), in its own process group so that a timeout also
    ends the processes the test spawned."""
    v = VARIANTS[variant]
    if v.shm_subst:
        opts = RunOptions(True, opts.record_wal_sizes, opts.replay_wal_sizes)
    env = {k: val for k, val in os.environ.items()
           if not k.startswith("WALDIO_TEST_")}
    env.update(v.env)
    if opts.record_wal_sizes:
        env["WALDIO_TEST_SIZE_LOG"] = str(opts.record_wal_sizes)
    if opts.replay_wal_sizes:
        env["WALDIO_TEST_SIZE_REPLAY"] = str(opts.replay_wal_sizes)
    top = Path(tempfile.mkdtemp(prefix=f"{variant}-{name}-", dir=workroot))
    work = top / "work"
    work.mkdir()
    start = time.monotonic()
    try:
        scripts = _script_dir(harness, name, opts, top)
        prefix = (unprivileged_prefix(
            work, [top] + ([scripts] if scripts != harness.testdir else []))
                  if v.unprivileged else [])
        # No arguments after the file: tester.tcl parses them with `foreach a
        # $argv`, and a global `a` left behind breaks wal2.test. (So
        # tester.tcl's limit of 1000 failures per file stays: "*** Giving
        # up..." counts as an early end.)
        proc = subprocess.Popen(
            prefix + [str(harness.binary(variant)), str(scripts / name)],
            cwd=work, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        timed_out = False
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            out, _ = proc.communicate()
        finally:
            _kill_group(proc.pid)      # leftovers a test spawned and abandoned
        text = out.decode("utf-8", errors="replace")
        # Paths of this run's directories are the same in every run.
        text = text.replace(str(work), "<workdir>").replace(
            str(scripts), "<testdir>")
    finally:
        shutil.rmtree(top, ignore_errors=True)
    seconds = time.monotonic() - start
    parsed = parse_output(text, ioerr_loops)
    if timed_out:
        status = TIMEOUT
    elif proc.returncode < 0:
        status = SIGNAL
    elif parsed["tests"] is None or parsed["gave_up"]:
        status = ENDED_EARLY
    else:
        status = COMPLETE
    lines = text.splitlines()
    return FileResult(
        file=name, variant=variant, status=status,
        errors=parsed["errors"], tests=parsed["tests"],  # type: ignore[arg-type]
        failures=parsed["failures"], rounds=parsed["rounds"],  # type: ignore[arg-type]
        returncode=proc.returncode, seconds=round(seconds, 2),
        last_case=parsed["last_case"],  # type: ignore[arg-type]
        tail=[t[:300] for t in lines[-15:]], log=text if keep_log else None,
        replay_diverged=bool(parsed["diverged"]))


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class Task:
    """One run: a file, a variant, and what is done to the file."""
    file: str
    variant: str
    opts: RunOptions = RunOptions()


def work_root() -> Path:
    """Where runs make their directories: $WALDIO_TEST_DIR or /var/tmp."""
    return Path(os.environ.get("WALDIO_TEST_DIR", "/var/tmp"))


def run_many(harness: Harness, tasks: Sequence[Task], timeout: float,
             jobs: int = 1, keep_log: bool = False,
             progress: Optional[Callable[[FileResult], None]] = None,
             ioerr_loops: Iterable[str] = ()) -> List[FileResult]:
    """Every task, `jobs` processes at a time; results in task order whatever
    order they finished in. ioerr_loops: files whose NAME.N.2 cases are
    do_ioerr_test rounds."""
    base = Path(tempfile.mkdtemp(prefix="waldio-tcl-", dir=work_root()))
    base.chmod(0o755)          # unprivileged runs enter it
    loops = set(ioerr_loops)
    try:
        def one(task: Task) -> FileResult:
            r = run_file(harness, task.file, task.variant, timeout, base,
                         keep_log, task.opts, task.file in loops)
            if progress:
                progress(r)
            return r
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(one, tasks))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_suite(harness: Harness, plan: Sequence[Tuple[str, str]],
              timeout: float, needs_stock: Callable[[FileResult], bool],
              stock: str = "always", jobs: int = 1, keep_log: bool = False,
              progress: Optional[Callable[[FileResult], None]] = None,
              ioerr_loops: Iterable[str] = ()) -> List[FileResult]:
    """plan: (file, waldio variant) pairs. Runs them, and the stock variant
    each is judged by: for every file (stock="always"), or only where
    needs_stock(waldio result) says the judgement needs it ("needed")."""
    if stock not in ("always", "needed"):
        raise ValueError(f"stock must be 'always' or 'needed', not {stock!r}")
    tasks = [Task(f, v) for f, v in plan]
    stock_tasks = list(dict.fromkeys(Task(f, reference_of(v)) for f, v in plan))
    if stock == "always":
        return run_many(harness, stock_tasks + tasks, timeout, jobs,
                        keep_log, progress, ioerr_loops)
    results = run_many(harness, tasks, timeout, jobs, keep_log, progress,
                       ioerr_loops)
    want = list(dict.fromkeys(Task(r.file, reference_of(r.variant))
                              for r in results if needs_stock(r)))
    return results + run_many(harness, want, timeout, jobs, keep_log,
                              progress, ioerr_loops)


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
