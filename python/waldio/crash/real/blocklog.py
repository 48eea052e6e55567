"""The block log of the FUSE block recorder (crash/block_recorder.c): reading it,
and replaying it onto an image.

A log is the image's history as the "device" saw it: every write that reached
the image file (offset, bytes), every zeroing fallocate (a discard or write-
zeroes request of the loop device), every flush (the loop device's fsync of its
backing file: REQ_PREFLUSH, a flush request, an emulated FUA), and the
workload's marks, each with its sequence number and CLOCK_MONOTONIC time.
The format is specified at the top of crash/block_recorder.c.

Invariants the reader checks: the magic, sequence numbers 1, 2, 3 ... without
a gap, whole records (a torn tail means the recorder died: refused), writes
inside the image.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional

MAGIC = b"WALDIOBLK1\n\0\0\0\0\0"
FILE_HDR = struct.Struct("<16sQQQQ")
REC_HDR = struct.Struct("<BBHIQQQQQ")

WRITE, FLUSH, ZERO, MARK = 1, 2, 3, 4
F_ZEROS, F_DATASYNC = 1, 2
TYPE_NAMES = {WRITE: "write", FLUSH: "flush", ZERO: "zero", MARK: "mark"}

SECTOR = 512


@dataclass
class Record:
    seq: int                  # 1, 2, 3 ...: the record's place in the log
    type: int                 # WRITE FLUSH ZERO MARK
    flags: int
    t_ns: int                 # CLOCK_MONOTONIC when the recorder handled it
    off: int = 0
    length: int = 0
    data: Optional[memoryview] = None     # WRITE: the bytes (None: all zeros)
    text: str = ""                        # MARK

    @property
    def changes_image(self) -> bool:
        return self.type in (WRITE, ZERO)

    def payload(self) -> bytes:
        """The bytes this record leaves in [off, off+length)."""
        if self.data is not None:
            return bytes(self.data)
        return bytes(self.length)

    def describe(self) -> str:
        if self.type == MARK:
            return "#%d mark %r" % (self.seq, self.text)
        if self.type == FLUSH:
            return "#%d flush" % self.seq
        what = "write" if self.type == WRITE and self.data is not None else "zeros"
        return "#%d %s @%d+%d" % (self.seq, what, self.off, self.length)


class BlockLogError(ValueError):
    """A block log that cannot be read (not one, torn, a gap in the sequence)."""


@dataclass
class BlockLog:
    image_size: int
    t_start_ns: int            # CLOCK_MONOTONIC at the recorder's start
    realtime_start_ns: int     # CLOCK_REALTIME at the same moment
    records: List[Record]

    def __len__(self) -> int:
        return len(self.records)

    def record(self, seq: int) -> Record:
        return self.records[seq - 1]

    def wall_ns(self, t_ns: int) -> int:
        """A record's CLOCK_MONOTONIC time as CLOCK_REALTIME."""
        return self.realtime_start_ns + (t_ns - self.t_start_ns)


def parse(path: Path) -> BlockLog:
    data = Path(path).read_bytes()
    if len(data) < FILE_HDR.size or data[:16] != MAGIC:
        raise BlockLogError("%s is not a block log of crash/block_recorder" % path)
    _m, size, t0, rt0, _pad = FILE_HDR.unpack_from(data, 0)
    mv = memoryview(data)
    pos, n = FILE_HDR.size, len(data)
    records: List[Record] = []
    while pos < n:
        if pos + REC_HDR.size > n:
            raise BlockLogError("%s: torn record header at byte %d (the recorder died?)" % (path, pos))
        typ, flags, _p, plen, seq, t, off, ln, _pad2 = REC_HDR.unpack_from(data, pos)
        pos += REC_HDR.size
        if pos + plen > n:
            raise BlockLogError("%s: torn record %d at byte %d" % (path, seq, pos))
        if seq != len(records) + 1:
            raise BlockLogError("%s: record %d follows %d" % (path, seq, len(records)))
        if typ not in TYPE_NAMES:
            raise BlockLogError("%s: record %d has unknown type %d" % (path, seq, typ))
        rec = Record(seq, typ, flags, t, off, ln)
        if typ == WRITE:
            if flags & F_ZEROS:
                if plen:
                    raise BlockLogError("%s: record %d: zero write with a payload" % (path, seq))
            elif plen != ln:
                raise BlockLogError("%s: record %d: %d payload bytes for a %d-byte write"
                                    % (path, seq, plen, ln))
            else:
                rec.data = mv[pos:pos + plen]
        elif typ == MARK:
            rec.text = bytes(mv[pos:pos + plen]).decode("utf-8", "replace")
        if rec.changes_image and off + ln > size:
            raise BlockLogError("%s: record %d writes past the image (%d+%d > %d)"
                                % (path, seq, off, ln, size))
        records.append(rec)
        pos += plen
    return BlockLog(size, t0, rt0, records)


def write(path: Path, log: BlockLog) -> None:
    """Write a block log (a hand-made or edited one: records are renumbered
    1, 2, 3 ... in list order)."""
    with open(path, "wb") as f:
        f.write(FILE_HDR.pack(MAGIC, log.image_size, log.t_start_ns, log.realtime_start_ns, 0))
        for i, r in enumerate(log.records, 1):
            payload = b""
            if r.type == WRITE and r.data is not None:
                payload = bytes(r.data)
            elif r.type == MARK:
                payload = r.text.encode()
            flags = r.flags | (F_ZEROS if r.type == WRITE and r.data is None else 0)
            f.write(REC_HDR.pack(r.type, flags, 0, len(payload), i, r.t_ns, r.off, r.length, 0))
            f.write(payload)


def apply(image: bytearray, rec: Record) -> None:
    """Apply a WRITE or ZERO record to an in-memory image."""
    if rec.type == WRITE and rec.data is not None:
        image[rec.off:rec.off + rec.length] = rec.data
    elif rec.changes_image:
        image[rec.off:rec.off + rec.length] = bytes(rec.length)


def apply_sectors(image: bytearray, rec: Record, sectors: Iterable[int]) -> None:
    """Apply only some 512-byte sectors (indexes within the record) of a write:
    a torn write."""
    for i in sectors:
        lo = rec.off + i * SECTOR
        hi = min(rec.off + rec.length, lo + SECTOR)
        if rec.data is not None and rec.type == WRITE:
            image[lo:hi] = rec.data[lo - rec.off:hi - rec.off]
        else:
            image[lo:hi] = bytes(hi - lo)


def n_sectors(rec: Record) -> int:
    return (rec.length + SECTOR - 1) // SECTOR


def read_image(path: Path) -> bytearray:
    return bytearray(Path(path).read_bytes())


def write_image(path: Path, image: bytes) -> None:
    """Write an image in place (the file keeps its inode: a loop device or a
    running check may hold it open elsewhere only after this returns)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        mv = memoryview(image)
        done = 0
        while done < len(mv):
            done += os.pwrite(fd, mv[done:done + (8 << 20)], done)
        os.ftruncate(fd, len(mv))
    finally:
        os.close(fd)
