"""Block-request capture on loop devices and attribution of written sectors.

Owns three things:

1. **Capture** (:class:`BlockTrace`): a private tracefs instance
   (``/sys/kernel/tracing/instances/waldio-bt-<pid>-<n>``) with
   ``block:block_rq_issue``, ``block:block_rq_complete`` and
   ``block:block_rq_requeue`` enabled and filtered to the traced devices'
   ``dev_t``.  A reader thread drains ``trace_pipe`` while the workload runs,
   so the ring buffer only has to absorb bursts.  ``block_rq_insert`` is not
   used: its only extra information is the submitting task, and waldio never
   classifies by task.
2. **Layout** (:func:`describe_layout`, :class:`Layout`): which sector ranges
   of which device belong to the file-system journal, to static file-system
   metadata, to the files the caller names (by class, e.g. "wal", "db"), to
   other files, and to directories.
3. **Classification** (:func:`classify`, :class:`Report`): per class bytes
   and requests, flushes, FUA writes and a request-size histogram.

Invariants:

* Attribution is by (device, sector range) only, never by process name:
  journal commits and flushes are issued by kernel threads.
* A request is accounted once, at issue.  A request that was requeued is
  dropped from the accounting (it is issued again and counted then).
* Flush requests (``REQ_OP_FLUSH``, rwbs ``FF``/``F``) carry no data: they
  count as flushes, never as bytes.  Discard and write-zeroes requests are
  counted apart from written bytes.
* Sectors are 512-byte units relative to the traced device (a loop device has
  no partition offset).
* Priority when ranges overlap: fs-journal > static fs-metadata > named file
  extents (the most recent snapshot first) > other files > directory blocks.
  A written sector outside all known ranges is "fs-metadata" if the request
  carries REQ_META (``M``), otherwise "unattributed-data".  A REQ_META
  request is never file data: outside the journal it is always "fs-metadata".
* The trace instance is removed on every exit path; nothing is synced or
  dropped implicitly: the caller syncs before leaving the trace context.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import itertools
import os
import re
import struct
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence

from .fsimage import CommandError, run_command

SECTOR = 512

FS_JOURNAL = "fs-journal"
FS_METADATA = "fs-metadata"
OTHER_FILE = "other-file"
UNATTRIBUTED = "unattributed-data"
RESERVED_CLASSES = frozenset({FS_JOURNAL, FS_METADATA, OTHER_FILE, UNATTRIBUTED})

TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
EVENTS = ("block_rq_issue", "block_rq_complete", "block_rq_requeue")
FLUSH_COMPLETE_SECTOR = 2**64 - 1


# ==========================================================================
# rwbs flags
# ==========================================================================

# Operation tokens of the kernel's blk_fill_rwbs, longest first.
_OPS = (
    ("ZRA", "zone-reset-all"),
    ("ZA", "zone-append"),
    ("ZR", "zone-reset"),
    ("ZO", "zone-open"),
    ("ZC", "zone-close"),
    ("ZF", "zone-finish"),
    ("WZ", "write-zeroes"),
    ("DE", "secure-erase"),
    ("W", "write"),
    ("R", "read"),
    ("D", "discard"),
    ("F", "flush"),
    ("N", "none"),
)
_OP_LETTERS = frozenset(tok[0] for tok, _ in _OPS)


@dataclass(frozen=True)
class Rwbs:
    """Decoded rwbs string: operation plus modifier flags."""

    raw: str
    op: str
    preflush: bool = False
    fua: bool = False
    sync: bool = False
    meta: bool = False
    readahead: bool = False
    other: str = ""


def parse_rwbs(raw: str) -> Rwbs:
    """Decode an rwbs string such as ``WS``, ``FWFSM`` or ``FF``."""
    rest = raw
    preflush = len(rest) > 1 and rest[0] == "F" and rest[1] in _OP_LETTERS
    if preflush:
        rest = rest[1:]
    op = "unknown"
    for token, name in _OPS:
        if rest.startswith(token):
            op, rest = name, rest[len(token):]
            break
    flags = {"F": False, "S": False, "M": False, "A": False}
    other = ""
    for char in rest:
        if char in flags:
            flags[char] = True
        else:
            other += char
    return Rwbs(raw, op, preflush, flags["F"], flags["S"], flags["M"], flags["A"], other)


# ==========================================================================
# Requests
# ==========================================================================


@dataclass
class BlockRequest:
    """One block request as issued to the driver (and its completion, if seen)."""

    device: str  # "major:minor"
    sector: int
    nr_sectors: int
    rwbs: str
    op: str
    preflush: bool
    fua: bool
    sync: bool
    meta: bool
    issue_ts: float
    comm: str
    pid: int
    cpu: int
    complete_ts: Optional[float] = None
    error: Optional[int] = None
    requeued: bool = False

    @property
    def nbytes(self) -> int:
        return self.nr_sectors * SECTOR

    @property
    def is_flush(self) -> bool:
        return self.op == "flush"

    @property
    def is_write(self) -> bool:
        return self.op in ("write", "zone-append") and self.nr_sectors > 0

    @property
    def is_read(self) -> bool:
        return self.op == "read" and self.nr_sectors > 0


def devno_of(device: str) -> str:
    """"major:minor" of a block device path."""
    rdev = os.stat(device).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def _kernel_dev_t(devno: str) -> int:
    major, minor = (int(x) for x in devno.split(":"))
    return (major << 20) | minor


# ==========================================================================
# trace_pipe text parsing
# ==========================================================================

_HEADER = re.compile(
    r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+(?:\S+\s+)?"
    r"(?P<ts>\d+\.\d+):\s+(?P<event>\w+):\s?(?P<body>.*)$"
)
_ISSUE = re.compile(
    r"^(?P<maj>\d+),(?P<min>\d+) (?P<rwbs>\S*) (?P<bytes>\d+) \((?P<cmd>[^)]*)\) "
    r"(?P<sector>\d+) \+ (?P<nr>\d+)(?: \S+)? \[(?P<comm>.*)\]$"
)
_DONE = re.compile(
    r"^(?P<maj>\d+),(?P<min>\d+) (?P<rwbs>\S*) \((?P<cmd>[^)]*)\) "
    r"(?P<sector>\d+) \+ (?P<nr>\d+)(?: \S+)? \[(?P<err>-?\d+)\]$"
)
_LOST = re.compile(r"^CPU:\s*\d+ \[LOST (?P<n>\d+) EVENTS\]")


@dataclass
class CaptureStats:
    """Completeness of one capture."""

    events: int = 0
    unparsed_lines: int = 0
    lost_events: int = 0  # from "[LOST n EVENTS]" lines in trace_pipe
    overrun: int = 0  # per_cpu stats "overrun" + "commit overrun"
    dropped: int = 0  # per_cpu stats "dropped events"
    unmatched_completions: int = 0
    flush_sequence_completions: int = 0  # empty PREFLUSH writes completed by a flush
    in_flight_at_stop: int = 0
    requeued: int = 0

    @property
    def complete(self) -> bool:
        """True when no event was lost or left unparsed."""
        return not (self.unparsed_lines or self.lost_events or self.overrun or self.dropped)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "complete": self.complete}


class _Assembler:
    """Turns parsed events into BlockRequests, pairing completions with issues."""

    def __init__(self, stats: CaptureStats) -> None:
        self.stats = stats
        self.requests: list[BlockRequest] = []
        self.markers: list[tuple[float, str]] = []
        self._pending: dict[tuple[str, Any], list[BlockRequest]] = {}

    @staticmethod
    def _key(device: str, op: str, sector: int) -> tuple[str, Any]:
        return (device, "flush") if op == "flush" else (device, sector)

    def line(self, text: str) -> None:
        if not text.strip():
            return
        lost = _LOST.match(text)
        if lost:
            self.stats.lost_events += int(lost.group("n"))
            return
        head = _HEADER.match(text)
        if head is None or not self._event(head):
            self.stats.unparsed_lines += 1

    def _event(self, head: re.Match[str]) -> bool:
        event, body = head.group("event"), head.group("body")
        ts = float(head.group("ts"))
        if event == "tracing_mark_write":
            self.markers.append((ts, body.strip()))
            return True
        if event == "block_rq_issue":
            return self._issue(head, body, ts)
        if event in ("block_rq_complete", "block_rq_requeue"):
            return self._done(body, ts, requeue=event == "block_rq_requeue")
        return False

    def _issue(self, head: re.Match[str], body: str, ts: float) -> bool:
        m = _ISSUE.match(body)
        if m is None:
            return False
        flags = parse_rwbs(m.group("rwbs"))
        req = BlockRequest(
            device=f"{m.group('maj')}:{m.group('min')}",
            sector=int(m.group("sector")),
            nr_sectors=int(m.group("nr")),
            rwbs=flags.raw,
            op=flags.op,
            preflush=flags.preflush,
            fua=flags.fua,
            sync=flags.sync,
            meta=flags.meta,
            issue_ts=ts,
            comm=m.group("comm"),
            pid=int(head.group("pid")),
            cpu=int(head.group("cpu")),
        )
        self.stats.events += 1
        self.requests.append(req)
        self._pending.setdefault(self._key(req.device, req.op, req.sector), []).append(req)
        return True

    def _done(self, body: str, ts: float, requeue: bool) -> bool:
        m = _DONE.match(body)
        if m is None:
            return False
        self.stats.events += 1
        device = f"{m.group('maj')}:{m.group('min')}"
        op = parse_rwbs(m.group("rwbs")).op
        queue = self._pending.get(self._key(device, op, int(m.group("sector"))))
        if not queue:
            if requeue:
                pass
            elif int(m.group("nr")) == 0:
                # The empty PREFLUSH write that asked for a flush completes
                # after the flush request that served it; it was never issued.
                self.stats.flush_sequence_completions += 1
            else:
                self.stats.unmatched_completions += 1
            return True
        req = queue.pop(0)
        if requeue:
            req.requeued = True
            self.stats.requeued += 1
        else:
            req.complete_ts, req.error = ts, int(m.group("err"))
        return True

    def finish(self) -> None:
        self.stats.in_flight_at_stop = sum(len(q) for q in self._pending.values())
        self.requests = [r for r in self.requests if not r.requeued]


# ==========================================================================
# tracefs instance
# ==========================================================================


def tracefs_root() -> str:
    """Mounted tracefs directory (mounts it at /sys/kernel/tracing if needed)."""
    for path in TRACEFS_CANDIDATES:
        if os.path.isdir(os.path.join(path, "instances")):
            return path
    with contextlib.suppress(CommandError, OSError):
        run_command(["mount", "-t", "tracefs", "nodev", TRACEFS_CANDIDATES[0]])
    if os.path.isdir(os.path.join(TRACEFS_CANDIDATES[0], "instances")):
        return TRACEFS_CANDIDATES[0]
    raise RuntimeError("tracefs is not mounted and could not be mounted at /sys/kernel/tracing")


def trace_unavailable_reason() -> Optional[str]:
    """None if block tracepoints can be captured here, else why not."""
    if os.geteuid() != 0:
        return "needs root (tracefs)"
    try:
        root = tracefs_root()
    except RuntimeError as exc:
        return str(exc)
    for event in EVENTS:
        if not os.path.isdir(os.path.join(root, "events", "block", event)):
            return f"kernel has no block:{event} tracepoint"
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


def _read_stats(instance: str) -> tuple[int, int]:
    """(overrun + commit overrun, dropped events) summed over CPUs."""
    overrun = dropped = 0
    per_cpu = os.path.join(instance, "per_cpu")
    for cpu in os.listdir(per_cpu):
        with contextlib.suppress(OSError), open(os.path.join(per_cpu, cpu, "stats"), encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("overrun", "commit overrun"):
                    overrun += int(value.split()[0])
                elif key.strip() == "dropped events":
                    dropped += int(value.split()[0])
    return overrun, dropped


_instance_counter = itertools.count()


class BlockTrace:
    """Capture block requests of ``devices`` while the context is active.

    ``with BlockTrace(devices=[fs.device]) as tr: workload(); fs.sync()`` then
    ``tr.requests`` (issue order) and ``tr.stats`` (completeness).
    ``tr.mark("text")`` writes a timestamped marker into the trace
    (``tr.markers``), e.g. to delimit transactions.
    """

    def __init__(self, devices: Sequence[str], buffer_kib_per_cpu: int = 8192) -> None:
        if not devices:
            raise ValueError("BlockTrace needs at least one device")
        self.devices = list(devices)
        self.devnos = [devno_of(d) for d in self.devices]
        self.buffer_kib_per_cpu = buffer_kib_per_cpu
        self.requests: list[BlockRequest] = []
        self.markers: list[tuple[float, str]] = []
        self.stats = CaptureStats()
        self.instance: Optional[str] = None
        self._chunks: list[bytes] = []
        self._stop = threading.Event()
        self._reader: Optional[threading.Thread] = None
        self._reader_error: Optional[BaseException] = None
        self._pipe_fd: Optional[int] = None

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> "BlockTrace":
        name = f"waldio-bt-{os.getpid()}-{next(_instance_counter)}"
        path = os.path.join(tracefs_root(), "instances", name)
        os.mkdir(path)
        self.instance = path
        try:
            self._configure(path)
            self._start_reader(path)
            _write(os.path.join(path, "tracing_on"), "1")
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], *_: object) -> None:
        try:
            if exc_type is None:
                self._stop_and_collect()
            else:  # keep the caller's exception; collect what we can
                with contextlib.suppress(Exception):
                    self._stop_and_collect()
        finally:
            self._teardown()

    def _configure(self, path: str) -> None:
        _write(os.path.join(path, "tracing_on"), "0")
        _write(os.path.join(path, "buffer_size_kb"), str(self.buffer_kib_per_cpu))
        _write(os.path.join(path, "trace_clock"), "mono")
        with contextlib.suppress(OSError):
            _write(os.path.join(path, "options", "overwrite"), "0")
        expr = " || ".join(f"dev == {_kernel_dev_t(d)}" for d in self.devnos)
        for event in EVENTS:
            event_dir = os.path.join(path, "events", "block", event)
            _write(os.path.join(event_dir, "filter"), expr)
            _write(os.path.join(event_dir, "enable"), "1")

    def _start_reader(self, path: str) -> None:
        self._pipe_fd = os.open(os.path.join(path, "trace_pipe"), os.O_RDONLY | os.O_NONBLOCK)
        self._reader = threading.Thread(target=self._read_loop, name="waldio-blocktrace", daemon=True)
        self._reader.start()

    def _read_loop(self) -> None:
        assert self._pipe_fd is not None
        try:
            while True:
                got = self._drain_once(self._pipe_fd)
                if self._stop.is_set() and not got:
                    return
                if not got:
                    time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - reported by __exit__
            self._reader_error = exc

    def _drain_once(self, fd: int) -> bool:
        """Read what is available; False when the pipe is empty (or at EOF)."""
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        if data:
            self._chunks.append(data)
        return bool(data)

    def _stop_and_collect(self) -> None:
        if self.instance is None:
            return
        _write(os.path.join(self.instance, "tracing_on"), "0")
        self._stop.set()
        if self._reader is not None:
            self._reader.join(timeout=30)
            if self._reader.is_alive():
                raise RuntimeError("trace reader did not finish draining trace_pipe")
        if self._reader_error is not None:
            raise RuntimeError(f"reading trace_pipe failed: {self._reader_error}")
        self.stats.overrun, self.stats.dropped = _read_stats(self.instance)
        self._parse()

    def _parse(self) -> None:
        assembler = _Assembler(self.stats)
        text = b"".join(self._chunks).decode(errors="replace")
        for line in text.splitlines():
            assembler.line(line)
        assembler.finish()
        self.requests, self.markers = assembler.requests, assembler.markers

    def _teardown(self) -> None:
        self._stop.set()
        if self._reader is not None and self._reader.is_alive():
            self._reader.join(timeout=5)
        if self._pipe_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pipe_fd)
            self._pipe_fd = None
        if self.instance is not None:
            _remove_instance(self.instance)
            self.instance = None

    # -- during the trace --------------------------------------------------

    def mark(self, text: str) -> None:
        """Write a marker line into this trace (see ``markers``)."""
        if self.instance is None:
            raise RuntimeError("trace is not running")
        _write(os.path.join(self.instance, "trace_marker"), text.replace("\n", " "))


def _remove_instance(path: str) -> None:
    with contextlib.suppress(OSError):
        _write(os.path.join(path, "tracing_on"), "0")
    for attempt in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or attempt == 49:
                raise
            time.sleep(0.02)


def leftover_trace_instances(pid: Optional[int] = None) -> list[str]:
    """tracefs instances created by this module (of ``pid`` if given) that still exist."""
    prefix = "waldio-bt-" if pid is None else f"waldio-bt-{pid}-"
    try:
        root = os.path.join(tracefs_root(), "instances")
    except RuntimeError:
        return []
    return sorted(os.path.join(root, n) for n in os.listdir(root) if n.startswith(prefix))


def release_trace_leftovers() -> list[str]:
    """Remove instances left by processes that died inside a trace; returns them."""
    removed = []
    for path in leftover_trace_instances():
        owner = os.path.basename(path).split("-")[2]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            _remove_instance(path)
            removed.append(path)
    return removed


# ==========================================================================
# FIEMAP
# ==========================================================================

_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_HEAD = struct.Struct("=QQLLLL")
_FIEMAP_EXTENT = struct.Struct("=QQQQQLLLL")
_FIEMAP_FLAG_SYNC = 0x1
_FIEMAP_EXTENT_LAST = 0x1
_FIEMAP_UNUSABLE = 0x2 | 0x4 | 0x8 | 0x80 | 0x200  # unknown, delalloc, encoded, encrypted, inline
_FIEMAP_EXTENT_UNWRITTEN = 0x800
_FIEMAP_BATCH = 128


@dataclass(frozen=True)
class FileExtent:
    """One mapped extent, in bytes, as FIEMAP reports it."""

    logical: int
    physical: int
    length: int
    flags: int

    @property
    def unwritten(self) -> bool:
        return bool(self.flags & _FIEMAP_EXTENT_UNWRITTEN)

    @property
    def usable(self) -> bool:
        return not self.flags & _FIEMAP_UNUSABLE


def fiemap(path: str, sync: bool = False) -> list[FileExtent]:
    """All extents of ``path`` (FS_IOC_FIEMAP); ``sync`` flushes delalloc first (writes I/O)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return _fiemap_fd(fd, _FIEMAP_FLAG_SYNC if sync else 0)
    finally:
        os.close(fd)


def _fiemap_fd(fd: int, flags: int) -> list[FileExtent]:
    extents: list[FileExtent] = []
    start = 0
    while True:
        batch = _fiemap_call(fd, start, flags)
        extents.extend(batch)
        if not batch or batch[-1].flags & _FIEMAP_EXTENT_LAST or len(batch) < _FIEMAP_BATCH:
            return extents
        start = batch[-1].logical + batch[-1].length


def _fiemap_call(fd: int, start: int, flags: int) -> list[FileExtent]:
    buf = bytearray(_FIEMAP_HEAD.size + _FIEMAP_BATCH * _FIEMAP_EXTENT.size)
    _FIEMAP_HEAD.pack_into(buf, 0, start, 2**64 - 1 - start, flags, 0, _FIEMAP_BATCH, 0)
    fcntl.ioctl(fd, _FS_IOC_FIEMAP, buf, True)
    mapped = _FIEMAP_HEAD.unpack_from(buf, 0)[3]
    result = []
    for i in range(mapped):
        f = _FIEMAP_EXTENT.unpack_from(buf, _FIEMAP_HEAD.size + i * _FIEMAP_EXTENT.size)
        result.append(FileExtent(logical=f[0], physical=f[1], length=f[2], flags=f[5]))
    return result


# ==========================================================================
# Layout
# ==========================================================================


@dataclass(frozen=True)
class Region:
    """A sector range [start, end) of one device attributed to a class."""

    devno: str
    start: int
    end: int
    cls: str
    source: str


# Priority ranks (lower wins).
_RANK_JOURNAL, _RANK_STATIC_META, _RANK_NAMED_FILE, _RANK_OTHER_FILE, _RANK_DIRECTORY = range(5)


class _FsLike(Protocol):
    kind: str
    device: str
    mountpoint: str
    journal_device: Optional[str]


class _IntervalMap:
    """Disjoint sorted intervals per device; earlier insertions win overlaps."""

    def __init__(self) -> None:
        self._starts: dict[str, list[int]] = {}
        self._items: dict[str, list[tuple[int, int, str]]] = {}

    def insert(self, devno: str, start: int, end: int, cls: str) -> None:
        starts = self._starts.setdefault(devno, [])
        items = self._items.setdefault(devno, [])
        for gap_start, gap_end in self._gaps(devno, start, end):
            i = bisect.bisect_left(starts, gap_start)
            starts.insert(i, gap_start)
            items.insert(i, (gap_start, gap_end, cls))

    def _gaps(self, devno: str, start: int, end: int) -> list[tuple[int, int]]:
        gaps, cursor = [], start
        for s, e, _ in self.overlapping(devno, start, end):
            if s > cursor:
                gaps.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < end:
            gaps.append((cursor, end))
        return gaps

    def overlapping(self, devno: str, start: int, end: int) -> list[tuple[int, int, str]]:
        starts, items = self._starts.get(devno, []), self._items.get(devno, [])
        i = max(bisect.bisect_right(starts, start) - 1, 0)
        found = []
        while i < len(items) and items[i][0] < end:
            s, e, cls = items[i]
            if e > start:
                found.append((s, e, cls))
            i += 1
        return found


@dataclass
class FileSnapshot:
    """FIEMAP extents of one file at one moment (physical addresses as FIEMAP gives them)."""

    cls: str
    path: str
    taken_at: float
    extents: list[FileExtent]


def snapshot_file(cls: str, path: str, sync: bool = False) -> Optional[FileSnapshot]:
    """FIEMAP ``path`` now under class ``cls``; None if it does not exist.

    Usable at any time (no layout needed), e.g. just before a file is deleted.
    """
    _check_class_name(cls)
    try:
        extents = fiemap(path, sync=sync)
    except FileNotFoundError:
        return None
    return FileSnapshot(cls, path, time.time(), extents)


class SnapshotPoller:
    """Snapshot ``files`` every ``interval_s`` seconds in a thread while active.

    For files that come and go during a workload (rollback journals).  A file
    that lives shorter than the interval can still be missed: snapshot it
    explicitly where the workload knows it exists.
    """

    def __init__(self, files: Mapping[str, Iterable[str]], interval_s: float = 0.05) -> None:
        self.files = {cls: list(paths) for cls, paths in files.items()}
        self.interval_s = interval_s
        self.snapshots: list[FileSnapshot] = []
        self._last: dict[str, list[FileExtent]] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def poll_once(self) -> None:
        for cls, paths in self.files.items():
            for path in paths:
                with contextlib.suppress(OSError):
                    snap = snapshot_file(cls, path)
                    if snap is not None and snap.extents and snap.extents != self._last.get(path):
                        self._last[path] = snap.extents
                        self.snapshots.append(snap)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll_once()

    def __enter__(self) -> "SnapshotPoller":
        self.poll_once()
        self._thread = threading.Thread(target=self._run, name="waldio-fiemap-poll", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.poll_once()


class Layout:
    """Sector ranges of the traced devices and the class each belongs to."""

    def __init__(self, kind: str, devices: Mapping[str, str], block_size: int) -> None:
        self.kind = kind
        self.devices = dict(devices)  # devno -> role ("main" / "journal")
        self.block_size = block_size
        self.notes: list[str] = []
        self.snapshots: list[FileSnapshot] = []
        self.skipped_extents = 0  # delalloc / inline / unknown: no usable address
        self._ranked: list[tuple[int, int, Region]] = []
        self._sequence = itertools.count()
        self._mapper: Optional[_AddressMapper] = None
        self._map: Optional[_IntervalMap] = None

    @property
    def main_devno(self) -> str:
        return next(d for d, role in self.devices.items() if role == "main")

    def add_region(self, region: Region, rank: int) -> None:
        """Attribute a sector range (lower ``rank`` wins overlaps)."""
        if region.end > region.start:
            self._ranked.append((rank, -next(self._sequence), region))
            self._map = None

    def add_snapshot(self, snap: FileSnapshot, rank: int = _RANK_NAMED_FILE) -> int:
        """Attribute a snapshot's extents; returns how many had no usable address."""
        self.snapshots.append(snap)
        mapper, skipped = self._address_mapper(), 0
        for ext in snap.extents:
            pieces = mapper.to_sectors(ext.physical, ext.length) if ext.usable else []
            skipped += not pieces
            for start, end in pieces:
                self.add_region(Region(mapper.devno, start, end, snap.cls, f"FIEMAP {snap.path}"), rank)
        self.skipped_extents += skipped
        return skipped

    def snapshot_file(self, cls: str, path: str, sync: bool = False) -> bool:
        """Record ``path``'s current extents under ``cls``; False if it does not exist.

        Call it before a file is deleted (SQLite rollback journals are) so its
        writes stay attributable.  Later snapshots win over earlier ones.
        """
        snap = snapshot_file(cls, path, sync=sync)
        if snap is None:
            return False
        self.add_snapshot(snap)
        return True

    def _address_mapper(self) -> "_AddressMapper":
        if self._mapper is None:
            self._mapper = _AddressMapper(self.main_devno)
        return self._mapper

    def regions(self) -> list[Region]:
        return [r for _, _, r in sorted(self._ranked, key=lambda t: (t[0], t[1]))]

    def lookup(self, devno: str, start: int, end: int) -> list[tuple[int, int, str]]:
        """Known (start, end, class) pieces of [start, end) on ``devno``."""
        if self._map is None:
            self._map = _IntervalMap()
            for region in self.regions():
                self._map.insert(region.devno, region.start, region.end, region.cls)
        return [(max(s, start), min(e, end), c) for s, e, c in self._map.overlapping(devno, start, end)]

    def class_bytes(self, cls: str) -> int:
        """Total size of all ranges attributed to ``cls`` (before overlap resolution)."""
        return sum((r.end - r.start) * SECTOR for r in self.regions() if r.cls == cls)

    def to_dict(self) -> dict[str, Any]:
        summary: dict[str, dict[str, int]] = {}
        for region in self.regions():
            entry = summary.setdefault(region.cls, {"ranges": 0, "bytes": 0})
            entry["ranges"] += 1
            entry["bytes"] += (region.end - region.start) * SECTOR
        return {
            "kind": self.kind,
            "devices": self.devices,
            "block_size": self.block_size,
            "classes": summary,
            "snapshots": [{"class": s.cls, "path": s.path, "extents": len(s.extents)} for s in self.snapshots],
            "skipped_extents": self.skipped_extents,
            "notes": self.notes,
        }


def _check_class_name(cls: str) -> None:
    if cls in RESERVED_CLASSES or cls.startswith("fs-"):
        raise ValueError(f"class name {cls!r} is reserved for file-system regions")


class _AddressMapper:
    """Maps FIEMAP physical byte addresses to device sector ranges.

    Identity on ext4 and xfs; on btrfs FIEMAP returns logical addresses that
    go through the chunk map (one range per stripe copy).
    """

    def __init__(self, devno: str, chunks: Optional[list[tuple[int, int, list[int]]]] = None) -> None:
        self.devno = devno
        self.chunks = chunks  # (logical start, length, [physical offsets]) or None = identity

    def to_sectors(self, physical: int, length: int) -> list[tuple[int, int]]:
        if self.chunks is None:
            return [(physical // SECTOR, -(-(physical + length) // SECTOR))]
        for logical, size, offsets in self.chunks:
            if logical <= physical < logical + size:
                delta = physical - logical
                return [((off + delta) // SECTOR, -(-(off + delta + length) // SECTOR)) for off in offsets]
        return []


# -- ext4 ------------------------------------------------------------------

_EXT4_STATIC = (
    (re.compile(r"(?:Primary|Backup) superblock at (\d+)"), "superblock"),
    (re.compile(r"Group descriptors at (\d+)-(\d+)"), "group descriptors"),
    (re.compile(r"Reserved GDT blocks at (\d+)-(\d+)"), "reserved GDT"),
    (re.compile(r"Block bitmap at (\d+)"), "block bitmap"),
    (re.compile(r"Inode bitmap at (\d+)"), "inode bitmap"),
    (re.compile(r"Inode table at (\d+)-(\d+)"), "inode table"),
)
_EXT4_EXTENT = re.compile(r"\((?:\d+)(?:-\d+)?\):(\d+)(?:-(\d+))?")
_EXT4_INDEX = re.compile(r"\((?:ETB|IND|DIND|TIND)\d*\):(\d+)")


def _dumpe2fs(device: str) -> str:
    return run_command(["dumpe2fs", device]).stdout


def _ext4_header_value(dump: str, key: str) -> Optional[str]:
    m = re.search(rf"^{re.escape(key)}:\s*(.+)$", dump, re.MULTILINE)
    return m.group(1).strip() if m else None


def _ext4_static_regions(dump: str, devno: str, bs_sectors: int) -> list[Region]:
    regions = []
    for pattern, what in _EXT4_STATIC:
        for m in pattern.finditer(dump):
            first = int(m.group(1))
            last = int(m.group(2)) if m.lastindex and m.lastindex >= 2 else first
            regions.append(Region(devno, first * bs_sectors, (last + 1) * bs_sectors, FS_METADATA, what))
    return regions


def _ext4_inode_blocks(device: str, inode: int, devno: str, bs_sectors: int, cls: str, what: str) -> list[Region]:
    """Data and extent-tree blocks of an inode, via ``debugfs -R "stat <N>"``."""
    out = run_command(["debugfs", "-R", f"stat <{inode}>", device]).stdout
    section = out.split("EXTENTS:", 1)[-1] if "EXTENTS:" in out else out.split("BLOCKS:", 1)[-1]
    regions = []
    for m in _EXT4_EXTENT.finditer(section):
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        regions.append(Region(devno, first * bs_sectors, (last + 1) * bs_sectors, cls, what))
    for m in _EXT4_INDEX.finditer(section):
        block = int(m.group(1))
        regions.append(Region(devno, block * bs_sectors, (block + 1) * bs_sectors, FS_METADATA, f"{what} tree"))
    return regions


def _device_sectors(device: str) -> int:
    with open(f"/sys/class/block/{os.path.basename(os.path.realpath(device))}/size", encoding="ascii") as fh:
        return int(fh.read())


def _layout_ext4(fs: _FsLike, layout: Layout) -> None:
    dump = _dumpe2fs(fs.device)
    bs = int(_ext4_header_value(dump, "Block size") or 4096)
    layout.block_size = bs
    bs_sectors = bs // SECTOR
    devno = layout.main_devno
    for region in _ext4_static_regions(dump, devno, bs_sectors):
        layout.add_region(region, _RANK_STATIC_META)
    journal_inode = _ext4_header_value(dump, "Journal inode")
    if fs.journal_device:
        jdev = devno_of(fs.journal_device)
        layout.add_region(Region(jdev, 0, _device_sectors(fs.journal_device), FS_JOURNAL, "external journal device"), _RANK_JOURNAL)
        layout.notes.append(f"{FS_JOURNAL}: the whole external journal device {fs.journal_device}")
    elif journal_inode:
        for region in _ext4_inode_blocks(fs.device, int(journal_inode), devno, bs_sectors, FS_JOURNAL, "journal inode"):
            layout.add_region(region, _RANK_JOURNAL)
        layout.notes.append(f"{FS_JOURNAL}: blocks of journal inode {journal_inode} (debugfs stat), fast-commit area included")
    else:
        layout.notes.append("no journal (has_journal off): fs-journal is always 0")
    orphan = _ext4_header_value(dump, "Orphan file inode")
    if orphan:
        for region in _ext4_inode_blocks(fs.device, int(orphan), devno, bs_sectors, FS_METADATA, "orphan file"):
            layout.add_region(region, _RANK_STATIC_META)
    layout.notes.append(
        f"{FS_METADATA}: superblocks, group descriptors, reserved GDT, bitmaps and inode tables "
        "(dumpe2fs), directory blocks (FIEMAP), extent-tree blocks, and any other write flagged REQ_META"
    )


# -- xfs -------------------------------------------------------------------


def _xfs_db(device: str, *commands: str) -> str:
    argv = ["xfs_db", "-r"]
    for command in commands:
        argv += ["-c", command]
    return run_command(argv + [device]).stdout


def _xfs_sb_fields(device: str, names: Sequence[str]) -> dict[str, int]:
    out = _xfs_db(device, "sb 0", *(f"p {n}" for n in names))
    values = {}
    for line in out.splitlines():
        key, _, value = line.partition(" = ")
        if value.strip().lstrip("-").isdigit():
            values[key.strip()] = int(value.strip())
    return values


def _xfs_fsblock_to_daddr(device: str, fsblock: int) -> int:
    out = _xfs_db(device, f"convert fsblock {fsblock} daddr")
    m = re.search(r"\((\d+)\)", out)
    if m is None:
        raise RuntimeError(f"xfs_db convert gave no daddr: {out!r}")
    return int(m.group(1))


def _layout_xfs(fs: _FsLike, layout: Layout) -> None:
    sb = _xfs_sb_fields(fs.device, ("blocksize", "sectsize", "agblocks", "agcount", "logstart", "logblocks"))
    layout.block_size = sb["blocksize"]
    devno = layout.main_devno
    ag_sectors = sb["agblocks"] * sb["blocksize"] // SECTOR
    header_sectors = 4 * sb["sectsize"] // SECTOR  # sb, agf, agi, agfl
    for ag in range(sb["agcount"]):
        start = ag * ag_sectors
        layout.add_region(Region(devno, start, start + header_sectors, FS_METADATA, f"AG {ag} headers"), _RANK_STATIC_META)
    if sb["logstart"]:
        start = _xfs_fsblock_to_daddr(fs.device, sb["logstart"])
        end = start + sb["logblocks"] * sb["blocksize"] // SECTOR
        layout.add_region(Region(devno, start, end, FS_JOURNAL, "xfs internal log"), _RANK_JOURNAL)
        layout.notes.append(f"{FS_JOURNAL}: the xfs internal log (xfs_db logstart/logblocks)")
    else:
        layout.notes.append("xfs log is external and not traced: fs-journal is not attributable")
    layout.notes.append(
        f"{FS_METADATA}: AG headers, directory blocks (FIEMAP), and every other write flagged REQ_META "
        "(btrees and inode chunks are dynamic and are recognized only by that flag)"
    )


# -- btrfs -----------------------------------------------------------------

_BTRFS_CHUNK = re.compile(r"CHUNK_ITEM (\d+)\).*?length (\d+) .*?type (\S+)(.*?)(?=\n\titem |\Z)", re.DOTALL)
_BTRFS_STRIPE = re.compile(r"stripe \d+ devid \d+ offset (\d+)")
_BTRFS_SUPERBLOCKS = (64 * 1024, 64 * 1024**2, 256 * 1024**3)


def _btrfs_chunks(device: str) -> list[tuple[int, int, str, list[int]]]:
    out = run_command(["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", device]).stdout
    chunks = []
    for m in _BTRFS_CHUNK.finditer(out):
        offsets = [int(x) for x in _BTRFS_STRIPE.findall(m.group(4))]
        chunks.append((int(m.group(1)), int(m.group(2)), m.group(3), offsets))
    return chunks


def _layout_btrfs(fs: _FsLike, layout: Layout) -> None:
    layout.block_size = 4096
    devno = layout.main_devno
    chunks = _btrfs_chunks(fs.device)
    layout._mapper = _AddressMapper(devno, [(lo, size, offs) for lo, size, _t, offs in chunks])
    for logical, size, ctype, offsets in chunks:
        if not ctype.startswith("DATA"):
            for off in offsets:
                region = Region(devno, off // SECTOR, (off + size) // SECTOR, FS_METADATA, f"{ctype} chunk @{logical}")
                layout.add_region(region, _RANK_STATIC_META)
    size_sectors = _device_sectors(fs.device)
    for offset in _BTRFS_SUPERBLOCKS:
        if offset // SECTOR < size_sectors:
            layout.add_region(Region(devno, offset // SECTOR, (offset + 4096) // SECTOR, FS_METADATA, "superblock"), _RANK_STATIC_META)
    layout.notes.append(
        "btrfs: fs-journal is NOT separated: the fsync log tree lives in metadata chunks and is counted as "
        f"{FS_METADATA} with every other tree block and the superblocks; file data is mapped through the "
        "chunk tree (DUP copies counted twice); data-chunk blocks of no known file are unattributed-data"
    )


# -- common ----------------------------------------------------------------

_LAYOUT_BUILDERS = {"ext4": _layout_ext4, "xfs": _layout_xfs, "btrfs": _layout_btrfs}


def _walk_tree(layout: Layout, root: str, named: set[str], limit: int) -> None:
    """Attribute other files and directory blocks found under ``root``."""
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        entries = [(dirpath, FS_METADATA, _RANK_DIRECTORY)]
        entries += [(os.path.join(dirpath, f), OTHER_FILE, _RANK_OTHER_FILE) for f in sorted(filenames)]
        for path, cls, rank in entries:
            seen += 1
            if seen > limit:
                layout.notes.append(f"tree walk stopped after {limit} entries: later files unattributed")
                return
            if os.path.realpath(path) in named or not (os.path.isdir(path) or os.path.isfile(path)):
                continue
            with contextlib.suppress(OSError):
                extents = fiemap(path)
                layout.add_snapshot(FileSnapshot(cls, path, time.time(), extents), rank)


def describe_layout(
    fs: _FsLike,
    files: Mapping[str, Iterable[str]],
    snapshots: Iterable[FileSnapshot] = (),
    walk_limit: int = 10000,
) -> Layout:
    """Build the sector map of ``fs`` (mounted) for :func:`classify`.

    ``files`` maps a class name ("wal", "db", ...) to the paths of that class;
    missing paths are skipped.  ``snapshots`` are extents recorded earlier
    (e.g. with :meth:`Layout.snapshot_file` on a layout built before the
    workload, or :func:`take_snapshot`) of files that may since be deleted;
    current extents win over them.  Call it after the workload, before
    unmounting.  Files not named are attributed to "other-file".
    """
    fstype = fs.kind.split("-", 1)[0]
    if fstype not in _LAYOUT_BUILDERS:
        raise ValueError(f"no layout support for file-system kind {fs.kind!r}")
    devices = {devno_of(fs.device): "main"}
    if fs.journal_device:
        devices[devno_of(fs.journal_device)] = "journal"
    layout = Layout(fs.kind, devices, 4096)
    _LAYOUT_BUILDERS[fstype](fs, layout)
    for snap in snapshots:
        layout.add_snapshot(snap)
    named: set[str] = set()
    for cls, paths in files.items():
        for path in paths:
            named.add(os.path.realpath(path))
            layout.snapshot_file(cls, path)
    _walk_tree(layout, fs.mountpoint, named, walk_limit)
    layout.notes.append(
        f"{UNATTRIBUTED}: written sectors outside every known range whose request is not REQ_META "
        "(e.g. blocks of files deleted before any snapshot)"
    )
    return layout


# ==========================================================================
# Classification
# ==========================================================================


@dataclass
class ClassTotals:
    """Accounting of one class."""

    bytes_written: int = 0
    write_requests: int = 0
    fua_writes: int = 0
    bytes_read: int = 0
    read_requests: int = 0


@dataclass
class Report:
    """Per-class accounting of one trace (JSON-serializable via ``to_dict``)."""

    classes: dict[str, ClassTotals] = field(default_factory=dict)
    total_bytes_written: int = 0
    write_requests: int = 0
    total_bytes_read: int = 0
    read_requests: int = 0
    flushes: int = 0
    flushes_by_device: dict[str, int] = field(default_factory=dict)
    preflush_writes: int = 0
    fua_writes: int = 0
    discard_bytes: int = 0
    discard_requests: int = 0
    write_zeroes_bytes: int = 0
    write_zeroes_requests: int = 0
    other_requests: int = 0
    size_histogram: dict[int, int] = field(default_factory=dict)  # write size in bytes -> requests
    definitions: list[str] = field(default_factory=list)
    capture: Optional[dict[str, Any]] = None

    def written(self, cls: str) -> int:
        """Bytes written to ``cls`` (0 if the class saw no write)."""
        totals = self.classes.get(cls)
        return totals.bytes_written if totals else 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["classes"] = {k: asdict(v) for k, v in sorted(self.classes.items())}
        data["size_histogram"] = {str(k): v for k, v in sorted(self.size_histogram.items())}
        return data


def _split(req: BlockRequest, layout: Layout) -> dict[str, int]:
    """Sectors of ``req`` per class (gaps: fs-metadata if REQ_META, else unattributed).

    File data is never written with REQ_META, so the pieces of a REQ_META
    request that fall in a file extent (a stale snapshot of a deleted file
    whose block now holds metadata, e.g. an extent-tree block) are metadata.
    """
    start, end = req.sector, req.sector + req.nr_sectors
    fallback = FS_METADATA if req.meta else UNATTRIBUTED
    pieces: dict[str, int] = {}
    cursor = start
    for s, e, cls in layout.lookup(req.device, start, end):
        if req.meta and cls != FS_JOURNAL:
            cls = FS_METADATA
        if s > cursor:
            pieces[fallback] = pieces.get(fallback, 0) + s - cursor
        pieces[cls] = pieces.get(cls, 0) + e - s
        cursor = e
    if cursor < end:
        pieces[fallback] = pieces.get(fallback, 0) + end - cursor
    return pieces


def _account_data(report: Report, req: BlockRequest, layout: Layout) -> None:
    for cls, sectors in _split(req, layout).items():
        totals = report.classes.setdefault(cls, ClassTotals())
        if req.is_write:
            totals.bytes_written += sectors * SECTOR
            totals.write_requests += 1
            totals.fua_writes += req.fua
        else:
            totals.bytes_read += sectors * SECTOR
            totals.read_requests += 1


def _account(report: Report, req: BlockRequest, layout: Layout) -> None:
    if req.is_flush:
        report.flushes += 1
        report.flushes_by_device[req.device] = report.flushes_by_device.get(req.device, 0) + 1
    elif req.is_write:
        report.total_bytes_written += req.nbytes
        report.write_requests += 1
        report.fua_writes += req.fua
        report.preflush_writes += req.preflush
        report.size_histogram[req.nbytes] = report.size_histogram.get(req.nbytes, 0) + 1
        _account_data(report, req, layout)
    elif req.is_read:
        report.total_bytes_read += req.nbytes
        report.read_requests += 1
        _account_data(report, req, layout)
    elif req.op in ("discard", "secure-erase"):
        report.discard_bytes += req.nbytes
        report.discard_requests += 1
    elif req.op == "write-zeroes":
        report.write_zeroes_bytes += req.nbytes
        report.write_zeroes_requests += 1
    else:
        report.other_requests += 1


def classify(
    requests: Iterable[BlockRequest], layout: Layout, capture: Optional[CaptureStats] = None
) -> Report:
    """Attribute every request by device and sector range (see module docstring).

    A request spanning several classes adds its sectors to each and counts as
    one request in each; the totals count it once.  Requests on devices that
    are not in the layout are ignored.
    """
    report = Report(definitions=list(layout.notes), capture=capture.to_dict() if capture else None)
    for req in requests:
        if req.device in layout.devices and not req.requeued:
            _account(report, req, layout)
    return report


__all__ = [
    "FS_JOURNAL",
    "FS_METADATA",
    "OTHER_FILE",
    "UNATTRIBUTED",
    "BlockRequest",
    "BlockTrace",
    "CaptureStats",
    "ClassTotals",
    "FileExtent",
    "FileSnapshot",
    "Layout",
    "Region",
    "Report",
    "Rwbs",
    "SnapshotPoller",
    "classify",
    "describe_layout",
    "devno_of",
    "fiemap",
    "leftover_trace_instances",
    "parse_rwbs",
    "release_trace_leftovers",
    "snapshot_file",
    "trace_unavailable_reason",
    "tracefs_root",
]
