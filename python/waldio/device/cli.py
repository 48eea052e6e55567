"""``waldio device``: the emulated devices' profiles, and their calibration.

Owns: argparse registration and printing for ``waldio device list``, ``show PROFILE``
and ``calibrate PROFILE``; the work is :mod:`.profile` and :mod:`.calibrate`.

Exit status: 0 when done (calibrate: every target with a source figure within the
tolerance), 1 when a calibration target missed it, 2 for a usage error (argparse, or
a profile that does not load: the message names the field), 3 when the emulated
device cannot be made here (the reason is printed).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List

from . import calibrate as C
from .profile import PARAMETERS, ProfileError, load, names
from .stack import unavailable_reason

EXAMPLES = """\
examples:
  waldio device list
  waldio device show emmc-2014
  waldio device calibrate emmc-2014 --json emmc-calibration.json
      every figure the profile cites, measured on ext4 over the emulated device, with the
      model's costs on and off (its own overhead), 5 rounds each
  waldio bench --device emmc-2014 --modes wal-full,waldio-full
      any benchmark on the emulated device (docs/device.md)
"""


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = subparsers.add_parser(
        "device", help="emulated phone storage: profiles and their calibration",
        description="Profiles of the emulated devices that waldio bench --device and waldio "
                    "trace --device run on (devmodel/device_model.c under a loop ext4), and "
                    "the microbenchmarks that check each profile against the figures of its "
                    "sources.  docs/device.md explains the model.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="device_command", metavar="COMMAND")
    sub.required = True
    def example(line: str) -> Dict[str, Any]:
        return {"epilog": "example:\n  " + line,
                "formatter_class": argparse.RawDescriptionHelpFormatter}
    ls = sub.add_parser("list", help="the shipped profiles, one line each",
                        **example("waldio device list"))
    ls.set_defaults(func=run_list)
    show = sub.add_parser("show", help="a profile: parameters, where each comes from, what it "
                                       "models and what not",
                          **example("waldio device show emmc-2014"))
    show.add_argument("profile", help="a shipped profile's name or a profile file's path")
    show.add_argument("--json", action="store_true", help="print the profile as JSON")
    show.set_defaults(func=run_show)
    cal = sub.add_parser("calibrate", help="measure the profile's source figures on the "
                                           "emulated stack (root, FUSE, loop devices)",
                         **example("waldio device calibrate emmc-2014 --rounds 3"))
    cal.add_argument("profile", help="a shipped profile's name or a profile file's path")
    cal.add_argument("--rounds", type=int, default=5, metavar="N",
                     help="runs per target, each with the costs on and off (default 5)")
    cal.add_argument("--seconds", type=float, default=1.5, metavar="S",
                     help="length of each run (default 1.5)")
    cal.add_argument("--json", metavar="FILE", help="write the whole record here")
    cal.add_argument("--quiet", action="store_true", help="no progress lines")
    cal.set_defaults(func=run_calibrate)
    for sp in (ls, show, cal):
        sp.set_defaults(_parser=sp)


def run_list(args: argparse.Namespace) -> int:
    for n in names():
        pr = load(n)
        print(f"{n:12s} {pr.summary}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    try:
        pr = load(args.profile)
    except ProfileError as e:
        args._parser.error(str(e))
    if args.json:
        print(json.dumps(pr.to_json(), indent=1))
        return 0
    print(f"{pr.name}: {pr.summary}\n")
    print("models:")
    for m in pr.models:
        print(f"  - {m}")
    print("does not model:")
    for m in pr.does_not_model:
        print(f"  - {m}")
    print("\nparameters (value: where it comes from):")
    for k, (meaning, _, _) in PARAMETERS.items():
        print(f"  {k} = {pr.device[k]:g}  ({meaning})\n      {pr.basis[k]}")
    print("\nsources:")
    for k, v in pr.sources.items():
        print(f"  [{k}] {v}")
    print("\nfigures checked by waldio device calibrate:")
    for t in pr.targets:
        v = "no figure in the source (measured, not checked)" if t.value is None else \
            f"{t.value:g} {t.unit}"
        print(f"  {t.figure}: {v}")
    for u in pr.unchecked:
        print(f"  not checked: {u}")
    return 0


def calibration_rows(doc: Dict[str, Any]) -> List[List[str]]:
    """One row per target: figure, source value, emulated median (min-max), at the median
    request, costs off, ratio, verdict."""
    rows = []
    for t in doc["targets"]:
        e, m, o = t["emulated"], t["emulated_at_median_request"], t["costs_off"]
        verdict = {True: "yes", False: "NO", None: "-"}[t["within_tolerance"]]
        rows.append([t["figure"], "-" if t["value"] is None else f"{t['value']:g} {t['unit']}",
                     f"{e['median']:.4g} ({e['min']:.4g}-{e['max']:.4g})", f"{m['median']:.4g}",
                     f"{o['median']:.4g}", "-" if t["ratio"] is None else f"{t['ratio']:.2f}",
                     verdict])
    return rows


def run_calibrate(args: argparse.Namespace) -> int:
    try:
        pr = load(args.profile)
    except ProfileError as e:
        args._parser.error(str(e))
    if args.rounds < 1 or not args.seconds > 0:
        args._parser.error("--rounds must be >= 1 and --seconds > 0")
    reason = unavailable_reason()
    if reason:
        print(f"waldio device calibrate: cannot emulate a device here: {reason}", file=sys.stderr)
        return 3
    if not pr.targets:
        print(f"waldio device calibrate: {pr.name} names no figure to check "
              f"({'; '.join(pr.unchecked) or 'no source gives one'})")
        return 0
    progress = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    doc = C.run(pr, C.Options(rounds=args.rounds, seconds=args.seconds), progress)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    probe = doc["device"]["overhead_probe"]
    print(f"{pr.name} on ext4 over the emulated device; {args.rounds} runs of {args.seconds:g} s "
          f"per figure, costs on and off interleaved; tolerance {doc['tolerance']:.0%}")
    big = probe[f"around_fixed_cost_{probe['big_kib']}k_us"]
    print(f"this machine's own overhead around a request (the model charging a fixed "
          f"{probe['fixed_cost_us']} us): 4 KiB median {probe['around_fixed_cost_us']['median']:.1f} "
          f"us (rounds {probe['around_fixed_cost_us']['min']:.1f}-"
          f"{probe['around_fixed_cost_us']['max']:.1f}), {probe['big_kib']} KiB {big['median']:.1f} "
          f"us; back-dated {probe['overhead_us']:.1f} us + {probe['overhead_us_per_kib']:.3f} us/KiB;"
          f" 4 KiB round trip with the costs off: {probe['costs_off_round_trip_us']['median']:.1f} us")
    busy = [a["machine_busy"] for t in doc["targets"] for a in t["model_accounting"]
            if a.get("machine_busy") is not None]
    if busy:
        print(f"the machine's CPUs (every process) were {min(busy):.0%}-{max(busy):.0%} busy "
              f"during the runs with the costs on")
    cols = ["figure", "source", "emulated median (min-max)", "at median request", "costs off",
            "ratio", "within"]
    rows = calibration_rows(doc)
    widths = [max(len(r[i]) for r in rows + [cols]) for i in range(len(cols))]
    for r in [cols] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print("emulated: the run's rate (work / wall time); at median request: one request's work / "
          "the median request time (leaves out waits for other programs); costs off: the same "
          "stack with the model charging nothing (this machine's ceiling).")
    if args.json:
        print(f"JSON: {args.json}")
    return 0 if doc["ok"] else 1
