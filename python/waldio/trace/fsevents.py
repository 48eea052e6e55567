"""File-system events of a trace: which sync call synced what, and when.

Parses the ext4/jbd2, xfs and btrfs tracepoint lines (and the ``sys_exit_*``
that closes a call) into :class:`FsEvent` records, pairs them into
:class:`SyncCall` intervals (``fsync``/``fdatasync``/O_DSYNC writes: inode,
thread, start, end) and :class:`JournalCommit` records (jbd2 commits), and
reads online extent mappings of xfs and btrfs from their mapping events.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from waldio.trace import block as bt

from .model import DIRECTORY, UNIDENTIFIED


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
FS_EVENTS: Dict[str, Tuple[Tuple[str, str, bool], ...]] = {
    "ext4": (("ext4", "ext4_sync_file_enter", True), ("ext4", "ext4_sync_file_exit", True),
             ("jbd2", "jbd2_start_commit", True), ("jbd2", "jbd2_end_commit", True),
             ("ext4", "ext4_fc_commit_start", True), ("ext4", "ext4_ext_map_blocks_exit", True)),
    "xfs": (("xfs", "xfs_file_fsync", True), ("xfs", "xfs_dir_fsync", True),
            ("xfs", "xfs_map_blocks_found", True), ("xfs", "xfs_map_blocks_alloc", True),
            ("xfs", "xfs_iomap_found", True), ("xfs", "xfs_iomap_alloc", True)),
    "btrfs": (("btrfs", "btrfs_sync_file", False), ("btrfs", "btrfs_ordered_extent_add", False)),
}


# Closes a sync window on xfs and btrfs (their sync tracepoints have no exit).
SYSCALL_EXITS = (("syscalls", "sys_exit_fsync"), ("syscalls", "sys_exit_fdatasync"),
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


def is_fs_event_line(line: str) -> bool:
    head = _FS_HEADER.match(line)
    if head is None:
        return False
    rest = head.group("rest")
    return rest.startswith(("ext4_", "jbd2_", "xfs_", "btrfs_", "sys_"))


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
