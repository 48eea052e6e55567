#!/usr/bin/env python3
"""regenerate.py — records what every listed case prints now, and shows the
change for review.

Runs make test's plan (or the part of it for --files) with the stock run of
every file, rewrites expected-differences.txt (expected.regenerate: each
failure with what it printed, in the block its case was in; failures that
stock prints alike under `stock`; new ones under `unfiled`, which make test
never excuses), and prints a unified diff of the file and the counts per
group before and after. Nothing else decides: the diff is for review, and an
`unfiled` case needs a group and a reason by hand (or a bug report).

  tests/sqlite-tcl/regenerate.py                      # whole plan, ~12 min
  tests/sqlite-tcl/regenerate.py --files walfault.test wal5.test
  tests/sqlite-tcl/regenerate.py --dry-run            # diff only
  tests/sqlite-tcl/regenerate.py --results run.json   # from a saved run

Exit status 0 when the list did not change, 1 when it did (or would).
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import expected  # noqa: E402
import lists  # noqa: E402
import run  # noqa: E402
import tclsuite  # noqa: E402


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Record what each listed case prints through waldio now "
                    "and show the difference to expected-differences.txt.")
    p.add_argument("--files", nargs="+", metavar="NAME",
                   help="only these files of make test's plan")
    p.add_argument("--dry-run", action="store_true",
                   help="show the diff, leave the file as it is")
    p.add_argument("--results", type=Path, metavar="JSON",
                   help="use the results saved by run.py/regenerate.py "
                        "--json instead of running")
    run.add_common(p)
    return p.parse_args(argv)


def load_results(path: Path) -> List[tclsuite.FileResult]:
    doc = json.loads(path.read_text())
    out = []
    for r in doc["results"]:
        r["failures"] = [tuple(f) for f in r["failures"]]
        out.append(tclsuite.FileResult(**r))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    old_text = args.expected.read_text()
    old = expected.parse(old_text, str(args.expected))
    if args.results:
        results = load_results(args.results)
    else:
        plan = [(f, v) for f, v in lists.make_test_plan()
                if not args.files or f in args.files]
        if not plan:
            sys.exit("regenerate.py: none of --files is in make test's plan")
        harness = tclsuite.harness_for(
            {v for _, v in plan} | {tclsuite.reference_of(v) for _, v in plan},
            args.lib, args.testfixture)
        results = tclsuite.run_suite(
            harness, plan, args.timeout, lambda r: True, stock="always",
            jobs=args.jobs, keep_log=bool(args.logs),
            progress=run.progress_printer(args.quiet),
            ioerr_loops=lists.IOERR_LOOPS)
        run.keep_logs(results, args.logs)
        run.write_json(args.json, {"results": [asdict(r) for r in results]})
    incomplete = [f"{r.file} [{r.variant}]: {r.status}" for r in results
                  if r.status == tclsuite.TIMEOUT]
    new = expected.regenerate(old, results)
    new_text = new.text()
    sys.stdout.writelines(difflib.unified_diff(
        old_text.splitlines(True), new_text.splitlines(True),
        str(args.expected), str(args.expected) + " (now)"))
    before, after = old.count(), new.count()
    print("\nlisted (file, case, variant) per group, before -> after:")
    for g in expected.GROUPS:
        if before.get(g) or after.get(g):
            print(f"  {g:12} {before.get(g, 0):5} -> {after.get(g, 0)}")
    if incomplete:
        print("\nnot recorded (timed out; the entries of these files are "
              "kept as they were):\n  " + "\n  ".join(incomplete))
    if after.get("unfiled"):
        print(f"\n{after['unfiled']} unfiled: give each a group and a reason "
              "(move its lines into a block), or report it as a bug")
    if new_text != old_text and not args.dry_run:
        args.expected.write_text(new_text)
        print(f"\nwrote {args.expected}; review with git diff")
    return 0 if new_text == old_text else 1


if __name__ == "__main__":
    sys.exit(main())
