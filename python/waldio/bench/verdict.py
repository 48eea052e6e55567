"""Whether paired ratios support a conclusion, in plain words.

A ratio here is a mode's rate over a stock mode's rate in the same round; a run
keeps its median, min and max over the measured rounds (:func:`~.stats.pair_ratios`).
The headline of ``waldio bench`` quotes that median with its spread, and says so in a
sentence when the rounds do not support a conclusion:

* fewer than two rounds: there is no spread to judge by;
* the rounds fall on both sides of 1.0 (min < 1 < max): some rounds say faster,
  some slower;
* the spread (max - min) is wider than the effect (|median - 1|): the machine moved
  the rounds more than the modes differ.

Nothing here measures; it reads ratio summaries and formats them.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

NOISY_MARK = "~"
NOISY_LEGEND = (f"{NOISY_MARK} = too noisy to conclude: fewer than 2 rounds, rounds on both "
                f"sides of 1.0, or a spread wider than the difference from 1.0")


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
    if hi - lo > abs(med - 1.0):
        return f"the rounds spread {hi - lo:.2f}, wider than the {abs(med - 1.0):.2f} effect"
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
