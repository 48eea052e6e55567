#!/usr/bin/env python3
"""The standard layout's two ways of writing a commit directly, measured.

    python3 bench/standard-edge/edges.py [--commits N] [--rounds R] [--json FILE]

A commit's frames start and end inside blocks (SQLite's offsets: 32 +
(i-1)*(P+24)). Two ways to write them with aligned direct I/O
(src/layout_standard.c, docs/format.md section 9):

  rewrite   waldio's default: one direct write of the blocks the frames
            cover, the first block completed with the bytes before the
            frames (as they are) and the last with zeros after them;
  padded    SQLite pads every synced commit to the sector itself (psow=0:
            POWERSAFE_OVERWRITE off, 4096-byte sectors), as it does without
            waldio on such a device; waldio writes what arrives.

against stock WAL FULL (the unix VFS, psow as SQLite's default). Every mode
commits N single-row inserts of 100 bytes with synchronous=FULL, 4096-byte
pages, on a fresh journaled ext4 on a loop device, each mode in its own
database, modes interleaved round by round. Per mode: commits/s (median,
min-max over rounds) and bytes written to the loop device per commit
(/sys/block/loopN/stat, the file system's journal included; a syncfs after
each run). Needs root.
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

MODES = ("stock", "rewrite", "padded")


def sectors_written(device: str) -> int:
    with open("/sys/block/%s/stat" % os.path.basename(device)) as f:
        return int(f.read().split()[6])


def connect(path: str, mode: str) -> Any:
    if mode == "stock":
        return apsw.Connection(path, vfs="unix")
    uri = "file:%s%s" % (path, "?psow=0" if mode == "padded" else "")
    return apsw.Connection(uri, vfs=waldio.VFS_NAME, flags=apsw.SQLITE_OPEN_READWRITE
                           | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI)


def run(fs: Any, mode: str, rnd: int, commits: int) -> Dict[str, Any]:
    path = fs.path("%s-%d.db" % (mode, rnd))
    c = connect(path, mode)
    for sql in ("PRAGMA page_size=4096", "PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)"):
        c.execute(sql).fetchall()
    fs.sync()
    before = sectors_written(fs.device)
    t0 = time.perf_counter()
    for _ in range(commits):
        c.execute("INSERT INTO t(v) VALUES(randomblob(100))")
    secs = time.perf_counter() - t0
    layout = ""
    if mode != "stock":
        layout = json.loads(c.execute("PRAGMA waldio").fetchall()[0][0])["layout"]
    c.close()
    fs.sync()
    return {"mode": mode, "round": rnd, "commits_per_s": commits / secs, "layout": layout,
            "device_bytes_per_commit": (sectors_written(fs.device) - before) * 512 / commits}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commits", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    waldio.load()
    rows: List[Dict[str, Any]] = []
    with loop_filesystem("ext4", size_mib=1024) as fs:
        for rnd in range(args.rounds + 1):          # round 0: warm-up, not counted
            for mode in MODES:
                r = run(fs, mode, rnd, args.commits)
                if rnd:
                    rows.append(r)
        setup = {"fs": fs.describe(), "kernel": os.uname().release,
                 "sqlite": apsw.sqlite_lib_version(), "commits": args.commits,
                 "rounds": args.rounds}
    print("%d single-row FULL commits per run, %d rounds after a warm-up, journaled ext4 "
          "on a loop device, SQLite %s" % (args.commits, args.rounds, setup["sqlite"]))
    print("%-8s %10s %16s %10s %14s" % ("mode", "commits/s", "(min-max)", "x stock",
                                        "device B/commit"))
    stock = [r["commits_per_s"] for r in rows if r["mode"] == "stock"]
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        cps = [r["commits_per_s"] for r in mine]
        ratio = median(a["commits_per_s"] / b for a, b in zip(mine, stock))
        print("%-8s %10.0f %16s %9.2fx %14.0f" % (
            mode, median(cps), "(%.0f-%.0f)" % (min(cps), max(cps)), ratio,
            median(r["device_bytes_per_commit"] for r in mine)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setup": setup, "runs": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
