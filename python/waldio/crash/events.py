"""The recorder's event log: its binary format, and the identity of a crash state.

The recorder (crash/recorder.c) writes one record per write, sync, truncate,
create, rename, delete, fallocate and ``ack`` mark (:data:`HDR`);
:func:`parse_events` reads them back. Several processes may append to one log
(each event one O_APPEND write, so the file order is the global order); every
event names its process (``pid``), and :func:`parse_mark` reads the marks
the workloads log (which writer acknowledged which transaction, at which
position of the commit order).  :class:`StateKey` names one crash
state (model, time, which volatile writes survive, tearing) so that
``waldio crash --replay ID`` rebuilds exactly that state.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REC_MAGIC = b"WALDIOREC1\n\0\0\0\0\0"


HDR = struct.Struct("<BBHiqqQQII")


(REC_OPEN, REC_CLOSE, REC_WRITE, REC_ZERO, REC_TRUNC, REC_SYNC_BEGIN, REC_SYNC_END,
 REC_UNLINK, REC_RENAME, REC_DIRSYNC, REC_MARK, REC_FAULT, REC_FALLOC, REC_FORK) = range(1, 15)


PAGE, DEV, FUA = 0, 1, 2


EVENT_NAMES = {1: "open", 2: "close", 3: "write", 4: "zero", 5: "trunc", 6: "sync-begin",
               7: "sync-end", 8: "unlink", 9: "rename", 10: "dirsync", 11: "mark",
               12: "fault", 13: "fallocate", 14: "fork"}


CLS_NAMES = {PAGE: "page-cache", DEV: "direct", FUA: "fua"}


@dataclass
class Event:
    type: int
    cls: int
    fid: int
    a: int
    b: int
    t_ns: int
    seq: int                  # per process
    payload: memoryview
    pid: int = 0              # the process that logged it (0: unknown)


def parse_events(path: Path) -> List[Event]:
    data = path.read_bytes()
    if data[:16] != REC_MAGIC:
        raise ValueError("%s is not a waldio crash recording" % path)
    mv = memoryview(data)
    pos, out = 16, []
    n = len(data)
    while pos + HDR.size <= n:
        typ, cls, _p, fid, a, b, t, seq, ln, pid = HDR.unpack_from(data, pos)
        pos += HDR.size
        if pos + ln > n:
            break                       # a torn tail (recorder killed): ignore
        out.append(Event(typ, cls, fid, a, b, t, seq, mv[pos:pos + ln], pid))
        pos += ln
    return out


@dataclass(frozen=True)
class Mark:
    """A workload's mark. kind: "ack" (a transaction acknowledged with the
    mode's durability promise), "ack-async" (acknowledged without one: a
    group-async or synchronous=OFF burst), "commit" (its COMMIT is about to
    run), or another name ("end"). g: the transaction's position in the
    commit order; writer, n: which writer's which transaction. A plain
    "ack" mark of a single-writer workload has writer 0 and n = g."""
    kind: str
    g: int
    writer: int = 0
    n: int = 0


def parse_mark(ev: Event) -> Mark:
    words = bytes(ev.payload).decode().split()
    kind = words[0] if words else ""
    if len(words) == 3:
        return Mark(kind, ev.a, int(words[1]), int(words[2]))
    return Mark(kind, ev.a, 0, ev.a)


def mark_name(kind: str, writer: int, n: int) -> str:
    """The payload of a mark for parse_mark (recorder_mark(name, g))."""
    return "%s %d %d" % (kind, writer, n)


def commit_order(events: List[Event]) -> List[Tuple[int, int, int]]:
    """(g, writer, n) of every acknowledged transaction of a multi-process
    recording, by position g; ValueError unless the positions are exactly
    1..N, each acknowledged once."""
    seen: Dict[int, Tuple[int, int, int]] = {}
    for ev in events:
        if ev.type != REC_MARK:
            continue
        m = parse_mark(ev)
        if m.kind not in ("ack", "ack-async"):
            continue
        if m.g in seen:
            raise ValueError("position %d acknowledged twice: %r and %r"
                             % (m.g, seen[m.g], (m.g, m.writer, m.n)))
        seen[m.g] = (m.g, m.writer, m.n)
    order = [seen[g] for g in sorted(seen)]
    if [o[0] for o in order] != list(range(1, len(order) + 1)):
        raise ValueError("acknowledged positions are not 1..%d: %s"
                         % (len(order), [o[0] for o in order][:20]))
    return order


# Item kinds (things that change what is on disk).
W, T, FA, CR, UL, RN = "W", "T", "F", "C", "U", "R"


INF = 1 << 62


@dataclass
class Item:
    idx: int                 # event index
    op: str                  # W T F C U R
    cls: int                 # PAGE DEV FUA; namespace items use PAGE
    ino: int = -1
    off: int = 0
    length: int = 0
    data: Optional[memoryview] = None   # None: zeros
    name: str = ""
    name2: str = ""
    mode: int = 0            # fallocate mode
    durable_at: int = INF    # event index at which it became durable
    ns: bool = False         # a namespace (directory) item

    def describe(self) -> str:
        if self.op == W:
            return "#%d %s write %s@%d+%d" % (self.idx, CLS_NAMES[self.cls], self.name,
                                             self.off, self.length)
        if self.op == T:
            return "#%d truncate %s to %d" % (self.idx, self.name, self.length)
        if self.op == FA:
            return "#%d fallocate(0x%x) %s@%d+%d" % (self.idx, self.mode, self.name, self.off, self.length)
        if self.op == CR:
            return "#%d create %s" % (self.idx, self.name)
        if self.op == UL:
            return "#%d unlink %s" % (self.idx, self.name)
        return "#%d rename %s -> %s" % (self.idx, self.name, self.name2)


FALLOC_KEEP_SIZE, FALLOC_PUNCH_HOLE, FALLOC_ZERO_RANGE, FALLOC_WRITE_ZEROES = 0x1, 0x2, 0x10, 0x80


@dataclass(frozen=True)
class StateKey:
    """One crash state: model, crash point (after event t), kind, parameter.

    kinds: kill/all; os/lose (every unsynced page-cache write lost), os/prefix
    j (the first j unsynced page-cache items survive, in order), os/rand r;
    power/prefix j (the first j volatile items survive, in order), power/drop
    i (all volatile items but the i-th), power/rand r (a seeded subset);
    os/torn and power/torn r: the write that completed at event t was in
    flight at the crash and landed partly (512-byte sectors: new, old or,
    for power loss, garbage); os/pages r and power/pages r: every unsynced
    page-cache write survives whole, not at all, or some of its 4 KiB pages
    (written back page by page; under power loss one page torn at sectors)."""
    model: str
    t: int
    kind: str
    param: int = 0

    def text(self) -> str:
        return "%s:%d:%s:%d" % (self.model, self.t, self.kind, self.param)

    @staticmethod
    def parse(s: str) -> "StateKey":
        model, t, kind, param = s.split(":")
        return StateKey(model, int(t), kind, int(param))
