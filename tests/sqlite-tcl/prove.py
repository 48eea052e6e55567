#!/usr/bin/env python3
"""prove.py — re-derives the by-design groups of expected-differences.txt
from runs made for the purpose, and shows the result as a table.

A listed case is proved when:
  reserve    stock SQLite that gives every new database 24 reserved bytes
             per page (variant stock-reserve*) prints what the list says;
  wal-kept   stock SQLite with SQLITE_FCNTL_PERSIST_WAL on every connection
             (stock-persist-wal*) prints what the list says;
  wal-size   the case passes through waldio when every `file size X-wal`
             answers what it answered on stock (wal_sizes.tcl: recorded on
             stock, replayed through waldio): only the -wal size differs;
  shm-name   the case passes through waldio with test.db-shm renamed to
             test.db-wal-shm in the script, or then passes with stock's -wal
             sizes too (it falls into wal-size), or then prints what
             stock-persist-wal or stock-reserve print (wal-kept, reserve).
A variant that renames test.db-shm itself (default-user) is compared with
its references after the rename is undone in what it printed.

  tests/sqlite-tcl/prove.py                    # every proved group, make test's variants
  tests/sqlite-tcl/prove.py --groups wal-size --files wal5.test --show all
  tests/sqlite-tcl/prove.py --json proof.json

Exit status 0 when every listed case of those groups is proved.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import expected  # noqa: E402
import lists  # noqa: E402
import run  # noqa: E402
import tclsuite  # noqa: E402
from tclsuite import RunOptions, Task  # noqa: E402

PROVED_GROUPS = ["reserve", "wal-kept", "shm-name", "wal-size"]
REFERENCE = {"reserve": "stock-reserve", "wal-kept": "stock-persist-wal"}


@dataclass
class Proof:
    group: str
    file: str
    case: str
    variant: str
    proved: bool
    how: str


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Prove the by-design groups of expected-differences.txt "
                    "with stock references, -wal-shm renames and replayed "
                    "-wal sizes.")
    p.add_argument("--groups", default=",".join(PROVED_GROUPS),
                   help="comma-separated groups (default: all four)")
    p.add_argument("--files", nargs="+", metavar="NAME",
                   help="only entries of these files")
    p.add_argument("--variants", help="only entries of these waldio "
                   "variants (comma-separated; default: make test's)")
    p.add_argument("--show", choices=["unproved", "all", "none"],
                   default="unproved", help="cases to list under the table")
    run.add_common(p)
    return p.parse_args(argv)


# ------------------------------------------------------------- the runs

def _record_path(records: Path, file: str, variant: str) -> Path:
    return records / f"{variant}--{file}.sizes"


class Runs:
    """The runs the proofs need, made once each, keyed by (file, variant,
    what was done to the file)."""

    def __init__(self, records: Path) -> None:
        self.records = records
        self.stage1: Dict[Tuple, Task] = {}
        self.stage2: Dict[Tuple, Task] = {}
        self.results: Dict[Tuple, tclsuite.FileResult] = {}

    def reference(self, file: str, variant: str, kind: str) -> Tuple:
        ref = tclsuite.reference_of(variant, kind)
        key = (file, ref, "plain")
        self.stage1[key] = Task(file, ref)
        return key

    def substituted(self, file: str, variant: str) -> Tuple:
        key = (file, variant, "shm")
        self.stage1[key] = Task(file, variant, RunOptions(shm_subst=True))
        return key

    def replayed(self, file: str, variant: str, shm: bool = False) -> Tuple:
        stock = tclsuite.reference_of(variant)
        record = _record_path(self.records, file, stock)
        self.stage1[(file, stock, "record")] = Task(
            file, stock, RunOptions(record_wal_sizes=record))
        key = (file, variant, "shm+replay" if shm else "replay")
        self.stage2[key] = Task(file, variant, RunOptions(
            shm_subst=shm, replay_wal_sizes=record))
        return key

    def variants(self) -> Set[str]:
        return {t.variant for t in list(self.stage1.values())
                + list(self.stage2.values())}

    def make(self, harness: tclsuite.Harness, timeout: float, jobs: int,
             logs: Optional[Path] = None, progress=None) -> None:
        """Stage 1 (references, renamed scripts, stock recording -wal
        sizes), then stage 2 (replays of those records)."""
        for stage in (self.stage1, self.stage2):
            keys = list(stage)
            done = tclsuite.run_many(
                harness, [stage[k] for k in keys], timeout, jobs, bool(logs),
                progress, lists.IOERR_LOOPS)
            for k, r in zip(keys, done):
                self.results[k] = r
                run.keep_logs([r], logs, "" if k[2] == "plain" else "+" + k[2])


# ----------------------------------------------------------- the proofs

def observed(r: tclsuite.FileResult, case: str, renamed: bool = False
             ) -> List[str]:
    """What `case` printed in run r (its end, for <end>); renamed: with
    stock's wal-index names turned into waldio's, as in a script run with
    test.db-shm renamed."""
    fails = expected.failures_of(r, tclsuite.not_run(r.file, r.variant))
    gots = [g for c, g in fails if c == case]
    return [tclsuite.substitute_shm(g) for g in gots] if renamed else gots


def loop_of(case: str) -> Optional[str]:
    m = tclsuite.FAULTSIM_ROUND.match(case)
    return m.group(1) if m else None


def in_same_loop(r: tclsuite.FileResult, case: str,
                 entries: Sequence[expected.Entry], renamed: bool) -> List[str]:
    """Rounds of case's fault loop in run r that printed what an entry says:
    round numbers differ between stock and waldio (each counts its own
    calls), so a round is compared with every round of the loop."""
    loop = loop_of(case)
    return [c for c in r.failed if loop_of(c) == loop
            and any(e.accepts(g) for e in entries
                    for g in observed(r, c, renamed))]


def _passes(r: tclsuite.FileResult, case: str) -> Tuple[bool, str]:
    if r.replay_diverged:
        return False, "the replay of stock's -wal sizes diverged"
    if r.status == tclsuite.TIMEOUT:
        return False, "timed out"
    gots = observed(r, case, False)
    return (not gots), ("passes" if not gots
                        else "still prints " + expected.describe(gots))


def _same(entries: Sequence[expected.Entry], gots: List[str]) -> bool:
    return len(entries) == len(gots) and all(
        e.accepts(g) for e, g in zip(entries, gots))


def prove_one(group: str, file: str, case: str, variant: str,
              entries: Sequence[expected.Entry], keys: Dict[str, Tuple],
              runs: Runs) -> Proof:
    renamed = tclsuite.VARIANTS[variant].shm_subst
    res = runs.results

    def by_reference(kind: str) -> Tuple[bool, str]:
        ref = res[keys[kind]]
        gots = observed(ref, case, renamed)
        if _same(entries, gots):
            return True, f"{kind} prints the same"
        if loop_of(case) and len(entries) == 1:
            rounds = in_same_loop(ref, case, entries, renamed)
            if rounds:
                return True, (f"{kind} prints the same in {rounds[0]} (rounds "
                              "are numbered by each run's own fault points)")
        return False, f"{kind} prints {expected.describe(gots)}"

    if group in REFERENCE:
        ok, how = by_reference(REFERENCE[group])
    elif group == "wal-size":
        ok, how = _passes(res[keys["replay"]], case)
        how = ("with stock's -wal sizes: " + how)
    else:                                   # shm-name
        ok, how = _passes(res[keys["shm"]], case)
        how = "with -wal-shm: " + how
        if not ok:
            ok2, how2 = _passes(res[keys["shm+replay"]], case)
            if ok2:
                ok, how = True, how + "; and stock's -wal sizes: passes (wal-size)"
            else:
                shm_gots = observed(res[keys["shm"]], case)
                for kind in ("stock-persist-wal", "stock-reserve"):
                    ref = observed(res[keys[kind]], case, renamed=True)
                    if ref == shm_gots:
                        ok, how = True, how + f"; {kind} prints the same"
                        break
    return Proof(group, file, case, variant, ok, how)


def plan_proofs(exp: expected.ExpectedList, groups: Set[str],
                files: Optional[Set[str]], variants: Set[str], runs: Runs
                ) -> List[Tuple[str, str, str, str, List[expected.Entry],
                                Dict[str, Tuple]]]:
    """Every listed (file, case, variant) to prove, with the runs it needs
    (registered in runs)."""
    todo = []
    for (file, case, variant), (block, entries) in sorted(exp.index.items()):
        if block.group not in groups or variant not in variants \
                or (files and file not in files):
            continue
        keys: Dict[str, Tuple] = {}
        if block.group in REFERENCE:
            kind = REFERENCE[block.group]
            keys[kind] = runs.reference(file, variant, kind)
        elif block.group == "wal-size":
            keys["replay"] = runs.replayed(file, variant)
        else:
            keys["shm"] = runs.substituted(file, variant)
            keys["shm+replay"] = runs.replayed(file, variant, shm=True)
            for kind in ("stock-persist-wal", "stock-reserve"):
                keys[kind] = runs.reference(file, variant, kind)
        todo.append((block.group, file, case, variant, entries, keys))
    return todo


def print_summary(proofs: Sequence[Proof], show: str) -> None:
    rows = []
    for g in PROVED_GROUPS:
        mine = [p for p in proofs if p.group == g]
        if mine:
            rows.append((g, str(len(mine)), str(sum(p.proved for p in mine)),
                         str(sum(not p.proved for p in mine))))
    run.print_table(("group", "listed", "proved", "not proved"), rows)
    picked = [p for p in proofs if show == "all"
              or (show == "unproved" and not p.proved)]
    if picked:
        print()
    for p in picked:
        print(f"{'proved    ' if p.proved else 'NOT PROVED'} {p.group:9} "
              f"{p.file} {p.case} [{p.variant}]: {p.how}")


def prove_all(exp: expected.ExpectedList, groups: Set[str],
              files: Optional[Set[str]], variants: Set[str],
              harness_for, timeout: float, jobs: int,
              logs: Optional[Path] = None, progress=None) -> List[Proof]:
    """Every listed case of `groups` in `variants` (and `files`), proved or
    not. harness_for(variants) builds the testfixtures the runs need."""
    with tempfile.TemporaryDirectory(prefix="waldio-prove-",
                                     dir=tclsuite.work_root()) as records:
        Path(records).chmod(0o777)     # unprivileged stock runs record here
        runs = Runs(Path(records))
        todo = plan_proofs(exp, groups, files, variants, runs)
        if todo:
            runs.make(harness_for(runs.variants()), timeout, jobs, logs,
                      progress)
        return [prove_one(*t, runs) for t in todo]


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    groups = {g for g in args.groups.split(",") if g}
    unknown = groups - set(PROVED_GROUPS)
    if unknown:
        sys.exit(f"prove.py: groups {', '.join(sorted(unknown))} are not "
                 f"proved by runs (only {', '.join(PROVED_GROUPS)})")
    variants = (set(args.variants.split(",")) if args.variants
                else {v for _, v in lists.make_test_plan()})
    proofs = prove_all(
        expected.load(args.expected), groups, set(args.files or []) or None,
        variants, lambda vs: tclsuite.harness_for(vs, args.lib, args.testfixture),
        args.timeout, args.jobs, args.logs, run.progress_printer(args.quiet))
    run.write_json(args.json, {"proofs": [asdict(p) for p in proofs]})
    if args.json != "-":
        print_summary(proofs, args.show)
    return 0 if all(p.proved for p in proofs) else 1


if __name__ == "__main__":
    sys.exit(main())
