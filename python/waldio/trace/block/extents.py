"""Where a file's data lies on its device: FIEMAP snapshots.

:func:`fiemap` asks the file system for a file's extents (``FS_IOC_FIEMAP``,
unwritten extents flagged); :func:`snapshot_file` records them for one named
file class, and :class:`SnapshotPoller` keeps re-reading them from a thread,
so that files deleted or moved during a run stay attributable.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from .classes import check_class_name

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
    check_class_name(cls)
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
