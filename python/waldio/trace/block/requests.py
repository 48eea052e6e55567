"""Block requests as the kernel's block tracepoints describe them.

Parses ``block_rq_issue`` / ``block_rq_complete`` / ``block_rq_requeue`` lines
(device, sector, bytes, the ``rwbs`` flags: write, flush, FUA, REQ_META,
preflush) into :class:`BlockRequest` records; :class:`RequestAssembler` pairs
each issue with its completion and drops requeued requests, counting what it
saw in :class:`CaptureStats`.  Sectors are 512-byte units of the traced device.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from typing import Any, Optional

SECTOR = 512


FLUSH_COMPLETE_SECTOR = 2**64 - 1


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


def kernel_dev_t(devno: str) -> int:
    major, minor = (int(x) for x in devno.split(":"))
    return (major << 20) | minor


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


class RequestAssembler:
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
