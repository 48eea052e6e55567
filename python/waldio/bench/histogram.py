"""Latency histograms of ``waldio bench --processes``: the C loop's buckets, decoded.

The timed loop of every process (``wbr_run_timed`` in bench/txnloop/txnloop.c)
counts each transaction's latency in a log-linear bucket (``hist_index``
there): exact below 256 ns, then 128 buckets per power of two (each less than
0.8% of its values wide) up to 2^41 ns (about 37 minutes; anything longer
lands in the last bucket).  Memory stays fixed however long a run is.

This module mirrors that layout (the constants must match the C file; the
native bridge checks :data:`BUCKETS` against the library's own count) and owns
the sparse JSON form of a histogram, a list of ``[bucket, count]`` pairs for
the buckets that are not empty, merging, and percentiles.  A percentile is the
midpoint of the bucket that holds the value of its nearest rank, so it is
within 0.4% of the exact value.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Sequence, Tuple

SUB_BITS = 7
SUB = 1 << SUB_BITS
TOP_BIT = 41
BUCKETS = 2 * SUB + (TOP_BIT - SUB_BITS - 1) * SUB

Sparse = List[List[int]]        # [[bucket, count], ...], buckets ascending


def index_of(ns: int) -> int:
    """The bucket of a latency in ns (what the C loop computes)."""
    u = max(0, int(ns))
    if u < 2 * SUB:
        return u
    if u >> TOP_BIT:
        return BUCKETS - 1
    e = u.bit_length() - 1
    shift = e - SUB_BITS
    return 2 * SUB + (shift - 1) * SUB + ((u >> shift) - SUB)


def bounds(i: int) -> Tuple[int, int]:
    """[low, high) in ns of bucket i."""
    if not 0 <= i < BUCKETS:
        raise ValueError(f"bucket {i} outside 0..{BUCKETS - 1}")
    if i < 2 * SUB:
        return i, i + 1
    k = i - 2 * SUB
    shift = k // SUB + 1
    lo = (SUB + k % SUB) << shift
    return lo, lo + (1 << shift)


def value(i: int) -> float:
    """The value reported for bucket i: its midpoint (its only value below 256 ns)."""
    lo, hi = bounds(i)
    return float(lo) if hi - lo == 1 else (lo + hi) / 2.0


def sparse(counts: Sequence[int]) -> Sparse:
    """A dense row of counts (one per bucket) as [[bucket, count], ...]."""
    return [[i, int(c)] for i, c in enumerate(counts) if c]


def merge(hists: Iterable[Sparse]) -> Sparse:
    out: Dict[int, int] = {}
    for h in hists:
        for i, c in h:
            out[int(i)] = out.get(int(i), 0) + int(c)
    return [[i, out[i]] for i in sorted(out)]


def total(h: Sparse) -> int:
    return sum(int(c) for _, c in h)


def percentile(h: Sparse, q: float) -> float:
    """The latency at percentile q (0 < q <= 100) by nearest rank, as its bucket's value."""
    n = total(h)
    if n == 0:
        raise ValueError("empty histogram")
    rank = max(1, math.ceil(q / 100.0 * n))
    seen = 0
    for i, c in h:
        seen += c
        if seen >= rank:
            return value(i)
    return value(h[-1][0])


def summary(h: Sparse) -> Dict[str, Any]:
    """count, p50/p90/p99/p99.9, min, max and mean (each a bucket's value), in ns."""
    n = total(h)
    if n == 0:
        return {"count": 0}
    return {"count": n, "min_ns": value(h[0][0]), "p50_ns": percentile(h, 50),
            "p90_ns": percentile(h, 90), "p99_ns": percentile(h, 99),
            "p999_ns": percentile(h, 99.9), "max_ns": value(h[-1][0]),
            "mean_ns": sum(value(i) * c for i, c in h) / n}
