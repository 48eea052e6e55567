"""The result document of ``waldio trace``: per-mode summaries and the whole.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence

from waldio import bench as B

from .model import COLUMNS, COUNTS, DEFINITIONS
from .workload import LoopFs, TraceOptions


def _median(values: Sequence[float]) -> Optional[float]:
    vals = sorted(v for v in values if v is not None)
    return B.percentile(vals, 50) if vals else None


def mode_summary(mode_doc: Dict[str, Any]) -> Dict[str, Any]:
    """Per-transaction figures of one mode: medians over its traced repetitions."""
    traced = [r for r in mode_doc["repetitions"] if r.get("traced") and not r["warmup"]
              and r.get("trace") and r["trace"].get("columns")]
    untraced = [r for r in mode_doc["repetitions"] if not r.get("traced") and not r["warmup"]
                and r["ok"] and r.get("ops_per_s")]
    out: Dict[str, Any] = {"traced_repetitions": len(traced),
                           "trace_ok": bool(traced) and all(r["trace"]["ok"] for r in traced)}
    if not traced:
        return out

    def per_rep(get: Callable[[Dict[str, Any]], Optional[float]]) -> Dict[str, Any]:
        vals = [get(r["trace"]) for r in traced]
        vals = [v for v in vals if v is not None]
        return {"median": _median(vals), "min": min(vals) if vals else None,
                "max": max(vals) if vals else None, "n": len(vals)}

    def window(name: str, key: str) -> Callable[[Dict[str, Any]], Optional[float]]:
        return lambda t: t["columns"][name][key] / t["transactions"] if t["transactions"] else None

    def txn(part: str, key: str) -> Callable[[Dict[str, Any]], Optional[float]]:
        return lambda t: (t["summary"] or {}).get(part, {}).get(key) if t.get("summary") else None

    keys = COLUMNS + COUNTS
    out["per_txn"] = {
        "first": {k: per_rep(txn("first", k)) for k in keys},
        "steady": {k: per_rep(txn("steady", k)) for k in keys},
        "in_transactions": {k: per_rep(window("transactions", k)) for k in keys},
        "total_window": {k: per_rep(window("total", k)) for k in keys},
    }
    classes = sorted({c for r in traced for c in r["trace"]["classes"]["total"]})
    out["classes_per_txn"] = {
        "total_window": {c: per_rep(lambda t, c=c: t["classes"]["total"].get(c, 0) / t["transactions"])
                         for c in classes},
        "steady": {c: per_rep(lambda t, c=c: ((t.get("summary") or {}).get("steady_classes") or {})
                               .get(c, 0.0)) for c in classes},
    }
    out["totals"] = {k: per_rep(lambda t, k=k: t["columns"]["total"][k]) for k in keys}
    dists = [r["trace"]["summary"]["steady_total_distribution"] for r in traced
             if r["trace"].get("summary")]
    out["steady_total_distribution"] = dists[0] if len(dists) == 1 else (
        {k: _median([d[k] for d in dists]) for k in ("min", "p50", "p90", "max")} if dists else None)
    syncs: Dict[str, Dict[str, float]] = {}
    for r in traced:
        for cls, st in r["trace"]["syncs"]["by_class"].items():
            e = syncs.setdefault(cls, {"calls": 0.0, "journal_bytes": 0.0, "flushes": 0.0})
            for k in e:
                e[k] += st.get(k, 0) / r["trace"]["transactions"] / len(traced)
    out["syncs_per_txn"] = syncs
    commits = [r["trace"]["journal_commits"] for r in traced if r["trace"].get("journal_commits")]
    if commits:
        out["jbd2_commits_per_txn"] = _median([c["jbd2_commits"] / r["trace"]["transactions"]
                                               for c, r in zip(commits, traced)])
    ops_t = [r["ops_per_s"] for r in traced if r.get("ops_per_s") and r["ok"]]
    ops_u = [r["ops_per_s"] for r in untraced]
    med_t, med_u = _median(ops_t), _median(ops_u)
    # Measured rounds 2k and 2k+1 hold one traced and one untraced repetition (T U U T ...).
    pairs: Dict[int, Dict[bool, float]] = {}
    first_measured = min((r["index"] for r in mode_doc["repetitions"] if not r["warmup"]), default=0)
    for r in traced + untraced:
        if r.get("ops_per_s") and r["ok"]:
            pairs.setdefault((r["index"] - first_measured) // 2, {})[bool(r.get("traced"))] = r["ops_per_s"]
    paired = sorted(p[False] / p[True] for p in pairs.values() if True in p and False in p)
    out["overhead"] = {
        "ops_per_s_traced": med_t, "ops_per_s_untraced": med_u,
        "n_traced": len(ops_t), "n_untraced": len(ops_u),
        "slowdown": (med_u / med_t) if med_t and med_u else None,
        "paired_slowdowns": paired,
        "note": "median ops/s of the untraced control repetitions over that of the traced ones "
                "(same run, interleaved); paired_slowdowns: untraced / traced ops/s of each "
                "adjacent pair of rounds; > 1 means tracing slowed the workload down",
    }
    out["capture"] = {
        "lost_events": sum(r["trace"]["capture"]["lost_events"] for r in traced),
        "overrun": sum(r["trace"]["capture"]["overrun"] for r in traced),
        "dropped": sum(r["trace"]["capture"]["dropped"] for r in traced),
        "unparsed": sum(r["trace"]["capture"]["unparsed_lines"] for r in traced),
        "complete": all(r["trace"]["capture"]["complete"] for r in traced),
    }
    out["failed_checks"] = [dict(c, repetition=r["index"]) for r in traced
                            for c in r["trace"].get("checks", []) if not c["ok"]]
    return out


def finish_document(doc: Dict[str, Any], options: TraceOptions, fs: LoopFs) -> Dict[str, Any]:
    """Turn the bench document of a TracedBench run into the trace document (in place)."""
    doc["tool"]["name"] = "waldio trace"
    doc["params"]["trace"] = {
        "options": options.to_json(),
        "fs_kind": fs.kind,
        "devices": {"main": fs.device, "journal": fs.journal_device},
        "rounds": "warm-up rounds untraced; measured rounds alternate traced / untraced "
                  "(T U U T ...) when the overhead is measured",
        "definitions": DEFINITIONS,
        "classification": "by device and sector range only (waldio.blocktrace), never by process "
                          "name; see each repetition's trace.layout.notes",
    }
    for mode in doc["modes"]:
        mode["trace_summary"] = mode_summary(mode)
    trace_ok = all(m["trace_summary"].get("trace_ok") for m in doc["modes"])
    doc["trace_ok"] = trace_ok
    doc["ok"] = bool(doc["ok"]) and trace_ok
    return doc
