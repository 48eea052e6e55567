"""`waldio crash`: prove each journal mode's durability contract.

    waldio crash                                   every mode and workload, 1000 states each
    waldio crash --mode waldio-full --states 10000 --seed 1
    waldio crash --mode lsmvbt --states 3000 --kills 20    the LS-MVBT modes (issue 12)
    waldio crash --workload two-procs,ckpt-proc,fork --states 5000
    waldio crash --mode all --states 10000 --kills 200 --corruptions 300 \\
                 --faults 20 --fuzz-seconds 300 --json results/crash.json
    waldio crash --replay 'waldio-full/mixed/seed=1/txns=300/power:1234:drop:3'
    waldio crash --real --states 10000 --json real.json      crash states from the real kernel

docs/crash.md explains the model (page cache + volatile device write cache,
flush and FUA barriers), the crash states, the oracle and the contracts.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from waldio import crash

DESCRIPTION = """\
Crash-consistency campaign. For each mode and workload, the workload runs
with the crash recorder below SQLite and waldio; every write, direct write,
FUA write, sync, truncate, create and delete is logged with its bytes. Crash
states are then generated from the log with a page cache (buffered writes,
durable after that file's fsync/fdatasync) and one volatile device write
cache (direct writes; a flush makes everything durable, an RWF_DSYNC write
makes itself durable):

  kill   process kill: every completed system call survives
  os     OS crash: the device cache survives, unsynced page-cache writes are
         lost (all, an in-order prefix, or a random subset); a direct write
         in flight may land in part
  power  power loss: durable data plus an in-order prefix, all-but-one, or a
         random subset of the volatile writes; the write in flight torn at
         512-byte sectors (new, old or garbage bytes)

Each state is recovered (opened through waldio, or through stock SQLite for
the wal-* modes, whose states are then also opened through waldio: its
conversion of a standard WAL must recover exactly what stock SQLite does)
and must pass PRAGMA integrity_check, equal the database after exactly the
first k acknowledged transactions (no holes), and k must cover what the
mode's contract makes durable at that crash point:
  wal-full, waldio-full, waldio-persistent, waldio-persistent-normal,
  waldio-persistent-exclusive: every acknowledged transaction
  wal-normal: kill: all; os/power: all acknowledged before the last WAL sync
  waldio-normal: kill: all; os/power: all acknowledged before the last flush
  waldio-ns, waldio-ns-exclusive: kill/os: all; power: all acknowledged
    before the last flush
  (*-normal: synchronous=NORMAL; *-exclusive: also locking_mode=EXCLUSIVE, a
  heap-memory wal-index; the mixed and bank workloads only, without readers)
  waldio-group-durable, waldio-group-strict, waldio-group-shared (durable,
    every commit waiting for a shared flush), waldio-group-auto (libwaldio's
    default group mode, synchronous=FULL): every acknowledged transaction
  waldio-normal-auto (the default group mode, synchronous=NORMAL): as
    waldio-normal
  (the other waldio modes switch group commit off: waldio_group=off)
  waldio-group-async: every transaction whose commit frame had reached the
    log (kill), the device (os: a direct write, or a page-cache write synced)
    or durable media (power) at the crash; commits return before that, and
    the time from acknowledgement to durable commit frame (the group_ms
    bound) is measured and printed
A "flush" is a completed fdatasync of the log, by any process (a sync of the
database file does not write the log's page cache back).

Workloads (--workload; default: mixed and the multi-process ones):
  mixed      one writer process: autocommit and multi-statement
             transactions, spilled and rolled-back transactions, checkpoints
             of every kind, readers that pin the log, reopening (also: bank,
             transfers only; two-writers, two connections of one process)
  two-procs  two writer processes committing interleaved transactions
  ckpt-proc  a writer process and a process that runs PASSIVE, FULL,
             RESTART and TRUNCATE checkpoints and read transactions
  fork       a process that forks while group-async commits are still
             buffered; the child exits (exit(): atexit handlers; _exit())
             or opens its own connection and commits while the parent
             leaves group mode, checkpoints (TRUNCATE) and commits
  stock-writer, stock-ckpt  two-procs and ckpt-proc with the second
             process stock SQLite (waldio modes of the standard layout)
Every process of a multi-process workload loads the recorder and waldio and
appends to one event log (one O_APPEND write per event: the file's order is
the order of the system calls). Each transaction learns its place g in the
commit order inside the transaction and marks "commit" before COMMIT and
"ack" after it with its writer, its number and g; a state must hold the
first k transactions of that order, k covering the largest g the contract
requires: every required transaction of every writer. Every mode runs every
workload, group modes included (they share flushes between processes).
With two-procs, --kills also kills one of four committing processes (often a
flush leader, or a committer waiting for a flush) at random moments: the
others must finish, and every writer keep its acknowledged prefix.

Failures print a reproducer id; --replay ID rebuilds exactly that state from
the saved recording and re-checks it, with a row diff (a multi-process
workload recorded again takes another interleaving: keep the recording).

--real: crash states from the real kernel instead of the model. Each run of
the table (real/plan.py; --mode and --workload select rows) records the
workload on ext4, mounted on a loop device over the image file of a FUSE
block recorder (build/crash/block_recorder) that logs every write and flush
reaching the image, with the acknowledgements marked in the same log. States:
every flush point, then random cuts with an in-order prefix, a random subset
or a torn last write (512-byte sectors) of the writes since the last flush.
Each is mounted (the kernel replays the journal), checked with e2fsck -fn,
and its database checked by the same oracle; each is also compared with the
model's states at the same moment (--no-model-check to skip). Controls
(wal-normal, wal-off) must lose acknowledged commits in some states. Needs
root, /dev/fuse and loop devices. --states is per run; failures are kept in
OUT/failures/ (image, acked list, replay command).
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "crash", help="crash-consistency campaign: simulated power loss, OS crash and "
                      "process kill for every journal mode",
        description=DESCRIPTION,
        epilog="example:\n  waldio crash --mode waldio-full --states 1000 --seed 1\n\n"
               "docs/crash.md explains the model, the states and every option.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", action="append", metavar="MODE",
                   help="mode to test, repeatable: %s, lsmvbt (the LS-MVBT modes), or all "
                        "(default: all); a waldio mode may name a log layout: "
                        "waldio-full+pad4k. Test-only: delete-off (rollback journal, "
                        "synchronous=OFF: must fail), wal-off (stock WAL, synchronous=OFF, "
                        "held to FULL's contract: must lose)" % ", ".join(crash.ALL_MODES))
    p.add_argument("--layout", choices=crash.LAYOUTS,
                   help="run the waldio modes with this log layout (mode names get "
                        "+LAYOUT, e.g. waldio-full+pad4k); stock modes are skipped")
    p.add_argument("--workload", default=None,
                   help="workloads, comma-separated: %s, or all (default %s; with --real: "
                        "the table's)" % (", ".join(crash.WORKLOADS), ",".join(DEFAULT_WORKLOADS)))
    p.add_argument("--states", type=int, default=1000,
                   help="crash states to check per mode (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="campaign seed (default 1)")
    p.add_argument("--txns", type=int, default=0,
                   help="acknowledged transactions in the workload (default: 200, or "
                        "300 with --states >= 5000)")
    p.add_argument("--models", default="kill,os,power",
                   help="crash models, comma-separated (default kill,os,power)")
    p.add_argument("--jobs", type=int, default=0,
                   help="checker processes (default: number of CPUs)")
    p.add_argument("--kills", type=int, default=10,
                   help="real SIGKILL rounds per mode, with the single-process workloads "
                        "and two-procs (default 10; 0 to skip)")
    p.add_argument("--corruptions", type=int, default=0,
                   help="log-corruption cases per layout (embed, pad4k) (default 0)")
    p.add_argument("--faults", type=int, default=0,
                   help="fault-injection runs per fault case (default 0)")
    p.add_argument("--fuzz-seconds", type=int, default=0,
                   help="run the libFuzzer target this long (default 0: skip)")
    p.add_argument("--out", type=Path, default=None,
                   help="where recordings are kept (default $WALDIO_CRASH_DIR or "
                        "/var/tmp, + /waldio-crash)")
    p.add_argument("--json", type=Path, default=None, help="write all results as JSON")
    p.add_argument("--replay", metavar="ID", help="rebuild and re-check one state")
    p.add_argument("--keep", type=Path, default=None,
                   help="with --replay: leave the state's files in this directory")
    p.add_argument("--quiet", action="store_true", help="only the final table")
    r = p.add_argument_group("real kernel (--real)")
    r.add_argument("--real", action="store_true",
                   help="crash states from the real kernel: ext4 on a loop device over the "
                        "FUSE block recorder (root, /dev/fuse, loop devices)")
    r.add_argument("--no-model-check", action="store_true",
                   help="with --real: do not compare the states with the model's")
    r.add_argument("--loop-direct-io", action="store_true",
                   help="with --real: attach the loop device with --direct-io=on")
    p.set_defaults(func=main)


DEFAULT_WORKLOADS = ("mixed",) + tuple(crash.MULTI_WORKLOADS)


def _log(quiet: bool):
    def log(s: str) -> None:
        if not quiet:
            print(s, file=sys.stderr, flush=True)
    return log


def main(args: argparse.Namespace) -> int:
    if args.real:
        from .real.cli import main as real_main
        return real_main(args, _log(args.quiet), finish)
    if args.replay:
        ok, text = crash.replay(args.replay, out_root=args.out, keep=args.keep)
        print(text)
        return 0 if ok else 1
    modes = args.mode or ["all"]
    if "all" in modes:
        modes = list(crash.ALL_MODES)
    if "lsmvbt" in modes:
        i = modes.index("lsmvbt")
        modes[i:i + 1] = [m for m in crash.LSMVBT_MODES if m not in modes]
    if args.layout:
        modes = [m + "+" + args.layout for m in modes if m in crash.MODES and crash.MODES[m].waldio]
    for m in modes:
        try:
            crash.get_mode(m)
        except KeyError as e:
            print("waldio crash: %s" % e.args[0], file=sys.stderr)
            return 2
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if any(m not in crash.MODELS for m in models):
        print("waldio crash: models are kill, os, power", file=sys.stderr)
        return 2
    workloads = [w.strip() for w in (args.workload or ",".join(DEFAULT_WORKLOADS)).split(",")
                 if w.strip()]
    if "all" in workloads:
        workloads = list(DEFAULT_WORKLOADS)
    bad = [w for w in workloads if w not in crash.WORKLOADS]
    if bad or not workloads:
        print("waldio crash: unknown workload %s (expected %s, or all)"
              % (", ".join(bad) or "''", ", ".join(crash.WORKLOADS)), file=sys.stderr)
        return 2
    txns = args.txns or (300 if args.states >= 5000 else 200)
    jobs = args.jobs or os.cpu_count() or 1
    log = _log(args.quiet)
    t0 = time.monotonic()
    report: Dict[str, Any] = {"command": " ".join(sys.argv), "seed": args.seed,
                              "workloads": workloads, "txns": txns, "campaigns": [],
                              "kills": [], "corruption": None, "faults": None, "fuzz": None}
    failed = False
    for wl in workloads:
        for m in modes:
            if not crash.mode_runs_workload(m, wl):
                continue
            try:
                res = crash.run_campaign(m, workload=wl, states=args.states,
                                         seed=args.seed, txns=txns, out_root=args.out,
                                         jobs=jobs, models=models, log=log)
            except crash.RecordingError as e:
                # The workload itself failed before any crash: a finding too.
                print("RECORDING FAILURE %s/%s: %s" % (m, wl, e.short()))
                print("  full output: %s" % e.log_path)
                report["campaigns"].append({"mode": m, "workload": wl,
                                            "recording_failed": e.short(),
                                            "tried": {}, "passed": {}})
                failed = True
                continue
            report["campaigns"].append(res.to_json())
            failed |= bool(res.failures) != crash.get_mode(m).testonly
            if res.failures:
                _print_failures(res, args.out, log)
            if args.kills and wl in crash.SINGLE_WORKLOADS:
                log("%s: %d process kills ..." % (m, args.kills))
                k = crash.run_kills(m, args.kills, args.seed, workload=wl)
                k["workload"] = wl
                report["kills"].append(k)
                failed |= bool(k["failures"]) and not crash.get_mode(m).testonly
                for f in k["failures"][:5]:
                    print("SIGKILL FAILURE %s round %d (acked %d): %s; files kept in %s"
                          % (m, f["round"], f["acked"], f["reason"], f["dir"]))
            if args.kills and wl == "two-procs":
                log("%s: %d kills of one of 4 committing processes ..." % (m, args.kills))
                k = crash.run_proc_kills(m, args.kills, args.seed)
                report["kills"].append(k)
                failed |= bool(k["failures"]) and not crash.get_mode(m).testonly
                for f in k["failures"][:5]:
                    print("SIGKILL FAILURE %s (4 processes) round %d, writer %d killed: %s;"
                          " files kept in %s" % (m, f["round"], f["victim"], f["reason"], f["dir"]))
    if args.corruptions:
        log("log corruption: %d cases per layout ..." % args.corruptions)
        c = crash.run_corruptions(args.corruptions, args.seed)
        report["corruption"] = c
        failed |= bool(c["failures"])
        for f in c["failures"][:10]:
            print("CORRUPTION FAILURE %s" % json.dumps(f))
    if args.faults:
        log("fault injection: %d runs per case ..." % args.faults)
        report["faults"] = run_faults(args.faults, args.seed)
        failed |= report["faults"]["passed"] != report["faults"]["runs"]
        for f in report["faults"]["failures"][:10]:
            print("FAULT FAILURE %s" % json.dumps(f))
    if args.fuzz_seconds:
        log("fuzzing the log recovery for %d s ..." % args.fuzz_seconds)
        fz = crash.run_fuzz(args.fuzz_seconds)
        report["fuzz"] = fz
        if fz.get("ran"):
            failed |= fz["exit"] != 0 or bool(fz["artifacts"])
            if fz["exit"] != 0 or fz["artifacts"]:
                print("FUZZ FAILURE: exit %s, artifacts %s in %s\n%s"
                      % (fz["exit"], fz["artifacts"], fz["workdir"], fz["tail"]))
    report["seconds"] = round(time.monotonic() - t0, 1)
    return finish(report, failed, args.json, format_table)


def finish(report: Dict[str, Any], failed: bool, json_path: Optional[Path],
           table: Callable[[Dict[str, Any]], str]) -> int:
    """Print the table, write the JSON report; the exit status."""
    print(table(report))
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=1, default=str))
    return 1 if failed else 0


def run_faults(runs: int, seed: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {"runs": 0, "passed": 0, "injected": 0, "absorbed": 0, "by_case": {},
                           "failures": []}
    for case in crash.FAULT_CASES:
        for i in range(runs):
            r = crash.run_fault(case, seed + i, skip=crash.fault_skip(case, seed + i))
            out["runs"] += 1
            out["injected"] += int(r.get("injected") or 0)
            out["absorbed"] += int(bool(r.get("absorbed")))
            c = out["by_case"].setdefault(case, [0, 0])
            c[0] += 1
            if r.get("passed"):
                out["passed"] += 1
                c[1] += 1
            else:
                out["failures"].append(r)
    return out


def _print_failures(res: crash.CampaignResult, out: Optional[Path], log: Any) -> None:
    fails = sorted(res.failures, key=lambda f: (_simplicity(f["id"]), f["id"]))
    print("%s/%s: %d of %d states FAILED" % (res.mode, res.workload, len(res.failures),
                                              res.total_tried))
    for f in fails[:5]:
        print("  %s\n    %s" % (f["id"], f["reason"]))
    first = fails[0]["id"]
    print("  minimal reproducer (earliest, simplest failing state):\n"
          "    waldio crash --replay '%s'%s" % (first, " --out %s" % out if out else ""))


def _simplicity(state_id: str) -> tuple:
    key = crash.StateKey.parse(state_id.split("/")[-1])
    rank = {"all": 0, "lose": 1, "prefix": 2, "drop": 3, "rand": 4, "torn": 5}
    return (key.t, rank.get(key.kind, 9))


def format_table(report: Dict[str, Any]) -> str:
    lines = []
    hdr = "%-26s %-10s %-8s %8s %8s %9s %8s" % ("mode", "workload", "model", "tried", "passed",
                                                 "distinct", "seconds")
    lines.append(hdr)
    lines.append("-" * len(hdr))
    kills = {(k["mode"], k.get("workload", "mixed")): k for k in report.get("kills", [])}
    for c in report["campaigns"]:
        wl = c.get("workload", "mixed")
        if c.get("recording_failed"):
            lines.append("%-26s %-10s recording failed: %s" % (c["mode"], wl, c["recording_failed"]))
            continue
        first = True
        for model in crash.MODELS:
            if model not in c["tried"]:
                continue
            lines.append("%-26s %-10s %-8s %8d %8d %9s %8s" % (
                c["mode"] if first else "", wl if first else "", model, c["tried"][model],
                c["passed"].get(model, 0), c["distinct"] if first else "",
                c["seconds"] if first else ""))
            first = False
        k = kills.get((c["mode"], wl))
        if k:
            lines.append("%-26s %-10s %-8s %8d %8d" % ("", "", "SIGKILL", k["rounds"], k["passed"]))
        k = kills.get((c["mode"], "procs")) if wl == "two-procs" else None
        if k:
            lines.append("%-26s %-10s %-8s %8d %8d" % ("", "", "kill 1/4", k["rounds"], k["passed"]))
        cd = c.get("commit_delay_ms")
        if cd:
            extra = ""
            if "bound" in cd:
                extra = "; %d of %d over group_ms=%g" % (cd["over_bound"], cd["commits"], cd["bound"])
            lines.append("%-26s ack -> commit frame durable: median %.2f ms, max %.2f ms%s"
                         % ("", cd["median"], cd["max"], extra))
        fd = c.get("flush_delay_ms")
        if fd:
            lines.append("%-26s direct write -> flush: median %.1f ms, max %.1f ms; %d of %d over "
                         "flush_ms=%g, %d never flushed"
                         % ("", fd["median"], fd["max"], fd["over_bound"], fd["writes"], fd["bound"],
                            fd["never_flushed"]))
        pr = c.get("summary", {}).get("processes")
        if pr:
            lines.append("%-26s %s" % ("", pr))
    cr = report.get("corruption")
    if cr:
        lines.append("log corruption: %d cases, %d passed (%d clean errors); by kind %s"
                     % (cr["cases"], cr["passed"], cr["clean_errors"],
                        ", ".join("%s %d/%d" % (k, v[1], v[0]) for k, v in cr["by_kind"].items())))
    fa = report.get("faults")
    if fa:
        lines.append("fault injection: %d runs, %d passed, %d faults injected (%d absorbed "
                     "without an error: nothing needed was lost); %s"
                     % (fa["runs"], fa["passed"], fa["injected"], fa.get("absorbed", 0),
                        ", ".join("%s %d/%d" % (k, v[1], v[0]) for k, v in fa["by_case"].items())))
    fz = report.get("fuzz")
    if fz:
        if fz.get("ran"):
            lines.append("fuzz (libFuzzer, ASan+UBSan): %d runs in %d s, exit %d, %d artifacts"
                         % (fz["runs"], fz["seconds"], fz["exit"], len(fz["artifacts"])))
        else:
            lines.append("fuzz: not run (%s)" % fz.get("reason"))
    lines.append("total %.1f s" % report.get("seconds", 0))
    return "\n".join(lines)
