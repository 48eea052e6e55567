"""``waldio bench --compare-mobibench``: Mobibench and waldio bench side by side.

This module owns the side-by-side run of issue 13.  It builds both Mobibench
versions (:mod:`.mobibench`) against the system SQLite, then, for every cell
(target x Mobibench version x journal mode x synchronous level), runs
Mobibench and ``waldio bench --sqlite system`` with the matching preset, each
as a fresh process doing one measured run, interleaved: repetition after
repetition, every cell once, the two tools' order alternating (so neither
always runs first).  Targets: a directory of the root file system, and a
fresh loop-mounted journaled ext4 (:func:`waldio.bench.open_target`) that
stays mounted for the whole comparison.  Before every run: the run directory
emptied and ``os.sync()``.  Mobibench drops the page cache before timing
(``echo 3 > /proc/sys/vm/drop_caches``, where it may); waldio bench then does
too (``--drop-caches``).

Printed: one row per cell with each tool's median transactions/s (min-max)
over the repetitions, the median of the per-repetition ratios
waldio/Mobibench, and the exact commands; the JSON (``--json``) holds every
run.  docs/bench.md ("waldio bench and Mobibench") explains the differences
that remain.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import mobibench as M
from .iostat import DROP_CACHES
from .stats import summarize

TARGETS = ("root", "loop")
DEFAULT_ROOT_DIR = "/var/tmp"


def can_drop_caches() -> bool:
    """Whether Mobibench's ``echo 3 > /proc/sys/vm/drop_caches`` works here (root)."""
    return os.access(DROP_CACHES, os.W_OK)


def waldio_command(preset: str, transactions: int, journal: str, sync: str, directory: str,
                   statements: str, json_path: str, drop_caches: bool) -> List[str]:
    """The waldio bench run matching one Mobibench run (one measured repetition); it
    drops the page cache before timing where Mobibench can."""
    return [sys.executable, "-m", "waldio", "bench", "--sqlite", "system", "--preset", preset,
            "--transactions", str(transactions), "--modes", f"{journal}-{sync}",
            "--statements", statements, "--dir", directory, "--repetitions", "1",
            "--warmup", "0", "--no-calibration", "--quiet", "--plain"] \
        + (["--drop-caches"] if drop_caches else []) + ["--json", json_path]


def _fresh(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    os.sync()


def run_mobibench(cmd: List[str], directory: str) -> Dict[str, Any]:
    _fresh(directory)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        raise M.MobibenchError(f"{' '.join(cmd)}: exit {res.returncode}: {res.stderr[-500:]}")
    out = M.parse_output(res.stdout)
    return {"tps": out.tps, "seconds": out.seconds, "echoed": out.echoed}


def run_waldio(cmd: List[str], directory: str, json_path: str) -> Dict[str, Any]:
    _fresh(directory)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        raise M.MobibenchError(f"{' '.join(cmd)}: exit {res.returncode}: "
                               f"{(res.stderr or res.stdout)[-800:]}")
    with open(json_path, encoding="utf-8") as f:
        doc = json.load(f)
    rep = doc["modes"][0]["repetitions"][0]
    return {"tps": rep["ops_per_s"], "seconds": rep["wall_ns"] / 1e9,
            "harness": rep.get("harness"), "settings": rep.get("settings")}


def _load() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


class Comparison:
    """The cells, their interleaved runs and the result document."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.cells: List[Tuple[str, str, str, str]] = [
            (t, v, j, s) for t in args.targets for v in args.versions
            for s in args.synchronous for j in args.journal_modes]
        self.runs: Dict[Tuple[str, str, str, str], List[Dict[str, Any]]] = {
            c: [] for c in self.cells}
        self.builds: Dict[str, M.Build] = {}

    def build(self, work: str) -> None:
        repo = M.repository(self.a.mobibench_source)
        for v in self.a.versions:
            self.builds[v] = M.build(repo, v, os.path.join(work, "bin"))

    def _dirs(self, target_paths: Dict[str, str]) -> Dict[str, Tuple[str, str]]:
        return {t: (os.path.join(p, "mobibench"), os.path.join(p, "waldio"))
                for t, p in target_paths.items()}

    def run(self, target_paths: Dict[str, str], work: str,
            log: Any = print) -> None:
        dirs = self._dirs(target_paths)
        n = self.a.transactions
        total = self.a.repetitions * len(self.cells)
        step = 0
        for rep in range(self.a.repetitions):
            for i, cell in enumerate(self.cells):
                t, v, j, s = cell
                mdir, wdir = dirs[t]
                jpath = os.path.join(work, "waldio.json")
                mcmd = M.command(self.builds[v].binary, mdir, n, j, s)
                wcmd = M.command(self.builds[v].binary, wdir, n, j, s) if self.a.self_check \
                    else waldio_command(M.VERSIONS[v], n, j, s, wdir, self.a.statements, jpath,
                                        can_drop_caches())
                first_m = (rep + i) % 2 == 0
                out: Dict[str, Any] = {"repetition": rep, "mobibench_first": first_m}
                for tool in (("m", "w") if first_m else ("w", "m")):
                    if tool == "m":
                        out["mobibench"] = run_mobibench(mcmd, mdir)
                    elif self.a.self_check:
                        out["waldio"] = run_mobibench(wcmd, wdir)
                    else:
                        out["waldio"] = run_waldio(wcmd, wdir, jpath)
                out["ratio"] = out["waldio"]["tps"] / out["mobibench"]["tps"]
                out["mobibench_command"] = mcmd
                out["waldio_command"] = wcmd
                self.runs[cell].append(out)
                step += 1
                log(f"[{step}/{total}] {t} {v} {j}-{s}: mobibench {out['mobibench']['tps']:,.0f}"
                    f" waldio {out['waldio']['tps']:,.0f} tx/s (x{out['ratio']:.3f}); "
                    f"load {_load()}")

    def rows(self) -> List[Dict[str, Any]]:
        out = []
        for cell in self.cells:
            runs = self.runs[cell]
            if not runs:
                continue
            t, v, j, s = cell
            out.append({"target": t, "version": v, "preset": M.VERSIONS[v],
                        "mode": f"{j}-{s}",
                        "mobibench_tps": summarize([r["mobibench"]["tps"] for r in runs]),
                        "waldio_tps": summarize([r["waldio"]["tps"] for r in runs]),
                        "ratio": summarize([r["ratio"] for r in runs]),
                        "mobibench_command": " ".join(runs[0]["mobibench_command"]),
                        "waldio_command": " ".join(runs[0]["waldio_command"] if self.a.self_check
                                                   else runs[0]["waldio_command"][1:-2])})
        return out


def _cell(sm: Optional[Dict[str, Any]]) -> str:
    if not sm:
        return "-"
    return f"{sm['median']:,.0f} ({sm['min']:,.0f}-{sm['max']:,.0f})"


def print_table(rows: Sequence[Dict[str, Any]], stream: Any = None,
                self_check: bool = False) -> None:
    stream = stream or sys.stdout
    other = "Mobibench again" if self_check else "waldio bench"
    cols = ["target", "version", "mode", "Mobibench tx/s", f"{other} tx/s",
            f"{other.split()[0]}/Mobibench"]
    body = [[r["target"], r["version"], r["mode"], _cell(r["mobibench_tps"]),
             _cell(r["waldio_tps"]),
             f"{r['ratio']['median']:.3f} ({r['ratio']['min']:.3f}-{r['ratio']['max']:.3f})"]
            for r in rows]
    widths = [max([len(c)] + [len(b[i]) for b in body]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)), file=stream)
    print("  ".join("-" * w for w in widths), file=stream)
    for b in body:
        print("  ".join(c.ljust(w) for c, w in zip(b, widths)), file=stream)
    print(file=stream)
    print("commands (per cell; -p/--dir name the run directory on the target):", file=stream)
    for r in rows:
        print(f"  {r['target']} {r['version']} {r['mode']}:", file=stream)
        print(f"    {r['mobibench_command']}", file=stream)
        print(f"    {r['waldio_command']}", file=stream)


def _environment(builds: Dict[str, M.Build], targets: Dict[str, Any]) -> Dict[str, Any]:
    from waldio import drivers
    from waldio import params as P
    sysp = P.system_params()
    return {"sqlite": drivers.driver_by_name("system").sqlite_version,
            "system_library": getattr(drivers.driver_by_name("system"), "library_path", None),
            "kernel": sysp.get("kernel"), "cpu": sysp.get("cpu_model"),
            "cpus": sysp.get("cpu_count"),
            "builds": {v: {"binary": b.binary, "command": " ".join(b.command),
                           "compiler": b.compiler} for v, b in builds.items()},
            "targets": targets}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="waldio bench --compare-mobibench",
        description="Build Mobibench from its public source against the system SQLite and run "
                    "it and waldio bench --sqlite system interleaved, on the root file system "
                    "and on a fresh journaled loop ext4, in four journal modes, at the settings "
                    "of both Mobibench versions (docs/bench.md).",
        epilog="example:\n  waldio bench --compare-mobibench --repetitions 5 --json cmp.json\n"
               "  python3 -m waldio.bench.compare_mobibench --mobibench-source "
               "~/src/Mobibench --targets loop --journal-modes wal",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mobibench-source", default=None, metavar="PATH|URL",
                   help=f"a git clone (or bare repository) of ESOS-Lab/Mobibench, or a URL to "
                        f"clone into {M.CACHE_DIR} (default: ${M.SOURCE_ENV}, else a local "
                        f"mirror if present, else {M.DEFAULT_URL})")
    p.add_argument("--versions", type=_list(M.VERSIONS), default=list(M.VERSIONS),
                   metavar="LIST", help="Mobibench commits (default 1ad7644,f56ea5e)")
    p.add_argument("--targets", type=_list(TARGETS), default=list(TARGETS), metavar="LIST",
                   help="root (a directory of --root-dir's file system) and/or loop (a fresh "
                        "journaled ext4 on a loop device; needs root)")
    p.add_argument("--root-dir", default=DEFAULT_ROOT_DIR, metavar="DIR",
                   help="where the root-fs runs happen (default /var/tmp)")
    p.add_argument("--journal-modes", type=_list(M.JOURNAL_CODES),
                   default=list(M.JOURNAL_CODES), metavar="LIST",
                   help="delete, truncate, persist, wal (default all four)")
    # --synchronous, as waldio bench's other PRAGMA-named options: --sync is
    # waldio_sync everywhere else (waldio run, WALDIO_SYNC, PRAGMA waldio_sync)
    p.add_argument("--synchronous", type=_list(M.SYNC_CODES), default=["full"], metavar="LIST",
                   help="PRAGMA synchronous levels (default full: -s 2, both versions' "
                        "default)")
    p.add_argument("--transactions", type=int, default=1000, metavar="N",
                   help="transactions per run, Mobibench -n (default 1000)")
    p.add_argument("--repetitions", type=int, default=5, metavar="N",
                   help="interleaved repetitions of every cell (default 5)")
    p.add_argument("--statements", choices=("exec", "prepared"), default="exec",
                   help="waldio bench --statements (default exec: SQL text parsed per "
                        "transaction, as Mobibench does)")
    p.add_argument("--self-check", action="store_true",
                   help="run Mobibench against itself (A/A) in place of waldio bench: the "
                        "spread of those ratios is how finely this machine can resolve "
                        "the side by side")
    p.add_argument("--json", metavar="FILE", help="write every run and the summary")
    p.add_argument("--dry-run", action="store_true",
                   help="print the build recipe and the commands of every cell, run nothing")
    return p


def _list(allowed: Sequence[str]) -> Any:
    def parse(text: str) -> List[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{', '.join(bad) or repr(text)}: accepted {', '.join(allowed)}")
        return items
    return parse


def dry_run(args: argparse.Namespace) -> int:
    c = Comparison(args)
    for v in args.versions:
        print(f"build {v}: git show {v}:shell/mobibench.c > mobibench.c (from "
              f"{args.mobibench_source}); "
              f"{' '.join(M.build_command('mobibench.c', f'mobibench-{v}'))}")
    for t, v, j, s in c.cells:
        d = "<loop ext4>" if t == "loop" else args.root_dir
        print(f"{t} {v} {j}-{s}:")
        print("  " + " ".join(M.command(f"mobibench-{v}", f"{d}/mobibench", args.transactions,
                                        j, s)))
        print("  " + " ".join(waldio_command(M.VERSIONS[v], args.transactions, j, s,
                                             f"{d}/waldio", args.statements, "out.json",
                                             can_drop_caches())))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.mobibench_source is None:
        args.mobibench_source = M.default_source()
    if args.dry_run:
        return dry_run(args)
    from waldio.bench.target import open_target
    cmp_ = Comparison(args)
    work = tempfile.mkdtemp(prefix="waldio-mobibench-")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = _load()
    try:
        try:
            cmp_.build(work)
        except M.MobibenchError as e:
            print(f"waldio bench --compare-mobibench: error: {e}", file=sys.stderr)
            return 3
        root = tempfile.mkdtemp(prefix="waldio-cmp-", dir=args.root_dir)
        targets: Dict[str, Any] = {}
        try:
            if "loop" in args.targets:
                with open_target("ext4", None, 512, False) as tgt:
                    targets["loop"] = dict(tgt.info, note=tgt.note)
                    targets["root"] = {"directory": root}
                    cmp_.run({"loop": tgt.path, "root": root}, work, log=_log)
            else:
                targets["root"] = {"directory": root}
                cmp_.run({"root": root}, work, log=_log)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        rows = cmp_.rows()
        print_table(rows, self_check=args.self_check)
        doc = {"kind": "mobibench-comparison", "started_utc": started,
               "load_before": load_before, "load_after": _load(),
               "transactions": args.transactions, "repetitions": args.repetitions,
               "statements": args.statements, "self_check": args.self_check,
               "environment": _environment(cmp_.builds, targets), "rows": rows,
               "runs": [{"cell": list(c), "runs": r} for c, r in cmp_.runs.items()]}
        print(f"load average before {load_before}, after {doc['load_after']}; SQLite "
              f"{doc['environment']['sqlite']}; kernel {doc['environment']['kernel']}")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
        return 0
    except M.MobibenchError as e:
        print(f"waldio bench --compare-mobibench: error: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
