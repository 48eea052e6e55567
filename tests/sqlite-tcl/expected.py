"""expected — the list of test cases that may fail through waldio, each with
exactly what it must print, and the judgement of a waldio run against it.

expected-differences.txt is a list of blocks. A block names a group and the
reason its cases differ, then lists each case explicitly, in each variant,
with what the case prints there (tester.tcl's "got: [...]", or the
"Error: ..." of a case whose script raised):

    reason wal-size  file size test.db-wal == wal_file_size(2,1024)
      wal.test  wal-1.2  default,pad4k,pad8k  = got: [8192]
      wal.test  wal-1.2  default-p4096        = got: [12288]

`= TEXT` is the exact text (\\n, \\t, \\r, \\\\ and \\x20 for a trailing
space escaped); `~ REGEX` must match the whole text (re.fullmatch), for a
value that is not the same in every run. A case that fails more than once
in a run has one line per failure, in order. A (file, case) belongs to one
block in each variant (it may be stock's in one variant and by design in
another). Comment lines (#) before the first block are kept by regenerate();
other comments are not.

A failure is excused only when its case is listed for the variant and every
failure of the case printed what its lines say. In the `stock` group the
stock run of the same build must, besides, print the same. `unfiled` holds
what regenerate() found and nobody has explained yet: never excused. A
fault-injection loop that ran fewer rounds than on stock is the failure
`<rounds:LOOP>`, printing "N rounds (stock M)" (a loop whose count moves
from run to run is listed with a pattern, `~`, and may then also not fail;
so may a round of the `poisoned` group, see _may_pass);
a run that did not reach
tester.tcl's summary line is the failure `<end>`, printing "STATUS after
LAST-CASE" (a timeout is never listed: it is not a value).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from tclsuite import (COMPLETE, FAULTSIM_ROUND, NOT_RUN, TIMEOUT, VARIANTS,
                      WALDIO_VARIANTS, FileResult, not_run, reference_of)

EXPECTED_FILE = Path(__file__).resolve().parent / "expected-differences.txt"

# The groups and what a case must do to be in one (the header of
# expected-differences.txt says why each is by design).
GROUPS: Dict[str, str] = {
    "wal-size": "asserts the -wal file's size (proved: passes with stock's sizes)",
    "wal-kept": "expects the -wal gone after the last close (proved: stock "
                "with SQLITE_FCNTL_PERSIST_WAL prints the same)",
    "wal-bytes": "reads or patches raw -wal bytes at standard offsets",
    "shm-name": "uses test.db-shm by name (proved: passes with -wal-shm, or "
                "then falls into another proved group)",
    "reserve": "counts pages or bytes of a new database (proved: stock with "
               "24 reserved bytes prints the same)",
    "poisoned": "uses a connection again after a failed log write or flush "
                "(wal_log.h L4)",
    "fewer-calls": "a fault loop with fewer rounds: the workload makes fewer "
                   "calls through waldio",
    "file-mode": "chmods the -wal or its wal-index by hand: waldio gives "
                 "both the database's mode at every WAL open",
    "stock": "fails on stock SQLite too, printing the same",
    "unfiled": "found by regenerate.py, not yet explained: never excused",
}
BY_DESIGN = [g for g in GROUPS if g not in ("stock", "unfiled")]
ROUNDS_PREFIX = "<rounds:"
END = "<end>"

# ------------------------------------------------------------- the file

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNESCAPE = re.compile(r"\\(\\|n|t|r|x20)")
_UNESCAPED = {"\\": "\\", "n": "\n", "t": "\t", "r": "\r", "x20": " "}


def escape(text: str) -> str:
    out = "".join(_ESCAPES.get(ch, ch) for ch in text)
    stripped = out.rstrip(" ")
    return stripped + "\\x20" * (len(out) - len(stripped))


def unescape(text: str) -> str:
    return _UNESCAPE.sub(lambda m: _UNESCAPED[m.group(1)], text)


@dataclass(frozen=True)
class Entry:
    """One expected failure of a case in some variants."""
    file: str
    case: str
    variants: Tuple[str, ...]
    op: str                   # "=": exactly `value`; "~": re.fullmatch
    value: str

    def accepts(self, got: str) -> bool:
        if self.op == "=":
            return got == self.value
        return re.fullmatch(self.value, got, re.DOTALL) is not None

    def line(self) -> str:
        value = escape(self.value) if self.op == "=" else self.value
        return (f"  {self.file}  {self.case}  {','.join(self.variants)}  "
                f"{self.op} {value}").rstrip()


@dataclass
class Block:
    group: str
    reason: str
    entries: List[Entry] = field(default_factory=list)


class ExpectedList:
    """The parsed file: its header comments and blocks, and an index from
    (file, case, variant) to the block and the entries in failure order."""

    def __init__(self, header: List[str], blocks: List[Block]) -> None:
        self.header = header
        self.blocks = blocks
        self.index: Dict[Tuple[str, str, str], Tuple[Block, List[Entry]]] = {}
        for b in blocks:
            for e in b.entries:
                for v in e.variants:
                    other, entries = self.index.setdefault((e.file, e.case, v),
                                                           (b, []))
                    if other is not b:
                        raise ValueError(f"{e.file} {e.case} [{v}] is in two "
                                         f"blocks ({other.group}, {b.group})")
                    entries.append(e)

    @property
    def entries(self) -> List[Entry]:
        return [e for b in self.blocks for e in b.entries]

    def lookup(self, file: str, case: str, variant: str
               ) -> Optional[Tuple[Block, List[Entry]]]:
        return self.index.get((file, case, variant))

    def listed(self, file: str, variant: str) -> List[str]:
        """Cases listed for this file and variant, each once."""
        return list(dict.fromkeys(c for f, c, v in self.index
                                  if f == file and v == variant))

    def count(self) -> Dict[str, int]:
        """Per group: listed (file, case, variant) triples."""
        out: Dict[str, int] = {}
        for b, _ in self.index.values():
            out[b.group] = out.get(b.group, 0) + 1
        return out

    def text(self) -> str:
        lines = list(self.header)
        for b in self.blocks:
            if not b.entries:
                continue
            lines += [""] if lines else []
            lines += [f"reason {b.group}  {b.reason}"]
            lines += [e.line() for e in b.entries]
        return "\n".join(lines) + "\n"


def parse(text: str, where: str = "expected-differences.txt") -> ExpectedList:
    header: List[str] = []
    blocks: List[Block] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not blocks and (not line or line.startswith("#")):
            header.append(line)
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith("reason "):
            parts = line.split(None, 2)
            if len(parts) < 3 or parts[1] not in GROUPS:
                raise ValueError(f"{where}:{lineno}: want `reason GROUP TEXT`"
                                 f" with GROUP one of {', '.join(GROUPS)}")
            blocks.append(Block(parts[1], parts[2]))
            continue
        if not blocks or not line.startswith("  "):
            raise ValueError(f"{where}:{lineno}: a case line (indented) "
                             "outside a block")
        parts = line.split(None, 3)
        if len(parts) < 4 or parts[3][:1] not in "=~" \
                or parts[3][1:2] not in ("", " "):
            raise ValueError(f"{where}:{lineno}: want `FILE CASE VARIANTS = "
                             "GOT` or `... ~ REGEX`")
        op, value = parts[3][0], parts[3][2:]
        variants = tuple(parts[2].split(","))
        for v in variants:
            if v not in WALDIO_VARIANTS:
                raise ValueError(f"{where}:{lineno}: unknown variant {v!r}")
        if op == "~":
            re.compile(value)
        else:
            value = unescape(value)
        blocks[-1].entries.append(Entry(parts[0], parts[1], variants, op, value))
    while header and not header[-1]:
        header.pop()
    try:
        return ExpectedList(header, blocks)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def load(path: Path = EXPECTED_FILE) -> ExpectedList:
    return parse(path.read_text(), str(path))


# ------------------------------------------------------------- judging

def failures_of(waldio: FileResult, stock: FileResult
                ) -> List[Tuple[str, str]]:
    """What a waldio run failed: its failed cases with what they printed,
    an `<end>` failure if it did not run to its end ("signal after CASE"),
    and a `<rounds:LOOP>` failure for every fault loop that ran fewer
    rounds than in the stock run (stock not run: none)."""
    out = list(waldio.failures)
    if waldio.status != COMPLETE:
        out.append((END, f"{waldio.status} after {waldio.last_case}"))
    if stock.status == COMPLETE:
        for loop, n in stock.rounds.items():
            mine = waldio.rounds.get(loop, 0)
            if mine < n:
                out.append((f"{ROUNDS_PREFIX}{loop}>", f"{mine} rounds (stock {n})"))
    return out


def _accepted(entries: Sequence[Entry], gots: Sequence[str]) -> bool:
    return len(entries) == len(gots) and all(
        e.accepts(g) for e, g in zip(entries, gots))


def describe(gots: Sequence[str]) -> str:
    return " | ".join(g[:300] for g in gots) or "(nothing)"


@dataclass
class Verdict:
    """A waldio run of one file judged against the list and the stock run of
    the same build."""
    file: str
    variant: str
    status: str
    stock_status: str
    stock_errors: Optional[int]
    waldio_errors: Optional[int]
    expected: List[str]            # by design, printing what the list says
    also_stock: List[str]          # listed as stock's, stock prints the same
    unexpected: Dict[str, str]     # case -> why it is not excused
    stale: List[str]               # listed for this variant, did not fail
    seconds: float
    stock_seconds: float
    last_case: Optional[str]
    tail: List[str]

    @property
    def ok(self) -> bool:
        """No unexpected failure (an early end is one unless listed)."""
        return not self.unexpected


def judge(waldio: FileResult, stock: FileResult,
          expected: ExpectedList) -> Verdict:
    exp: List[str] = []
    both: List[str] = []
    unexp: Dict[str, str] = {}
    fails = failures_of(waldio, stock)
    for case in dict.fromkeys(c for c, _ in fails):
        gots = [g for c, g in fails if c == case]
        hit = expected.lookup(waldio.file, case, waldio.variant)
        if waldio.status == TIMEOUT and case == END:
            unexp[case] = f"timed out after {waldio.last_case}"
            continue
        if hit is None:
            unexp[case] = f"not listed; prints {describe(gots)}"
            continue
        block, entries = hit
        if not _accepted(entries, gots):
            unexp[case] = (f"prints {describe(gots)}; listed ({block.group}): "
                           + " | ".join(f"{e.op} {e.value[:300]}" for e in entries))
        elif block.group == "unfiled":
            unexp[case] = f"unfiled: prints {describe(gots)}"
        elif block.group != "stock":
            exp.append(case)
        elif stock.status == NOT_RUN:
            unexp[case] = "listed as stock's, but stock was not run"
        elif stock.gots(case) != gots:
            unexp[case] = (f"listed as stock's, but stock prints "
                           f"{describe(stock.gots(case))}")
        else:
            both.append(case)
    # Listed, and did not fail (rounds only count where stock ran too).
    failed = {c for c, _ in fails}
    stale = [c for c in expected.listed(waldio.file, waldio.variant)
             if c not in failed and waldio.status != TIMEOUT
             and (stock.status == COMPLETE or not c.startswith(ROUNDS_PREFIX))
             and not _may_pass(expected, waldio.file, c, waldio.variant)]
    return Verdict(
        file=waldio.file, variant=waldio.variant, status=waldio.status,
        stock_status=stock.status, stock_errors=stock.errors,
        waldio_errors=waldio.errors, expected=exp, also_stock=both,
        unexpected=unexp, stale=stale, seconds=waldio.seconds,
        stock_seconds=stock.seconds, last_case=waldio.last_case,
        tail=waldio.tail)


def _may_pass(expected: ExpectedList, file: str, case: str,
              variant: str) -> bool:
    """Listed cases that need not fail in every run (neither is stale when
    it passes; when it fails, it must print what it is listed with):
    * a fault loop's count listed with patterns only: it moves by a round
      or a few from run to run, and in some runs reaches stock's;
    * a fault round of the `poisoned` group: the round whose fault hits the
      log's flush. A CI run once counted the body's fault points so that
      no transient round hit the flush (walfault-15-ioerr-transient.14
      passed, and no other round failed); the cause was not reproduced."""
    hit = expected.lookup(file, case, variant)
    if hit is None:
        return False
    if case.startswith(ROUNDS_PREFIX):
        return all(e.op == "~" for e in hit[1])
    return hit[0].group == "poisoned" and FAULTSIM_ROUND.match(case) is not None


def needs_stock(r: FileResult, expected: ExpectedList) -> bool:
    """Whether judging a waldio result needs the stock run of its file: a
    failure listed as stock's or not listed, a fault loop (its rounds are
    compared), or a run that did not end normally."""
    if r.status != COMPLETE or r.rounds:
        return True
    for case in r.failed:
        hit = expected.lookup(r.file, case, r.variant)
        if hit is None or hit[0].group == "stock":
            return True
    return any(c.startswith(ROUNDS_PREFIX)
               for c in expected.listed(r.file, r.variant))


def pair_up(results: Iterable[FileResult]
            ) -> List[Tuple[FileResult, FileResult]]:
    """Every waldio result with the stock result of its file and reference
    variant (a NOT_RUN placeholder where that was not run)."""
    results = list(results)
    stock = {(r.file, r.variant): r for r in results
             if not VARIANTS[r.variant].reference}
    return [(r, stock.get((r.file, reference_of(r.variant)))
             or not_run(r.file, reference_of(r.variant)))
            for r in results if VARIANTS[r.variant].reference]


def judge_all(results: Iterable[FileResult],
              expected: ExpectedList) -> List[Verdict]:
    return [judge(w, s, expected) for w, s in pair_up(results)]


# ------------------------------------------------------------ regenerating

def _natural(case: str) -> Tuple:
    return tuple(int(t) if t.isdigit() else t
                 for t in re.split(r"(\d+)", case))


def _order(variant: str) -> int:
    return WALDIO_VARIANTS.index(variant)


def regenerate(old: ExpectedList, results: Iterable[FileResult],
               unfiled_reason: str = "not yet explained: give each case a "
               "group and a reason, or report it as a bug (FINDINGS.md)"
               ) -> ExpectedList:
    """The list with every (file, variant) that ran, with its stock run,
    without a timeout, recorded afresh: each failure with what it printed
    now, in the block its case was in (a fault round: or a round of its loop
    that printed the same; a `~` line is kept while it still matches),
    under `stock` when the stock run printed the same, under `unfiled` when
    its case was in no block. Everything else is kept as it was."""
    pairs = [(w, s) for w, s in pair_up(results)
             if TIMEOUT not in (w.status, s.status) and s.status != NOT_RUN]
    redone: Set[Tuple[str, str]] = {(w.file, w.variant) for w, _ in pairs}
    # The by-design block of each case: the one of this variant, else the
    # one of any variant.
    # A fault round renumbered (each run numbers its own fault points) goes
    # where a round of the same loop that printed the same value was.
    block_of: Dict[Tuple, Block] = {}
    for (file, case, variant), (b, entries) in old.index.items():
        if b.group not in ("stock", "unfiled"):
            block_of[(file, case, variant)] = b
            block_of.setdefault((file, case), b)
            loop = FAULTSIM_ROUND.match(case)
            for e in entries:
                if loop and e.op == "=":
                    block_of.setdefault((file, loop.group(1), e.value), b)
    # (file, case, variant) -> (block, entries), old ones first.
    atoms: Dict[Tuple[str, str, str], Tuple[Block, List[Entry]]] = {
        k: v for k, v in old.index.items() if (k[0], k[2]) not in redone}
    blocks = [Block(b.group, b.reason) for b in old.blocks]
    same = {id(b): nb for b, nb in zip(old.blocks, blocks)}

    def special(group: str, reason: str) -> Block:
        for b in blocks:
            if b.group == group:
                return b
        blocks.append(Block(group, reason))
        return blocks[-1]

    for w, s in pairs:
        fails = failures_of(w, s)
        for case in dict.fromkeys(c for c, _ in fails):
            gots = [g for c, g in fails if c == case]
            prev = old.lookup(w.file, case, w.variant)
            if prev and all(e.op == "~" for e in prev[1]) \
                    and _accepted(prev[1], gots):
                entries = list(prev[1])
            else:
                entries = [Entry(w.file, case, (w.variant,), "=", g) for g in gots]
            loop = FAULTSIM_ROUND.match(case)
            home = (block_of.get((w.file, case, w.variant))
                    or block_of.get((w.file, case))
                    or (block_of.get((w.file, loop.group(1), gots[0]))
                        if loop and len(gots) == 1 else None))
            if s.gots(case) == gots:
                block = special("stock", GROUPS["stock"])
            elif home is not None:
                block = same[id(home)]
            else:
                block = special("unfiled", unfiled_reason)
            atoms[(w.file, case, w.variant)] = (block, entries)
    for (file, case, variant), (block, entries) in atoms.items():
        if id(block) in same:
            block = same[id(block)]
        atoms[(file, case, variant)] = (block, entries)

    # One line per (case, failure), the variants that print alike together.
    grouped: Dict[Tuple[int, str, str, Tuple], List[str]] = {}
    for (file, case, variant), (block, entries) in atoms.items():
        key = (id(block), file, case, tuple((e.op, e.value) for e in entries))
        grouped.setdefault(key, []).append(variant)
    by_id = {id(b): b for b in blocks}
    for (bid, file, case, values), variants in grouped.items():
        vs = tuple(sorted(variants, key=_order))
        by_id[bid].entries += [Entry(file, case, vs, op, val) for op, val in values]
    for b in blocks:
        b.entries.sort(key=lambda e: (e.file, _natural(e.case),
                                      _order(e.variants[0])))
    return ExpectedList(old.header, [b for b in blocks if b.entries])
