"""The engine of ``waldio trace``: block-level I/O attribution of SQLite workloads.

What it does (docs/trace.md is the user-facing description):

1. **Capture** (:class:`Capture`): one private tracefs instance per traced
   repetition that records, besides :class:`waldio.blocktrace.BlockTrace`'s
   block requests (``block_rq_issue/complete/requeue``, flush and FUA flags),
   the file-system *sync events*: which inode an ``fsync``/``fdatasync`` (or an
   O_DSYNC write) synced, when it started and when it returned.  On ext4:
   ``ext4_sync_file_enter/exit`` plus ``jbd2_start/end_commit`` and
   ``ext4_fc_commit_start``; on xfs ``xfs_file_fsync``/``xfs_dir_fsync``, on
   btrfs ``btrfs_sync_file``, each closed by the ``sys_exit_*`` of the same
   thread (``fsync``, ``fdatasync``, ``pwritev2``).
2. **File extents** (:class:`FileWatcher`): FIEMAP snapshots of the database's
   files (db, -wal, -journal, -shm) taken by a polling thread and at every
   open and close of a connection, so files deleted during the run (rollback
   journals, the stock WAL at close) stay attributable; plus the inode
   numbers of those files (``stat``), to tell which file a sync event synced.
3. **Brackets**: the start and end of every SQLite transaction on
   ``CLOCK_MONOTONIC``, the clock the capture uses (``trace_clock=mono``;
   checked on every capture with a marker), and the windows of a run.
4. **Analysis** (:meth:`TraceSession.analyze`): every request is classified
   by device and sector range with :func:`waldio.blocktrace.classify` (never
   by process name), and assigned to the transaction whose bracket holds its
   issue time and to the sync call in progress at that time.  Output: bytes,
   requests, flushes and FUA writes per class, per window and per
   transaction; JOJ bytes; a timeline.
5. **Workloads** (:class:`TracedBench`): ``waldio bench``'s own engine
   (:class:`waldio.bench.Bench`) runs the workload; this module only wraps its
   connection opener (to bracket transactions) and its repetition (to trace
   it).  Measured repetitions alternate traced / untraced, so the trace
   overhead is measured in the same run.

Definitions (also printed with every result and written into the JSON):

* ``data`` = bytes written to file data (db, wal, journal, shm, other files,
  and ``unattributed-data``: data blocks of no known file);
* ``journal`` = bytes written to the file-system journal: the ext4 journal
  (internal inode or external device, fast-commit area included), the xfs
  log; on btrfs, which has no journal region, metadata written *inside a sync
  call* (the fsync log tree and the superblocks it updates);
* ``metadata`` = file-system metadata written in place (all other REQ_META or
  static-metadata writes);
* ``total`` = data + journal + metadata = every byte written;
* **JOJ** = journal bytes written while an ``fsync``/``fdatasync`` of SQLite's
  own journal (the ``-wal`` or the ``-journal``) or of their directory was in
  progress (on ext4, a journal write inside a jbd2 commit belongs to the sync
  call during which that commit *started*; a commit that started outside any
  sync call is background and never JOJ).

Invariants:

* Every loop device, mount and tracefs instance is released on every exit
  path (:mod:`waldio.fsimage` and ``BlockTrace.__exit__``); the polling
  thread is stopped before the capture ends.
* The sum of the classes of a window equals its total bytes written, and the
  sum over transactions plus the bytes between transactions equals the window
  (checked on every analysis).
* Nothing here times anything: ops/s come from ``waldio bench``'s own clock.
"""
from __future__ import annotations

import bisect
import contextlib
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from . import bench as B
from . import blocktrace as bt
from . import params as _params

SCHEMA_VERSION = 1

# Class names of SQLite's files (blocktrace: named file classes).
DB, WAL, JOURNAL, SHM, DIRECTORY = "db", "wal", "journal", "shm", "directory"
SQLITE_CLASSES = (DB, WAL, JOURNAL, SHM)
# Syncs whose journal writes are JOJ: SQLite's own journal and its directory
# (SQLite fsyncs the directory only after creating a journal or a WAL).
JOJ_SYNC_CLASSES = (WAL, JOURNAL, DIRECTORY)
UNIDENTIFIED = "unidentified"
BACKGROUND = "none"                 # no sync call in progress
COLUMNS = ("data", "journal", "joj", "metadata", "total")
COUNTS = ("requests", "flushes", "fua_writes", "preflush_writes")
TIMELINE_LIMIT = 50_000             # rows kept per traced repetition

DEFINITIONS = {
    "data": "bytes written to file data: db, wal, journal, shm, other files and "
            "unattributed-data (data blocks of no known file)",
    "journal": "bytes written to the file-system journal: the ext4 journal (journal inode or "
               "external device, fast-commit area included) or the xfs log; btrfs has no journal "
               "region: there it is metadata written inside a sync call (fsync log tree and the "
               "superblocks it updates)",
    "metadata": "file-system metadata written in place (static metadata ranges and every other "
                "REQ_META write outside the journal)",
    "total": "data + journal + metadata: every byte written to the traced devices",
    "joj": "journal bytes written while an fsync/fdatasync of SQLite's own journal (-wal or "
           "-journal) or of their directory was in progress; on ext4 a journal write inside a "
           "jbd2 commit belongs to the sync call during which that commit started, and a commit "
           "that started outside every sync call is background, never JOJ",
    "transaction window": "from just before a transaction's first statement (BEGIN, or the "
                          "autocommit statement; the open in the open-close regime) to just after "
                          "its COMMIT returned, on CLOCK_MONOTONIC; a request belongs to it when "
                          "it was issued to the driver inside it",
    "total window": "from the start of the timed region (first transaction, or the timed open) "
                    "to the first open of the correctness check, i.e. after the untimed close and "
                    "waldio bench's final os.sync(): deferred write-back and the checkpoint at "
                    "close are included",
    "first transaction": "transaction 0 of a repetition: the first insert into the fresh copy of "
                         "the template database (empty table), right after the connection was "
                         "opened (the stock WAL file already exists then: SQLite creates it at "
                         "open)",
    "steady state": "the mean over transactions steady_after..N-1 of a repetition (the first "
                    "steady_after transactions are its warm-up)",
}


class TraceError(Exception):
    """Tracing cannot run or cannot be trusted; the message says why."""


def _mono() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def unavailable_reason(kind: str = "ext4") -> Optional[str]:
    """None if ``kind`` can be traced here, else why not (for pytest.skip and the CLI)."""
    from . import fsimage
    return fsimage.unavailable_reason(kind) or bt.trace_unavailable_reason()


def sqlite_files(db: str) -> Dict[str, List[str]]:
    """The files SQLite and libwaldio keep next to database ``db``, by class."""
    return {DB: [db], WAL: [db + "-wal"], JOURNAL: [db + "-journal"],
            SHM: [db + "-shm", db + "-wal-shm"]}


# ==========================================================================
# Capture: block requests + sync events in one tracefs instance
# ==========================================================================

@dataclass
class FsEvent:
    """One parsed file-system event (times on the trace clock, seconds)."""

    ts: float
    tid: int
    kind: str            # sync_enter, sync_exit, dir_sync_enter, commit_start, commit_end,
    #                      fc_commit, sys_exit
    ino: int = 0
    parent: Optional[int] = None
    datasync: Optional[int] = None
    number: Optional[int] = None      # jbd2 transaction id
    fsid: str = ""
    syscall: str = ""
    offset: int = 0                   # map: file offset (ext4, xfs: in fs blocks; btrfs: bytes)
    address: int = 0                  # map: ext4 block, xfs fsblock, btrfs logical byte
    length: int = 0                   # map: ext4, xfs: blocks; btrfs: bytes


_FS_HEADER = re.compile(r"^\s*(?P<task>.+?)-(?P<tid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+"
                        r"(?:\S+\s+)?(?P<ts>\d+\.\d+):\s+(?P<rest>.*)$")
_EXT4_SYNC_ENTER = re.compile(r"^ext4_sync_file_enter: dev \d+,\d+ ino (\d+) parent (\d+) datasync (\d+)")
_EXT4_SYNC_EXIT = re.compile(r"^ext4_sync_file_exit: dev \d+,\d+ ino (\d+) ret (-?\d+)")
_JBD2 = re.compile(r"^jbd2_(start|end)_commit: dev \d+,\d+ transaction (\d+)")
_FC = re.compile(r"^ext4_fc_commit_start: dev \d+,\d+ tid (\d+)")
_XFS_SYNC = re.compile(r"^xfs_(file|dir)_fsync: dev \d+:\d+ ino 0x([0-9a-f]+)")
_BTRFS_SYNC = re.compile(r"^btrfs_sync_file: ([0-9a-f-]+): root=\S+ ino=(\d+) parent=(\d+) datasync=(\d+)")
_SYS_EXIT = re.compile(r"^(sys_(?:fsync|fdatasync|pwritev2)) -> ")
# Online extent maps: where the file system put (or found) a file's blocks.
_EXT4_MAP = re.compile(r"^ext4_ext_map_blocks_exit: dev \d+,\d+ ino (\d+) flags\s+\S*\s*lblk (\d+) "
                       r"pblk (\d+) len (\d+) mflags\s+\S*\s*ret (-?\d+)")
_XFS_MAP = re.compile(r"^xfs_(?:map_blocks|iomap)_(?:found|alloc): dev \d+:\d+ ino 0x([0-9a-f]+) .*?"
                      r"fork (\S+) startoff 0x([0-9a-f]+) startblock 0x([0-9a-f]+) fsbcount 0x([0-9a-f]+)")
_BTRFS_MAP = re.compile(r"^btrfs_ordered_extent_add: ([0-9a-f-]+): root=\S+ ino=(\d+) file_offset=(\d+) "
                        r"start=(\d+) len=(\d+) disk_len=(\d+)")

# (group, event, filtered by the file system's dev_t?)
_FS_EVENTS: Dict[str, Tuple[Tuple[str, str, bool], ...]] = {
    "ext4": (("ext4", "ext4_sync_file_enter", True), ("ext4", "ext4_sync_file_exit", True),
             ("jbd2", "jbd2_start_commit", True), ("jbd2", "jbd2_end_commit", True),
             ("ext4", "ext4_fc_commit_start", True), ("ext4", "ext4_ext_map_blocks_exit", True)),
    "xfs": (("xfs", "xfs_file_fsync", True), ("xfs", "xfs_dir_fsync", True),
            ("xfs", "xfs_map_blocks_found", True), ("xfs", "xfs_map_blocks_alloc", True),
            ("xfs", "xfs_iomap_found", True), ("xfs", "xfs_iomap_alloc", True)),
    "btrfs": (("btrfs", "btrfs_sync_file", False), ("btrfs", "btrfs_ordered_extent_add", False)),
}
# Closes a sync window on xfs and btrfs (their sync tracepoints have no exit).
_SYSCALL_EXITS = (("syscalls", "sys_exit_fsync"), ("syscalls", "sys_exit_fdatasync"),
                  ("syscalls", "sys_exit_pwritev2"))


def parse_fs_line(line: str) -> Optional[FsEvent]:
    """An :class:`FsEvent` if ``line`` is one of the sync/commit events, else None."""
    head = _FS_HEADER.match(line)
    if head is None:
        return None
    rest, ts, tid = head.group("rest"), float(head.group("ts")), int(head.group("tid"))
    if rest.startswith("ext4_ext_map_blocks_exit"):
        m = _EXT4_MAP.match(rest)
        if m is None:
            return None
        return FsEvent(ts, tid, "map", int(m.group(1)), offset=int(m.group(2)),
                       address=int(m.group(3)), length=int(m.group(4)) if int(m.group(5)) > 0 else 0)
    if rest.startswith(("xfs_map_blocks_", "xfs_iomap_")):
        m = _XFS_MAP.match(rest)
        if m is None:
            return None
        return FsEvent(ts, tid, "map", int(m.group(1), 16), offset=int(m.group(3), 16),
                       address=int(m.group(4), 16),
                       length=int(m.group(5), 16) if m.group(2) == "data" else 0)
    if rest.startswith("btrfs_ordered_extent_add"):
        m = _BTRFS_MAP.match(rest)
        if m is None:
            return None
        return FsEvent(ts, tid, "map", int(m.group(2)), fsid=m.group(1), offset=int(m.group(3)),
                       address=int(m.group(4)), length=int(m.group(6)))
    if rest.startswith("ext4_sync_file_enter"):
        m = _EXT4_SYNC_ENTER.match(rest)
        return FsEvent(ts, tid, "sync_enter", int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None
    if rest.startswith("ext4_sync_file_exit"):
        m = _EXT4_SYNC_EXIT.match(rest)
        return FsEvent(ts, tid, "sync_exit", int(m.group(1))) if m else None
    if rest.startswith("jbd2_"):
        m = _JBD2.match(rest)
        return FsEvent(ts, tid, f"commit_{m.group(1) if m.group(1) == 'start' else 'end'}",
                       number=int(m.group(2))) if m else None
    if rest.startswith("ext4_fc_commit_start"):
        m = _FC.match(rest)
        return FsEvent(ts, tid, "fc_commit", number=int(m.group(1))) if m else None
    if rest.startswith("xfs_"):
        m = _XFS_SYNC.match(rest)
        if m:
            kind = "dir_sync_enter" if m.group(1) == "dir" else "sync_enter"
            return FsEvent(ts, tid, kind, int(m.group(2), 16))
        return None
    if rest.startswith("btrfs_sync_file"):
        m = _BTRFS_SYNC.match(rest)
        return FsEvent(ts, tid, "sync_enter", int(m.group(2)), int(m.group(3)), int(m.group(4)),
                       fsid=m.group(1)) if m else None
    m = _SYS_EXIT.match(rest)
    if m:
        return FsEvent(ts, tid, "sys_exit", syscall=m.group(1))
    return None


def _is_fs_event_line(line: str) -> bool:
    head = _FS_HEADER.match(line)
    if head is None:
        return False
    rest = head.group("rest")
    return rest.startswith(("ext4_", "jbd2_", "xfs_", "btrfs_", "sys_"))


class Capture(bt.BlockTrace):
    """:class:`waldio.blocktrace.BlockTrace` plus the sync and journal-commit events.

    One tracefs instance (named like BlockTrace's, so its leftover helpers
    find it) and one reader; block lines go to BlockTrace's parser, the
    file-system events to :func:`parse_fs_line`.  ``fs_events`` is in trace
    order.  Events the kernel lacks are listed in ``missing_events``.
    """

    def __init__(self, fs: Any, buffer_kib_per_cpu: int = 8192) -> None:
        super().__init__(fs.devices, buffer_kib_per_cpu)
        self.fstype = fs.kind.split("-", 1)[0]
        self.fs_events: List[FsEvent] = []
        self.fs_unparsed = 0
        self.missing_events: List[str] = []
        self.enabled_events: List[str] = []

    def _configure(self, path: str) -> None:
        super()._configure(path)
        major, minor = (int(x) for x in self.devnos[0].split(":"))
        dev_filter = f"dev == {(major << 20) | minor}"
        wanted = [(g, e, f) for g, e, f in _FS_EVENTS.get(self.fstype, ())]
        if self.fstype in ("xfs", "btrfs"):
            wanted += [(g, e, False) for g, e in _SYSCALL_EXITS]
        for group, event, filtered in wanted:
            event_dir = os.path.join(path, "events", group, event)
            if not os.path.isdir(event_dir):
                self.missing_events.append(f"{group}:{event}")
                continue
            if filtered:
                bt._write(os.path.join(event_dir, "filter"), dev_filter)
            bt._write(os.path.join(event_dir, "enable"), "1")
            self.enabled_events.append(f"{group}:{event}")
        essential = {"ext4": "ext4:ext4_sync_file_enter", "xfs": "xfs:xfs_file_fsync",
                     "btrfs": "btrfs:btrfs_sync_file"}.get(self.fstype)
        if essential and essential in self.missing_events:
            raise TraceError(f"the kernel has no {essential} tracepoint: sync calls (and so JOJ) "
                             "cannot be attributed")

    def _parse(self) -> None:
        # BlockTrace's assembler counts every line it does not know as unparsed
        # (a completeness failure), so the file-system lines are routed here.
        assembler = bt._Assembler(self.stats)
        text = b"".join(self._chunks).decode(errors="replace")
        for line in text.splitlines():
            if _is_fs_event_line(line):
                ev = parse_fs_line(line)
                if ev is None:
                    self.fs_unparsed += 1
                    self.stats.unparsed_lines += 1
                else:
                    self.fs_events.append(ev)
            else:
                assembler.line(line)
        assembler.finish()
        self.requests, self.markers = assembler.requests, assembler.markers


# ==========================================================================
# Sync windows
# ==========================================================================

@dataclass
class SyncCall:
    """One fsync/fdatasync (or O_DSYNC write) of one inode, as the trace saw it."""

    tid: int
    ino: int
    start: float
    end: float
    parent: Optional[int] = None
    datasync: Optional[int] = None
    directory: bool = False
    terminated: bool = True
    cls: str = UNIDENTIFIED
    identified_by: str = ""


def sync_calls(events: Sequence[FsEvent], fstype: str, btrfs_fsid: str = "") -> List[SyncCall]:
    """Pair sync entry and exit events per thread into :class:`SyncCall` windows.

    ext4 has both ends (``ext4_sync_file_enter/exit``); on xfs and btrfs the
    window ends at the next ``sys_exit_{fsync,fdatasync,pwritev2}`` of the
    same thread.  btrfs events carry no device, so they are kept only when
    their fsid is ``btrfs_fsid``.
    """
    calls: List[SyncCall] = []
    open_by_tid: Dict[int, List[SyncCall]] = {}
    for ev in events:
        if ev.kind in ("sync_enter", "dir_sync_enter"):
            if fstype == "btrfs" and btrfs_fsid and ev.fsid != btrfs_fsid:
                continue
            call = SyncCall(ev.tid, ev.ino, ev.ts, ev.ts, ev.parent, ev.datasync,
                            directory=ev.kind == "dir_sync_enter", terminated=False)
            open_by_tid.setdefault(ev.tid, []).append(call)
            calls.append(call)
        elif ev.kind == "sync_exit":          # ext4: matches by inode
            stack = open_by_tid.get(ev.tid, [])
            for i in range(len(stack) - 1, -1, -1):
                if stack[i].ino == ev.ino:
                    stack[i].end, stack[i].terminated = ev.ts, True
                    del stack[i]
                    break
        elif ev.kind == "sys_exit" and fstype != "ext4":
            for call in open_by_tid.pop(ev.tid, []):
                call.end, call.terminated = ev.ts, True
    return sorted(calls, key=lambda c: c.start)


@dataclass
class JournalCommit:
    """One jbd2 commit (ext4): when it started and ended."""

    number: int
    start: float
    end: Optional[float]


def journal_commits(events: Sequence[FsEvent]) -> List[JournalCommit]:
    started: Dict[int, JournalCommit] = {}
    out: List[JournalCommit] = []
    for ev in events:
        if ev.kind == "commit_start" and ev.number is not None:
            c = JournalCommit(ev.number, ev.ts, None)
            started[ev.number] = c
            out.append(c)
        elif ev.kind == "commit_end" and ev.number in started:
            started.pop(ev.number).end = ev.ts
    return out


class _Intervals:
    """Find the interval holding a time (the latest-starting one when several do)."""

    def __init__(self, items: Iterable[Tuple[float, float, Any]]) -> None:
        rows = sorted(items, key=lambda t: t[0])
        self.starts = [r[0] for r in rows]
        self.ends = [r[1] for r in rows]
        self.payloads = [r[2] for r in rows]
        self.longest = max((e - s for s, e, _ in rows), default=0.0)

    def find(self, ts: float) -> Any:
        i = bisect.bisect_right(self.starts, ts) - 1
        while i >= 0 and ts - self.starts[i] <= self.longest:
            if self.ends[i] >= ts:
                return self.payloads[i]
            i -= 1
        return None


# ==========================================================================
# File extents and inode numbers
# ==========================================================================

class FileWatcher(bt.SnapshotPoller):
    """FIEMAP snapshots (blocktrace's poller) plus the inode number of every file seen.

    Paths can be added while it runs (:meth:`watch`); :meth:`poll_once` is
    safe from any thread.  ``inodes`` maps an inode number to the class of the
    path it was seen under; ``directories`` holds the inode numbers of the
    watched files' directories.
    """

    def __init__(self, files: Mapping[str, Iterable[str]], interval_s: float) -> None:
        super().__init__(files, interval_s)
        self._lock = threading.Lock()
        self.inodes: Dict[int, str] = {}
        self.directories: Dict[int, str] = {}

    def watch(self, files: Mapping[str, Iterable[str]]) -> None:
        with self._lock:
            for cls, paths in files.items():
                known = self.files.setdefault(cls, [])
                for p in paths:
                    if p not in known:
                        known.append(p)
                    with contextlib.suppress(OSError):
                        d = os.path.dirname(os.path.abspath(p))
                        self.directories[os.stat(d).st_ino] = d

    def poll_once(self) -> None:
        with self._lock:
            super().poll_once()
            for cls, paths in self.files.items():
                for p in paths:
                    with contextlib.suppress(OSError):
                        self.inodes[os.stat(p).st_ino] = cls


# ==========================================================================
# One traced run: the session
# ==========================================================================

@dataclass
class Windows:
    """Times (trace clock) that delimit a traced run; None = derive from the brackets."""

    start: Optional[float] = None       # start of the timed region
    timed_end: Optional[float] = None
    end: Optional[float] = None         # end of the total window


class TraceSession:
    """Capture + file watcher + transaction brackets on one mounted loop file system.

    ``with TraceSession(fs, files) as ts: ... with ts.transaction(): ...``
    then :meth:`analyze`.  ``files`` maps classes to paths ("wal": [...]);
    ``sqlite_db`` adds a database's family (:func:`sqlite_files`).
    ``elimination_class``: class given to a synced inode that no watched path
    ever had, when its parent is a watched directory (ext4, btrfs) or, on xfs
    (no parent in the event), always; None leaves it "unidentified".
    """

    def __init__(self, fs: Any, files: Optional[Mapping[str, Iterable[str]]] = None,
                 poll_ms: float = 5.0, elimination_class: Optional[str] = None,
                 buffer_kib_per_cpu: int = 8192) -> None:
        self.fs = fs
        self.fstype = fs.kind.split("-", 1)[0]
        self.poll_ms = poll_ms
        self.elimination_class = elimination_class
        self.capture = Capture(fs, buffer_kib_per_cpu)
        self.watcher = FileWatcher({}, max(poll_ms, 0.5) / 1000.0)
        if files:
            self.watcher.watch(files)
        self.brackets: List[Tuple[float, float]] = []
        self.windows = Windows()
        self.clock_check: Dict[str, Any] = {}
        self._lock = threading.Lock()
        self._active = False
        self.started_at: Optional[float] = None
        self.stopped_at: Optional[float] = None
        self.wall_minus_mono = time.time() - _mono()
        self.online_map_stats: Dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> "TraceSession":
        self.capture.__enter__()
        try:
            before = _mono()
            self.capture.mark("waldio-trace clock check")
            after = _mono()
            self.clock_check = {"python_before_s": before, "python_after_s": after}
            self.started_at = after
            if self.poll_ms > 0:
                self.watcher.__enter__()
                self._active = True
        except BaseException as exc:
            self.capture.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, exc_type: Optional[type], exc: Optional[BaseException], tb: Any) -> None:
        try:
            if self._active:
                self._active = False
                self.watcher.__exit__(exc_type, exc, tb)
            else:
                with contextlib.suppress(Exception):
                    self.watcher.poll_once()
        finally:
            self.stopped_at = _mono()
            self.capture.__exit__(exc_type, exc, tb)

    # -- during the run ----------------------------------------------------

    def watch(self, files: Mapping[str, Iterable[str]]) -> None:
        self.watcher.watch(files)

    def sqlite_db(self, db: str) -> None:
        self.watch(sqlite_files(db))

    def poll(self) -> None:
        """Snapshot the watched files now (e.g. just before one is deleted)."""
        self.watcher.poll_once()

    def add_bracket(self, start: float, end: float) -> None:
        with self._lock:
            self.brackets.append((start, end))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Bracket one transaction (CLOCK_MONOTONIC, the capture's clock)."""
        start = _mono()
        yield
        self.add_bracket(start, _mono())

    # -- afterwards --------------------------------------------------------

    def btrfs_fsid(self) -> str:
        if self.fstype != "btrfs":
            return ""
        try:
            return _params._btrfs_uuid(os.path.basename(os.path.realpath(self.fs.device)))
        except Exception as exc:  # noqa: BLE001
            raise TraceError(f"cannot find the btrfs fsid of {self.fs.device}: {exc}") from exc

    def layout(self, calls: Sequence[SyncCall], btrfs_fsid: str = "") -> bt.Layout:
        """The sector map: static regions, FIEMAP snapshots and the online map events.

        Snapshots go in in time order (FIEMAP and map events interleaved), so
        where two disagree about a block the later one wins; files that still
        exist win over both.
        """
        synced = {c.ino: c.cls for c in calls if c.cls not in (UNIDENTIFIED, DIRECTORY)}

        def cls_of_ino(ino: int) -> Optional[str]:
            return self.watcher.inodes.get(ino) or synced.get(ino)

        geometry = None
        if self.fstype == "xfs":
            geometry = bt._xfs_sb_fields(self.fs.device, ("blocksize", "agblocks", "agblklog"))
        block_size = 4096
        if self.fstype == "ext4":
            with contextlib.suppress(Exception):
                block_size = os.statvfs(self.fs.mountpoint).f_bsize
        online, self.online_map_stats = online_snapshots(
            self.capture.fs_events, self.fstype, cls_of_ino, block_size=block_size,
            xfs_geometry=geometry, btrfs_fsid=btrfs_fsid, wall_minus_mono=self.wall_minus_mono)
        snaps = sorted(list(self.watcher.snapshots) + online, key=lambda sn: sn.taken_at)
        files = {cls: [p for p in paths if os.path.exists(p)]
                 for cls, paths in self.watcher.files.items()}
        return bt.describe_layout(self.fs, files, snaps)

    def analyze(self, *, timeline: bool = True, steady_after: int = 0,
                per_txn: bool = True, device_stat: Optional[Dict[str, int]] = None,
                expected_transactions: Optional[int] = None) -> Dict[str, Any]:
        """Classify the capture; see :func:`analyze` for the result."""
        fsid = self.btrfs_fsid()
        calls = classified_sync_calls(self, fsid)
        return analyze(self, self.layout(calls, fsid), btrfs_fsid=fsid, timeline=timeline,
                       steady_after=steady_after, per_txn=per_txn, device_stat=device_stat,
                       expected_transactions=expected_transactions)


# ==========================================================================
# Online extent maps
# ==========================================================================

_XFS_STARTBLOCKMASK = ((1 << 35) - 1) << 17       # xfs_bmap_btree.h: a delalloc "null" startblock


def online_snapshots(events: Sequence[FsEvent], fstype: str,
                     cls_of_ino: Callable[[int], Optional[str]], *, block_size: int,
                     xfs_geometry: Optional[Dict[str, int]] = None, btrfs_fsid: str = "",
                     wall_minus_mono: float = 0.0) -> Tuple[List[bt.FileSnapshot], Dict[str, int]]:
    """File extents from the file system's own map events, as blocktrace snapshots.

    ext4 ``ext4_ext_map_blocks_exit`` (every mapping, allocations included), xfs
    ``xfs_map_blocks_*``/``xfs_iomap_*`` (writeback and direct I/O), btrfs
    ``btrfs_ordered_extent_add`` (every data write, copy-on-write included):
    where each block of a file was when it was written, even if the file is
    deleted or the block moved afterwards.  Only inodes whose class is known
    (``cls_of_ino``) are kept; the rest are counted.  The snapshot time is the
    event's, on the wall clock FIEMAP snapshots use.
    """
    latest: Dict[Tuple[str, int, int, int], Tuple[float, int]] = {}
    stats = {"events": 0, "unknown_inode": 0, "delalloc": 0, "kept": 0}
    for ev in events:
        if ev.kind != "map" or ev.length <= 0:
            continue
        if fstype == "btrfs" and btrfs_fsid and ev.fsid != btrfs_fsid:
            continue
        stats["events"] += 1
        cls = cls_of_ino(ev.ino)
        if cls is None or cls == DIRECTORY:
            stats["unknown_inode"] += 1
            continue
        if fstype == "ext4":
            logical, physical, length = ev.offset * block_size, ev.address * block_size, ev.length * block_size
        elif fstype == "xfs":
            if xfs_geometry is None:
                continue
            if ev.address & _XFS_STARTBLOCKMASK == _XFS_STARTBLOCKMASK:
                stats["delalloc"] += 1
                continue
            agblklog, agblocks = xfs_geometry["agblklog"], xfs_geometry["agblocks"]
            agno, agbno = ev.address >> agblklog, ev.address & ((1 << agblklog) - 1)
            bs = xfs_geometry["blocksize"]
            logical, physical, length = ev.offset * bs, (agno * agblocks + agbno) * bs, ev.length * bs
        else:
            logical, physical, length = ev.offset, ev.address, ev.length
        latest[(cls, ev.ino, physical, length)] = (ev.ts, logical)
    snaps = []
    for (cls, ino, physical, length), (ts, logical) in latest.items():
        snaps.append(bt.FileSnapshot(cls, f"inode {ino} ({fstype} map event)", ts + wall_minus_mono,
                                     [bt.FileExtent(logical, physical, length, 0)]))
        stats["kept"] += 1
    return snaps, stats


# ==========================================================================
# Analysis
# ==========================================================================

def classified_sync_calls(session: "TraceSession", btrfs_fsid: str = "") -> List[SyncCall]:
    """The session's sync calls, each with the class of the file it synced."""
    calls = sync_calls(session.capture.fs_events, session.fstype, btrfs_fsid)
    for call in calls:
        _classify_sync(call, session.watcher, session.fstype, session.elimination_class)
    return calls


def _classify_sync(call: SyncCall, watcher: FileWatcher, fstype: str,
                   elimination_class: Optional[str]) -> None:
    if call.ino in watcher.inodes:
        call.cls, call.identified_by = watcher.inodes[call.ino], "stat of a watched path"
    elif call.ino in watcher.directories or call.directory:
        call.cls, call.identified_by = DIRECTORY, "directory"
    elif elimination_class and call.parent is not None and call.parent in watcher.directories:
        call.cls, call.identified_by = elimination_class, "elimination (parent is the database directory)"
    elif elimination_class and call.parent is None and fstype == "xfs":
        call.cls, call.identified_by = elimination_class, "elimination (xfs: no parent in the event)"
    else:
        call.cls, call.identified_by = UNIDENTIFIED, "none"


@dataclass
class _Acc:
    """Sums of one group of requests: the Table-1 columns, counts and classes."""

    columns: Dict[str, int] = field(default_factory=lambda: {k: 0 for k in COLUMNS + COUNTS})
    classes: Dict[str, int] = field(default_factory=dict)
    read_bytes: int = 0
    read_requests: int = 0
    histogram: Dict[int, int] = field(default_factory=dict)

    def add(self, other: "_Acc") -> None:
        for k, v in other.columns.items():
            self.columns[k] += v
        for k, v in other.classes.items():
            self.classes[k] = self.classes.get(k, 0) + v
        for k, v in other.histogram.items():
            self.histogram[k] = self.histogram.get(k, 0) + v
        self.read_bytes += other.read_bytes
        self.read_requests += other.read_requests


def _accumulate(report: bt.Report, in_sync: bool, joj: bool, btrfs: bool) -> _Acc:
    acc = _Acc()
    classes = {cls: t.bytes_written for cls, t in report.classes.items() if t.bytes_written}
    if btrfs and in_sync and classes.get(bt.FS_METADATA):
        # btrfs: metadata written inside a sync call is the fsync log (see DEFINITIONS)
        classes[bt.FS_JOURNAL] = classes.get(bt.FS_JOURNAL, 0) + classes.pop(bt.FS_METADATA)
    journal = classes.get(bt.FS_JOURNAL, 0)
    metadata = classes.get(bt.FS_METADATA, 0)
    c = acc.columns
    c["total"] = report.total_bytes_written
    c["journal"] = journal
    c["metadata"] = metadata
    c["data"] = report.total_bytes_written - journal - metadata
    c["joj"] = journal if joj else 0
    c["requests"] = report.write_requests
    c["flushes"] = report.flushes
    c["fua_writes"] = report.fua_writes
    c["preflush_writes"] = report.preflush_writes
    acc.classes = classes
    acc.read_bytes, acc.read_requests = report.total_bytes_read, report.read_requests
    acc.histogram = dict(report.size_histogram)
    return acc


def _request_class(req: bt.BlockRequest, layout: bt.Layout, in_sync: bool, btrfs: bool) -> str:
    if req.is_flush:
        return "flush"
    rep = bt.classify([req], layout)
    if not rep.classes:
        return "other"
    cls = max(rep.classes.items(), key=lambda kv: kv[1].bytes_written + kv[1].bytes_read)[0]
    if btrfs and in_sync and cls == bt.FS_METADATA and req.is_write:
        return bt.FS_JOURNAL
    return cls


def analyze(session: TraceSession, layout: bt.Layout, *, btrfs_fsid: str = "",
            timeline: bool = True, steady_after: int = 0, per_txn: bool = True,
            device_stat: Optional[Dict[str, int]] = None,
            expected_transactions: Optional[int] = None) -> Dict[str, Any]:
    """Attribute every captured request; the result is JSON-serializable.

    ``device_stat``: bytes written and flushes the main device's own counters
    (``/sys/class/block/*/stat``) saw over the total window, for a
    cross-check.  ``per_txn`` False skips per-transaction lists (several
    threads: brackets overlap).
    """
    cap = session.capture
    btrfs = session.fstype == "btrfs"
    brackets = sorted(session.brackets)
    w = session.windows
    t0 = w.start if w.start is not None else (brackets[0][0] if brackets else session.started_at)
    t_end = w.end if w.end is not None else (brackets[-1][1] if brackets else session.stopped_at)
    t_timed = w.timed_end if w.timed_end is not None else t_end
    if t0 is None or t_end is None:
        raise TraceError("no window: nothing was bracketed")

    calls = classified_sync_calls(session, btrfs_fsid)
    sync_index = _Intervals((c.start, c.end, c) for c in calls)
    commits = journal_commits(cap.fs_events) if session.fstype == "ext4" else []
    commit_index = _Intervals((c.start, c.end, c) for c in commits if c.end is not None)
    bracket_index = _Intervals((s, e, i) for i, (s, e) in enumerate(brackets))

    def sync_of(ts: float) -> Optional[SyncCall]:
        return sync_index.find(ts)

    def journal_sync_of(req: bt.BlockRequest) -> Optional[SyncCall]:
        commit = commit_index.find(req.issue_ts) if commits else None
        if commit is not None:
            return sync_of(commit.start)
        return sync_of(req.issue_ts)

    # Group the requests of the total window by (transaction, sync classes, timed?).
    groups: Dict[Tuple[Optional[int], str, bool], List[bt.BlockRequest]] = {}
    outside = {"before": 0, "after": 0}
    timeline_rows: List[List[Any]] = []
    per_device: Dict[str, Dict[str, int]] = {}
    for req in cap.requests:
        if req.device not in layout.devices:
            continue
        if req.issue_ts < t0 or req.issue_ts > t_end:
            if req.is_write:
                outside["before" if req.issue_ts < t0 else "after"] += req.nbytes
            continue
        txn = bracket_index.find(req.issue_ts)
        call = sync_of(req.issue_ts)
        jcall = journal_sync_of(req) if req.is_write else call
        # A request writes into the journal or it does not; the JOJ path only
        # matters for journal bytes, so requests carry the journal-sync class
        # (commit-based on ext4) and the plain sync class for everything else.
        key_cls = (jcall.cls if jcall else BACKGROUND) + "|" + (call.cls if call else BACKGROUND)
        groups.setdefault((txn, key_cls, req.issue_ts <= t_timed), []).append(req)
        role = layout.devices[req.device]
        d = per_device.setdefault(role, {"bytes_written": 0, "write_requests": 0, "flushes": 0})
        if req.is_write:
            d["bytes_written"] += req.nbytes
            d["write_requests"] += 1
        elif req.is_flush:
            d["flushes"] += 1
        if timeline and len(timeline_rows) < TIMELINE_LIMIT and (req.is_write or req.is_flush):
            in_sync = call is not None
            timeline_rows.append([round((req.issue_ts - t0) * 1e3, 4), role, req.sector,
                                  req.nr_sectors, _request_class(req, layout, in_sync, btrfs),
                                  req.rwbs, txn])

    total, timed, in_txn, between = _Acc(), _Acc(), _Acc(), _Acc()
    txn_accs: List[_Acc] = [_Acc() for _ in brackets]
    by_sync: Dict[str, _Acc] = {}
    for (txn, key_cls, is_timed), reqs in groups.items():
        jcls, scls = key_cls.split("|")
        # (only ext4 has commit events, so elsewhere jcls == scls)
        acc = _accumulate(bt.classify(reqs, layout), in_sync=scls != BACKGROUND,
                          joj=jcls in JOJ_SYNC_CLASSES, btrfs=btrfs)
        total.add(acc)
        if is_timed:
            timed.add(acc)
        if txn is None:
            between.add(acc)
        else:
            in_txn.add(acc)
            txn_accs[txn].add(acc)
        # Journal bytes by the sync that forced them; everything else by the sync in progress.
        j = by_sync.setdefault(jcls, _Acc())
        j.columns["journal"] += acc.columns["journal"]
        s = by_sync.setdefault(scls, _Acc())
        for k in ("data", "metadata", "flushes", "requests", "fua_writes"):
            s.columns[k] += acc.columns[k]
        for k, v in acc.classes.items():
            if k not in (bt.FS_JOURNAL, bt.FS_METADATA):
                s.classes[k] = s.classes.get(k, 0) + v

    # -- syncs and commits in the total window
    in_window = [c for c in calls if t0 <= c.start <= t_end]
    sync_stats: Dict[str, Dict[str, Any]] = {}
    for c in in_window:
        st = sync_stats.setdefault(c.cls, {"calls": 0, "fdatasync": 0, "fsync": 0, "time_s": 0.0,
                                           "identified_by": {}})
        st["calls"] += 1
        if c.datasync is not None:
            st["fdatasync" if c.datasync else "fsync"] += 1
        st["time_s"] += max(0.0, c.end - c.start)
        st["identified_by"][c.identified_by] = st["identified_by"].get(c.identified_by, 0) + 1
    for cls, acc in by_sync.items():
        st = sync_stats.setdefault(cls, {"calls": 0, "fdatasync": 0, "fsync": 0, "time_s": 0.0,
                                         "identified_by": {}})
        st["journal_bytes"] = acc.columns["journal"]
        st["data_bytes"] = acc.columns["data"]
        st["metadata_bytes"] = acc.columns["metadata"]
        st["flushes"] = acc.columns["flushes"]
        st["data_classes"] = dict(sorted(acc.classes.items()))
    for st in sync_stats.values():
        st["time_s"] = round(st["time_s"], 6)
        for k in ("journal_bytes", "data_bytes", "metadata_bytes", "flushes"):
            st.setdefault(k, 0)
        st.setdefault("data_classes", {})
    # Data blocks of no known file (deleted before any snapshot, or rewritten
    # elsewhere by a copy-on-write file system), by the sync call in progress
    # when they were written: a hint at their owner, never a classification.
    unattributed_by_sync = {cls: st["data_classes"].get(bt.UNATTRIBUTED, 0)
                            for cls, st in sync_stats.items()
                            if st["data_classes"].get(bt.UNATTRIBUTED, 0)}
    commit_doc: Optional[Dict[str, Any]] = None
    if session.fstype == "ext4":
        in_commits = [c for c in commits if t0 <= c.start <= t_end]
        by_cls: Dict[str, int] = {}
        for c in in_commits:
            call = sync_of(c.start)
            k = call.cls if call else BACKGROUND
            by_cls[k] = by_cls.get(k, 0) + 1
        fc = [e for e in cap.fs_events if e.kind == "fc_commit" and t0 <= e.ts <= t_end]
        commit_doc = {"jbd2_commits": len(in_commits), "by_sync_class": by_cls,
                      "fast_commits": len(fc),
                      "per_txn": [sum(1 for c in in_commits if s <= c.start <= e)
                                  for s, e in brackets] if per_txn else None}

    # -- per transaction
    n = len(brackets)
    txn_doc: Optional[Dict[str, Any]] = None
    if per_txn and n:
        txn_doc = {k: [a.columns[k] for a in txn_accs] for k in COLUMNS + COUNTS}
        all_classes = sorted({c for a in txn_accs for c in a.classes})
        txn_doc["classes"] = {c: [a.classes.get(c, 0) for a in txn_accs] for c in all_classes}
        txn_doc["latency_us"] = [round((e - s) * 1e6, 1) for s, e in brackets]
    steady_after = min(max(steady_after, 0), max(n - 1, 0))
    summary = _txn_summary(txn_doc, n, steady_after) if txn_doc else None

    # -- checks (each can fail)
    checks: List[Dict[str, Any]] = []

    def check(name: str, expected: Any, actual: Any, ok: Optional[bool] = None) -> None:
        checks.append({"name": name, "expected": expected, "actual": actual,
                       "ok": bool(expected == actual) if ok is None else bool(ok)})

    marker_ts = [ts for ts, text in cap.markers if text == "waldio-trace clock check"]
    cc = dict(session.clock_check)
    cc["marker_s"] = marker_ts[0] if marker_ts else None
    cc["ok"] = bool(marker_ts) and cc["python_before_s"] - 2e-6 <= marker_ts[0] <= cc["python_after_s"] + 2e-6
    check("trace clock = CLOCK_MONOTONIC (marker between two clock reads)", True, cc["ok"])
    check("no event lost or unparsed", True, cap.stats.complete)
    check("classes sum to the total (total window)", total.columns["total"],
          sum(total.classes.values()))
    if expected_transactions is not None:
        check("one bracket per transaction", expected_transactions, n)
    if n > 1 and per_txn:
        overlaps = sum(1 for (s1, e1), (s2, _e2) in zip(brackets, brackets[1:]) if s2 < e1)
        check("transaction brackets do not overlap", 0, overlaps)
    unterminated = sum(1 for c in in_window if not c.terminated)
    check("every sync call has an end", 0, unterminated)
    cross: Optional[Dict[str, Any]] = None
    if device_stat is not None:
        main = per_device.get("main", {"bytes_written": 0, "flushes": 0})
        cross = {"device_stat_write_bytes": device_stat.get("write_bytes"),
                 "trace_write_bytes": main["bytes_written"],
                 "device_stat_flushes": device_stat.get("flushes"),
                 "trace_flushes": main["flushes"]}
        diff = abs((device_stat.get("write_bytes") or 0) - main["bytes_written"])
        check("bytes written: trace = the device's own counter, within one 4 KiB block",
              "|diff| <= 4096", diff, ok=diff <= 4096)

    hist = dict(sorted(total.histogram.items()))
    doc: Dict[str, Any] = {
        "transactions": n,
        "steady_after": steady_after,
        "windows": {
            "total": {"start_s": t0, "end_s": t_end, "duration_s": round(t_end - t0, 6)},
            "timed": {"start_s": t0, "end_s": t_timed, "duration_s": round(t_timed - t0, 6)},
            "transactions": {"count": n, "time_s": round(sum(e - s for s, e in brackets), 6)},
        },
        "columns": {"total": total.columns, "timed": timed.columns,
                    "transactions": in_txn.columns, "between": between.columns},
        "classes": {"total": dict(sorted(total.classes.items())),
                    "transactions": dict(sorted(in_txn.classes.items())),
                    "between": dict(sorted(between.classes.items()))},
        "reads": {"bytes": total.read_bytes, "requests": total.read_requests},
        "outside_window_bytes": outside,
        "devices": per_device,
        "size_histogram": {str(k): v for k, v in hist.items()},
        "summary": summary,
        "per_txn": txn_doc,
        "syncs": {"by_class": dict(sorted(sync_stats.items())), "unterminated": unterminated},
        "unattributed_by_sync": unattributed_by_sync,
        "journal_commits": commit_doc,
        "cross_check": cross,
        "capture": dict(cap.stats.to_dict(), fs_events=len(cap.fs_events),
                        fs_unparsed=cap.fs_unparsed, enabled_events=cap.enabled_events,
                        missing_events=cap.missing_events, buffer_kib_per_cpu=cap.buffer_kib_per_cpu),
        "clock_check": cc,
        "layout": layout.to_dict(),
        "file_watcher": {"poll_ms": session.poll_ms, "snapshots": len(session.watcher.snapshots),
                         "inodes_seen": len(session.watcher.inodes),
                         "online_map": dict(session.online_map_stats)},
        "timeline": {"columns": ["t_ms", "device", "sector", "sectors", "class", "rwbs", "txn"],
                     "rows": timeline_rows, "truncated": len(timeline_rows) >= TIMELINE_LIMIT,
                     "brackets_ms": [[round((s - t0) * 1e3, 4), round((e - t0) * 1e3, 4)]
                                     for s, e in brackets]}
        if timeline else None,
        "checks": checks,
        "ok": all(c["ok"] for c in checks),
    }
    return doc


def _txn_summary(txn: Dict[str, Any], n: int, steady_after: int) -> Dict[str, Any]:
    """First transaction, steady-state mean, all-transaction mean and distribution."""
    keys = COLUMNS + COUNTS
    steady_idx = range(steady_after, n)
    first = {k: txn[k][0] for k in keys}
    steady = {k: sum(txn[k][i] for i in steady_idx) / len(steady_idx) for k in keys}
    mean = {k: sum(txn[k]) / n for k in keys}
    totals = sorted(txn["total"][i] for i in steady_idx)
    dist = {"min": totals[0], "p50": B.percentile(totals, 50), "p90": B.percentile(totals, 90),
            "max": totals[-1]}
    classes_steady = {c: sum(v[i] for i in steady_idx) / len(steady_idx)
                      for c, v in txn["classes"].items()}
    return {"first": first, "steady": steady, "mean": mean, "steady_total_distribution": dist,
            "steady_classes": classes_steady, "steady_transactions": len(steady_idx)}


# ==========================================================================
# Running waldio bench's workload under the trace
# ==========================================================================

@dataclass
class TraceOptions:
    """What ``waldio trace`` adds to a bench run."""

    overhead: bool = True          # run an untraced repetition next to every traced one
    traced_repetitions: int = 1
    steady_after: int = 10
    poll_ms: float = 0.0
    timeline: bool = True
    buffer_kib_per_cpu: int = 8192

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)


class _Recorder:
    """Shared state of one traced repetition, fed by the opener and connection wrappers."""

    def __init__(self, session: TraceSession, settings: B.Settings, plan_sql: Iterable[str]) -> None:
        self.session = session
        self.s = settings
        self.plan_sql = frozenset(plan_sql)
        self.begin_sql = {"begin": "BEGIN", "begin-immediate": "BEGIN IMMEDIATE"}.get(settings.txn)
        self.open_close = settings.regime == "open-close"
        self.timed_open = "open" in settings.timed and not self.open_close
        self.first_open: Optional[float] = None
        self.txn_started = False
        self.timed_ends: List[float] = []
        self.check_open: Optional[float] = None


class _TracingConn:
    """A bench connection that reports its transactions' brackets (and nothing else changes)."""

    def __init__(self, inner: Any, rec: _Recorder, opened_at: float) -> None:
        self._c = inner
        self._rec = rec
        self._opened_at = opened_at
        self._pending: Optional[float] = None
        self._ran_plan = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)

    def _statement(self, call: Callable[[], Any], sql: str) -> Any:
        rec = self._rec
        if sql in rec.plan_sql:
            rec.txn_started = True
            self._ran_plan = True
            if rec.begin_sql is None and not rec.open_close:   # autocommit: one statement
                start = _mono()
                out = call()
                rec.session.add_bracket(start, _mono())
                return out
            return call()
        if rec.begin_sql is not None and sql == rec.begin_sql and not rec.open_close:
            self._pending = _mono()
            return call()
        if sql == "COMMIT" and self._pending is not None:
            out = call()
            rec.session.add_bracket(self._pending, _mono())
            self._pending = None
            return out
        if sql.startswith("PRAGMA wal_checkpoint(") and rec.txn_started:
            out = call()
            rec.timed_ends.append(_mono())
            return out
        if sql == "PRAGMA integrity_check" and rec.check_open is None:
            rec.check_open = self._opened_at
        return call()

    def run(self, sql: str, params: Tuple[Any, ...] = ()) -> Any:
        return self._statement(lambda: self._c.run(sql, params), sql)

    def rows(self, sql: str, params: Tuple[Any, ...] = ()) -> Any:
        return self._statement(lambda: self._c.rows(sql, params), sql)

    def close(self) -> None:
        rec = self._rec
        rec.session.poll()              # the stock WAL is deleted by this close
        self._c.close()
        end = _mono()
        if rec.open_close and self._ran_plan:
            rec.session.add_bracket(self._opened_at, end)
        elif rec.txn_started and "close" in rec.s.timed and rec.check_open is None:
            rec.timed_ends.append(end)


class _TracingOpener:
    """Wraps :class:`waldio.bench.Opener`: registers the database's files, wraps connections."""

    def __init__(self, inner: B.Opener, rec: _Recorder) -> None:
        self._o = inner
        self._rec = rec

    def __getattr__(self, name: str) -> Any:
        return getattr(self._o, name)

    def open(self, path: str) -> _TracingConn:
        rec = self._rec
        opened_at = _mono()
        if rec.first_open is None:
            rec.first_open = opened_at
        rec.session.sqlite_db(path)
        rec.session.poll()
        return _TracingConn(self._o.open(path), rec, opened_at)


def _find_mountpoint(path: str) -> str:
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    return p


@dataclass
class LoopFs:
    """What the analysis needs of a loop file system made by ``bench.open_target``."""

    kind: str
    device: str
    mountpoint: str
    journal_device: Optional[str]

    @property
    def devices(self) -> List[str]:
        return [d for d in (self.device, self.journal_device) if d]

    @classmethod
    def from_target(cls, target: B.Target) -> "LoopFs":
        loop = target.info.get("loop")
        if target.kind != "loop" or not loop:
            raise TraceError("waldio trace needs a fresh loop file system (root, loop devices); "
                             f"got {target.kind} target: {target.note}")
        return cls(loop["kind"], loop["device"], _find_mountpoint(target.path),
                   loop.get("journal_device"))


class TracedBench(B.Bench):
    """``waldio bench``'s engine with every measured repetition traced or left as a control.

    Rounds: ``settings.warmup`` untraced warm-up rounds, then the measured
    rounds; with ``options.overhead`` they alternate traced / untraced in the
    pattern T U U T T U ... (so neither kind always runs first), and
    ``settings.repetitions`` must be twice ``options.traced_repetitions``.
    """

    def __init__(self, settings: B.Settings, modes: Sequence[B.ModeSpec], fs: LoopFs,
                 options: TraceOptions, progress: Optional[B.ProgressFn] = None) -> None:
        raw = [m.label for m in modes if not m.mode.is_sql]
        if raw:
            raise B.BenchError(f"raw modes ({', '.join(raw)}) run no SQLite transactions to "
                               "bracket; waldio trace takes SQL modes (tests/py/test_trace.py "
                               "traces the raw system-call patterns)")
        super().__init__(settings, modes, progress=progress)
        self.fs = fs
        self.options = options
        self.plan_sql = {sql for p in self.plans for _ph, stmts in p.txns for sql, _a, _r in stmts}

    def is_traced(self, rnd: int) -> bool:
        if rnd < self.s.warmup:
            return False
        m = rnd - self.s.warmup
        if not self.options.overhead:
            return True
        return (m % 2 == 0) != ((m // 2) % 2 == 1)

    def _run_rep(self, spec: B.ModeSpec, opener: Optional[B.Opener], rnd: int, warm: bool,
                 results: Dict[str, Any]) -> Dict[str, Any]:
        if not self.is_traced(rnd) or opener is None:
            rep = super()._run_rep(spec, opener, rnd, warm, results)
            rep["traced"], rep["trace"] = False, None
            return rep
        session = TraceSession(self.fs, poll_ms=self.options.poll_ms, elimination_class=JOURNAL,
                               buffer_kib_per_cpu=self.options.buffer_kib_per_cpu)
        rec = _Recorder(session, self.s, self.plan_sql)
        with session:
            rep = super()._run_rep(spec, _TracingOpener(opener, rec), rnd, warm, results)
        rep["traced"] = True
        if rep.get("error") or not session.brackets:
            rep["trace"] = {"ok": False, "error": rep.get("error") or "no transaction bracketed"}
            return rep
        start = rec.first_open if (rec.timed_open or rec.open_close) else None
        session.windows = Windows(start=start if start is not None else min(session.brackets)[0],
                                  timed_end=max([e for _s, e in session.brackets] + rec.timed_ends),
                                  end=rec.check_open)
        dev = (rep.get("io") or {}).get("devices") or []
        stat = dev[0]["total"] if dev else None
        doc = session.analyze(timeline=self.options.timeline,
                              steady_after=self.options.steady_after,
                              per_txn=self.s.threads == 1, device_stat=stat,
                              expected_transactions=rep.get("transactions"))
        rep["trace"] = doc
        if rep.get("io") is not None:
            rep["io"]["classes"] = dict(doc["classes"]["total"])
        return rep


# ==========================================================================
# Summaries over repetitions
# ==========================================================================

def _median(values: Sequence[float]) -> Optional[float]:
    vals = sorted(v for v in values if v is not None)
    return B.percentile(vals, 50) if vals else None


def mode_summary(mode_doc: Dict[str, Any]) -> Dict[str, Any]:
    """Per-transaction figures of one mode: medians over its traced repetitions."""
    traced = [r for r in mode_doc["repetitions"] if r.get("traced") and not r["warmup"]
              and r.get("trace") and r["trace"].get("columns")]
    untraced = [r for r in mode_doc["repetitions"] if not r.get("traced") and not r["warmup"]
                and r["ok"] and r.get("ops_per_s")]
    out: Dict[str, Any] = {"traced_repetitions": len(traced),
                           "trace_ok": bool(traced) and all(r["trace"]["ok"] for r in traced)}
    if not traced:
        return out

    def per_rep(get: Callable[[Dict[str, Any]], Optional[float]]) -> Dict[str, Any]:
        vals = [get(r["trace"]) for r in traced]
        vals = [v for v in vals if v is not None]
        return {"median": _median(vals), "min": min(vals) if vals else None,
                "max": max(vals) if vals else None, "n": len(vals)}

    def window(name: str, key: str) -> Callable[[Dict[str, Any]], Optional[float]]:
        return lambda t: t["columns"][name][key] / t["transactions"] if t["transactions"] else None

    def txn(part: str, key: str) -> Callable[[Dict[str, Any]], Optional[float]]:
        return lambda t: (t["summary"] or {}).get(part, {}).get(key) if t.get("summary") else None

    keys = COLUMNS + COUNTS
    out["per_txn"] = {
        "first": {k: per_rep(txn("first", k)) for k in keys},
        "steady": {k: per_rep(txn("steady", k)) for k in keys},
        "in_transactions": {k: per_rep(window("transactions", k)) for k in keys},
        "total_window": {k: per_rep(window("total", k)) for k in keys},
    }
    classes = sorted({c for r in traced for c in r["trace"]["classes"]["total"]})
    out["classes_per_txn"] = {
        "total_window": {c: per_rep(lambda t, c=c: t["classes"]["total"].get(c, 0) / t["transactions"])
                         for c in classes},
        "steady": {c: per_rep(lambda t, c=c: ((t.get("summary") or {}).get("steady_classes") or {})
                               .get(c, 0.0)) for c in classes},
    }
    out["totals"] = {k: per_rep(lambda t, k=k: t["columns"]["total"][k]) for k in keys}
    dists = [r["trace"]["summary"]["steady_total_distribution"] for r in traced
             if r["trace"].get("summary")]
    out["steady_total_distribution"] = dists[0] if len(dists) == 1 else (
        {k: _median([d[k] for d in dists]) for k in ("min", "p50", "p90", "max")} if dists else None)
    syncs: Dict[str, Dict[str, float]] = {}
    for r in traced:
        for cls, st in r["trace"]["syncs"]["by_class"].items():
            e = syncs.setdefault(cls, {"calls": 0.0, "journal_bytes": 0.0, "flushes": 0.0})
            for k in e:
                e[k] += st.get(k, 0) / r["trace"]["transactions"] / len(traced)
    out["syncs_per_txn"] = syncs
    commits = [r["trace"]["journal_commits"] for r in traced if r["trace"].get("journal_commits")]
    if commits:
        out["jbd2_commits_per_txn"] = _median([c["jbd2_commits"] / r["trace"]["transactions"]
                                               for c, r in zip(commits, traced)])
    ops_t = [r["ops_per_s"] for r in traced if r.get("ops_per_s") and r["ok"]]
    ops_u = [r["ops_per_s"] for r in untraced]
    med_t, med_u = _median(ops_t), _median(ops_u)
    # Measured rounds 2k and 2k+1 hold one traced and one untraced repetition (T U U T ...).
    pairs: Dict[int, Dict[bool, float]] = {}
    first_measured = min((r["index"] for r in mode_doc["repetitions"] if not r["warmup"]), default=0)
    for r in traced + untraced:
        if r.get("ops_per_s") and r["ok"]:
            pairs.setdefault((r["index"] - first_measured) // 2, {})[bool(r.get("traced"))] = r["ops_per_s"]
    paired = sorted(p[False] / p[True] for p in pairs.values() if True in p and False in p)
    out["overhead"] = {
        "ops_per_s_traced": med_t, "ops_per_s_untraced": med_u,
        "n_traced": len(ops_t), "n_untraced": len(ops_u),
        "slowdown": (med_u / med_t) if med_t and med_u else None,
        "paired_slowdowns": paired,
        "note": "median ops/s of the untraced control repetitions over that of the traced ones "
                "(same run, interleaved); paired_slowdowns: untraced / traced ops/s of each "
                "adjacent pair of rounds; > 1 means tracing slowed the workload down",
    }
    out["capture"] = {
        "lost_events": sum(r["trace"]["capture"]["lost_events"] for r in traced),
        "overrun": sum(r["trace"]["capture"]["overrun"] for r in traced),
        "dropped": sum(r["trace"]["capture"]["dropped"] for r in traced),
        "unparsed": sum(r["trace"]["capture"]["unparsed_lines"] for r in traced),
        "complete": all(r["trace"]["capture"]["complete"] for r in traced),
    }
    out["failed_checks"] = [dict(c, repetition=r["index"]) for r in traced
                            for c in r["trace"].get("checks", []) if not c["ok"]]
    return out


def finish_document(doc: Dict[str, Any], options: TraceOptions, fs: LoopFs) -> Dict[str, Any]:
    """Turn the bench document of a TracedBench run into the trace document (in place)."""
    doc["tool"]["name"] = "waldio trace"
    doc["params"]["trace"] = {
        "options": options.to_json(),
        "fs_kind": fs.kind,
        "devices": {"main": fs.device, "journal": fs.journal_device},
        "rounds": "warm-up rounds untraced; measured rounds alternate traced / untraced "
                  "(T U U T ...) when the overhead is measured",
        "definitions": DEFINITIONS,
        "classification": "by device and sector range only (waldio.blocktrace), never by process "
                          "name; see each repetition's trace.layout.notes",
    }
    for mode in doc["modes"]:
        mode["trace_summary"] = mode_summary(mode)
    trace_ok = all(m["trace_summary"].get("trace_ok") for m in doc["modes"])
    doc["trace_ok"] = trace_ok
    doc["ok"] = bool(doc["ok"]) and trace_ok
    return doc


__all__ = [
    "COLUMNS", "DEFINITIONS", "JOJ_SYNC_CLASSES", "Capture", "FileWatcher", "LoopFs", "SyncCall",
    "TraceError", "TraceOptions", "TraceSession", "TracedBench", "analyze", "finish_document",
    "mode_summary", "parse_fs_line", "sqlite_files", "sync_calls", "unavailable_reason",
]
