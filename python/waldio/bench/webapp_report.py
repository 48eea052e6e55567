"""Tables of ``waldio bench --workload webapp`` results (the run's own output and
``waldio report`` of its JSON).  Everything printed is read from the result document
(:mod:`.webapp`; schema ``schemas/bench-webapp.schema.json``).

Default output: the headline (each mode's requests/s and p99 latency against stock
WAL FULL and NORMAL, median of the paired rounds, per mix and worker count, marked
where the rounds do not support a conclusion, see :mod:`.verdict`), then one table
per mix.  The checklist (every parameter, every cell's spread, CPU, context switches,
device I/O, what the graceful stop left, and what each number means) goes to a file,
or to the terminal with ``--verbose``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from . import verdict as V
from .printer import Printer
from .processes_report import header_params
from .report import check_cell, failure_lines, print_parameters
from .webapp import MIX_DOCS


def _ratio(doc: Dict[str, Any], mix: str, n: int, mode: str, stock: str
           ) -> Optional[Dict[str, Any]]:
    for r in doc["ratios"]:
        if (r["mix"], r["processes"], r["mode"], r["stock"]) == (mix, n, mode, stock):
            return r
    return None


def references(doc: Dict[str, Any]) -> List[str]:
    return sorted({r["stock"] for r in doc["ratios"]}, key=["wal-full", "wal-normal"].index)


def _med(s: Optional[Dict[str, Any]], fmt: str = "{:,.0f}", scale: float = 1.0) -> str:
    return "-" if not s else fmt.format(s["median"] * scale)


def _ms(s: Optional[Dict[str, Any]]) -> str:
    if not s:
        return "-"
    v = s["median"]
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _both(r: Optional[Dict[str, Any]]) -> str:
    """``1.20 / 0.16``: requests/s and p99 ratios (noisy ones marked)."""
    if not r or r.get("median") is None:
        return "-"
    return f"{V.marked(r)} / {V.marked(r.get('p99'))}"


def print_headline(out: Printer, doc: Dict[str, Any]) -> None:
    b = doc["params"]["bench"]
    ns = b["processes"]
    modes = [m["label"] for m in doc["modes"]]
    noisy = 0
    for ref in references(doc):
        rows = []
        for mix in b["mixes"]:
            for m in (x for x in modes if x != ref):
                cells = []
                for n in ns:
                    r = _ratio(doc, mix, n, m, ref)
                    cells.append(_both(r))
                    noisy += sum(bool(x and x.get("median") is not None and V.too_noisy(x))
                                 for x in (r, (r or {}).get("p99")))
                rows.append([mix, m] + cells)
        out.table(f"headline: x stock {ref}: requests/s / p99 latency, each over {ref}'s in "
                  f"the same round, median of {b['rounds']['measured']} rounds",
                  ["mix", "mode"] + [f"{n} workers" for n in ns], rows,
                  ["l", "l"] + ["r"] * len(ns))
    if noisy:
        out.wrapped(f"{V.NOISY_LEGEND}. {noisy} of these ratios cannot be told from noise on "
                    f"this run: rerun with more --repetitions, on a quieter machine.")
        out.line("")


def compact_table(doc: Dict[str, Any], mix: str
                  ) -> Tuple[str, List[str], List[List[str]], List[str]]:
    b = doc["params"]["bench"]
    refs = references(doc)
    cols = ["workers", "mode", "req/s"] + [f"x {r}" for r in refs] + \
        ["p50 ms", "p99 ms", "p99.9 ms", "commits/s", "busy", "CPU us/req", "server us/req"]
    rows = []
    for c in (c for c in doc["cells"] if c["mix"] == mix):
        s = c["summary"] or {}
        lat = s.get("latency_ms") or {}
        cpu = s.get("cpu") or {}
        check = check_cell(c["repetitions"])
        rows.append([str(c["processes"]), c["mode"],
                     _med(s.get("requests_per_s")) if check == "ok" else check] +
                    [V.ratio_text(_ratio(doc, mix, c["processes"], c["mode"], r))
                     if r != c["mode"] else "-" for r in refs] +
                    [_ms(lat.get("p50")), _ms(lat.get("p99")), _ms(lat.get("p999")),
                     _med(s.get("commits_per_s")),
                     _med(cpu.get("machine_busy"), "{:.0f}%", 100),
                     _med(cpu.get("machine_cpu_us_per_request")),
                     _med(cpu.get("server_cpu_us_per_request"))])
    title = (f"webapp-{mix}: {MIX_DOCS[mix]}; median of {b['rounds']['measured']} rounds; "
             f"latency per request (wrk); busy and CPU/req machine-wide, server us/req the "
             f"gunicorn workers' own")
    return title, cols, rows, ["r", "l"] + ["r"] * (len(cols) - 2)


def print_results(out: Printer, doc: Dict[str, Any], headline: bool = True) -> None:
    if headline:
        print_headline(out, doc)
    for mix in doc["params"]["bench"]["mixes"]:
        out.table(*compact_table(doc, mix))


def print_failures(out: Printer, doc: Dict[str, Any]) -> None:
    for c in doc["cells"]:
        for line in failure_lines(f"webapp-{c['mix']} x{c['processes']} {c['mode']}",
                                  c["repetitions"]):
            out.wrapped(line)


# ------------------------------------------------------------ the checklist

def _spread(s: Optional[Dict[str, Any]], fmt: str = "{:,.0f}") -> str:
    return "-" if not s else f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-" \
                             f"{fmt.format(s['max'])})"


def _stop_state(c: Dict[str, Any]) -> str:
    """What the graceful stops left beside the database, per measured round."""
    out = []
    for r in c["repetitions"]:
        log = (r.get("stop") or {}).get("log") or {}
        if not log:
            out.append("?")
        elif not log.get("wal_exists"):
            out.append("no -wal")
        elif log.get("waldio"):
            out.append(f"{log['wal_bytes'] // 1024} KiB" +
                       (" frames" if log.get("holds_frames") else "") +
                       (" guard" if log.get("in_use_guard") else ""))
        else:
            out.append(f"-wal {log['wal_bytes'] // 1024} KiB")
    return ", ".join(out)


def detail_table(doc: Dict[str, Any], mix: str
                 ) -> Tuple[str, List[str], List[List[str]], List[str]]:
    cols = ["workers", "mode", "req/s (min-max)", "p50/p99/p99.9 ms", "commits/s",
            "CPU us/req", "CPU us/commit", "cs/req", "cs/commit", "load before",
            "KB/commit", "flush/commit", "log device reads/req", "log syncs/req",
            "log after stop (each round)", "check"]
    rows = []
    for c in (c for c in doc["cells"] if c["mix"] == mix):
        s = c["summary"] or {}
        lat = s.get("latency_ms") or {}
        cpu = s.get("cpu") or {}
        pc = s.get("per_commit") or {}
        wpr = s.get("waldio_per_request") or {}
        rows.append([str(c["processes"]), c["mode"], _spread(s.get("requests_per_s")),
                     " / ".join(_ms(lat.get(k)) for k in ("p50", "p99", "p999")),
                     _med(s.get("commits_per_s")),
                     _med(cpu.get("machine_cpu_us_per_request")),
                     _med(cpu.get("machine_cpu_us_per_commit")),
                     _med(cpu.get("context_switches_per_request"), "{:.1f}"),
                     _med(cpu.get("context_switches_per_commit"), "{:.1f}"),
                     _med(s.get("loadavg_before"), "{:.1f}"),
                     _med(pc.get("device_write_bytes"), "{:.1f}", 1 / 1024),
                     _med(pc.get("device_flushes"), "{:.2f}"),
                     _med(wpr.get("device_reads"), "{:.2f}"), _med(wpr.get("flushes"), "{:.2f}"),
                     _stop_state(c), check_cell(c["repetitions"])])
    return (f"webapp-{mix}: every cell (medians over measured rounds, min-max in brackets)",
            cols, rows, ["r", "l"] + ["r"] * (len(cols) - 2))


def settings_rows(doc: Dict[str, Any]) -> Tuple[str, List[str], List[List[str]]]:
    cols = ["mode", "server environment", "read back in every worker"]
    rows = []
    for m in doc["modes"]:
        seen = set()
        for c in (c for c in doc["cells"] if c["mode"] == m["label"]):
            for r in c["repetitions"]:
                for w in r["workers"]:
                    wd = w.get("waldio") or {}
                    seen.add(f"sqlite {w.get('sqlite')}, journal_mode={w.get('journal_mode')}, "
                             f"synchronous={w.get('synchronous')}" +
                             (f", waldio {wd.get('sync')}/{wd.get('group')}/"
                              f"{wd.get('group_scope')}/{wd.get('layout')}" if wd else ""))
        env = ", ".join(f"{k}={v}" for k, v in m["environment"].items() if k != "LD_PRELOAD")
        if "LD_PRELOAD" in m["environment"]:
            env = "LD_PRELOAD=libwaldio_preload.so, " + env
        rows.append([m["label"], env, " | ".join(sorted(seen)) or "-"])
    return "settings of every mode", cols, rows


def notes(doc: Dict[str, Any]) -> List[str]:
    b = doc["params"]["bench"]
    out = [f"cell: {b['cell']}.", f"rate: {b['rate']}; {b['commits']}.",
           f"latency: {b['latency']}.", f"load: {b['load']['generator']}; {b['load']['note']}.",
           f"cpu: {b['cpu']}.",
           "x wal-full / x wal-normal: the mode's value over stock's in the same round, median "
           "(min-max) over rounds; headline: requests/s / p99 latency.",
           "KB/commit, flush/commit: the device's own counters (/sys/class/block/*/stat) "
           "over the timed window, per acknowledged commit.",
           "log after stop: what the graceful stop (SIGTERM to gunicorn) left beside the "
           "database: waldio's log (its size, 'frames' if it holds any, 'guard' if its "
           "in-use guard is set) or stock's -wal.",
           "check: no failed request; every worker's settings; gunicorn exited 0; every "
           "acknowledged post id and visit count in the database; integrity_check; waldio "
           "modes: the log left by the stop holds no frames and no guard, at most the idle "
           "bound."]
    out.append(doc["params"]["target"].get("note", ""))
    return out + list(b.get("notes") or [])


def print_checklist(out: Printer, doc: Dict[str, Any]) -> None:
    print_parameters(out, header_params(doc, lambda m: f"sqlite (of the checks, read on "
                                                       f"{m['label']})"),
                     settings_rows(doc), doc["modes"])
    for mix in doc["params"]["bench"]["mixes"]:
        out.table(*detail_table(doc, mix))
    for n in notes(doc):
        if n:
            out.wrapped(f"- {n}")
    out.line("")
