"""Tables of ``waldio bench --processes`` results (the run's own output and ``waldio
report`` of its JSON).  Everything printed is read from the result document
(:mod:`.processes`; schema ``schemas/bench-processes.schema.json``).

Default output, made to fit a terminal: the headline (each mode against stock WAL
FULL and against stock WAL NORMAL, median of the paired rounds, per workload and
process count, with a mark where the rounds do not support a conclusion, see
:mod:`.verdict`), then one compact table per workload.  The full checklist
(:func:`print_checklist`: every parameter, the settings every process read back,
every cell's rate spread, latency per transaction kind, I/O and CPU, and what each
number means) goes to a file, or to the terminal with ``--verbose``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from waldio import params as _params

from . import verdict as V
from .printer import Printer
from .process_workloads import WORKLOADS
from .report import check_cell, failure_lines, print_parameters

RATE_NAME = {"insert": "commits/s", "update": "commits/s", "web": "requests/s"}


def _ratio(doc: Dict[str, Any], wl: str, n: int, mode: str, stock: str
           ) -> Optional[Dict[str, Any]]:
    for r in doc["ratios"]:
        if (r["workload"], r["processes"], r["mode"], r["stock"]) == (wl, n, mode, stock):
            return r
    return None


def _cells(doc: Dict[str, Any], wl: str) -> List[Dict[str, Any]]:
    return [c for c in doc["cells"] if c["workload"] == wl]


def _ms(ns: Optional[float]) -> str:
    if ns is None:
        return "-"
    ms = ns / 1e6
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" \
        if ms >= 1 else f"{ms:.3f}"


def _rate(s: Optional[Dict[str, Any]]) -> str:
    return "-" if not s else f"{s['median']:,.0f}"


def _per(v: Optional[Dict[str, Any]], digits: int = 2) -> str:
    return "-" if not v else f"{v['median']:.{digits}f}"


def references(doc: Dict[str, Any]) -> List[str]:
    return sorted({r["stock"] for r in doc["ratios"]}, key=["wal-full", "wal-normal"].index)


def intro(out: Printer, doc: Dict[str, Any]) -> None:
    b = doc["params"]["bench"]
    how = (f"{b['duration_s']:g} s per cell" if b["duration_s"] else
           f"{b['transactions']} transactions per process")
    out.line(f"waldio bench --processes {','.join(map(str, b['processes']))}: workloads "
             f"{', '.join(b['workloads'])}; {how}; {b['rounds']['warmup']} warm-up + "
             f"{b['rounds']['measured']} measured rounds, modes interleaved in every round")
    out.line(f"modes: {', '.join(m['label'] for m in doc['modes'])}; busy timeout "
             f"{b['sqlite_settings']['busy_timeout_ms']} ms; log in the steady state "
             f"(grown, then restarted) before timing")


def print_headline(out: Printer, doc: Dict[str, Any]) -> None:
    """Per stock reference: a matrix of medians, rows workload x mode, columns N."""
    b = doc["params"]["bench"]
    ns = b["processes"]
    refs = references(doc)
    if not refs:
        out.line("headline: no ratios (run wal-full and/or wal-normal with the other modes)")
        return
    modes = [m["label"] for m in doc["modes"]]
    noisy = 0
    for ref in refs:
        others = [m for m in modes if m != ref]
        cols = ["workload", "mode"] + [f"{n} proc" for n in ns]
        rows = []
        for wl in b["workloads"]:
            for m in others:
                cells = []
                for n in ns:
                    r = _ratio(doc, wl, n, m, ref)
                    cells.append(V.marked(r))
                    noisy += bool(r and r.get("median") is not None and V.too_noisy(r))
                rows.append([wl, m] + cells)
        out.table(f"headline: x stock {ref}: the mode's rate over {ref}'s in the same round, "
                  f"median of {b['rounds']['measured']} rounds", cols, rows,
                  ["l", "l"] + ["r"] * len(ns))
    if noisy:
        out.wrapped(f"{V.NOISY_LEGEND}. {noisy} of these ratios cannot be told from noise on "
                    f"this run: rerun with more --repetitions, on a quieter machine.")
        out.line("")


def compact_table(doc: Dict[str, Any], wl: str
                  ) -> Tuple[str, List[str], List[List[str]], List[str]]:
    b = doc["params"]["bench"]
    refs = references(doc)
    cols = ["proc", "mode", RATE_NAME[wl]] + [f"x {r}" for r in refs] + \
        ["p50 ms", "p99 ms", "p99.9 ms", "flush/tx", "CPU us/tx"]
    rows = []
    for c in _cells(doc, wl):
        s = c["summary"] or {}
        lat = s.get("latency_ns") or {}
        pt = s.get("per_txn") or {}
        check = check_cell(c["repetitions"])
        rate = _rate(s.get("ops_per_s")) if check == "ok" else check
        rows.append([str(c["processes"]), c["mode"], rate] +
                    [V.ratio_text(_ratio(doc, wl, c["processes"], c["mode"], r))
                     if r != c["mode"] else "-" for r in refs] +
                    [_ms(lat.get("p50_ns")), _ms(lat.get("p99_ns")), _ms(lat.get("p999_ns")),
                     _per(pt.get("device_flushes")), _per(pt.get("cpu_us"), 0)])
    w = WORKLOADS[wl]
    title = (f"{wl}: {w.summary}; median of {b['rounds']['measured']} rounds; latency per "
             f"{'request' if wl == 'web' else 'commit'}, pooled")
    return title, cols, rows, ["r", "l"] + ["r"] * (len(cols) - 2)


def print_results(out: Printer, doc: Dict[str, Any], headline: bool = True) -> None:
    if headline:
        print_headline(out, doc)
    for wl in doc["params"]["bench"]["workloads"]:
        out.table(*compact_table(doc, wl))


def print_failures(out: Printer, doc: Dict[str, Any]) -> None:
    for c in doc["cells"]:
        for line in failure_lines(f"{c['workload']} x{c['processes']} {c['mode']}",
                                  c["repetitions"]):
            out.wrapped(line)


# ------------------------------------------------------------ the checklist

def detail_table(doc: Dict[str, Any], wl: str
                 ) -> Tuple[str, List[str], List[List[str]], List[str]]:
    kinds = WORKLOADS[wl].kinds
    dev = (doc["params"]["bench"].get("devices") or [{}])[0].get("name", "device")
    cols = ["proc", "mode", "rate", "min-max", "CoV"] + \
        [f"{k} p50/p99/p99.9/max ms" for k in kinds] + \
        [f"{dev} KB/tx", "flush/tx", "log syncs/tx", "CPU us/tx", "cs/tx",
         "machine CPU us/tx", "machine cs/tx", "machine busy", "check"]
    rows = []
    for c in _cells(doc, wl):
        s = c["summary"] or {}
        ops = s.get("ops_per_s")
        pt = s.get("per_txn") or {}
        lk = s.get("latency_ns_kinds") or {}
        lat = [" / ".join(_ms(lk.get(k, {}).get(p)) for p in ("p50_ns", "p99_ns", "p999_ns",
                                                                "max_ns")) for k in kinds]
        wb = pt.get("device_write_bytes")
        busy = s.get("machine_busy")
        rows.append([str(c["processes"]), c["mode"], _rate(ops),
                     "-" if not ops else f"{ops['min']:,.0f}-{ops['max']:,.0f}",
                     "-" if not ops or ops.get("cov") is None else f"{100 * ops['cov']:.1f}%"]
                    + lat +
                    ["-" if not wb else f"{wb['median'] / 1024:.1f}",
                     _per(pt.get("device_flushes")), _per(pt.get("log_syncs")),
                     _per(pt.get("cpu_us"), 1), _per(pt.get("process_context_switches"), 1),
                     _per(pt.get("machine_cpu_us"), 1), _per(pt.get("context_switches"), 1),
                     "-" if not busy else f"{100 * busy['median']:.0f}%",
                     check_cell(c["repetitions"])])
    return (f"{wl}: every cell (medians over measured rounds; latency pooled over processes "
            f"and rounds, per transaction kind)", cols, rows, ["r", "l"] + ["r"] * (len(cols) - 2))


def notes(doc: Dict[str, Any]) -> List[str]:
    b = doc["params"]["bench"]
    out = [f"rate: {b['rate']}. Median, min-max and CoV over measured rounds.",
           "x wal-full / x wal-normal: the mode's rate over stock WAL's in the same round, "
           "median (min-max) over rounds.",
           f"latency: {b['latency']}.",
           f"start: {b['start']}; stop: {b['stop']}.",
           f"steady state: {b['steady_state']}.",
           f"busy: {b['busy']}.",
           "flush/tx, KB/tx: the device's own counters (/sys/class/block/*/stat) over the "
           "timed window, per transaction; other I/O on the device counts too. log syncs/tx: "
           "waldio modes, PRAGMA waldio_stats flushes + O_DSYNC writes summed over processes.",
           f"cpu: {b['cpu']}.",
           "check: distinct pids; all processes running at one instant; histogram counts = "
           "transactions; rows returned; what the database holds = what the processes "
           "counted; settings read back in every process; PRAGMA integrity_check."]
    out.append(doc["params"]["target"].get("note", ""))
    return out + list(b.get("notes") or [])


def header_params(doc: Dict[str, Any], sqlite_key: Optional[Any] = None) -> Dict[str, Any]:
    """The parameter header; sqlite_key(mode doc) names where SQLite's parameters were
    read (default: the mode's build and label)."""
    b = dict(doc["params"]["bench"])
    b.pop("modes", None)
    out: Dict[str, Any] = {"schema_version": doc["schema_version"],
                           "provenance": dict(doc["tool"], _why={}),
                           "workload": dict(b, _why={})}
    for m in doc["modes"]:
        sq = (m.get("params") or {}).get("sqlite")
        if sq:
            out[sqlite_key(m) if sqlite_key else
                f"sqlite ({m['sqlite_build'] or 'apsw'}, read on {m['label']})"] = sq
            break
    common = doc["params"].get("common") or {}
    for k in ("filesystem", "device", "system"):
        if k in common:
            out[k] = common[k]
    tgt = dict(doc["params"]["target"])
    tgt.pop("note", None)
    out["target"] = dict(tgt, _why={})
    return out


def settings_rows(doc: Dict[str, Any]) -> Tuple[str, List[str], List[List[str]]]:
    cols = ["mode", "vfs", "PRAGMAs (in order)", "URI options", "read back in every process"]
    rows = []
    for m in doc["modes"]:
        seen = set()
        for c in doc["cells"]:
            if c["mode"] != m["label"]:
                continue
            for r in c["repetitions"]:
                for p in r["processes"]:
                    st = p["settings"] or {}
                    seen.add(", ".join(f"{k}={_params.format_value(st.get(k))}" for k in (
                        "journal_mode", "synchronous", "page_size", "reserve_bytes",
                        "wal_autocheckpoint", "waldio.sync", "waldio.group") if k in st))
        rows.append([m["label"], m["vfs"], "; ".join(m["pragmas"]),
                     ", ".join(f"{k}={v}" for k, v in m["uri_options"].items()) or "-",
                     " | ".join(sorted(seen)) or "-"])
    return "settings of every mode", cols, rows


def print_checklist(out: Printer, doc: Dict[str, Any]) -> None:
    """Everything: parameters, settings read back, every cell, what each number means."""
    print_parameters(out, header_params(doc), settings_rows(doc), doc["modes"])
    for wl in doc["params"]["bench"]["workloads"]:
        out.table(*detail_table(doc, wl))
    for n in notes(doc):
        if n:
            out.wrapped(f"- {n}")
    out.line("")
