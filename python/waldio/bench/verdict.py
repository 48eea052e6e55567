"""Whether paired ratios support a conclusion, in plain words.

A ratio here is a mode's rate over a stock mode's rate in the same round; a run
keeps its median, min and max over the measured rounds (:func:`~.stats.pair_ratios`).
The headline of ``waldio bench`` quotes that median with its spread, and says so in a
sentence when the rounds do not support a conclusion:

* fewer than two rounds: there is no spread to judge by;
* the rounds fall on both sides of 1.0 (min < 1 < max): some rounds say faster,
  some slower;
* a paired t-test on the rounds' log ratios cannot tell the effect from zero at the
  5% level (two-sided): the machine moved the rounds more than the modes differ.
  Logs, because a ratio's noise is multiplicative (1.5x and 0.67x are the same
  distance from 1.0); paired, because both modes of a round share its machine.
  Five rounds of 1.31x-1.87x are a conclusion, three of 1.01x-1.10x are not.

Nothing here measures; it reads ratio summaries and formats them.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, Optional, Sequence

# Student's t, two-sided 5%, by degrees of freedom; between two entries the
# smaller df's (larger) value, so the test never claims more than it should.
_T_CRIT = ((1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447),
           (7, 2.365), (8, 2.306), (9, 2.262), (10, 2.228), (12, 2.179), (15, 2.131),
           (20, 2.086), (30, 2.042), (60, 2.000), (120, 1.980))

NOISY_MARK = "~"
NOISY_LEGEND = (f"{NOISY_MARK} = too noisy to conclude: fewer than 2 rounds, rounds on both "
                f"sides of 1.0, or a difference from 1.0 that a paired t-test on the rounds "
                f"cannot tell from noise (5%)")


def t_critical(df: int) -> float:
    """Student's t for a two-sided 5% test with df degrees of freedom (df >= 1)."""
    crit = _T_CRIT[0][1]
    for d, t in _T_CRIT:
        if d > df:
            break
        crit = t
    return crit


def log_ratio_t(ratios: Sequence[float]) -> float:
    """|t| of the paired rounds' log ratios against 0 (inf when they do not vary)."""
    logs = [math.log(max(x, 1e-9)) for x in ratios]      # a round at 0 ops/s: far below
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    if sd == 0:
        return math.inf if mean else 0.0
    return abs(mean) / (sd / math.sqrt(len(logs)))


def too_noisy(r: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why the rounds of ratio summary ``r`` do not support a conclusion, or None."""
    if not r or r.get("median") is None:
        return "no paired round passed"
    n = len(r.get("per_rep") or [])
    lo, hi, med = r["min"], r["max"], r["median"]
    if n < 2:
        return "one round only, no spread to judge by"
    if lo < 1.0 < hi:
        return "the rounds fall on both sides of 1.0"
    t, crit = log_ratio_t([p["ratio"] for p in r["per_rep"]]), t_critical(n - 1)
    if t < crit:
        return (f"{n} rounds spread {lo:.2f}-{hi:.2f} cannot tell the {abs(med - 1.0):.2f} "
                f"effect from noise (paired t {t:.1f} < {crit:.1f}, 5%)")
    return None


def ratio_text(r: Optional[Dict[str, Any]]) -> str:
    """``1.47x (0.97-1.91)``, or ``-`` when there is no ratio."""
    if not r or r.get("median") is None:
        return "-"
    return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"


def marked(r: Optional[Dict[str, Any]]) -> str:
    """The median with the noisy mark when the rounds do not support a conclusion."""
    if not r or r.get("median") is None:
        return "-"
    return f"{r['median']:.2f}" + (NOISY_MARK if too_noisy(r) else "")
