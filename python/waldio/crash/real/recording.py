"""A real-kernel recording, read back: the block log, what was acknowledged at
each crash point, and what the mode's contract requires there.

Crash points are positions in the block log: a state *at p* holds what the
device had received by record p (and no later record). The workload's marks
are records too, written after the fact they mark (an ``ack`` after COMMIT
returned, a ``commit`` before COMMIT began), so at p:

* acknowledged: every ``ack`` mark at or before p (whichever process made it:
  the value is the transaction's place g in the commit order, and the
  database can only recover a prefix of that order);
* begun: every ``commit`` mark at or before p (multi-process workloads), or
  one more than acknowledged: no state may hold more (:meth:`upper`);
* required: what the mode's contract makes durable — every acknowledged
  transaction (``all``), or, for the synchronous=NORMAL modes, those
  acknowledged before the last completed sync of the log began (``flush``,
  ``walsync``): read from the model's recording of the same run (file/), whose
  events carry the same clock (CLOCK_MONOTONIC) as the block log, at the
  last event before the crash moment (:meth:`file_index`).

The crash moment of a state at p lies before record p+1 arrived; the age of
an acknowledgement at the crash is measured to that time (the device held
that state until then).
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..modes import Mode, get_mode
from ..states import Recording
from . import blocklog
from .record import BASE_IMAGE, BLOCK_LOG, META, file_recording_dir


@dataclass(frozen=True)
class BlockMark:
    seq: int
    kind: str                 # ack, ack-async, commit, base, end
    g: int                    # position in the commit order
    writer: int = 0
    n: int = 0


def parse_block_mark(rec: blocklog.Record) -> BlockMark:
    """A mark written by recorder.mark: "NAME VALUE", NAME "kind" or "kind W N"."""
    words = rec.text.split()
    if len(words) not in (2, 4):
        raise blocklog.BlockLogError("record %d: a mark %r is not 'KIND [W N] VALUE'"
                                     % (rec.seq, rec.text))
    g = int(words[-1])
    if len(words) == 4:
        return BlockMark(rec.seq, words[0], g, int(words[1]), int(words[2]))
    return BlockMark(rec.seq, words[0], g, 0, g)


class RealRecording:
    """A recording directory (record.py) and its crash-point arithmetic."""

    def __init__(self, rec_dir: Path) -> None:
        self.dir = Path(rec_dir)
        self.meta: Dict[str, Any] = json.loads((self.dir / META).read_text())
        self.mode: Mode = get_mode(self.meta["mode"])
        self.control: bool = bool(self.meta.get("control"))
        self.log = blocklog.parse(self.dir / BLOCK_LOG)
        self.base_image = self.dir / BASE_IMAGE
        self.n = len(self.log)
        self.marks = [parse_block_mark(r) for r in self.log.records if r.type == blocklog.MARK]
        base = [m.seq for m in self.marks if m.kind == "base"]
        if len(base) != 1:
            raise blocklog.BlockLogError("%s: %d 'base' marks (expected one)" % (self.dir, len(base)))
        self.start = base[0]
        self.flushes = [r.seq for r in self.log.records if r.type == blocklog.FLUSH]
        self._prefix_max()
        self.digests: List[str] = json.loads(
            (file_recording_dir(self.dir) / "meta.json").read_text())["digests"]
        self._file: Optional[Recording] = None
        self._file_times: List[int] = []

    def _prefix_max(self) -> None:
        """Running maxima of the marks, by position."""
        self.mark_seqs = [m.seq for m in self.marks]
        self.acked_max: List[int] = []          # "ack": promised
        self.acked_any_max: List[int] = []      # "ack" or "ack-async"
        self.begun_max: List[int] = []          # "commit"
        a = aa = b = 0
        for m in self.marks:
            if m.kind == "ack":
                a = max(a, m.g)
            if m.kind in ("ack", "ack-async"):
                aa = max(aa, m.g)
            if m.kind == "commit":
                b = max(b, m.g)
            self.acked_max.append(a)
            self.acked_any_max.append(aa)
            self.begun_max.append(b)
        self.has_commit_marks = any(m.kind == "commit" for m in self.marks)
        # The acknowledgement time of each position g (its first "ack" mark).
        self.ack_time: Dict[int, int] = {}
        for m in self.marks:
            if m.kind in ("ack", "ack-async") and m.g not in self.ack_time:
                self.ack_time[m.g] = self.log.record(m.seq).t_ns
        self.n_acked = max(self.acked_any_max or [0])

    # ---- what happened by crash point p
    def _at(self, series: List[int], p: int) -> int:
        i = bisect.bisect_right(self.mark_seqs, p)
        return series[i - 1] if i else 0

    def acked(self, p: int) -> int:
        return self._at(self.acked_max, p)

    def upper(self, p: int) -> int:
        if self.has_commit_marks:
            u = max(self._at(self.begun_max, p), self._at(self.acked_any_max, p))
        else:
            u = self._at(self.acked_any_max, p) + 1
        return min(u, len(self.digests) - 1)

    def crash_time(self, p: int) -> int:
        """The latest moment the device held the state at p: when record p+1
        arrived (the end of the log: its last record)."""
        return self.log.record(min(p + 1, self.n)).t_ns

    def required(self, p: int, model: str = "power") -> int:
        contract = {"kill": self.mode.kill_contract, "os": self.mode.os_contract,
                    "power": self.mode.power_contract}[model]
        if contract in ("all", "none"):
            return self.acked(p) if contract == "all" else 0
        if contract in ("flush", "walsync"):
            t = self.file_index(p)
            if t < 0:
                return 0
            req = self.file.req_flush if contract == "flush" else self.file.req_walsync
            return min(req[t], self.acked(p))
        raise ValueError("contract %r is not checked on the real kernel" % contract)

    def loss_age_ms(self, p: int, k: int) -> Optional[float]:
        """For a state holding k transactions: how long before the crash the
        oldest lost acknowledged transaction (k+1) had been acknowledged; None
        if nothing acknowledged was lost."""
        if k >= self.acked(p) or (k + 1) not in self.ack_time:
            return None
        return (self.crash_time(p) - self.ack_time[k + 1]) / 1e6

    # ---- the model's recording of the same run
    @property
    def file(self) -> Recording:
        if self._file is None:
            self._file = Recording(file_recording_dir(self.dir))
            self._file_times = [ev.t_ns for ev in self._file.events]
        return self._file

    def file_index(self, p: int) -> int:
        """The model's crash point for block position p: its last event
        logged before the crash moment (record p+1 arriving); -1 if none."""
        _ = self.file
        return bisect.bisect_left(self._file_times, self.crash_time(p)) - 1

    def file_window(self, p: int) -> Tuple[int, int]:
        """(lo, hi): the model's events certainly done by the state at p (logged
        before record p arrived) and possibly done (before record p+1)."""
        _ = self.file
        t_lo = self.log.record(max(p, 1)).t_ns
        return (bisect.bisect_left(self._file_times, t_lo) - 1,
                bisect.bisect_left(self._file_times, self.crash_time(p)) - 1)

    # ---- identity
    def state_id(self, key_text: str) -> str:
        m = self.meta
        return "%s/%s/seed=%d/txns=%d/%s" % (m["mode"], m["workload"], m["seed"], m["txns"],
                                             key_text)

    def summary(self) -> Dict[str, Any]:
        by_type: Dict[str, int] = {}
        for r in self.log.records:
            by_type[blocklog.TYPE_NAMES[r.type]] = by_type.get(blocklog.TYPE_NAMES[r.type], 0) + 1
        return {"records": self.n, "by_type": by_type, "acked": self.n_acked,
                "flushes_after_base": sum(1 for f in self.flushes if f > self.start),
                "written_bytes": sum(r.length for r in self.log.records if r.changes_image),
                "kernel": self.meta.get("kernel"), "image_bytes": self.meta.get("image_bytes")}
