"""Capture of block requests through a private tracefs instance.

:class:`BlockTrace` creates ``/sys/kernel/tracing/instances/waldio-bt-<pid>-<n>``,
enables the block request events filtered to the traced devices' ``dev_t``,
drains ``trace_pipe`` from a reader thread while the workload runs, and removes
the instance on every exit path; leftovers of a killed run are found (and
released) by their name prefix.  ``block_rq_insert`` is not used: its only
extra information is the submitting task, and waldio never classifies by task.
"""
from __future__ import annotations

import contextlib
import errno
import itertools
import os
import threading
import time
from typing import Optional, Sequence

from waldio.fs.commands import CommandError, run_command

from .requests import BlockRequest, CaptureStats, RequestAssembler, devno_of, kernel_dev_t

TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


EVENTS = ("block_rq_issue", "block_rq_complete", "block_rq_requeue")


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


def write_file(path: str, value: str) -> None:
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
            write_file(os.path.join(path, "tracing_on"), "1")
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
        write_file(os.path.join(path, "tracing_on"), "0")
        write_file(os.path.join(path, "buffer_size_kb"), str(self.buffer_kib_per_cpu))
        write_file(os.path.join(path, "trace_clock"), "mono")
        with contextlib.suppress(OSError):
            write_file(os.path.join(path, "options", "overwrite"), "0")
        expr = " || ".join(f"dev == {kernel_dev_t(d)}" for d in self.devnos)
        for event in EVENTS:
            event_dir = os.path.join(path, "events", "block", event)
            write_file(os.path.join(event_dir, "filter"), expr)
            write_file(os.path.join(event_dir, "enable"), "1")

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
        write_file(os.path.join(self.instance, "tracing_on"), "0")
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
        assembler = RequestAssembler(self.stats)
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
        write_file(os.path.join(self.instance, "trace_marker"), text.replace("\n", " "))


def _remove_instance(path: str) -> None:
    with contextlib.suppress(OSError):
        write_file(os.path.join(path, "tracing_on"), "0")
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
