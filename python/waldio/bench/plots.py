"""Plots of ``waldio bench`` results (``waldio report --plot``).

Plots (matplotlib, Agg backend, PNG and SVG):

* ``<stem>-ops``: ops/s per mode, bar = median, whiskers = min and max over
  the measured repetitions; several files side by side.
* ``<stem>-bytes``: device bytes per transaction, stacked: written inside the
  timed region, and written after it (untimed close, deferred write-back
  forced by the final ``os.sync()``); when repetitions carry trace classes
  (``io.classes``, from a block trace) those are stacked instead.
* ``<stem>-latency``: CDF of per-transaction latency per mode (all samples
  kept of the measured repetitions), log-scaled time axis.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from .report import primary_device, summary_median


def _stem(path: str) -> str:
    return Path(path).stem


def _pooled_latencies(m: Dict[str, Any]) -> List[int]:
    out: List[int] = []
    for r in m["repetitions"]:
        if not r["warmup"] and r["ok"]:
            out.extend(r["latency"].get("samples_ns") or [])
    return sorted(out)


def _title(doc: Dict[str, Any]) -> str:
    b = doc["params"]["bench"]
    fs = (doc["params"].get("common") or {}).get("filesystem") or {}
    tgt = doc["params"]["target"]
    kind = tgt.get("fs_kind") or fs.get("fstype")
    where = f"{'loop ' if tgt.get('kind') == 'loop' else ''}{kind}"
    return (f"{b.get('preset') or 'custom'}: {'+'.join(b['phases'])}, {b['transactions']} txn, "
            f"{b['repetitions']} reps, {b['regime']}, on {where}")


def plot_all(docs: Sequence[Tuple[str, Dict[str, Any]]], out_dir: str,
             formats: Sequence[str]) -> List[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    written: List[str] = []
    stem = _stem(docs[0][0]) if len(docs) == 1 else "combined"

    def save(fig: Any, name: str) -> None:
        for fmt in formats:
            p = os.path.join(out_dir, f"{name}.{fmt}")
            fig.savefig(p, dpi=130, bbox_inches="tight")
            written.append(p)
        plt.close(fig)

    # ---- ops/s with min-max whiskers
    labels: List[str] = []
    for _, doc in docs:
        for m in doc["modes"]:
            if m["label"] not in labels:
                labels.append(m["label"])
    fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * len(labels) * max(1, len(docs)) ** 0.5 + 2),
                                    4.6))
    width = 0.8 / len(docs)
    vals_all: List[float] = []
    for j, (path, doc) in enumerate(docs):
        by = {m["label"]: m for m in doc["modes"]}
        xs, meds, lo, hi, tops = [], [], [], [], []
        for i, lab in enumerate(labels):
            m = by.get(lab)
            ops = (m or {}).get("summary", {}) or {}
            ops = ops.get("ops_per_s") if ops else None
            if not ops:
                continue
            xs.append(i + (j - (len(docs) - 1) / 2) * width)
            meds.append(ops["median"])
            lo.append(ops["median"] - ops["min"])
            hi.append(ops["max"] - ops["median"])
            tops.append(ops["max"])
            vals_all += [ops["min"], ops["max"]]
        ax.bar(xs, meds, width * 0.9, yerr=[lo, hi], capsize=4,
                      label=_stem(path) if len(docs) > 1 else None,
                      error_kw={"elinewidth": 1.2})
        for x, v, top in zip(xs, meds, tops):
            ax.annotate(f"{v:,.0f}", (x, top), textcoords="offset points", xytext=(0, 3),
                        ha="center", va="bottom", fontsize=7)
    if vals_all and min(vals_all) > 0 and max(vals_all) / min(vals_all) > 30:
        ax.set_yscale("log")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.set_ylabel("transactions per second (median; whiskers: min-max)")
    ax.set_title(_title(docs[0][1]) if len(docs) == 1 else "ops/s per mode", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if len(docs) > 1:
        ax.legend(fontsize=8)
    save(fig, f"{stem}-ops")

    for path, doc in docs:
        name = _stem(path)
        # ---- device bytes per transaction, stacked
        modes = [m for m in doc["modes"] if m["summary"]]
        dev = primary_device(doc)
        classes = _trace_classes(modes)
        fig, ax = plt.subplots(figsize=(max(6.5, 1.0 * len(modes) + 2), 4.6))
        x = list(range(len(modes)))
        if classes:
            bottom = [0.0] * len(modes)
            for cls in classes:
                v = [_class_per_txn(m, cls) / 1024 for m in modes]
                ax.bar(x, v, 0.7, bottom=bottom, label=cls)
                bottom = [a + b for a, b in zip(bottom, v)]
            tops = bottom
        else:
            timed = [(summary_median(m["summary"]["per_txn"]["device_write_bytes_timed"]) or 0) / 1024
                     for m in modes]
            after = [_after_timed(m) / 1024 for m in modes]
            ax.bar(x, timed, 0.7, label="inside the timed region")
            ax.bar(x, after, 0.7, bottom=timed,
                   label="after it (untimed close, write-back at the final sync)")
            tops = [a + b for a, b in zip(timed, after)]
        for i, (t, m) in enumerate(zip(tops, modes)):
            fl = summary_median(m["summary"]["per_txn"]["device_flushes"])
            ax.annotate(f"{t:.1f}" + (f"\n{fl:.1f} fl" if fl is not None else ""), (i, t),
                        textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
        ax.set_xticks(x)
        ax.set_xticklabels([m["label"] for m in modes], rotation=30, ha="right")
        ax.set_ylabel(f"KiB written to {dev['name'] if dev else 'device'} per transaction "
                      "(median)")
        ax.set_title(_title(doc) + ("" if not dev else f"\n/dev/{dev['name']} ({dev['kind']}); "
                                    "'fl' = flush requests per transaction"), fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(top=max(tops + [1]) * 1.18)
        save(fig, f"{name}-bytes")

        # ---- latency CDF
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for m in doc["modes"]:
            lat = _pooled_latencies(m)
            if not lat:
                continue
            n = len(lat)
            xs_ms = [v / 1e6 for v in lat]
            ys = [(i + 1) / n for i in range(n)]
            ax.step(xs_ms, ys, where="post", label=m["label"], linewidth=1.3)
        ax.set_xscale("log")
        ax.set_xlabel("transaction latency (ms, log scale)")
        ax.set_ylabel("fraction of transactions")
        ax.set_ylim(0, 1.001)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="lower right")
        ax.set_title(_title(doc), fontsize=10)
        save(fig, f"{name}-latency")
    return written


def _after_timed(m: Dict[str, Any]) -> float:
    vals = []
    for r in m["repetitions"]:
        if r["warmup"] or not r["ok"] or not r.get("io") or not r["io"]["devices"]:
            continue
        d = r["io"]["devices"][0]
        vals.append(max(0, d["total"]["write_bytes"] - d["timed"]["write_bytes"])
                    / r["transactions"])
    if not vals:
        return 0.0
    vals.sort()
    from .stats import percentile
    return percentile(vals, 50)


def _trace_classes(modes: List[Dict[str, Any]]) -> List[str]:
    out: List[str] = []
    for m in modes:
        for r in m["repetitions"]:
            for k in ((r.get("io") or {}).get("classes") or {}):
                if k not in out:
                    out.append(k)
    return out


def _class_per_txn(m: Dict[str, Any], cls: str) -> float:
    vals = []
    for r in m["repetitions"]:
        if r["warmup"] or not r["ok"]:
            continue
        c = ((r.get("io") or {}).get("classes") or {}).get(cls)
        if c is not None and r["transactions"]:
            vals.append(c / r["transactions"])
    if not vals:
        return 0.0
    from .stats import percentile
    return percentile(sorted(vals), 50)
