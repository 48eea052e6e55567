#!/usr/bin/env python3
"""run.py — command line of the SQLite TCL suite runner (engine: tclsuite.py).

Builds testfixture with waldio (cached, build.sh), runs each test file in its
own process in every variant asked for plus stock, and prints one row per
file and variant: stock errors, waldio errors, failures expected by design
(expected-differences.txt), failures stock has too, and unexpected failures.

  tests/sqlite-tcl/run.py                          # full list, stock + default
  tests/sqlite-tcl/run.py --list wal --variants pad4k,pad8k
  tests/sqlite-tcl/run.py --files wal.test wal2.test --json out.json
  tests/sqlite-tcl/run.py --show-failures          # tails of failing files
  tests/sqlite-tcl/run.py --plan --stock needed --jobs 2   # what make test runs

Exit status 0 when every waldio run ended normally with only expected (or
stock-shared) failures, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tclsuite  # noqa: E402
import lists  # noqa: E402


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
                        "default options, LAYOUT per layout, EMBED forced) "
                        "instead of --list/--files x --variants")
    p.add_argument("--variants", default="default",
                   help="comma-separated waldio variants: "
                        + ",".join(tclsuite.WALDIO_VARIANTS)
                        + " (the stock variant of the same build runs too; "
                        "default: default)")
    p.add_argument("--stock", choices=["always", "needed"], default="always",
                   help="run stock for every file, or only for files whose "
                        "waldio runs have failures not listed as expected "
                        "(default: always)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds per file before it is killed (default 600)")
    p.add_argument("--jobs", type=int, default=1,
                   help="test files run at once (default 1)")
    p.add_argument("--testfixture", type=Path,
                   help="use this binary as the 1024-byte-page build "
                        "instead of building it")
    p.add_argument("--lib", type=Path, help="libwaldio.a to link "
                   "(default build/libwaldio.a)")
    p.add_argument("--expected", type=Path, default=tclsuite.EXPECTED_FILE,
                   help="expected-differences file")
    p.add_argument("--json", metavar="FILE",
                   help="write results as JSON to FILE ('-': stdout)")
    p.add_argument("--logs", type=Path, metavar="DIR",
                   help="keep each run's full output in DIR/VARIANT/FILE.out")
    p.add_argument("--show-failures", action="store_true",
                   help="print the failed cases and output tail of each "
                        "file that is not ok")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines")
    return p.parse_args(argv)


def print_table(verdicts: List[tclsuite.Verdict]) -> None:
    head = ("file", "variant", "stock err", "waldio err", "expected",
            "both", "unexpected", "status", "s (stock)")
    rows = []
    for v in verdicts:
        rows.append((v.file, v.variant, _n(v.stock_errors), _n(v.waldio_errors),
                     str(len(v.expected)), str(len(v.also_stock)),
                     str(len(v.unexpected)),
                     v.status if v.stock_status in (tclsuite.COMPLETE,
                                                    tclsuite.NOT_RUN)
                     else f"{v.status} (stock {v.stock_status})",
                     f"{v.seconds:.0f} ({v.stock_seconds:.0f})"))
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


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
    expected = tclsuite.load_expected(args.expected)

    def progress(r: tclsuite.FileResult) -> None:
        if not args.quiet:
            print(f"  {r.variant:13} {r.file:24} {r.status:12} "
                  f"{_n(r.errors)}/{_n(r.tests)}  {r.seconds:.1f}s",
                  file=sys.stderr, flush=True)

    results = tclsuite.run_suite(harness, plan, args.timeout, expected,
                                 stock=args.stock,
                                 jobs=args.jobs, keep_log=bool(args.logs),
                                 progress=progress)
    if args.logs:
        for r in results:
            out = args.logs / r.variant / (r.file + ".out")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(r.log or "")
            r.log = None
    verdicts = tclsuite.judge_all(results, expected)
    if args.json:
        doc = tclsuite.to_json(results, verdicts)
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    if args.json != "-":
        print_table(verdicts)
        if args.show_failures:
            for v in verdicts:
                if v.ok:
                    continue
                print(f"\n== {v.file} [{v.variant}] {v.status}, last case "
                      f"{v.last_case}")
                print("unexpected:", " ".join(v.unexpected) or "-")
                print("\n".join("   | " + t for t in v.tail))
    return 0 if all(v.ok for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
