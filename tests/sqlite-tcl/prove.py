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
A variant that renames test.db-shm itself (Variant.shm_subst) is compared
with its references after the rename is undone in what it printed.

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
from tclsuite import TIMEOUT, RunOptions, Task  # noqa: E402

PROVED_GROUPS = ["reserve", "wal-kept", "shm-name", "wal-size"]
REFERENCE = {"reserve": "stock-reserve", "wal-kept": "stock-persist-wal"}
# Variants whose new databases get 24 reserved bytes (the embed layout,
# vfs.c; the default, the standard layout, reserves nothing).
RESERVING = {"embed"}


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

    def _want(self, stage: Dict[Tuple, Task], key: Tuple, task: Task) -> Tuple:
        if key not in self.results:
            stage[key] = task
        return key

    def reference(self, file: str, variant: str, kind: str) -> Tuple:
        ref = tclsuite.reference_of(variant, kind)
        return self._want(self.stage1, (file, ref, "plain"), Task(file, ref))

    def substituted(self, file: str, variant: str) -> Tuple:
        return self._want(self.stage1, (file, variant, "shm"),
                          Task(file, variant, RunOptions(shm_subst=True)))

    def replayed(self, file: str, variant: str, kind: str,
                 shm: bool = False) -> Dict[str, Tuple]:
        """The reference `kind` recording its -wal sizes, and the waldio
        variant replaying them: {"record:KIND": key, "replay:KIND": key}."""
        ref = tclsuite.reference_of(variant, kind)
        record = _record_path(self.records, file, ref)
        rec = self._want(self.stage1, (file, ref, "record"),
                         Task(file, ref, RunOptions(record_wal_sizes=record)))
        rep = self._want(
            self.stage2, (file, variant, ("shm+" if shm else "") + "replay:" + kind),
            Task(file, variant, RunOptions(shm_subst=shm,
                                           replay_wal_sizes=record)))
        return {"record:" + kind: rec, "replay:" + kind: rep}

    def variants(self) -> Set[str]:
        return {t.variant for t in list(self.stage1.values())
                + list(self.stage2.values())}

    def make(self, harness: tclsuite.Harness, timeout: float, jobs: int,
             logs: Optional[Path] = None, progress=None) -> None:
        """What was asked for since the last call: stage 1 (references,
        renamed scripts, stock recording -wal sizes), then stage 2 (replays
        of those records)."""
        for stage in (self.stage1, self.stage2):
            keys = list(stage)
            done = tclsuite.run_many(
                harness, [stage[k] for k in keys], timeout, jobs, bool(logs),
                progress, lists.IOERR_LOOPS)
            for k, r in zip(keys, done):
                self.results[k] = r
                run.keep_logs([r], logs, "" if k[2] == "plain" else "+" + k[2])
            stage.clear()


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


def _replayed_as(res, keys: Dict[str, Tuple], kind: str, case: str,
                 renamed: bool) -> Tuple[bool, str]:
    """Whether the case, run through waldio with the -wal sizes of the
    reference `kind` replayed, prints what that reference printed (nothing,
    if it passed there)."""
    rep, ref = res[keys["replay:" + kind]], res[keys["record:" + kind]]
    if rep.replay_diverged:
        return False, f"the replay of {kind}'s -wal sizes diverged"
    if TIMEOUT in (rep.status, ref.status):
        return False, "timed out"
    mine, theirs = observed(rep, case), observed(ref, case, renamed)
    if mine == theirs:
        return True, (f"with {kind}'s -wal sizes: "
                      + ("passes" if not mine else f"prints what {kind} prints"))
    return False, (f"with {kind}'s -wal sizes: prints {expected.describe(mine)}"
                   f" ({kind}: {expected.describe(theirs)})")


def _same(entries: Sequence[expected.Entry], gots: List[str]) -> bool:
    return len(entries) == len(gots) and all(
        e.accepts(g) for e, g in zip(entries, gots))


def prove_one(group: str, file: str, case: str, variant: str,
              entries: Sequence[expected.Entry], keys: Dict[str, Tuple],
              runs: Runs) -> Proof:
    renamed = tclsuite.VARIANTS[variant].shm_subst
    res = runs.results

    def by_reference(kind: str, gots_of=None) -> Tuple[bool, str]:
        ref = res[keys[kind]]
        kind = ref.variant                  # the reference of this build/user
        gots = observed(ref, case, renamed)
        if gots_of is not None:
            ok = gots == gots_of
        else:
            ok = _same(entries, gots)
            if not ok and loop_of(case) and len(entries) == 1:
                rounds = in_same_loop(ref, case, entries, renamed)
                if rounds:
                    return True, (f"{kind} prints the same in {rounds[0]} "
                                  "(rounds are numbered by each run's own "
                                  "fault points)")
        if ok:
            return True, f"{kind} prints the same"
        return False, f"{kind} prints {expected.describe(gots)}"

    if group in REFERENCE:
        ok, how = by_reference(REFERENCE[group])
        if not ok and "shm" in keys:
            shm = observed(res[keys["shm"]], case)
            theirs = observed(res[keys[REFERENCE[group]]], case, True)
            ok = shm == theirs
            how += ("; with -wal-shm: " + ("prints the same (and shm-name)"
                                            if ok else
                                            "prints " + expected.describe(shm)))
    elif group == "wal-size":
        ok, how = _replayed_as(res, keys, "stock", case, renamed)
        if not ok and "replay:stock-reserve" in keys:
            ok2, how2 = _replayed_as(res, keys, "stock-reserve", case, renamed)
            ok, how = ok2, how + "; " + how2 + (" (and reserve)" if ok2 else "")
    else:                                   # shm-name
        shm = observed(res[keys["shm"]], case)
        ok, how = not shm, "with -wal-shm: " + (
            "passes" if not shm else "prints " + expected.describe(shm))
        if not ok and "replay:stock" in keys:
            ok, how2 = _replayed_as(res, keys, "stock", case, True)
            how += "; " + how2 + (" (wal-size)" if ok else "")
            for kind in ("stock-persist-wal", "stock-reserve"):
                if not ok:
                    ok, how2 = by_reference(kind, shm)
                    how += "; " + how2
    return Proof(group, file, case, variant, ok, how)


def plan_proofs(exp: expected.ExpectedList, groups: Set[str],
                files: Optional[Set[str]], variants: Set[str], runs: Runs
                ) -> List[Tuple[str, str, str, str, List[expected.Entry],
                                Dict[str, Tuple]]]:
    """Every listed (file, case, variant) to prove, with the runs it needs
    first (registered in runs)."""
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
            keys.update(runs.replayed(file, variant, "stock"))
        else:
            keys["shm"] = runs.substituted(file, variant)
        todo.append((block.group, file, case, variant, entries, keys))
    return todo


def plan_fallbacks(todo, runs: Runs) -> None:
    """The runs a case needs when the first ones did not prove it, for two
    differences at once: a shm-name case that does not pass with -wal-shm,
    the same with stock's -wal sizes and the references of the groups it may
    fall into; a wal-size case of a variant whose new databases get reserved
    bytes, stock-reserve's -wal sizes; a reserve or wal-kept case, waldio
    with -wal-shm. Only those: the runs of large files are slow."""
    for group, file, case, variant, entries, keys in todo:
        if prove_one(group, file, case, variant, entries, keys, runs).proved:
            continue
        if group == "shm-name":
            keys.update(runs.replayed(file, variant, "stock", shm=True))
            for kind in ("stock-persist-wal", "stock-reserve"):
                keys[kind] = runs.reference(file, variant, kind)
        elif group == "wal-size" and variant in RESERVING:
            keys.update(runs.replayed(file, variant, "stock-reserve"))
        elif group in REFERENCE and not tclsuite.VARIANTS[variant].shm_subst:
            keys["shm"] = runs.substituted(file, variant)


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
        for plan in (None, plan_fallbacks):
            if plan:
                plan(todo, runs)
            if runs.variants():
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
