"""One traced repetition: the tracefs capture, the file watcher and the brackets.

:class:`Capture` extends :class:`waldio.trace.block.BlockTrace` with the
file-system events of :mod:`.fsevents`; :class:`FileWatcher` keeps FIEMAP
snapshots and inode numbers of the database's files (polling, and at every
open and close); :class:`TraceSession` holds both plus the transaction
brackets and the windows of a run, all on ``CLOCK_MONOTONIC``.
"""
from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from waldio import params as _params
from waldio.trace import block as bt
from waldio.trace.block.layout import xfs_sb_fields
from waldio.trace.block.requests import RequestAssembler
from waldio.trace.block.tracefs import write_file

from .fsevents import (
    FS_EVENTS,
    SYSCALL_EXITS,
    FsEvent,
    SyncCall,
    is_fs_event_line,
    online_snapshots,
    parse_fs_line,
    sync_calls,
)
from .model import DIRECTORY, UNIDENTIFIED, TraceError, mono, sqlite_files


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
        wanted = [(g, e, f) for g, e, f in FS_EVENTS.get(self.fstype, ())]
        if self.fstype in ("xfs", "btrfs"):
            wanted += [(g, e, False) for g, e in SYSCALL_EXITS]
        for group, event, filtered in wanted:
            event_dir = os.path.join(path, "events", group, event)
            if not os.path.isdir(event_dir):
                self.missing_events.append(f"{group}:{event}")
                continue
            if filtered:
                write_file(os.path.join(event_dir, "filter"), dev_filter)
            write_file(os.path.join(event_dir, "enable"), "1")
            self.enabled_events.append(f"{group}:{event}")
        essential = {"ext4": "ext4:ext4_sync_file_enter", "xfs": "xfs:xfs_file_fsync",
                     "btrfs": "btrfs:btrfs_sync_file"}.get(self.fstype)
        if essential and essential in self.missing_events:
            raise TraceError(f"the kernel has no {essential} tracepoint: sync calls (and so JOJ) "
                             "cannot be attributed")

    def _parse(self) -> None:
        # BlockTrace's assembler counts every line it does not know as unparsed
        # (a completeness failure), so the file-system lines are routed here.
        assembler = RequestAssembler(self.stats)
        text = b"".join(self._chunks).decode(errors="replace")
        for line in text.splitlines():
            if is_fs_event_line(line):
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


class Intervals:
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
        self.wall_minus_mono = time.time() - mono()
        self.online_map_stats: Dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> "TraceSession":
        self.capture.__enter__()
        try:
            before = mono()
            self.capture.mark("waldio-trace clock check")
            after = mono()
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
            self.stopped_at = mono()
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
        start = mono()
        yield
        self.add_bracket(start, mono())

    # -- afterwards --------------------------------------------------------

    def btrfs_fsid(self) -> str:
        if self.fstype != "btrfs":
            return ""
        try:
            return _params.btrfs_uuid(os.path.basename(os.path.realpath(self.fs.device)))
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
            geometry = xfs_sb_fields(self.fs.device, ("blocksize", "agblocks", "agblklog"))
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
