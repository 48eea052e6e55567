"""Statistics over repetitions: percentiles, summaries, paired ratios.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("no values")
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def summarize(values: Sequence[float]) -> Optional[Dict[str, Any]]:
    """median, min, max, mean, stdev (sample), cov (stdev/mean), n; None if empty."""
    vals = sorted(float(v) for v in values)
    n = len(vals)
    if n == 0:
        return None
    mean = sum(vals) / n
    stdev = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    return {"n": n, "median": percentile(vals, 50), "min": vals[0], "max": vals[-1],
            "mean": mean, "stdev": stdev, "cov": (stdev / mean) if mean else None}


def latency_summary(lat_ns: Sequence[int]) -> Dict[str, Any]:
    vals = sorted(lat_ns)
    if not vals:
        return {"count": 0}
    return {"count": len(vals), "min_ns": vals[0], "p50_ns": percentile(vals, 50),
            "p90_ns": percentile(vals, 90), "p99_ns": percentile(vals, 99),
            "p999_ns": percentile(vals, 99.9), "max_ns": vals[-1],
            "mean_ns": sum(vals) / len(vals)}


def pair_ratios(reps: Sequence[Dict[str, Any]], base_reps: Sequence[Dict[str, Any]],
                key: str = "ops_per_s") -> Dict[str, Any]:
    """``key`` (ops/s) of repetition i over the baseline's repetition i (same round),
    measured only."""
    base = {r["index"]: r for r in base_reps if not r["warmup"] and r["ok"]}
    per_rep = []
    for r in reps:
        b = base.get(r["index"])
        if r["warmup"] or not r["ok"] or b is None or not b[key] or r[key] is None:
            continue
        per_rep.append({"index": r["index"], "ratio": r[key] / b[key]})
    s = summarize([p["ratio"] for p in per_rep])
    return {"per_rep": per_rep,
            "median": s["median"] if s else None,
            "min": s["min"] if s else None,
            "max": s["max"] if s else None}


def sum_counters(counters: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Key by key sums of the numeric values (e.g. PRAGMA waldio_stats of several logs)."""
    out: Dict[str, Any] = {}
    for st in counters:
        for k, v in st.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    return out
