"""Crash states from a block log, and their disk images.

A state is named by a :class:`RealKey` ``real:KIND:CUT:PARAM``. With F the
last flush at or before the cut and V the image-changing records (writes,
zeroed ranges) after F up to the cut, in arrival order:

| kind   | the image holds                                                    |
|--------|--------------------------------------------------------------------|
| flush  | every record up to the flush CUT (nothing volatile)                |
| prefix | every record up to CUT: the device lost nothing it had received    |
|        | (dm-log-writes replaying an in-order prefix; an OS crash)          |
| subset | everything up to F, plus a seeded random subset of V (power loss:  |
|        | the volatile write cache kept some of its writes, in any order)    |
| torn   | everything up to F, all of V before CUT or a random subset, and    |
|        | the write CUT torn at 512-byte sectors: each holds the new or the  |
|        | old bytes (a device that writes whole sectors)                     |

Everything up to F is durable: the device acknowledged the flush. The
crash position p of a state (what had been *received*) is CUT, or CUT - 1 for
a torn state (the torn write had not arrived whole). Images are built
incrementally (:class:`ImageBuilder`): states in cut order, the durable image
advanced from flush to flush.
"""
from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Sequence, Tuple

from . import blocklog
from .recording import RealRecording

KINDS = ("flush", "prefix", "subset", "torn")


@dataclass(frozen=True)
class RealKey:
    kind: str
    cut: int
    param: int = 0

    def text(self) -> str:
        return "real:%s:%d:%d" % (self.kind, self.cut, self.param)

    @staticmethod
    def parse(s: str) -> "RealKey":
        parts = s.split(":")
        if len(parts) != 4 or parts[0] != "real" or parts[1] not in KINDS:
            raise ValueError("a real-kernel state is real:KIND:CUT:PARAM (KIND: %s), not %r"
                             % (", ".join(KINDS), s))
        return RealKey(parts[1], int(parts[2]), int(parts[3]))

    @property
    def position(self) -> int:
        """How many records the device had received whole at the crash."""
        return self.cut - 1 if self.kind == "torn" else self.cut

    @property
    def model(self) -> str:
        """The crash model whose contract applies: the device kept all it had
        received (an OS crash, and every flush point), or lost volatile writes
        (power loss)."""
        return "os" if self.kind in ("flush", "prefix") else "power"


@dataclass
class Recipe:
    """How a state's image is made: the durable image at flush `flush`, then
    the kept volatile records (seqs, in order), then the torn write's
    sectors. Two states with equal recipes have equal images."""
    flush: int
    kept: Tuple[int, ...]
    torn: int = 0
    torn_sectors: Tuple[int, ...] = ()

    def ident(self) -> Tuple[int, Tuple[int, ...], int, Tuple[int, ...]]:
        return (self.flush, self.kept, self.torn, self.torn_sectors)

    def describe(self, volatile: int) -> str:
        text = "durable to flush #%d; %d of %d volatile writes kept" % (
            self.flush, len(self.kept), volatile)
        if self.torn:
            text += "; write #%d torn: sectors %s new" % (self.torn, _ranges(self.torn_sectors))
        return text


def _ranges(xs: Sequence[int]) -> str:
    out: List[str] = []
    for x in xs:
        if out and out[-1].split("-")[-1] == str(x - 1):
            out[-1] = out[-1].split("-")[0] + "-" + str(x)
        else:
            out.append(str(x))
    return ",".join(out) or "none"


class StateSpace:
    """The crash states of one recording: drawing them and their recipes."""

    def __init__(self, rec: RealRecording) -> None:
        self.rec = rec
        self.records = rec.log.records
        self.flushes = rec.flushes
        self.changing = [r.seq for r in self.records if r.changes_image]
        self.writes = [r.seq for r in self.records if r.type == blocklog.WRITE and r.seq > rec.start]

    def last_flush(self, p: int) -> int:
        i = bisect.bisect_right(self.flushes, p)
        return self.flushes[i - 1] if i else 0

    def volatile(self, p: int) -> List[int]:
        """Image-changing records after the last flush up to p, in order."""
        f = self.last_flush(p)
        lo, hi = bisect.bisect_right(self.changing, f), bisect.bisect_right(self.changing, p)
        return self.changing[lo:hi]

    def recipe(self, key: RealKey) -> Recipe:
        rng = random.Random(key.text())
        p = key.position
        f = self.last_flush(p)
        vol = self.volatile(p)
        if key.kind in ("flush", "prefix"):
            return Recipe(f, tuple(vol))
        if key.kind == "subset":
            keep = rng.choice([0.2, 0.5, 0.8])
            return Recipe(f, tuple(s for s in vol if rng.random() < keep))
        torn = self.records[key.cut - 1]
        kept = tuple(vol) if rng.random() < 0.5 else tuple(s for s in vol if rng.random() < 0.5)
        nsec = blocklog.n_sectors(torn)
        style = rng.choice(["prefix", "suffix", "random"])
        if style == "prefix":
            new = range(rng.randrange(0, nsec))
        elif style == "suffix":
            new = range(rng.randrange(1, nsec + 1), nsec)
        else:
            new = [i for i in range(nsec) if rng.random() < 0.5]
        sectors = tuple(new)
        if len(sectors) == nsec and nsec:             # torn means not whole
            sectors = sectors[:-1]
        return Recipe(f, kept, key.cut, sectors)

    # ---- drawing states
    def flush_points(self) -> List[int]:
        return [f for f in self.flushes if f > self.rec.start]

    def interesting(self) -> List[int]:
        """Right after each acknowledgement (the largest promise) and right
        before each flush (the most volatile writes)."""
        pts = {m.seq for m in self.rec.marks if m.kind in ("ack", "ack-async") and m.seq > self.rec.start}
        pts |= {f - 1 for f in self.flushes if f - 1 > self.rec.start}
        return sorted(pts)

    def sample(self, n_states: int, seed: int) -> List[RealKey]:
        """n_states distinct states: every flush point first (if they are at
        most half of n_states; else a seeded third of n_states), then seeded
        cuts: in-order prefixes, random subsets, torn writes."""
        rng = random.Random("real-states:%d" % seed)
        out: List[RealKey] = []
        seen = set()
        flushes = self.flush_points()
        if len(flushes) > n_states // 2:
            flushes = sorted(rng.sample(flushes, n_states // 3))
        for f in flushes:
            out.append(RealKey("flush", f))
            seen.add(out[-1])
        interesting = self.interesting()
        lo, hi = self.rec.start, self.rec.n
        attempts = 0
        while len(out) < n_states and attempts < 50 * n_states + 1000:
            attempts += 1
            kind = rng.choices(["prefix", "subset", "torn"], [3, 4, 3])[0]
            if kind == "torn":
                if not self.writes:
                    continue
                key = RealKey("torn", rng.choice(self.writes), rng.randrange(1 << 30))
                if blocklog.n_sectors(self.records[key.cut - 1]) < 2:
                    continue
            else:
                cut = rng.choice(interesting) if interesting and rng.random() < 0.6 \
                    else rng.randrange(lo, hi + 1)
                param = rng.randrange(1 << 30) if kind == "subset" else 0
                if kind == "subset" and not self.volatile(cut):
                    kind, param = "prefix", 0
                key = RealKey(kind, cut, param)
            if key in seen:
                continue
            seen.add(key)
            out.append(key)
        return out


class ImageBuilder:
    """Builds state images in cut order: the durable image is advanced from
    flush to flush; a state's image is the durable one plus its kept records.
    `images` yields (key, recipe, image bytes); the image is reused, so copy
    it (or write it out) before the next one."""

    def __init__(self, space: StateSpace) -> None:
        self.space = space
        self.durable = blocklog.read_image(space.rec.base_image)
        self.applied = 0                       # records applied to durable

    def _advance(self, flush: int) -> None:
        if flush < self.applied:
            raise ValueError("states must come in cut order")
        for r in self.space.records[self.applied:flush]:
            blocklog.apply(self.durable, r)
        self.applied = flush

    def images(self, keys: Iterable[RealKey]) -> Iterator[Tuple[RealKey, Recipe, bytearray]]:
        order = sorted(keys, key=lambda k: (k.position, k.cut, k.kind, k.param))
        scratch = bytearray(len(self.durable))
        for key in order:
            recipe = self.space.recipe(key)
            self._advance(recipe.flush)
            scratch[:] = self.durable
            for s in recipe.kept:
                blocklog.apply(scratch, self.space.records[s - 1])
            if recipe.torn:
                blocklog.apply_sectors(scratch, self.space.records[recipe.torn - 1], recipe.torn_sectors)
            yield key, recipe, scratch

