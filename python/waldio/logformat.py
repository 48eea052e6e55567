"""What a database and its waldio log look like on disk, read without SQLite.

Decodes the database header (page size, reserved bytes, read/write versions),
the WAL header SQLite sees, and the log in its layout: a log of the standard
layout is SQLite's own WAL (its frames, counted as SQLite's recovery would),
block 0 of a slotted one (embed, pad4k, pad8k) holds the superblock
(docs/format.md §2: magic, format, layout, block size, page size, frame size)
and the in-use guard that makes stock SQLite refuse a log waldio is using.
Used by ``waldio info`` and by ``waldio crash`` (to recognise a log's layout).
"""
from __future__ import annotations

import struct
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Dict, Optional

RESERVE_BYTES_FCNTL = 38


EMBED_RESERVE = 24


WAL_MAGICS = (0x377F0682, 0x377F0683)


WAL_VERSION = 3007000


GUARD_VERSION = 0x57414C44


LAYOUTS = {1: "embed", 2: "pad4k", 3: "pad8k"}


WAL_HDR, FRAME_HDR = 32, 24


SB_MAGIC = b"WALDIOSB"


def _u32(b: bytes, off: int) -> int:
    return int(struct.unpack_from(">I", b, off)[0])


def wal_checksum(data: bytes, big_endian: bool, s: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """SQLite's WAL checksum (src/wal.c walChecksumBytes)."""
    s1, s2 = s
    fmt = ">%dI" if big_endian else "<%dI"
    words = struct.unpack(fmt % (len(data) // 4), data)
    for i in range(0, len(words), 2):
        s1 = (s1 + words[i] + s2) & 0xFFFFFFFF
        s2 = (s2 + words[i + 1] + s1) & 0xFFFFFFFF
    return s1, s2


STANDARD_HEADER_KIND = "standard SQLite WAL header"


def describe_wal_header(h: bytes) -> Dict[str, Any]:
    """What the first 32 bytes of a -wal say, as stock SQLite would read them."""
    if len(h) < 32 or _u32(h, 0) not in WAL_MAGICS:
        return {"kind": "none (stock SQLite sees an empty log)"}
    ok = wal_checksum(h[:24], bool(_u32(h, 0) & 1)) == (_u32(h, 24), _u32(h, 28))
    version = _u32(h, 4)
    if not ok:
        kind = "invalid checksum (stock SQLite sees an empty log)"
    elif version == WAL_VERSION:
        kind = STANDARD_HEADER_KIND
    elif version == GUARD_VERSION:
        kind = "waldio guard (stock SQLite refuses: SQLITE_CANTOPEN)"
    else:
        kind = "unknown WAL version %d" % version
    return {"kind": kind, "page_size": _u32(h, 8), "checkpoint_seq": _u32(h, 12),
            "salts": [_u32(h, 16), _u32(h, 20)]}


def standard_frames(wal: bytes) -> Dict[str, int]:
    """The frames a standard WAL (SQLite's format, the standard layout) holds,
    as SQLite's recovery finds them (src/wal.c walIndexRecover): from byte 32,
    frames of 24 + page bytes, valid while their salts match the header's and
    their checksums continue the chain; the log ends at the first that fails.
    Frames after the last commit frame belong to no transaction."""
    out = {"frames": 0, "committed_frames": 0, "commits": 0}
    if not header_ok(wal) or _u32(wal, 4) != WAL_VERSION:
        return out
    page, big = _u32(wal, 8), bool(_u32(wal, 0) & 1)
    page = 65536 if page == 1 else page
    salts, s = wal[16:24], (_u32(wal, 24), _u32(wal, 28))
    off = WAL_HDR
    while off + FRAME_HDR + page <= len(wal):
        fh = wal[off:off + FRAME_HDR]
        if _u32(fh, 0) == 0 or fh[8:16] != salts:
            break
        s = wal_checksum(fh[:8], big, s)
        s = wal_checksum(wal[off + FRAME_HDR:off + FRAME_HDR + page], big, s)
        if s != (_u32(fh, 16), _u32(fh, 20)):
            break
        out["frames"] += 1
        if _u32(fh, 4):
            out["committed_frames"] = out["frames"]
            out["commits"] += 1
        off += FRAME_HDR + page
    return out


def header_ok(h: bytes) -> bool:
    """A 32-byte WAL header whose checksum matches (any version)."""
    return (len(h) >= WAL_HDR and _u32(h, 0) in WAL_MAGICS
            and wal_checksum(h[:24], bool(_u32(h, 0) & 1)) == (_u32(h, 24), _u32(h, 28)))


def as_standard_header(h: bytes) -> bytes:
    """A WAL header with version 3007000 and the checksum that goes with it."""
    b = bytearray(h[:WAL_HDR])
    struct.pack_into(">I", b, 4, WAL_VERSION)
    struct.pack_into(">II", b, 24, *wal_checksum(bytes(b[:24]), bool(_u32(b, 0) & 1)))
    return bytes(b)


def damage_of(b0: bytes) -> Optional[str]:
    """What is wrong with a waldio superblock, in words; None if nothing is
    (or block 0 holds no superblock and no guard: not a waldio log)."""
    if len(b0) < 112:
        return "block 0 is shorter than the 112 bytes of a superblock"
    guard = header_ok(b0[:WAL_HDR]) and _u32(b0, 4) == GUARD_VERSION
    if b0[32:40] != SB_MAGIC:
        return ("the superblock's magic (bytes 32..39) is %r instead of %r, while "
                "bytes 0..31 hold waldio's guard header" % (bytes(b0[32:40]), SB_MAGIC)
                if guard else None)
    stored = (_u32(b0, 104), _u32(b0, 108))
    computed = wal_checksum(bytes(b0[32:104]), True)
    if stored != computed:
        return ("the superblock's checksum does not match bytes 32..103 (stored "
                "%08x %08x, computed %08x %08x): at least one byte in 32..111 changed"
                % (stored + computed))
    layout, block, page = _u32(b0, 44), _u32(b0, 48), _u32(b0, 56)
    if _u32(b0, 40) == 1 and geometry(layout, block, page or 4096) is None:
        return ("the superblock's geometry is impossible (layout %d, block %d, "
                "page %d)" % (layout, block, page))
    return None


@dataclass(frozen=True)
class Geometry:
    """docs/format.md §3 (src/wal_format.c wf_geometry)."""
    layout: int
    block: int
    page: int
    area: int
    slot: int
    hdr_in_slot: int
    page_in_slot: int

    def describe(self) -> str:
        return "%s, %d-byte blocks, %d-byte pages" % (
            LAYOUTS.get(self.layout, "?"), self.block, self.page)


def geometry(layout: int, block: int, page: int) -> Optional[Geometry]:
    def pow2(x: int) -> bool:
        return 512 <= x <= 65536 and x & (x - 1) == 0
    if not pow2(block) or not pow2(page):
        return None
    if layout == 1:
        if page < block:
            return None
        return Geometry(1, block, page, block, page, page - FRAME_HDR, 0)
    if layout in (2, 3):
        unit = max(4096 if layout == 2 else 8192, block)
        slot = -(-(block + page) // unit) * unit
        return Geometry(layout, block, page, unit, slot, 0, block)
    return None


def describe_superblock(b0: bytes) -> Dict[str, Any]:
    """The waldio superblock in block 0 (docs/format.md §2), and what is
    wrong with it if libwaldio would refuse it."""
    out: Dict[str, Any] = {"present": b0[32:40] == SB_MAGIC}
    damage = damage_of(b0)
    if damage:
        out["damage"] = damage + ("; libwaldio refuses this log: `waldio recover` keeps "
                                  "every frame that can be proven committed")
    if len(b0) < 112 or not out["present"]:
        return out
    ok = wal_checksum(b0[32:104], True) == (_u32(b0, 104), _u32(b0, 108))
    flags = _u32(b0, 64)
    out.update({
        "checksum_ok": ok, "format": _u32(b0, 40),
        "layout": LAYOUTS.get(_u32(b0, 44), "unknown(%d)" % _u32(b0, 44)),
        "block_size": _u32(b0, 48), "header_area": _u32(b0, 52),
        "page_size": _u32(b0, 56), "frame_bytes": _u32(b0, 60),
        "holds_frames": bool(flags & 1), "in_use_guard": bool(flags & 2),
    })
    if flags & 1:
        out["sqlite_header"] = describe_wal_header(b0[72:104])
    return out


def describe_database(path: Path) -> Dict[str, Any]:
    """Everything `waldio info` reports, from the files alone."""
    info: Dict[str, Any] = {"database": str(path)}
    with open(path, "rb") as f:
        h = f.read(100)
    if h[:16] == b"SQLite format 3\x00":
        page = struct.unpack_from(">H", h, 16)[0]
        info.update(page_size=65536 if page == 1 else page, reserve_bytes=h[20],
                    write_version=h[18], read_version=h[19],
                    journal="wal" if h[18] == 2 else "rollback")
    else:
        info["header"] = "empty or not an SQLite database"
    wal = Path(str(path) + "-wal")
    info["wal_file"] = {"exists": wal.exists()}
    if wal.exists():
        data = wal.read_bytes()
        sb = describe_superblock(data[:512])
        info["wal_file"].update(size=len(data), header=describe_wal_header(data[:32]),
                                superblock=sb)
        # No superblock (nor the guard of a damaged one): SQLite's own WAL
        # format, the standard layout's (or stock SQLite's, which deletes its
        # WAL at the last close: a log that outlives it is waldio's).
        if sb["present"] or "damage" in sb:
            info["wal_file"]["layout"] = sb.get("layout", "unknown (damaged superblock)")
        else:
            info["wal_file"]["layout"] = "standard"
            info["wal_file"].update(standard_frames(data))
    for suffix in ("-shm", "-wal-shm"):
        info["wal_file"]["has" + suffix.replace("-", "_")] = Path(str(path) + suffix).exists()
    return info


# The physical log decoded back into SQLite's logical WAL (crash checking,
# `waldio recover`).


def log_geometry(log: bytes) -> Optional[Dict[str, int]]:
    """Block 0 of a waldio log (docs/format.md §2), or None."""
    if len(log) < 112 or log[32:40] != b"WALDIOSB":
        return None
    u = lambda o: struct.unpack_from(">I", log, o)[0]
    return {"layout": u(44), "block": u(48), "area": u(52), "page": u(56), "slot": u(60),
            "flags": u(64)}


def log_to_standard(log: bytes) -> Optional[bytes]:
    """The standard SQLite WAL that a waldio log holds: its SQLite header
    followed by every slot decoded back into a logical frame. None when
    block 0 holds no generation (then the log is empty)."""
    g = log_geometry(log)
    if g is None or not g["flags"] & 1 or g["slot"] == 0:
        return None
    hdr = bytes(log[72:104])
    page, slot, area = g["page"], g["slot"], g["area"]
    out = bytearray(hdr)
    i = 0
    while area + (i + 1) * slot <= len(log):
        s = log[area + i * slot: area + (i + 1) * slot]
        if g["layout"] == 1:
            fh = s[page - FRAME_HDR:page]
            pg = bytes(s[:page - FRAME_HDR]) + bytes(FRAME_HDR)
        else:
            fh = s[:FRAME_HDR]
            pg = s[g["block"]:g["block"] + page]
        out += fh + pg
        i += 1
    return bytes(out)
