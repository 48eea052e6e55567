"""The cross-check: is a real-kernel crash state one the model could make?

The model (:mod:`..states`) builds crash states from the recorded system
calls: durable data, plus any subset of the volatile calls (page cache,
device cache), each applied whole, and one call in flight torn at sectors.
Every real state is compared with it at the same moment: the model's events
logged before the state's last block record arrived have certainly
completed (``lo``), those logged before the next block record may have
(``hi``; recording.py :meth:`file_window`). For each database file (the
``-shm`` files are outside the model) the state must then show:

* a namespace the model allows: the durable one plus an in-order prefix of
  the volatile creations, unlinks and renames;
* at every byte, the model's durable content at ``lo`` or the bytes of a
  write, truncate or zeroing fallocate the model holds volatile by ``hi``,
  or of the one call per process still in flight (the next write after
  ``hi``): otherwise the byte is *unexplained* — data the model calls durable
  that the device lost, or bytes no recorded call wrote;
* a length the model allows (the durable length, or where a volatile call
  left it);
* every volatile write whole or absent: a multi-sector write of which some
  sectors reached the disk and others did not, not being the call in flight,
  is *partial* — the model's "each call is atomic, only the write in flight
  tears" is then weaker than the kernel (page-cache writeback goes page by
  page, and a crash can cut it).

Each finding is a short text; the campaign counts states with findings, by
kind, and docs/crash.md lists what was found.
"""
from __future__ import annotations

import bisect
from typing import Dict, List, Optional, Sequence, Tuple

from ..events import (
    FA,
    FALLOC_KEEP_SIZE,
    FALLOC_PUNCH_HOLE,
    FALLOC_WRITE_ZEROES,
    FALLOC_ZERO_RANGE,
    Item,
    T,
    W,
)
from ..states import Image
from .recording import RealRecording

BLOCK = 4096
SECTOR = 512
ZEROING = FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE | FALLOC_WRITE_ZEROES
FINDING_KINDS = ("namespace", "unexplained", "length", "partial")


def _piece(it: Item, lo: int, hi: int) -> Optional[bytes]:
    """The bytes item it leaves in [lo, hi) (clipped to its range), or None
    if it does not touch that range."""
    if it.op == W:
        a, b = max(lo, it.off), min(hi, it.off + it.length)
        if a >= b:
            return None
        return bytes(b - a) if it.data is None else bytes(it.data[a - it.off:b - it.off])
    if it.op == FA and it.mode & ZEROING:
        a, b = max(lo, it.off), min(hi, it.off + it.length)
        return bytes(b - a) if a < b else None
    return None


def _span(it: Item) -> Tuple[int, int]:
    if it.op in (W, FA):
        return it.off, it.off + it.length
    return 0, 0


class ModelCheck:
    """Explains real states with the model's recording of the same run."""

    def __init__(self, rec: RealRecording) -> None:
        self.rec = rec
        self.file = rec.file
        self.items = self.file.items
        self.item_idx = [it.idx for it in self.items]
        self.frontier = 0
        self.base = Image(dict(self.file.base_ns),
                          {i: bytearray(b) for i, b in self.file.base_img.items()})
        self.pid_of = [ev.pid for ev in self.file.events]
        self.last_lo = -1

    def _advance(self, lo: int) -> None:
        """Apply to the base every item, in order, up to the first one not
        yet durable at lo (so the base is durable at every later lo)."""
        items = self.items
        while self.frontier < len(items) and items[self.frontier].durable_at <= lo:
            self.base.apply(items[self.frontier])
            self.frontier += 1

    def explain(self, p: int, files: Dict[str, bytes]) -> List[str]:
        """The findings for the state at crash position p with these files
        (in the database directory); states come in crash-point order."""
        lo, hi = self.rec.file_window(p)
        if lo < 0:
            return []
        if lo < self.last_lo:
            raise ValueError("states must be explained in crash-point order")
        self.last_lo = lo
        self._advance(lo)
        end = bisect.bisect_right(self.item_idx, hi)
        window = self.items[self.frontier:end]
        durable = self.base.fork()
        volatile: List[Item] = []
        for it in window:
            if it.durable_at <= lo:
                durable.apply(it)
            else:
                volatile.append(it)
        in_flight = self._in_flight(end)
        real = {n: d for n, d in files.items() if not n.endswith("-shm")}
        variants = [{n: i for n, i in ns.items() if not n.endswith("-shm")}
                    for ns in self._namespaces(durable, [it for it in volatile if it.ns])]
        matching = [ns for ns in variants if set(ns) == set(real)]
        if not matching:
            return ["namespace: files %s; the model allows %s"
                    % (sorted(real), " or ".join(str(sorted(ns)) for ns in variants[:6]))]
        # The same names may stand for other files (a rename over a name, an
        # unlink and a new file): the state is explained if one variant is.
        best: Optional[List[str]] = None
        for ns in matching:
            findings: List[str] = []
            for name, data in sorted(real.items()):
                ino = ns[name]
                findings += self._content(
                    name, data, FileWindow(
                        bytes(self.base.data.get(ino, b"")), bytes(durable.data.get(ino, b"")),
                        [it for it in window if it.ino == ino and not it.ns],
                        {id(it) for it in volatile},
                        [it for it in in_flight if it.ino == ino]))
            if best is None or len(findings) < len(best):
                best = findings
            if not findings:
                break
        return best or []

    def _in_flight(self, end: int) -> List[Item]:
        """The next write of each process after the window: it may have been
        under way at the crash (a direct write reaches the device before its
        system call returns)."""
        out: List[Item] = []
        seen = set()
        for it in self.items[end:end + 64]:
            pid = self.pid_of[it.idx]
            if it.op == W and pid not in seen:
                seen.add(pid)
                out.append(it)
        return out

    # ---- namespace
    @staticmethod
    def _namespaces(durable: Image, ns_items: Sequence[Item]) -> List[Dict[str, int]]:
        """The namespaces the model allows: the durable one, then each
        in-order prefix of the volatile namespace operations."""
        probe = Image(dict(durable.ns), {})
        out = [dict(probe.ns)]
        for it in ns_items:
            probe.apply(it)
            out.append(dict(probe.ns))
        return out

    # ---- content
    def _content(self, name: str, real: bytes, fw: "FileWindow") -> List[str]:
        findings: List[str] = []
        durable = fw.durable
        lengths = {len(durable)}
        for it in fw.candidates:
            a, b = _span(it)
            if it.op == W or (it.op == FA and not it.mode & FALLOC_KEEP_SIZE):
                lengths |= {b, max(b, len(durable))}
            if it.op == T:
                lengths.add(it.length)
        if len(real) not in lengths:
            findings.append("length: %s is %d bytes; the model allows %s"
                            % (name, len(real), sorted(lengths)[:8]))
        unexplained: List[Tuple[int, int]] = []
        n = len(real)
        for blk in range(0, n, BLOCK):
            hi = min(n, blk + BLOCK)
            got = real[blk:hi]
            if got == durable[blk:hi].ljust(hi - blk, b"\0"):
                continue
            if fw.block_explained(got, blk, hi):
                continue
            bad = fw.bytes_unexplained(got, blk)
            if bad:
                unexplained.append((blk + bad[0], blk + bad[-1] + 1))
        if unexplained:
            total = sum(b - a for a, b in unexplained)
            a, b = unexplained[0]
            findings.append("unexplained: %s: %d bytes in %d blocks match no content the model "
                            "allows (first at %d..%d: durable there %s, found %s)"
                            % (name, total, len(unexplained), a, b, _show(durable[a:b]),
                               _show(real[a:b])))
        flying = {id(it) for it in fw.flying}
        for it in fw.candidates:
            if it.op == W and id(it) not in flying and it.length > SECTOR:
                part = fw.partial(it, real)
                if part:
                    findings.append("partial: %s: %s %s" % (name, it.describe(), part))
        return findings


class FileWindow:
    """One file at one crash moment, as the model sees it: its content at the
    frontier (every earlier item durable), the items of the window in order
    (durable ones and candidates: volatile or in flight), and its durable
    content. A candidate's bytes count only where no later durable item
    wrote over them (the model applies items in order: a dropped or kept
    older write is hidden under a newer durable one)."""

    def __init__(self, frontier: bytes, durable: bytes, window: List[Item],
                 volatile_ids: set, flying: List[Item]) -> None:
        self.frontier = frontier
        self.durable = durable
        self.flying = flying
        self.window = sorted(window + flying, key=lambda it: it.idx)
        vol = volatile_ids | {id(it) for it in flying}
        self.is_candidate = {id(it): id(it) in vol for it in self.window}
        self.candidates = [it for it in self.window if self.is_candidate[id(it)]]
        self.spans = [_span(it) for it in self.window]

    def _touching(self, lo: int, hi: int) -> List[Item]:
        return [it for it, (a, b) in zip(self.window, self.spans)
                if (a < hi and b > lo) or (it.op == T and it.length < hi)]

    def _compose(self, lo: int, hi: int, items: List[Item]) -> bytes:
        out = bytearray(self.frontier[lo:hi].ljust(hi - lo, b"\0"))
        for it in items:
            piece = _piece(it, lo, hi)
            if piece is not None:
                a = max(lo, it.off) - lo
                out[a:a + len(piece)] = piece
            elif it.op == T and it.length < hi:
                cut = max(0, it.length - lo)
                out[cut:] = bytes(len(out) - cut)
        return bytes(out)

    def block_explained(self, got: bytes, lo: int, hi: int) -> bool:
        """Fast paths: the block with every candidate kept, or with one."""
        touching = self._touching(lo, hi)
        if not any(self.is_candidate[id(it)] for it in touching):
            return False
        if self._compose(lo, hi, touching) == got:
            return True
        durable = [it for it in touching if not self.is_candidate[id(it)]]
        for c in touching:
            if self.is_candidate[id(c)]:
                one = sorted(durable + [c], key=lambda it: it.idx)
                if self._compose(lo, hi, one) == got:
                    return True
        return False

    def bytes_unexplained(self, got: bytes, lo: int) -> List[int]:
        """Offsets (in the block) that neither the durable content nor any
        candidate's visible bytes explain."""
        hi = lo + len(got)
        touching = self._touching(lo, hi)
        pieces = []
        for i, c in enumerate(touching):
            if not self.is_candidate[id(c)]:
                continue
            if c.op == T:                         # zeros past the new end
                start = max(0, c.length - lo)
                piece = bytes(len(got) - start)
            else:
                start = max(lo, c.off) - lo
                piece = _piece(c, lo, hi)
                if piece is None:
                    continue
            hidden = [_span(d) for d in touching[i + 1:] if not self.is_candidate[id(d)]]
            pieces.append((start, piece, hidden))
        old = self.durable[lo:hi].ljust(hi - lo, b"\0")
        bad = []
        for i, (g, o) in enumerate(zip(got, old)):
            if g == o:
                continue
            if not any(a <= i < a + len(pc) and pc[i - a] == g
                       and not any(x <= lo + i < y for x, y in hidden)
                       for a, pc, hidden in pieces):
                bad.append(i)
        return bad

    def partial(self, it: Item, real: bytes) -> str:
        """"n sectors new, m old" if the write's bytes are on disk in some
        sectors and absent in others (sectors a later item also wrote tell
        nothing); "" if it is whole or absent."""
        later = [(w.length, 1 << 62) if w.op == T else _span(w)
                 for w in self.window if w.idx > it.idx]
        new_secs = old_secs = 0
        for s in range(it.off // SECTOR, (it.off + it.length - 1) // SECTOR + 1):
            a, b = max(it.off, s * SECTOR), min(it.off + it.length, (s + 1) * SECTOR)
            if b > len(real):
                continue
            # Only the bytes no later item wrote tell whether this one landed.
            visible = _subtract(a, b, later)
            piece = b"".join(_piece(it, x, y) or b"" for x, y in visible)
            old = b"".join(self.durable[x:y].ljust(y - x, b"\0") for x, y in visible)
            if not visible or piece == old:
                continue
            got = b"".join(real[x:y] for x, y in visible)
            if got == piece:
                new_secs += 1
            elif got == old:
                old_secs += 1
        if new_secs and old_secs:
            return "partly on disk: %d sectors new, %d old" % (new_secs, old_secs)
        return ""


def _subtract(a: int, b: int, spans: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """[a, b) without the given spans, as ranges."""
    out = [(a, b)]
    for x, y in spans:
        nxt = []
        for p, q in out:
            if y <= p or x >= q:
                nxt.append((p, q))
                continue
            if p < x:
                nxt.append((p, x))
            if y < q:
                nxt.append((y, q))
        out = nxt
    return out


def _show(b: bytes) -> str:
    if not b:
        return "nothing (past the end)"
    if not any(b):
        return "zeros"
    return b[:12].hex() + ("..." if len(b) > 12 else "")

