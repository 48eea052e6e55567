"""`waldio crash --real`: crash states from the real kernel (the options are
registered by :mod:`..cli`; this module runs them and prints the results).

    waldio crash --real                                   every row of plan.RUNS, 1000 states each
    waldio crash --real --mode waldio-full --states 10000 --seed 1 --json real.json
    waldio crash --real --mode wal-off --workload mixed --states 300
    waldio crash --real --replay 'waldio-full/mixed/seed=1/txns=100/real:subset:812:4711'
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from ..recorder import RecordingError
from . import machine, plan
from .campaign import exit_on_term, replay, run_real_campaign


Finish = Callable[[Dict[str, Any], bool, Optional[Path], Callable[[Dict[str, Any]], str]], int]


def main(args: argparse.Namespace, log: Callable[[str], None], finish: Finish) -> int:
    """Run the selected rows of the table; finish (crash/cli.py) prints the
    table and writes the JSON report."""
    reason = machine.unavailable_reason()
    if reason:
        print("waldio crash --real: cannot run here: %s" % reason, file=sys.stderr)
        return 2
    # A campaign stopped with SIGTERM unmounts and detaches what it set up
    # (the finally blocks of machine.py; the checkers do the same).
    signal.signal(signal.SIGTERM, exit_on_term)
    if args.replay:
        ok, text = replay(args.replay, out_root=args.out, keep=args.keep, log=log)
        print(text)
        return 0 if ok else 1
    workloads = [w.strip() for w in (args.workload or "").split(",") if w.strip()]
    try:
        runs = plan.select(args.mode or [], [] if "all" in workloads else workloads)
    except KeyError as e:
        print("waldio crash --real: %s" % e.args[0], file=sys.stderr)
        return 2
    if not runs:
        print("waldio crash --real: no run of the table matches (see plan.RUNS)", file=sys.stderr)
        return 2
    txns = args.txns or (200 if args.states >= 5000 else 100)
    jobs = args.jobs or os.cpu_count() or 1
    report: Dict[str, Any] = {"command": " ".join(sys.argv), "seed": args.seed, "txns": txns,
                              "states_per_run": args.states, "jobs": jobs,
                              "kernel": machine.kernel(), "mkfs": " ".join(machine.MKFS_OPTIONS),
                              "mount": machine.MOUNT_OPTIONS,
                              "loop_direct_io": args.loop_direct_io, "runs": []}
    t0 = time.monotonic()
    failed = False
    for run in runs:
        with progress_bar(run.name, not args.quiet) as progress:
            try:
                res = run_real_campaign(run, states=args.states, seed=args.seed, txns=txns,
                                        out_root=args.out, jobs=jobs,
                                        cross_check=not args.no_model_check,
                                        loop_direct_io=args.loop_direct_io,
                                        progress=progress, log=log)
            except RecordingError as e:
                print("RECORDING FAILURE %s: %s\n  full output: %s" % (run.name, e.short(), e.log_path))
                report["runs"].append({"mode": run.mode, "workload": run.workload,
                                       "recording_failed": e.short()})
                failed = True
                continue
            except machine.FAILURES as e:
                print("MACHINE FAILURE %s: %s" % (run.name, e))
                report["runs"].append({"mode": run.mode, "workload": run.workload,
                                       "recording_failed": str(e)[:300]})
                failed = True
                continue
        report["runs"].append(res.to_json())
        if res.failures and not run.control:
            failed = True
            print("%s: %d of %d states FAILED" % (run.name, len(res.failures), res.total_tried))
            for f in res.failures[:5]:
                print("  %s\n    %s\n    artifact: %s" % (f["id"], f["reason"], f.get("artifact")))
        if run.control and not res.losing_states:
            failed = True
            print("CONTROL %s lost no acknowledged transaction in %d states: the method would "
                  "not see a loss (check more states)" % (run.name, res.total_tried))
    report["seconds"] = round(time.monotonic() - t0, 1)
    return finish(report, failed, args.json, format_table)


@contextmanager
def progress_bar(label: str, enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on a terminal; elsewhere a line per tenth."""
    if not enabled:
        yield lambda done, total: None
        return
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
            TimeElapsedColumn
        prog = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
        task = prog.add_task(label, total=None)
        with prog:
            yield lambda done, total: prog.update(task, completed=done, total=total)
        return
    shown = [0]

    def line(done: int, total: int) -> None:
        if done * 10 // max(1, total) > shown[0] or done == total:
            shown[0] = done * 10 // max(1, total)
            print("  %s: %d/%d states" % (label, done, total), file=sys.stderr, flush=True)
    yield line


def format_table(report: Dict[str, Any]) -> str:
    hdr = "%-30s %-9s %7s %7s %6s %8s %7s %8s %9s %8s" % (
        "mode", "workload", "states", "passed", "failed", "lossy", "maxlost", "outside",
        "images", "st/min")
    lines: List[str] = [hdr, "-" * len(hdr)]
    for r in report["runs"]:
        if r.get("recording_failed"):
            lines.append("%-30s %-9s recording failed: %s" % (r["mode"], r["workload"],
                                                             r["recording_failed"]))
            continue
        name = r["mode"] + (" (control)" if r["control"] else "")
        lines.append("%-30s %-9s %7d %7d %6d %8d %7d %8d %9d %8.0f" % (
            name, r["workload"], r["total_tried"], r["total_passed"], len(r["failures"]),
            r["losing_states"], r["max_lost"], r["states_outside_model"], r["distinct_images"],
            r["states_per_minute"]))
        dur = r.get("ack_to_durable_ms")
        if dur:
            after = dur["after_ack"]
            lines.append("%-30s acknowledged -> durable (every flush point): %d of %d before "
                         "the acknowledgement%s%s" % (
                             "", dur["durable_before_ack"], dur["commits"],
                             "; after it: median %.1f ms, p90 %.1f ms, max %.1f ms"
                             % (after["median"], after["p90"], after["max"]) if after else "",
                             "; %d never" % dur["never_durable"] if dur["never_durable"] else ""))
        ages = r.get("loss_age_ms")
        if ages:
            lines.append("%-30s oldest lost acknowledgement at the crash: median %.1f ms, "
                         "p90 %.1f ms, max %.1f ms (%d states)"
                         % ("", ages["median"], ages["p90"], ages["max"], ages["states"]))
        if r["fs_torn"]:
            lines.append("%-30s %d torn writes damaged ext4 itself, %d so that it does not mount "
                         "(not failures of the database; e.g. %s)"
                         % ("", r["fs_torn"], r["unjudged"], r["fs_torn_examples"][0]["id"]))
        if r["outside_model"]:
            lines.append("%-30s outside the model: findings %s; in states %s" % (
                "", ", ".join("%s %d" % kv for kv in sorted(r["outside_model"].items())),
                ", ".join("%s %d" % kv for kv in sorted(r["outside_states_by_kind"].items()))))
    total = sum(r.get("total_tried", 0) for r in report["runs"])
    lines.append("%d states in %.1f s (%s, kernel %s)" % (total, report.get("seconds", 0),
                                                          "lossy: states missing acknowledged "
                                                          "transactions; outside: findings of the "
                                                          "model cross-check", report["kernel"]))
    return "\n".join(lines)

