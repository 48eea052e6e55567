#!/usr/bin/env python3
"""The table of docs/durability.md, "The log left beside an idle database",
from the JSON files bench/idle-bound/run.sh wrote.

    bench/idle-bound/table.py OUT_DIR

Per session kind and journal_size_limit: ms per open-commit-close session of
stock WAL FULL and waldio full (median over the measured repetitions, min-max),
waldio's time against stock's round by round (median, min-max), and the bytes
waldio's log kept after the last close.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import median
from typing import Any, Dict, List

SESSIONS = {"row": "one 100-byte row", "64k": "16 rows of 4000 B (~64 KiB)",
            "224k": "56 rows of 4000 B (~224 KiB)"}
LIMITS = [0, 65536, 262144, 1048576, 4194304]


def ms_per_session(mode: Dict[str, Any]) -> List[float]:
    return [r["wall_ns"] / r["transactions"] / 1e6 for r in mode["repetitions"]
            if not r["warmup"] and r["ok"]]


def spread(values: List[float], fmt: str = "%.2f") -> str:
    return (fmt + " (" + fmt + "–" + fmt + ")") % (median(values), min(values), max(values))


def kib(n: int) -> str:
    return "%d KiB" % (n // 1024) if n < 1 << 20 else "%g MiB" % (n / (1 << 20))


def main() -> None:
    out = Path(sys.argv[1])
    print("| session | journal_size_limit | stock WAL FULL, ms/session | waldio full, ms/session "
          "| waldio / stock, per round | log kept after close |")
    print("|---|---|---|---|---|---|")
    params = None
    for s, label in SESSIONS.items():
        for limit in LIMITS:
            f = out / f"{s}-{limit}.json"
            if not f.exists():
                continue
            doc = json.loads(f.read_text())
            params = params or doc
            modes = {m["label"]: m for m in doc["modes"]}
            stock, wal = ms_per_session(modes["wal-full"]), ms_per_session(modes["waldio-full"])
            # ratios are of ops/s, per round: time ratio is their inverse
            per = [1 / r["ratio"] for r in doc["ratios"]["modes"]["waldio-full"]["per_rep"]
                   if r.get("ratio")]
            kept = {r["log_file"]["after_bytes"] for r in modes["waldio-full"]["repetitions"]
                    if not r["warmup"]}
            print(f"| {label} | {kib(limit)} | {spread(stock)} | {spread(wal)} "
                  f"| {spread(per)} | {', '.join(kib(k) for k in sorted(kept))} |")
    if params:
        c = params["params"]["common"]
        fs, disk = c["filesystem"], (c["device"].get("chain") or [{}])[-1]
        m = params["modes"][0]
        b = params["params"]["bench"]
        print()
        print(f"Parameters: SQLite {m['params']['sqlite'].get('sqlite_version')} (apsw), "
              f"journal_mode=WAL, synchronous=FULL, page_size 4096, "
              f"{b.get('transactions')} sessions per repetition, "
              f"{b.get('repetitions')} repetitions + {b.get('warmup')} warm-up, interleaved; "
              f"{fs.get('fstype')} ({','.join(fs.get('mount_options') or [])}, journal: "
              f"{fs.get('journals')}) on {fs.get('source')} over {disk.get('name')} "
              f"(write cache: {disk.get('write_cache')}, FUA: {disk.get('fua')}); "
              f"{c['system'].get('kernel')}, {c['system'].get('cpu_count')} CPUs.")


if __name__ == "__main__":
    main()
