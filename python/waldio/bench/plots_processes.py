"""Plots of ``waldio bench --processes`` results (``--plot DIR``, ``waldio report --out``).

One figure per workload, ``<stem>-<workload>``: on the left the rate (commits/s,
requests/s for web) against the process count, one line per mode, markers at the
median and whiskers from min to max over the measured rounds; on the right the p99
latency (pooled histograms) against the process count; both axes of values log-scaled
(stock NORMAL and FULL are an order of magnitude apart).  Everything is
read from the result document (:mod:`.processes`).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence

from .processes_report import RATE_NAME


def plot_processes(doc: Dict[str, Any], stem: str, out_dir: str,
                   formats: Sequence[str]) -> List[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    written: List[str] = []
    b = doc["params"]["bench"]
    for wl in b["workloads"]:
        fig, (ax, axl) = plt.subplots(1, 2, figsize=(11, 4.4))
        for m in doc["modes"]:
            cells = sorted((c for c in doc["cells"]
                            if c["workload"] == wl and c["mode"] == m["label"]),
                           key=lambda c: c["processes"])
            xs, med, lo, hi, p99x, p99 = [], [], [], [], [], []
            for c in cells:
                s = c["summary"] or {}
                ops = s.get("ops_per_s")
                if ops:
                    xs.append(c["processes"])
                    med.append(ops["median"])
                    lo.append(ops["median"] - ops["min"])
                    hi.append(ops["max"] - ops["median"])
                lat = s.get("latency_ns") or {}
                if lat.get("p99_ns"):
                    p99x.append(c["processes"])
                    p99.append(lat["p99_ns"] / 1e6)
            if xs:
                ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=m["label"])
            if p99x:
                axl.plot(p99x, p99, marker="o", label=m["label"])
        for a in (ax, axl):
            a.set_xscale("log", base=2)
            a.set_xticks(b["processes"])
            a.set_xticklabels([str(n) for n in b["processes"]])
            a.set_xlabel("processes")
            a.grid(True, alpha=0.3)
        ax.set_ylabel(f"{RATE_NAME[wl]} (median, min-max)")
        axl.set_ylabel("p99 latency, ms")
        ax.set_yscale("log")
        axl.set_yscale("log")
        ax.legend(fontsize=8)
        fig.suptitle(f"{wl}: {b['rounds']['measured']} rounds, "
                     f"{doc['params']['target'].get('fs_kind')} "
                     f"({doc['params']['target'].get('kind')})")
        for fmt in formats:
            p = os.path.join(out_dir, f"{stem}-{wl}.{fmt}")
            fig.savefig(p, dpi=130, bbox_inches="tight")
            written.append(p)
        plt.close(fig)
    return written
