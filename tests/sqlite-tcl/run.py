#!/usr/bin/env python3
"""run.py — command line of the SQLite TCL suite runner (engine: tclsuite.py,
judgement: expected.py).

Builds testfixture with waldio (cached, build.sh), runs each test file in its
own process in every variant asked for plus the stock variant it is judged
by, and prints one row per file and variant: stock errors, waldio errors,
failures listed as by design (expected-differences.txt) and printing what the
list says, failures listed as stock's (stock prints the same), unexpected
failures, and listed cases that did not fail (stale).

  tests/sqlite-tcl/run.py                          # full list, stock + default
  tests/sqlite-tcl/run.py --list wal --variants pad4k,pad8k
  tests/sqlite-tcl/run.py --files wal.test wal2.test --json out.json
  tests/sqlite-tcl/run.py --show-failures          # why each is unexpected
  tests/sqlite-tcl/run.py --plan --stock needed --jobs 2   # what make test runs
  tests/sqlite-tcl/run.py --list fault --rounds    # fault rounds, stock vs waldio

Exit status 0 when every waldio run ended normally with only listed
failures printing what the list says, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import expected  # noqa: E402
import lists  # noqa: E402
import tclsuite  # noqa: E402


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Run SQLite's TCL tests with waldio as the default VFS "
                    "and compare with stock SQLite.")
    p.add_argument("--list", choices=sorted(lists.LISTS), default="full",
                   help="named list of test files (default: full)")
    p.add_argument("--files", nargs="+", metavar="NAME",
                   help="these test files instead of a list (e.g. wal.test)")
    p.add_argument("--plan", action="store_true",
                   help="run make test's plan (lists.make_test_plan: FULL with "
                        "default options, LAYOUT per layout, EMBED forced, "
                        "USER unprivileged) instead of --list/--files x "
                        "--variants")
    p.add_argument("--variants", default="default",
                   help="comma-separated waldio variants: "
                        + ",".join(tclsuite.WALDIO_VARIANTS)
                        + " (the stock variant of the same build runs too; "
                        "default: default)")
    p.add_argument("--stock", choices=["always", "needed"], default="always",
                   help="run stock for every file, or only where the "
                        "judgement needs it (default: always)")
    add_common(p)
    p.add_argument("--rounds", action="store_true",
                   help="print the rounds of every fault-injection loop, "
                        "stock and waldio")
    p.add_argument("--show-failures", action="store_true",
                   help="print why each failure is unexpected, and the "
                        "output tail of each file that is not ok")
    return p.parse_args(argv)


def add_common(p: argparse.ArgumentParser) -> None:
    """Options shared with regenerate.py and prove.py."""
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds per file before it is killed (default 900)")
    p.add_argument("--jobs", type=int, default=2,
                   help="test files run at once (default 2)")
    p.add_argument("--testfixture", type=Path,
                   help="use this binary as the 1024-byte-page build "
                        "instead of building it")
    p.add_argument("--lib", type=Path, help="libwaldio.a to link "
                   "(default build/libwaldio.a)")
    p.add_argument("--expected", type=Path, default=expected.EXPECTED_FILE,
                   help="expected-differences file")
    p.add_argument("--json", metavar="FILE",
                   help="write results as JSON to FILE ('-': stdout)")
    p.add_argument("--logs", type=Path, metavar="DIR",
                   help="keep each run's full output in DIR/VARIANT/FILE.out")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines")


def progress_printer(quiet: bool):
    def progress(r: tclsuite.FileResult) -> None:
        if not quiet:
            print(f"  {r.variant:23} {r.file:24} {r.status:12} "
                  f"{_n(r.errors)}/{_n(r.tests)}  {r.seconds:.1f}s",
                  file=sys.stderr, flush=True)
    return progress


def keep_logs(results: Sequence[tclsuite.FileResult], logs: Optional[Path],
              tag: str = "") -> None:
    """Write each result's output to logs/VARIANT/FILE.out and drop it."""
    if logs is None:
        return
    for r in results:
        out = logs / (r.variant + tag) / (r.file + ".out")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(r.log or "")
        r.log = None


def write_json(where: Optional[str], doc: dict) -> None:
    if not where:
        return
    text = json.dumps(doc, indent=1)
    if where == "-":
        print(text)
    else:
        Path(where).write_text(text + "\n")


def print_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in list(rows) + [head])
              for i in range(len(head))]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def print_verdicts(verdicts: Sequence[expected.Verdict]) -> None:
    rows = []
    for v in verdicts:
        status = v.status if v.stock_status in (tclsuite.COMPLETE,
                                                tclsuite.NOT_RUN) \
            else f"{v.status} (stock {v.stock_status})"
        rows.append((v.file, v.variant, _n(v.stock_errors), _n(v.waldio_errors),
                     str(len(v.expected)), str(len(v.also_stock)),
                     str(len(v.unexpected)), str(len(v.stale)), status,
                     f"{v.seconds:.0f} ({v.stock_seconds:.0f})"))
    print_table(("file", "variant", "stock err", "waldio err", "expected",
                 "stock's", "unexpected", "stale", "status", "s (stock)"), rows)


def print_rounds(results: Sequence[tclsuite.FileResult]) -> None:
    """Per file and waldio variant: fault rounds through waldio and stock,
    and the loops where waldio ran fewer."""
    rows = []
    for w, s in expected.pair_up(results):
        if not (w.rounds or s.rounds):
            continue
        fewer = [f"{loop} {w.rounds.get(loop, 0)}<{n}"
                 for loop, n in s.rounds.items() if w.rounds.get(loop, 0) < n]
        rows.append((w.file, w.variant, str(sum(s.rounds.values())),
                     str(sum(w.rounds.values())), str(len(s.rounds)),
                     ", ".join(fewer) or "-"))
    print_table(("file", "variant", "stock rounds", "waldio rounds", "loops",
                 "loops with fewer rounds through waldio"), rows)


def _n(x: Optional[int]) -> str:
    return "-" if x is None else str(x)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in tclsuite.WALDIO_VARIANTS:
            sys.exit(f"run.py: unknown variant {v!r}")
    files = args.files or lists.LISTS[args.list]
    if args.plan:
        plan = lists.make_test_plan()
    else:
        plan = [(f, v) for f in files for v in variants]
    harness = tclsuite.harness_for({v for _, v in plan}, args.lib,
                                   args.testfixture)
    exp = expected.load(args.expected)
    results = tclsuite.run_suite(
        harness, plan, args.timeout, lambda r: expected.needs_stock(r, exp),
        stock=args.stock, jobs=args.jobs, keep_log=bool(args.logs),
        progress=progress_printer(args.quiet), ioerr_loops=lists.IOERR_LOOPS)
    keep_logs(results, args.logs)
    verdicts = expected.judge_all(results, exp)
    write_json(args.json, {"results": [asdict(r) for r in results],
                           "verdicts": [dict(asdict(v), ok=v.ok)
                                        for v in verdicts]})
    if args.json != "-":
        print_verdicts(verdicts)
        if args.rounds:
            print()
            print_rounds(results)
        if args.show_failures:
            for v in verdicts:
                if v.ok and not v.stale:
                    continue
                print(f"\n== {v.file} [{v.variant}] {v.status}, last case "
                      f"{v.last_case}")
                for case, why in v.unexpected.items():
                    print(f"  unexpected {case}: {why}")
                for case in v.stale:
                    print(f"  stale {case}: listed, did not fail")
                if v.status != tclsuite.COMPLETE:
                    print("\n".join("   | " + t for t in v.tail))
    return 0 if all(v.ok and not v.stale for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
