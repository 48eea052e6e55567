"""`waldio recover`: what a waldio log with a damaged block 0 (or a standard
log with a damaged header) still proves.

libwaldio refuses to open a log whose superblock (block 0, bytes 32..111,
docs/format.md §2) fails its checks: the log may hold committed transactions,
and guessing its geometry inside a VFS would risk serving wrong pages. This
module does the careful work offline, without SQLite:

1. SQLite's own 32-byte WAL header is kept twice in block 0: as the
   superblock's copy (bytes 72..103) and, with its version field replaced, as
   the guard header (bytes 0..31). Each carries its own checksum, so either
   one alone is enough; a changed byte cannot pass both.
2. The geometry (layout, block size) is found by trying every layout and
   block size: the right one is the one under which SQLite's frame checksum
   chain, seeded by that header, goes furthest. Only frames SQLite's own
   recovery would accept (salts of the header, page number not 0, checksum
   chained from the previous frame) count, up to the last commit frame.
3. Those frames are written as a standard SQLite WAL (header + frames exactly
   as SQLite wrote them) to a new file, which is fsynced and renamed over the
   log; the damaged log is kept beside it first (a hard link, so every step
   is atomic). The next waldio open converts the standard WAL (format.md §7);
   stock SQLite would recover it as it is.

Frames dropped: those after the last commit frame of the chain (a
transaction that never committed) and those of the same generation after
the chain breaks (they cannot be proven to follow the frames before them).
Nothing is ever written to the database file itself.

A standard-layout log (SQLite's own WAL, docs/format.md §4) has no second
copy of its header. A damaged one is rebuilt from the first frame: SQLite's
checksum runs backwards as well as forwards (each step adds words to both
sums, so each step can be subtracted again), so frame 1's stored checksum
and bytes give the header's checksum, and the header's one unknown word
(its checkpoint sequence) is the one that makes the header sum to it. The
salts come from the frame; a page size is right when the reverse run lands
on a consistent header.
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, List, Optional, Tuple

import waldio

from .logformat import (FRAME_HDR, GUARD_VERSION, SB_MAGIC, WAL_HDR, WAL_MAGICS,
                        WAL_VERSION, Geometry, as_standard_header, damage_of, geometry,
                        header_ok, wal_checksum)

WAL_MAGIC_LE, WAL_MAGIC_BE = WAL_MAGICS


def _standard_geometry(page: int) -> Geometry:
    """SQLite's own offsets (src/layout_standard.c): frames from byte 32."""
    return Geometry(STANDARD, 4096, page, WAL_HDR, page + FRAME_HDR, 0, FRAME_HDR)

BLOCK_SIZES = (4096, 512, 1024, 2048, 8192, 16384, 32768, 65536)
LOCK_BASE = 1 << 62           # src/log_lock.c: INIT at +0, USE at +1


def _u32(b: bytes, off: int) -> int:
    return int(struct.unpack_from(">I", b, off)[0])


# ------------------------------------------------------------ block 0

def _header_candidates(b0: bytes) -> List[Tuple[str, bytes]]:
    """SQLite's header as block 0 keeps it: the superblock's copy, and the
    guard header turned back into the standard header. Each only if its
    own checksum holds; equal ones once."""
    out: List[Tuple[str, bytes]] = []
    copy = bytes(b0[72:104])
    if header_ok(copy) and _u32(copy, 4) == WAL_VERSION:
        out.append(("the superblock's copy of SQLite's header (bytes 72..103)", copy))
    guard = bytes(b0[:WAL_HDR])
    if header_ok(guard) and _u32(guard, 4) == GUARD_VERSION:
        std = as_standard_header(guard)
        if not any(h == std for _, h in out):
            out.append(("the guard header (bytes 0..31)", std))
    return out


# --------------------------------------- a standard log's header, rebuilt

STANDARD = 4                  # WALDIO_LAYOUT_STANDARD
PAGE_SIZES = (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512)


def _unsum(data: bytes, big: bool, s: Tuple[int, int]) -> Tuple[int, int]:
    """The sums wal_checksum(data, big, start) started from, given its result s."""
    words = struct.unpack((">%dI" if big else "<%dI") % (len(data) // 4), data)
    s1, s2 = s
    for i in range(len(words) - 2, -1, -2):
        s2 = (s2 - words[i + 1] - s1) & 0xFFFFFFFF
        s1 = (s1 - words[i] - s2) & 0xFFFFFFFF
    return s1, s2


def _header_for(page: int, salts: bytes, big: bool, want: Tuple[int, int]) -> Optional[bytes]:
    """The WAL header with these page size and salts whose checksum is want,
    solving for its checkpoint sequence (bytes 12..15); None if none can."""
    magic = WAL_MAGIC_BE if big else WAL_MAGIC_LE
    fmt = ">6I" if big else "<6I"
    base = bytearray(struct.pack(">IIII", magic, WAL_VERSION, page, 0) + salts)
    w = struct.unpack(fmt, bytes(base))
    s1 = w[0]
    s2 = (w[1] + s1) & 0xFFFFFFFF
    s1 = (s1 + w[2] + s2) & 0xFFFFFFFF
    # want[0] = s1 + w4 + s2', s2' = s2 + w3 + s1: solve for w3
    s2_after = (want[0] - s1 - w[4]) & 0xFFFFFFFF
    w3 = (s2_after - s2 - s1) & 0xFFFFFFFF
    struct.pack_into(">I" if big else "<I", base, 12, w3)
    if wal_checksum(bytes(base), big) != want:
        return None
    return bytes(base) + struct.pack(">II", *want)


def _standard_candidates(f: BinaryIO, size: int) -> List[Tuple[str, bytes]]:
    """Headers rebuilt from frame 1 of a standard log, one per page size
    (and checksum byte order) under which the reverse run is consistent."""
    out: List[Tuple[str, bytes]] = []
    for page in PAGE_SIZES:
        if WAL_HDR + FRAME_HDR + page > size:
            continue
        f.seek(WAL_HDR)
        frame = f.read(FRAME_HDR + page)
        if _u32(frame, 0) == 0:
            continue
        stored = (_u32(frame, 16), _u32(frame, 20))
        for big in (True, False):
            start = _unsum(frame[FRAME_HDR:], big, stored)
            start = _unsum(frame[:8], big, start)
            hdr = _header_for(page, frame[8:16], big, start)
            if hdr is not None:
                out.append(("frame 1 (the header rebuilt for %d-byte pages)" % page, hdr))
    return out


def _frames(f: BinaryIO, g: Geometry, size: int) -> Iterator[Tuple[bytes, bytes]]:
    """(frame header, page as SQLite wrote it) of each slot, in order."""
    i = 0
    while g.area + (i + 1) * g.slot <= size:
        f.seek(g.area + i * g.slot)
        s = f.read(g.slot)
        if len(s) < g.slot:
            return
        hdr = s[g.hdr_in_slot:g.hdr_in_slot + FRAME_HDR]
        if g.layout == 1:
            page = s[:g.page - FRAME_HDR] + bytes(FRAME_HDR)
        else:
            page = s[g.page_in_slot:g.page_in_slot + g.page]
        yield hdr, page
        i += 1


@dataclass
class Chain:
    """What SQLite's recovery would accept under one geometry."""
    geometry: Geometry
    valid: int = 0                # frames accepted, up to the first break
    committed: int = 0            # frames up to the last commit frame
    transactions: int = 0
    after_break: int = 0          # frames of the generation after the break
    frames: List[bytes] = field(default_factory=list)   # committed, logical


def walk(f: BinaryIO, g: Geometry, header: bytes, size: int,
         past_break: bool = True) -> Chain:
    """past_break: go on after the chain breaks, to count the generation's
    frames there (reads the whole log; not needed to compare geometries)."""
    big = bool(_u32(header, 0) & 1)
    salts = header[16:24]
    s = (_u32(header, 24), _u32(header, 28))
    c = Chain(g)
    pending: List[bytes] = []
    broken = False
    for hdr, page in _frames(f, g, size):
        same_generation = hdr[8:16] == salts and _u32(hdr, 0) != 0
        if broken:
            if not past_break:
                break
            c.after_break += same_generation
            continue
        if not same_generation:
            broken = True                     # the generation ends here
            continue
        s = wal_checksum(page, big, wal_checksum(hdr[:8], big, s))
        if s != (_u32(hdr, 16), _u32(hdr, 20)):
            broken = True                     # a damaged frame: a break
            c.after_break += 1
            continue
        c.valid += 1
        pending.append(hdr + page)
        if _u32(hdr, 4):                      # commit frame: nTruncate != 0
            c.frames += pending
            pending = []
            c.committed = c.valid
            c.transactions += 1
    return c


# ------------------------------------------------------------- recovery

@dataclass
class Recovery:
    """What `waldio recover` found and did."""
    database: str
    log: str
    damage: Optional[str]
    header_from: Optional[str] = None
    geometry: Optional[str] = None
    frames_kept: int = 0
    transactions: int = 0
    dropped_uncommitted: int = 0      # valid frames after the last commit
    dropped_after_break: int = 0      # frames of the generation past a break
    backup: Optional[str] = None
    wrote: Optional[str] = None

    @property
    def dropped(self) -> int:
        return self.dropped_uncommitted + self.dropped_after_break


def _lock_alone(fd: int) -> None:
    """Take waldio's INIT and USE locks exclusively (src/log_lock.c): no
    process has the log open while they are held (held until fd closes)."""
    for which in (0, 1):
        fl = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, LOCK_BASE + which, 1, 0)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, fl)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EAGAIN):
                raise waldio.WaldioError(
                    "%s is open in another process; close every connection to the "
                    "database first" % os.readlink("/proc/self/fd/%d" % fd)) from e
            raise


def _best_chain(f: BinaryIO, b0: bytes, size: int, header: bytes) -> Optional[Chain]:
    """The geometry under which the chain of `header` proves most, the
    superblock's own values first among equals."""
    page = _u32(header, 8) or 65536
    sb_layout, sb_block = _u32(b0, 44), _u32(b0, 48)
    blocks = [sb_block] + [b for b in (os.fstat(f.fileno()).st_blksize,) + BLOCK_SIZES
                           if b != sb_block]
    layouts = [sb_layout] + [x for x in (1, 2, 3) if x != sb_layout]
    best: Optional[Chain] = None
    for block in blocks:
        for layout in layouts:
            g = geometry(layout, block, page)
            if g is None:
                continue
            c = walk(f, g, header, size, past_break=False)
            if best is None or (c.committed, c.valid) > (best.committed, best.valid):
                best = c
    return best and walk(f, best.geometry, header, size)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _free_name(base: Path) -> Path:
    n, p = 0, base
    while p.exists():
        n += 1
        p = base.with_name("%s.%d" % (base.name, n))
    return p


def recover(database: Path, dry_run: bool = False, force: bool = False) -> Recovery:
    """Find what the log of `database` proves and, unless dry_run, replace
    the log by a standard WAL of exactly those frames (the damaged log kept
    as DATABASE-wal.damaged). A log whose block 0 is intact is left alone
    unless force."""
    log = Path(str(database) + "-wal")
    if not log.exists():
        raise waldio.WaldioError("%s has no log (%s does not exist)" % (database, log))
    with open(log, "rb" if dry_run else "r+b") as f:
        if not dry_run:
            _lock_alone(f.fileno())
        b0 = f.read(65536)
        size = os.fstat(f.fileno()).st_size
        standard = b0[32:40] != SB_MAGIC and not (header_ok(b0[:WAL_HDR])
                                                   and _u32(b0, 4) == GUARD_VERSION)
        damage = damage_of(b0)
        if standard and not (header_ok(b0[:WAL_HDR]) and _u32(b0, 4) == WAL_VERSION):
            damage = ("the WAL header (bytes 0..31) is damaged: its magic, version or "
                      "checksum is wrong")
        rep = Recovery(str(database), str(log), damage)
        if rep.damage is None and not force:
            raise waldio.WaldioError(
                "%s: %s is intact; waldio opens this log as it is (use --force "
                "to rewrite it as a standard WAL all the same)"
                % (log, "the WAL header" if standard else "block 0"))
        best: Optional[Tuple[str, bytes, Chain]] = None
        if standard:
            for source, header in _standard_candidates(f, size):
                c = walk(f, _standard_geometry(_u32(header, 8)), header, size)
                if best is None or c.committed > best[2].committed:
                    best = (source, header, c)
        for source, header in _header_candidates(b0):
            c = _best_chain(f, b0, size, header)
            if c and (best is None or c.committed > best[2].committed):
                best = (source, header, c)
        if best is not None:
            source, header, chain = best
            rep.header_from, rep.geometry = source, chain.geometry.describe()
            rep.frames_kept, rep.transactions = chain.committed, chain.transactions
            rep.dropped_uncommitted = chain.valid - chain.committed
            rep.dropped_after_break = chain.after_break
        if dry_run:
            return rep
        backup = _free_name(Path(str(log) + ".damaged"))
        os.link(log, backup)                   # the damaged log, kept as it is
        rep.backup = str(backup)
        if best is None or not best[2].frames:
            os.unlink(log)
            rep.wrote = "no log: nothing in it can be proven committed"
        else:
            tmp = Path(str(log) + ".waldio-recover")
            with open(tmp, "wb") as out:
                out.write(best[1])
                for frame in best[2].frames:
                    out.write(frame)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, log)
            rep.wrote = ("a standard SQLite WAL of %d frames (stock SQLite and "
                         "waldio's standard layout recover it as it is)" % len(best[2].frames))
        _fsync_dir(log)
    return rep


def summary(rep: Recovery) -> List[str]:
    """The report, in lines for people."""
    lines = ["%s: %s" % (rep.log, rep.damage or "block 0 is intact")]
    if rep.header_from:
        lines.append("SQLite's header from %s; geometry: %s" % (rep.header_from,
                                                                rep.geometry))
    else:
        lines.append("no valid copy of SQLite's header: the log holds no frames "
                     "that can be proven")
    lines.append("kept %d frames (%d committed transactions); dropped %d that cannot "
                 "be proven committed (%d after the last commit, %d after a break in "
                 "the checksum chain)" % (rep.frames_kept, rep.transactions, rep.dropped,
                                          rep.dropped_uncommitted, rep.dropped_after_break))
    if rep.wrote:
        lines.append("wrote %s; the damaged log is kept as %s" % (rep.wrote, rep.backup))
    else:
        lines.append("dry run: nothing written")
    return lines


def as_json(rep: Recovery) -> Dict[str, object]:
    d = dict(rep.__dict__)
    d["dropped"] = rep.dropped
    return d
