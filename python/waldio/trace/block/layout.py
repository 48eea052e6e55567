"""Which sector ranges of a device belong to what.

:func:`describe_layout` builds a :class:`Layout` for a mounted ext4, xfs or
btrfs: the file-system journal (ext4's journal inode or external device, the
xfs log), static metadata (superblocks, group descriptors, bitmaps, inode
tables, btrfs metadata chunks), the files the caller names by class ("wal",
"db"...), other files and directories.  Overlaps resolve by priority:
fs-journal > static fs-metadata > named file extents (most recent snapshot
first) > other files > directory blocks.
"""
from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Protocol, Sequence

from waldio.fs.commands import run_command

from .classes import FS_JOURNAL, FS_METADATA, OTHER_FILE, UNATTRIBUTED
from .extents import FileSnapshot, fiemap, snapshot_file
from .requests import SECTOR, devno_of


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


def _xfs_db(device: str, *commands: str) -> str:
    argv = ["xfs_db", "-r"]
    for command in commands:
        argv += ["-c", command]
    return run_command(argv + [device]).stdout


def xfs_sb_fields(device: str, names: Sequence[str]) -> dict[str, int]:
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
    sb = xfs_sb_fields(fs.device, ("blocksize", "sectsize", "agblocks", "agcount", "logstart", "logblocks"))
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
