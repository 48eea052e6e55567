#!/usr/bin/env python3
"""Long sessions against the idle bound: what re-growing the log costs.

    python3 bench/idle-bound/sessions.py [--commits N] [--rounds R] [--json FILE]

The open-close regime of `waldio bench` (run.sh) commits one transaction per
session, so a session never needs more log than the first runway. This
measures the other end: sessions of N single-row FULL commits (default 1000:
one autocheckpoint's worth of frames, ~4 MiB of log), each opening the
database, committing, and closing it again, with the idle log bounded by
journal_size_limit, and stock WAL FULL beside it. Rounds interleave the
variants. Per variant: ms per session (median, min-max over rounds), against
stock round by round, and how many zero-filled extensions of the log a
session made (PRAGMA waldio_stats prealloc_extends). Fresh journaled ext4 on
a loop device (needs root).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from statistics import median
from typing import Any, Dict, List

import apsw

import waldio
from waldio.fs.loop import loop_filesystem
from waldio.params.device import device_params

LIMITS = [262144, 1048576, 4194304]


def session(path: str, commits: int, limit: int, stock: bool) -> Dict[str, Any]:
    t0 = time.perf_counter_ns()
    if stock:
        c = apsw.Connection(path, vfs="unix")
    else:
        c = apsw.Connection(waldio.uri(path), vfs="waldio",
                            flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
                            | apsw.SQLITE_OPEN_URI)
    c.execute("PRAGMA journal_mode=WAL").fetchall()
    c.execute("PRAGMA synchronous=FULL")
    c.execute(f"PRAGMA journal_size_limit={limit}")
    c.execute("CREATE TABLE IF NOT EXISTS t(v)")
    for _ in range(commits):
        c.execute("INSERT INTO t VALUES (randomblob(100))")
    extends = None if stock else \
        json.loads(c.execute("PRAGMA waldio_stats").fetchall()[0][0])["prealloc_extends"]
    c.close()
    return {"ms": (time.perf_counter_ns() - t0) / 1e6, "extends": extends,
            "kept": os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0}


def spread(v: List[float]) -> str:
    return "%.0f (%.0f–%.0f)" % (median(v), min(v), max(v))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    waldio.load()
    variants = ["stock"] + [f"waldio-{n}" for n in LIMITS]
    res: Dict[str, List[Dict[str, Any]]] = {v: [] for v in variants}
    with loop_filesystem("ext4") as fs:
        for r in range(args.rounds + 1):                 # round 0: warm-up
            order = variants if r % 2 else list(reversed(variants))
            for v in order:
                stock = v == "stock"
                limit = LIMITS[-1] if stock else int(v.split("-")[1])
                out = session(fs.path(f"{v}.db"), args.commits, limit, stock)
                if r:
                    res[v].append(out)
        desc = fs.describe()
        dev = device_params(fs.path())
    print(f"{args.commits} single-row FULL commits per session, open and close included; "
          f"{args.rounds} rounds (+1 warm-up), interleaved; ms per session, median (min–max):")
    print("| variant | ms/session | against stock, per round | extensions per session | log kept |")
    print("|---|---|---|---|---|")
    for v in variants:
        ms = [o["ms"] for o in res[v]]
        ratio = [o["ms"] / s["ms"] for o, s in zip(res[v], res["stock"])]
        ext = sorted({o["extends"] for o in res[v]}) if v != "stock" else ["—"]
        kept = sorted({o["kept"] for o in res[v]})
        print(f"| {v.replace('waldio-', 'waldio, journal_size_limit=')} | {spread(ms)} | "
              f"{'%.2f (%.2f–%.2f)' % (median(ratio), min(ratio), max(ratio))} | "
              f"{', '.join(map(str, ext))} | {', '.join(str(k // 1024) + ' KiB' for k in kept)} |")
    disk = (dev.get("chain") or [{}])[-1]
    print(f"SQLite {apsw.sqlite_lib_version()} (apsw), WAL, synchronous=FULL, page 4096, "
          f"100-byte rows; {desc.get('kind')} ({desc.get('mount_options')}, journaled, "
          f"{desc.get('size_mib')} MiB) on {desc.get('device')} over {disk.get('name')} (write cache "
          f"{disk.get('write_cache')}, FUA {disk.get('fua')}); {os.uname().release}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"commits": args.commits, "rounds": args.rounds, "results": res,
                       "filesystem": desc, "device": dev}, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
