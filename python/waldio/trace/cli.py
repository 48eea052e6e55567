"""``waldio trace``: argparse registration, tables, plots and the JSON file.

The engine is the rest of :mod:`waldio.trace`; the workload is ``waldio bench``'s, so
every workload option is bench's own (the parser inherits them from
:func:`waldio.bench.cli.register`, and :func:`waldio.bench.options.settings_from_args`
turns them into settings): one option, one meaning, in both commands.
docs/trace.md documents the method and every output.

Exit status: 0 when every repetition passed bench's correctness checks and
every trace check (no lost event, clock check, byte cross-check with the
device counters, one bracket per transaction), 1 when one failed (printed),
2 for a usage error, 3 when tracing cannot run here (not root, no loop
devices, no tracefs) or the result does not match its schema.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from waldio import bench as B
from waldio import trace as T
from waldio.bench import cli as bench_cli
from waldio.bench import options as BO

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "trace.schema.json"
BENCH_SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "bench.schema.json"

TABLE1_MODES = "off-full,wal-full,delete-full,truncate-full,persist-full,waldio-full"
DEFAULT_TRANSACTIONS = 20
DEFAULT_SCHEMA = "rowid"

EXAMPLES = f"""\
examples:
  waldio trace
      the WALDIO paper's Table 1 on a fresh ext4 (data=ordered): {DEFAULT_TRANSACTIONS} autocommit
      100-byte inserts per repetition into a rowid table in {TABLE1_MODES};
      per transaction: the first insert and the steady state (inserts 10..19);
      writes ./waldio-trace/trace.json and the timeline plot
  waldio trace --fs xfs --out xfs-table1
  waldio trace --modes wal-full,waldio-full --transactions 100 --repetitions 3
      docs/results.md's claim: WAL FULL journals its journal, waldio full writes one block
  waldio trace --preset mobibench-2015 --schema autoincrement --transactions 1000 \\
      --modes delete-full,truncate-full,persist-full,wal-full,waldio-full:pad4k,waldio-full
      the paper's Fig. 8 / Fig. 15 (1,000 inserts: data vs journal volume)
  waldio trace --fs ext4-extjournal --modes wal-full --no-overhead
  waldio trace --markdown table1.md --quiet

Every workload option is waldio bench's (docs/bench.md); the differences are the
defaults: --modes {TABLE1_MODES}, --transactions {DEFAULT_TRANSACTIONS}, --schema {DEFAULT_SCHEMA},
--repetitions 1 (traced; each with an untraced control for the overhead), and the
target is always a fresh loop file system (--fs). docs/trace.md defines every column.
"""


# --------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------

def _bench_parser() -> argparse.ArgumentParser:
    """waldio bench's own parser (its options become trace's)."""
    holder = argparse.ArgumentParser(add_help=False)
    sub = holder.add_subparsers()
    bench_cli.register(sub)
    return sub.choices["bench"]


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from waldio import fs as fsimage
    p = subparsers.add_parser(
        "trace", parents=[_bench_parser()], conflict_handler="resolve",
        help="block-level I/O attribution of SQLite modes on a fresh loop file system",
        description="Run a waldio bench workload on a fresh loop file system, capture every "
                    "block request (tracefs: block_rq_issue/complete, flush and FUA flags) and "
                    "every fsync, and attribute every written sector by device and sector range "
                    "to the file-system journal, file-system metadata or the file it belongs to "
                    "(db, wal, journal, shm; FIEMAP snapshots, so deleted rollback journals "
                    "count), per transaction.  Prints per-class and Table-1-style tables (data / "
                    "journal / JOJ / total per transaction), writes JSON and an LBA-over-time "
                    "plot.  docs/trace.md explains the method and every column.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(modes=TABLE1_MODES, transactions=DEFAULT_TRANSACTIONS, schema=DEFAULT_SCHEMA)
    o = p.add_argument_group("options whose meaning or default differs from waldio bench")
    o.add_argument("--modes", type=BO.mode_list_arg, metavar="LIST",
                   help=f"SQL modes to trace, in this order, each round (default {TABLE1_MODES}: "
                        "the paper's Table 1); raw modes run no SQLite and are refused")
    o.add_argument("--transactions", type=BO.int_at_least(1), metavar="N",
                   help=f"transactions per phase (default {DEFAULT_TRANSACTIONS}, not the preset's "
                        "count; pass 1000 for the paper's Fig. 8/15)")
    o.add_argument("--schema", choices=B.SCHEMAS,
                   help=f"default {DEFAULT_SCHEMA}: one B-tree page per insert, as the paper's "
                        "Table 1 figures imply (autoincrement also rewrites sqlite_sequence)")
    o.add_argument("--repetitions", type=BO.int_at_least(1), metavar="N", default=1,
                   help="traced repetitions per mode (default 1); each gets an untraced control "
                        "repetition unless --no-overhead")
    o.add_argument("--warmup", type=BO.int_at_least(0), metavar="N",
                   help="untraced warm-up rounds before them (default 1)")
    o.add_argument("--fs", choices=fsimage.KINDS, default="ext4",
                   help="file system made fresh on a loop device for the run (default ext4, "
                        "data=ordered); ext4-extjournal traces its journal device too")
    p.add_argument("--dir", help=argparse.SUPPRESS)
    o.add_argument("--json", metavar="FILE",
                   help="write the JSON here (default OUT/trace.json; schema "
                        "waldio/schemas/trace.schema.json)")
    g = p.add_argument_group("trace")
    g.add_argument("--no-overhead", action="store_true",
                   help="do not run untraced control repetitions (no overhead figure)")
    g.add_argument("--steady-after", type=BO.int_at_least(0), metavar="N",
                   help="steady-state per-transaction figures exclude the first N transactions of "
                        "every repetition (default min(10, transactions/2))")
    g.add_argument("--poll-ms", type=BO.float_at_least_zero, metavar="MS", default=0.0,
                   help="FIEMAP/stat polling interval for files that come and go, e.g. rollback "
                        "journals, for file systems without map events (default 0: only at opens and "
                        "closes; the online extent map events cover ext4, xfs and btrfs)")
    g.add_argument("--buffer-kib", type=BO.int_at_least(64), metavar="KIB", default=8192,
                   help="tracefs ring buffer per CPU (default 8192)")
    g.add_argument("--out", metavar="DIR", default="waldio-trace",
                   help="directory for trace.json and the plots (default ./waldio-trace)")
    g.add_argument("--no-plot", action="store_true", help="no PNG/SVG plots")
    g.add_argument("--timeline-txns", type=BO.int_at_least(0), metavar="N", default=10,
                   help="transactions shown in the timeline plot, from the first steady-state "
                        "one (default 10, as the paper's Fig. 12; 0 = the whole window)")
    g.add_argument("--markdown", metavar="FILE",
                   help="also write the tables as Markdown (with the command and parameters)")
    p.set_defaults(func=run_trace, _parser=p)


# --------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------

def validate(doc: Dict[str, Any]) -> List[str]:
    """Schema violations of a trace document (empty when valid or jsonschema is missing)."""
    try:
        import jsonschema
        from referencing import Registry, Resource
    except ImportError:
        return []
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        schema = json.load(f)
    with open(BENCH_SCHEMA_PATH, encoding="utf-8") as f:
        bench = json.load(f)
    registry = Registry().with_resources([(bench["$id"], Resource.from_contents(bench)),
                                          (schema["$id"], Resource.from_contents(schema))])
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))][:20]


# --------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------

KIB = 1024.0


def _kb(v: Optional[float]) -> str:
    return "-" if v is None else f"{v / KIB:.1f}"


def _n(v: Optional[float], digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _med(stat: Optional[Dict[str, Any]]) -> Optional[float]:
    return None if not stat else stat.get("median")


def _spread(stat: Optional[Dict[str, Any]]) -> str:
    if not stat or stat.get("median") is None:
        return "-"
    lo, hi = stat["min"] / KIB, stat["max"] / KIB
    if stat["n"] < 2 or abs(hi - lo) < 0.05:
        return _kb(stat["median"])
    return f"{stat['median'] / KIB:.1f} ({lo:.1f}-{hi:.1f})"


def table1(doc: Dict[str, Any]) -> Tuple[str, List[str], List[List[str]]]:
    cols = ["mode", "first: data", "journal", "JOJ", "meta", "total",
            "steady: data", "journal", "JOJ", "meta", "total", "flush/txn", "FUA/txn", "req/txn"]
    rows = []
    for m in doc["modes"]:
        ts = m.get("trace_summary") or {}
        pt = ts.get("per_txn")
        if not pt:
            rows.append([m["label"]] + ["-"] * (len(cols) - 1))
            continue
        f, s = pt["first"], pt["steady"]
        rows.append([m["label"]] + [_kb(_med(f[k])) for k in ("data", "journal", "joj", "metadata", "total")]
                    + [_spread(s[k]) for k in ("data", "journal", "joj", "metadata", "total")]
                    + [_n(_med(s["flushes"])), _n(_med(s["fua_writes"])), _n(_med(s["requests"]))])
    steady = _steady_after(doc)
    title = (f"KB (1 KB = 1024 B) written per transaction, inside its window: the first "
             f"transaction (insert into the fresh empty table) and the steady state (mean of "
             f"transactions {steady}..N-1); median over traced repetitions (min-max)")
    if doc["params"]["bench"].get("threads", 1) > 1:
        title += ("; several threads: transaction windows overlap, so only the total-window "
                  "table below has figures")
    return title, cols, rows


def _steady_after(doc: Dict[str, Any]) -> int:
    for m in doc["modes"]:
        for r in m["repetitions"]:
            if r.get("traced") and (r.get("trace") or {}).get("steady_after") is not None:
                return int(r["trace"]["steady_after"])
    return 0


def total_table(doc: Dict[str, Any]) -> Tuple[str, List[str], List[List[str]]]:
    cols = ["mode", "txns", "data", "journal", "JOJ", "meta", "total", "flush/txn",
            "total MiB", "data MiB", "journal MiB"]
    rows = []
    for m in doc["modes"]:
        ts = m.get("trace_summary") or {}
        pt = ts.get("per_txn")
        if not pt:
            continue
        w = pt["total_window"]
        tot = ts["totals"]
        n = next((r["trace"]["transactions"] for r in m["repetitions"]
                  if r.get("traced") and (r.get("trace") or {}).get("transactions")), None)
        rows.append([m["label"], str(n)] + [_kb(_med(w[k])) for k in
                                            ("data", "journal", "joj", "metadata", "total")]
                    + [_n(_med(w["flushes"]))]
                    + [_n((_med(tot[k]) or 0) / KIB / KIB, 2) for k in ("total", "data", "journal")])
    return ("KB per transaction over the total window (timed region + untimed close + final "
            "sync: checkpoints and deferred write-back included), and the window's totals in MiB",
            cols, rows)


def class_table(doc: Dict[str, Any], part: str = "steady") -> Tuple[str, List[str], List[List[str]]]:
    order = ["db", "wal", "journal", "shm", "other-file", "unattributed-data", "fs-journal",
             "fs-metadata"]
    present: List[str] = []
    for m in doc["modes"]:
        for c in ((m.get("trace_summary") or {}).get("classes_per_txn") or {}).get(part, {}):
            if c not in present:
                present.append(c)
    classes = [c for c in order if c in present] + sorted(c for c in present if c not in order)
    rows = []
    for m in doc["modes"]:
        cp = ((m.get("trace_summary") or {}).get("classes_per_txn") or {}).get(part)
        if cp is None:
            continue
        rows.append([m["label"]] + [_kb(_med(cp.get(c))) for c in classes])
    what = ("steady-state transactions" if part == "steady"
            else "the total window, per transaction")
    return f"KB per transaction by class (sector ranges), {what}", ["mode"] + classes, rows


def sync_table(doc: Dict[str, Any]) -> Tuple[str, List[str], List[List[str]]]:
    cols = ["mode", "sync class", "calls/txn", "journal KB/txn", "flushes/txn", "how identified"]
    rows = []
    for m in doc["modes"]:
        ts = m.get("trace_summary") or {}
        for cls, st in sorted((ts.get("syncs_per_txn") or {}).items()):
            how = ""
            for r in m["repetitions"]:
                if r.get("traced") and r.get("trace") and cls in r["trace"]["syncs"]["by_class"]:
                    how = ", ".join(f"{k}: {v}" for k, v in
                                    r["trace"]["syncs"]["by_class"][cls]["identified_by"].items())
                    break
            rows.append([m["label"], cls if cls != T.BACKGROUND else "(no sync call)",
                         _n(st["calls"]), _kb(st["journal_bytes"]), _n(st["flushes"]), how])
    return ("sync calls per transaction (total window) and the journal writes each forced; "
            "JOJ = the journal KB of the wal, journal and directory rows", cols, rows)


def overhead_table(doc: Dict[str, Any]) -> Tuple[str, List[str], List[List[str]]]:
    cols = ["mode", "ops/s traced", "ops/s untraced", "slowdown", "paired (min-max)", "lost events",
            "unattributed KB/txn", "jbd2 commits/txn", "trace checks"]
    rows = []
    pooled: List[float] = []
    for m in doc["modes"]:
        ts = m.get("trace_summary") or {}
        if not ts.get("traced_repetitions"):
            continue
        oh = ts.get("overhead") or {}
        cap = ts.get("capture") or {}
        un = _med(((ts.get("classes_per_txn") or {}).get("total_window") or {}).get("unattributed-data"))
        failed = ts.get("failed_checks") or []
        paired = oh.get("paired_slowdowns") or []
        pooled += paired
        rows.append([m["label"], _n(oh.get("ops_per_s_traced"), 0), _n(oh.get("ops_per_s_untraced"), 0),
                     _n(oh.get("slowdown"), 2),
                     f"{B.percentile(paired, 50):.2f} ({paired[0]:.2f}-{paired[-1]:.2f})" if paired else "-",
                     f"{cap.get('lost_events', 0) + cap.get('overrun', 0) + cap.get('dropped', 0)}",
                     _kb(un), _n(ts.get("jbd2_commits_per_txn")),
                     "ok" if not failed else f"FAIL {len(failed)}"])
    if pooled:
        geo = math.exp(sum(math.log(x) for x in pooled) / len(pooled))
        rows.append(["all modes", "", "", "", f"{geo:.2f} geo. mean of {len(pooled)} pairs", "",
                     "", "", ""])
    return ("trace overhead: median ops/s of the untraced control repetitions over the traced ones "
            "(same run, interleaved), and the same ratio per adjacent pair of rounds; capture "
            "completeness and checks", cols, rows)


def size_table(doc: Dict[str, Any], top: int = 8) -> Tuple[str, List[str], List[List[str]]]:
    """Write requests per transaction by request size (total window, first traced repetition)."""
    hists: List[Tuple[str, Dict[int, int], int]] = []
    for m in doc["modes"]:
        t = _first_traced(m) or next((r["trace"] for r in m["repetitions"] if r.get("traced")
                                      and (r.get("trace") or {}).get("size_histogram")), None)
        if t and t.get("transactions"):
            hists.append((m["label"], {int(k): v for k, v in t["size_histogram"].items()},
                          t["transactions"]))
    overall: Dict[int, int] = {}
    for _label, h, _n_txn in hists:
        for k, v in h.items():
            overall[k] = overall.get(k, 0) + v
    sizes = sorted(sorted(overall, key=lambda k: -overall[k])[:top])
    cols = ["mode"] + [f"{k / KIB:g} KiB" for k in sizes] + ["other sizes"]
    rows = []
    for label, h, n_txn in hists:
        other = sum(v for k, v in h.items() if k not in sizes)
        rows.append([label] + [_n(h.get(k, 0) / n_txn) for k in sizes] + [_n(other / n_txn)])
    return ("write requests per transaction by request size (total window, one repetition)",
            cols, rows)


def all_tables(doc: Dict[str, Any]) -> List[Tuple[str, List[str], List[List[str]]]]:
    return [table1(doc), class_table(doc, "steady"), total_table(doc),
            class_table(doc, "total_window"), size_table(doc), sync_table(doc),
            overhead_table(doc)]


def definitions_lines(doc: Dict[str, Any]) -> List[str]:
    defs = doc["params"]["trace"]["definitions"]
    out = [f"{k}: {v}" for k, v in defs.items()]
    notes: List[str] = []
    for m in doc["modes"]:
        for r in m["repetitions"]:
            if r.get("traced") and r.get("trace") and r["trace"].get("layout"):
                notes = r["trace"]["layout"]["notes"]
                break
        if notes:
            break
    return out + [f"layout: {n}" for n in notes]


def trace_header(doc: Dict[str, Any]) -> str:
    """The [trace] section of the parameter header (bench's sections come first)."""
    from waldio import params as P
    t = doc["params"]["trace"]
    o = t["options"]
    events: List[str] = []
    for m in doc["modes"]:
        for r in m["repetitions"]:
            if r.get("traced") and (r.get("trace") or {}).get("capture"):
                events = r["trace"]["capture"]["enabled_events"]
                break
        if events:
            break
    sec = {
        "file_system": t["fs_kind"], "devices": t["devices"],
        "rounds": (f"{doc['params']['bench']['warmup']} untraced warm-up; then "
                   f"{o['traced_repetitions']} traced"
                   + (f" + {o['traced_repetitions']} untraced control (T U U T ...; bench's "
                      "'repetitions' above counts both)" if o["overhead"] else "")),
        "steady_state": f"transactions {o['steady_after']}..N-1 of each repetition",
        "fiemap_poll_ms": o["poll_ms"] or "off (snapshots at opens and closes, and map events)",
        "ring_buffer_kib_per_cpu": o["buffer_kib_per_cpu"],
        "events": ["block:block_rq_issue", "block:block_rq_complete", "block:block_rq_requeue"] + events,
        "classification": t["classification"],
    }
    return P.format_params({"trace": sec}, width=110)


def failures(doc: Dict[str, Any]) -> List[str]:
    out = []
    for m in doc["modes"]:
        for c in (m.get("trace_summary") or {}).get("failed_checks") or []:
            out.append(f"{m['label']} repetition {c['repetition']}: {c['name']}: expected "
                       f"{c['expected']}, got {c['actual']}")
        for r in m["repetitions"]:
            if r.get("traced") and (r.get("trace") or {}).get("error"):
                out.append(f"{m['label']} repetition {r['index']}: {r['trace']['error']}")
    return out


def markdown(doc: Dict[str, Any]) -> str:
    lines = [f"Command: `{' '.join(doc['tool']['command_line'])}`  ",
             f"waldio {doc['tool'].get('waldio_version')} (git "
             f"{str(doc['tool'].get('git_commit'))[:12]}{'+dirty' if doc['tool'].get('git_dirty') else ''}), "
             f"{doc['tool'].get('started_utc')}  "]
    common = doc["params"].get("common") or {}
    fs = common.get("filesystem") or {}
    sysp = common.get("system") or {}
    bench = doc["params"]["bench"]
    lines.append(f"File system: {doc['params']['trace']['fs_kind']} ({fs.get('fstype')}, mount "
                 f"options {fs.get('mount_options', fs.get('options', '?'))}); kernel "
                 f"{sysp.get('kernel')}; SQLite {', '.join(f'{k} {v}' for k, v in bench['sqlite_builds'].items())}  ")
    lines.append(f"Workload: {bench.get('preset')} preset, {'+'.join(bench['phases'])}, "
                 f"{bench['transactions']} transactions, schema {bench['schema']}, record "
                 f"{bench['record_size']} B, page {bench['page_size']}, regime {bench['regime']}, "
                 f"timed {', '.join(bench['timed_region'])}; {_traced_count(doc)} traced repetition(s) "
                 f"per mode  ")
    lines.append("")
    for title, cols, rows in all_tables(doc):
        lines.append(f"*{title}*")
        lines.append("")
        lines.append("| " + " | ".join(cols) + " |")
        lines.append("|" + "---|" * len(cols))
        for r in rows:
            lines.append("| " + " | ".join(r) + " |")
        lines.append("")
    return "\n".join(lines)


def _traced_count(doc: Dict[str, Any]) -> int:
    return max((m.get("trace_summary") or {}).get("traced_repetitions", 0) for m in doc["modes"])


# --------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------

CLASS_COLORS = {"db": "#1f77b4", "wal": "#2ca02c", "journal": "#ff7f0e", "shm": "#9467bd",
                "other-file": "#8c564b", "unattributed-data": "#7f7f7f", "fs-journal": "#d62728",
                "fs-metadata": "#e377c2", "flush": "#000000", "other": "#bcbd22"}


def _first_traced(mode: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    for r in mode["repetitions"]:
        if r.get("traced") and not r["warmup"] and (r.get("trace") or {}).get("timeline"):
            return r["trace"]
    return None


def plot_timeline(doc: Dict[str, Any], stem: str, formats: Sequence[str], txns: int) -> List[str]:
    """LBA over time, the paper's Fig. 12 style: a circle per write request at its start
    address, area proportional to its size, coloured by class; flushes as ticks."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [(m["label"], _first_traced(m)) for m in doc["modes"]]
    modes = [(label, t) for label, t in modes if t]
    if not modes:
        return []
    fig, axes = plt.subplots(len(modes), 1, figsize=(10, 2.6 * len(modes) + 0.8), squeeze=False)
    seen: Dict[str, Any] = {}
    for ax, (label, t) in zip(axes[:, 0], modes):
        rows = t["timeline"]["rows"]
        brackets = t["timeline"].get("brackets_ms") or []
        k0 = min(t.get("steady_after") or 0, max(len(brackets) - 1, 0))
        if txns and brackets:
            sel = brackets[k0:k0 + txns]
            lo, hi = sel[0][0], sel[-1][1]
            pad = max((hi - lo) * 0.02, 0.01)
            lo, hi = lo - pad, hi + pad
            rows = [r for r in rows if lo <= r[0] <= hi]
            shown = f"transactions {k0}..{k0 + len(sel) - 1}"
        else:
            sel = brackets
            shown = "the whole window"
        for i, (s, e) in enumerate(sel):
            ax.axvspan(s, e, color="#f0f0f0" if i % 2 == 0 else "#e4e4f4", zorder=0, lw=0)
        for cls in sorted({r[4] for r in rows}):
            pts = [r for r in rows if r[4] == cls]
            if cls == "flush":      # ticks along the bottom edge, outside the LBA scale
                xs = [r[0] for r in pts]
                h = ax.vlines(xs, 0, 0.06, transform=ax.get_xaxis_transform(), colors="black",
                              linewidth=1.2, zorder=3)
            else:
                xs = [r[0] for r in pts]
                ys = [r[2] * 512 / (1 << 20) for r in pts]
                sizes = [max(8.0, r[3] * 512 / 4096 * 18) for r in pts]
                marker = ["s" if r[1] == "journal" else "o" for r in pts]
                h = None
                for mk in ("o", "s"):
                    idx = [i for i, m in enumerate(marker) if m == mk]
                    if idx:
                        h = ax.scatter([xs[i] for i in idx], [ys[i] for i in idx],
                                       s=[sizes[i] for i in idx], marker=mk,
                                       facecolors="none", edgecolors=CLASS_COLORS.get(cls, "#17becf"),
                                       linewidths=1.2, zorder=3)
            seen.setdefault(cls, h)
        ax.margins(y=0.15)
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax.set_title(f"{label}: {shown}", fontsize=9, loc="left")
        ax.set_ylabel("offset (MiB)")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time since the start of the total window (ms)\nshaded: transaction "
                           "windows; circle area ~ request size; ticks: flushes; squares: "
                           "external journal device")
    handles = [h for h in seen.values() if h is not None]
    fig.legend(handles, [c for c, h in seen.items() if h is not None], loc="upper right",
               fontsize=8, ncol=min(len(handles), 5))
    fig.suptitle(_plot_title(doc), fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97 - 0.1 / len(modes)))
    return _save(fig, stem, formats)


def plot_volume(doc: Dict[str, Any], stem: str, formats: Sequence[str]) -> List[str]:
    """Stacked KB per transaction by class: steady state and total window."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in doc["modes"] if (m.get("trace_summary") or {}).get("classes_per_txn")]
    if not modes:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 1.6 * len(modes) + 3), 4.8), squeeze=False)
    for ax, part, title in ((axes[0, 0], "steady", "steady-state transaction"),
                            (axes[0, 1], "total_window", "total window / transactions")):
        classes = [c for c in CLASS_COLORS if any(
            c in m["trace_summary"]["classes_per_txn"][part] for m in modes)]
        bottom = [0.0] * len(modes)
        for c in classes:
            vals = [(_med(m["trace_summary"]["classes_per_txn"][part].get(c)) or 0) / KIB for m in modes]
            ax.bar(range(len(modes)), vals, 0.7, bottom=bottom, label=c, color=CLASS_COLORS[c])
            bottom = [a + b for a, b in zip(bottom, vals)]
        for i, v in enumerate(bottom):
            ax.annotate(f"{v:.1f}", (i, v), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=7)
        ax.set_xticks(range(len(modes)))
        ax.set_xticklabels([m["label"] for m in modes], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("KB written per transaction")
        ax.set_ylim(top=max(bottom + [1.0]) * 1.12)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 1].legend(fontsize=7)
    fig.suptitle(_plot_title(doc), fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return _save(fig, stem, formats)


def _plot_title(doc: Dict[str, Any]) -> str:
    b = doc["params"]["bench"]
    return (f"waldio trace: {doc['params']['trace']['fs_kind']} (loop), {b['transactions']} x "
            f"{'+'.join(b['phases'])}, schema {b['schema']}, {b['regime']}")


def _save(fig: Any, stem: str, formats: Sequence[str]) -> List[str]:
    import matplotlib.pyplot as plt
    out = []
    for fmt in formats:
        path = f"{stem}.{fmt}"
        fig.savefig(path, dpi=130)
        out.append(path)
    plt.close(fig)
    return out


# --------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------

def run_trace(args: argparse.Namespace) -> int:
    from waldio.bench import report as R
    parser: argparse.ArgumentParser = args._parser
    if args.dir is not None:
        parser.error("--dir: waldio trace always makes a fresh loop file system (--fs), so "
                     "that every block request on the device is the workload's")
    try:
        settings = BO.settings_from_args(args)
        modes = BO.mode_list(args)
    except ValueError as e:
        parser.error(str(e))
    raw = [m.label for m in modes if not m.mode.is_sql]
    if raw:
        parser.error(f"--modes: {', '.join(raw)} run no SQLite transactions to bracket; trace SQL "
                     "modes (the raw system-call patterns are traced by tests/py/test_trace.py)")
    if args.baseline is not None:
        settings.baseline = B.parse_modes(args.baseline, args.layout, args.sqlite)[0].label
        if settings.baseline not in [m.label for m in modes]:
            parser.error(f"--baseline {args.baseline}: not among the modes traced")
    reps = args.repetitions
    settings.repetitions = reps * (1 if args.no_overhead else 2)
    steady = args.steady_after if args.steady_after is not None else \
        min(10, settings.transactions // 2)
    options = T.TraceOptions(overhead=not args.no_overhead, traced_repetitions=reps,
                             steady_after=steady, poll_ms=args.poll_ms, timeline=True,
                             buffer_kib_per_cpu=args.buffer_kib)
    reason = T.unavailable_reason(args.fs)
    if reason:
        print(f"waldio trace: cannot trace here: {args.fs}: {reason}", file=sys.stderr)
        return 3
    plain = args.plain or not sys.stdout.isatty()
    out = R.Printer(plain=plain)
    err = R.Printer(plain=args.plain or not sys.stderr.isatty(), stream=sys.stderr)
    labels = [m.label for m in modes]
    if not args.quiet:
        out.line(f"waldio trace: {', '.join(labels)} on a fresh {args.fs}; "
                 f"{settings.transactions} transactions per repetition; {settings.warmup} warm-up "
                 f"+ {reps} traced" + ("" if args.no_overhead else f" + {reps} untraced control")
                 + " rounds")
    size = args.fs_size or B.default_fs_size_mib(settings, args.fs)
    t0 = time.perf_counter()
    try:
        with B.open_target(args.fs, None, size, need_odirect=True, device=args.device) as target:
            fs = T.LoopFs.from_target(target)
            runner = T.TracedBench(settings, modes, fs, options)
            if not args.quiet:
                out.line(target.note)
                out.line("")
            with R.progress_reporter(err, enabled=not args.quiet,
                                     total=(settings.warmup + settings.repetitions) * len(modes)) as cb:
                runner.progress = cb
                doc = runner.run(target)
    except (B.BenchError, T.TraceError) as e:
        print(f"waldio trace: error: {e}", file=sys.stderr)
        return 3
    T.finish_document(doc, options, fs)
    wall = time.perf_counter() - t0
    doc["tool"]["wall_s"] = round(wall, 3)
    problems = validate(doc)
    os.makedirs(args.out, exist_ok=True)
    json_path = args.json or os.path.join(args.out, "trace.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    written = [json_path]
    if not args.no_plot:
        try:
            written += plot_timeline(doc, os.path.join(args.out, "timeline"), ("png", "svg"),
                                     args.timeline_txns)
            written += plot_volume(doc, os.path.join(args.out, "volume"), ("png", "svg"))
        except ImportError:
            print("waldio trace: no plots: matplotlib is not installed (pip install 'waldio[plot]')",
                  file=sys.stderr)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown(doc) + "\n")
        written.append(args.markdown)
    if not args.quiet:
        R.print_header(out, doc)
        out.line(trace_header(doc))
        out.line("")
    tables = all_tables(doc)
    for title, cols, rows in (tables if not args.quiet else tables[:1]):
        out.table(title, cols, rows)
    if not args.quiet:
        out.line("definitions:")
        for line in definitions_lines(doc):
            out.line(f"  {line}")
        out.line("")
    R.print_failures(out, doc)
    bad = failures(doc)
    for line in bad:
        out.line(f"TRACE CHECK FAILED: {line}")
    for p in problems:
        print(f"waldio trace: internal error: result does not match its schema: {p}",
              file=sys.stderr)
    if not args.quiet:
        out.line(f"wrote {', '.join(written)}; total wall time {wall:.1f} s")
    if problems:
        return 3
    return 0 if doc["ok"] else 1
