"""Tables of ``waldio bench`` results (``waldio report``, and the bench's own output).

Everything here reads the result document (the JSON ``waldio bench --json``
writes; schema in ``schemas/bench.schema.json``, read by :mod:`.results`), so a saved file prints
exactly like the run that produced it.  Nothing is computed that the document
does not hold, except formatting and, for the stacked bytes plot, the
difference "total window minus timed window".

Plots are :mod:`.plots`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from waldio import params as _params

from . import verdict as V
from .printer import Printer, progress_reporter  # noqa: F401 - progress_reporter: waldio trace

# keys shown per mode in the settings table (read back), removed from the header
_PER_MODE_SQLITE = ("vfs", "journal_mode", "synchronous", "page_size", "reserve_bytes",
                    "cache_size", "mmap_size", "locking_mode", "wal_autocheckpoint",
                    "journal_size_limit")


_HEADER_UNSET = ("cache_size", "mmap_size", "locking_mode", "wal_autocheckpoint",
                 "journal_size_limit", "flush_ms", "prealloc", "group_ms", "group_bytes")


def _num(v: Optional[float], digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def _ops(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def _ms(ns: Optional[float]) -> str:
    if ns is None:
        return "-"
    ms = ns / 1e6
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def check_cell(reps: List[Dict[str, Any]]) -> str:
    """``ok``, or ``FAIL k/n``: repetitions that failed, warm-up included."""
    nfail = sum(1 for r in reps if not r["ok"])
    return "ok" if nfail == 0 and reps else f"FAIL {nfail}/{len(reps)}"


def summary_median(s: Optional[Dict[str, Any]]) -> Optional[float]:
    return None if not s else s.get("median")


def _ratio(r: Optional[Dict[str, Any]], percent: bool = False) -> str:
    if not r or r.get("median") is None:
        return "-"
    if percent:
        return f"{100 * r['median']:.0f}% ({100 * r['min']:.0f}-{100 * r['max']:.0f})"
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def primary_device(doc: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    devs = doc["params"]["bench"].get("devices") or []
    return devs[0] if devs else None


def results_table(doc: Dict[str, Any]) -> Tuple[str, List[str], List[List[str]], List[str]]:
    bench = doc["params"]["bench"]
    base = doc["ratios"]["baseline"]
    ceil = doc.get("ceiling", {}).get("mode")
    dev = primary_device(doc)
    devname = dev["name"] if dev else "device"
    same = doc["ratios"].get("same_sync") or {}
    cols = ["mode", "ops/s", "min-max", "CoV", f"x {base}"]
    if same:
        cols.append("x same-sync stock")
    if ceil:
        cols.append(f"of {ceil}")
    cols += ["p50 ms", "p99 ms", "max ms", f"{devname} KB/txn", "in timed",
             "flush/txn", "proc KB/txn", "write() KB/txn", "log KB/txn", "log syncs/txn",
             "check"]
    rows = []
    for m in doc["modes"]:
        s = m["summary"] or {}
        ops = s.get("ops_per_s")
        lat = s.get("latency_ns") or {}
        pt = s.get("per_txn") or {}
        check = check_cell(m["repetitions"])
        row = [m["label"] + (" *" if m["label"] == base else ""),
               _ops(summary_median(ops)),
               f"{_ops(ops['min'])}-{_ops(ops['max'])}" if ops else "-",
               f"{100 * ops['cov']:.1f}%" if ops and ops.get("cov") is not None else "-",
               _ratio(doc["ratios"]["modes"].get(m["label"]))]
        if same:
            row.append(_ratio(same.get(m["label"])))
        if ceil:
            row.append(_ratio(doc["ceiling"]["modes"].get(m["label"]), percent=True))

        def kb(key: str) -> str:
            v = summary_median(pt.get(key))
            return "-" if v is None else f"{v / 1024:.1f}"
        fl = summary_median(pt.get("device_flushes"))
        ls = summary_median(pt.get("log_syncs"))
        row += [_ms(lat.get("p50_ns")), _ms(lat.get("p99_ns")), _ms(lat.get("max_ns")),
                kb("device_write_bytes"), kb("device_write_bytes_timed"),
                "-" if fl is None else f"{fl:.2f}",
                kb("process_write_bytes"), kb("process_wchar"),
                "n/a" if m["kind"] != "waldio" else kb("log_bytes_written"),
                "n/a" if m["kind"] != "waldio" else ("-" if ls is None else f"{ls:.2f}"),
                check]
        rows.append(row)
    n = bench["repetitions"]
    title = (f"results: {bench.get('preset') or 'custom'} workload, {n} measured repetition"
             f"{'s' if n != 1 else ''} per mode (medians)")
    notes = result_notes(doc)
    return title, cols, rows, notes


def result_notes(doc: Dict[str, Any]) -> List[str]:
    b = doc["params"]["bench"]
    tgt = doc["params"]["target"]
    dev = primary_device(doc)
    ckpt = f"checkpoint({b['checkpoint_mode'].upper()})"
    timed = ", ".join(ckpt if p == "checkpoint" else p for p in b["timed_region"])
    untimed = ", ".join(b["not_timed"]) or "nothing"
    notes = [
        f"ops/s = transactions / wall time of the timed region [{timed}]; not timed: {untimed}. "
        f"Median over {b['repetitions']} measured repetition{'s' if b['repetitions'] != 1 else ''}"
        f" after {b['warmup']} warm-up round{'s' if b['warmup'] != 1 else ''}, "
        f"modes interleaved round by round; min-max and CoV (stdev/mean) over repetitions.",
        f"x {doc['ratios']['baseline']} (baseline, marked *): ratio of ops/s in the same round, "
        f"median (min-max) over rounds."
        + (" x same-sync stock: the same, for each waldio mode against stock WAL with its "
           "synchronous setting (waldio-full: wal-full, waldio-normal: wal-normal, "
           "waldio-off: wal-off)." if doc["ratios"].get("same_sync") else "")
        + (f" 'of {doc['ceiling']['mode']}': the same against the raw system-call ceiling."
           if doc.get("ceiling", {}).get("mode") else ""),
        "p50/p99/max ms: per-transaction latency (perf_counter_ns), pooled over measured "
        "repetitions" + ("; includes open and close (open-close regime)"
                         if b["regime"] == "open-close" else "") + ".",
    ]
    if dev:
        shared = ("it carries only this benchmark's file system (its journal included)"
                  if dev["kind"] == "loop" else
                  "it is shared with the rest of the system, so other processes' writes "
                  "are counted too")
        notes.append(
            f"{dev['name']} KB/txn: bytes written to /dev/{dev['name']} ({dev['kind']}) per "
            f"transaction (/sys/class/block/{dev['name']}/stat, field 7), from just before the "
            f"timed region to after the untimed close and a final os.sync(); 'in timed': "
            f"inside the timed region only; flush/txn: flush requests (field 16) in the "
            f"same total window. Device counters include any other I/O on the device: {shared}.")
    notes.append("proc KB/txn: /proc/self/io write_bytes in the total window: bytes this "
                 "process caused to be written, charged when a page-cache folio is dirtied "
                 "(the whole folio, which can be far larger than the write on kernels with "
                 "large folios) or when direct I/O is issued; an upper-bound estimate, the "
                 "device column is what reached the disk.")
    notes.append("write() KB/txn: /proc/self/io wchar in the total window: bytes this process "
                 "passed to write system calls (buffered and direct alike, before any page-cache "
                 "effect). log KB/txn: waldio modes only, PRAGMA waldio_stats bytes_written "
                 "(bytes libwaldio wrote into its log, timed region).")
    notes.append("log syncs/txn: waldio modes only (PRAGMA waldio_stats: log fdatasyncs + "
                 "O_DSYNC writes, timed region); stock modes issue syncs SQLite does not count "
                 "(n/a): compare flush/txn.")
    notes.append("check: rows changed, rows left, sum of keys, rows holding the update value, "
                 "PRAGMA integrity_check, journal_mode/synchronous (and waldio sync/group/layout) read "
                 "back on a new connection after every repetition; raw modes: stamps read back.")
    notes.append(f"regime {b['regime']}" + (
        f": {b.get('reused_procedure')}" if b["regime"] == "reused" else
        ": fresh database and log files per repetition" if b["regime"] == "growing" else
        ": a connection per transaction") + ".")
    if tgt.get("note"):
        notes.append(tgt["note"])
    notes += b.get("notes") or []
    return notes


def headline(doc: Dict[str, Any]) -> Tuple[str, List[Tuple[str, Optional[Dict[str, Any]], str]]]:
    """What the headline compares: each mode against stock WAL with its synchronous
    setting, or, when no mode has one, each mode against the baseline."""
    same = doc["ratios"].get("same_sync") or {}
    n = doc["params"]["bench"]["repetitions"]
    rounds = f"median of {n} paired round{'s' if n != 1 else ''} (min-max)"
    if same:
        return (f"headline: each waldio mode against stock WAL with its synchronous setting, "
                f"ops/s ratio, {rounds}",
                [(m["label"], same[m["label"]], same[m["label"]]["stock"]) for m in doc["modes"]
                 if m["label"] in same])
    base = doc["ratios"]["baseline"]
    return (f"headline: each mode against {base}, ops/s ratio, {rounds}",
            [(m["label"], doc["ratios"]["modes"].get(m["label"]), base) for m in doc["modes"]
             if m["label"] != base])


def print_headline(out: Printer, doc: Dict[str, Any]) -> None:
    title, rows = headline(doc)
    out.wrapped(title)
    width = max([len(label) for label, _, _ in rows] + [4])
    refw = max([len(ref) for _, _, ref in rows] + [4])
    noisy = 0
    for label, r, ref in rows:
        why = V.too_noisy(r)
        noisy += why is not None
        ratio = "-" if not r or r.get("median") is None else \
            f"{r['median']:.2f}x {ref:<{refw}}  ({r['min']:.2f}-{r['max']:.2f})"
        out.wrapped(f"  {label:<{width}}  {ratio}" +
                    (f"  too noisy to conclude: {why}" if why else ""), indent=" " * (width + 4))
    if noisy:
        busy = [(m["summary"] or {}).get("machine_busy") for m in doc["modes"]]
        busy_med = [b["median"] for b in busy if b]
        load = (f"; the machine's CPUs were up to {100 * max(busy_med):.0f}% busy during the "
                f"timed regions, this run included" if busy_med else "")
        out.wrapped(f"  {noisy} of {len(rows)} cannot be told from noise: the machine moved the "
                    f"rounds more than the modes differ{load}. Rerun with more --repetitions, "
                    f"on a quieter machine.", indent="  ")
    out.line("")


def compact_table(doc: Dict[str, Any]) -> Tuple[str, List[str], List[List[str]]]:
    """One row per mode, the columns a first look needs (the checklist has them all)."""
    base = doc["ratios"]["baseline"]
    dev = primary_device(doc)
    devname = dev["name"] if dev else "device"
    cols = ["mode", "ops/s", "min-max", f"x {base}", "p50 ms", "p99 ms", f"{devname} KB/tx",
            "flush/tx", "check"]
    rows = []
    for m in doc["modes"]:
        s = m["summary"] or {}
        ops = s.get("ops_per_s")
        lat = s.get("latency_ns") or {}
        pt = s.get("per_txn") or {}
        kb = summary_median(pt.get("device_write_bytes"))
        fl = summary_median(pt.get("device_flushes"))
        rows.append([m["label"] + (" *" if m["label"] == base else ""),
                     _ops(summary_median(ops)),
                     f"{_ops(ops['min'])}-{_ops(ops['max'])}" if ops else "-",
                     V.ratio_text(doc["ratios"]["modes"].get(m["label"])),
                     _ms(lat.get("p50_ns")), _ms(lat.get("p99_ns")),
                     "-" if kb is None else f"{kb / 1024:.1f}",
                     "-" if fl is None else f"{fl:.2f}",
                     check_cell(m["repetitions"])])
    b = doc["params"]["bench"]
    n = b["repetitions"]
    title = f"results: {b.get('preset') or 'custom'} workload, medians of {n} round" + \
        ("s" if n != 1 else "")
    return title, cols, rows


def print_summary(out: Printer, doc: Dict[str, Any], headline: bool = True) -> None:
    """The default output after a run: the headline, then the compact table."""
    if headline:
        print_headline(out, doc)
    out.table(*compact_table(doc), optional=("min-max", "p50 ms", "check", "flush/tx"))
    timed = "+".join(doc["params"]["bench"]["timed_region"])
    out.wrapped(f"ops/s = transactions / timed wall ({timed}); * = the baseline; KB/tx, "
                f"flush/tx: the device's own counters per transaction. Every column and what "
                f"it means: the checklist.")
    out.line("")


def print_checklist(out: Printer, doc: Dict[str, Any]) -> None:
    """Everything a run recorded: the parameter header, every table, every note."""
    print_header(out, doc)
    print_results(out, doc, notes=True)


def print_results(out: Printer, doc: Dict[str, Any], notes: bool = True) -> None:
    title, cols, rows, nts = results_table(doc)
    out.table(title, cols, rows)
    ph = phase_table(doc)
    if ph:
        out.table(*ph)
    rd = reader_table(doc)
    if rd:
        out.table(*rd)
    ws = waldio_stats_table(doc)
    if ws:
        out.table(*ws)
    ht = harness_table(doc)
    if ht:
        out.table(*ht)
    if notes:
        for n in nts:
            out.wrapped(f"- {n}")
        out.line("")


def _us(sm: Optional[Dict[str, Any]]) -> str:
    if not sm:
        return "-"
    return f"{sm['min']:.2f} (median {sm['median']:.2f})"


def _overhead(ov: Optional[Dict[str, Any]]) -> str:
    if not ov:
        return "-"
    p = ov.get("paired") or {}
    return f"{ov['best']:+.2f} (paired {p.get('min', 0):+.1f}..{p.get('max', 0):+.1f})"


def harness_table(doc: Dict[str, Any]) -> Optional[Tuple[str, List[str], List[List[str]]]]:
    """The calibration round: SQLite's own cost per transaction and what each loop adds."""
    h = doc["params"]["bench"].get("harness") or {}
    cal = h.get("calibration")
    if not cal:
        return None
    cols = ["SQLite build", "txns", "SQLite alone us/txn", "C loop adds us/txn",
            "Python loop adds us/txn"]
    rows = []
    for b in cal["builds"]:
        ov = b["overhead_us_per_txn"]
        rows.append([f"{b['build']} {b['sqlite_version']}", str(b["transactions"]),
                     _us(b["us_per_txn"].get("bare")), _overhead(ov.get("native")),
                     _overhead(ov.get("python"))])
    title = (f"harness overhead per transaction (this run's timed loop: {cal['loop_used']}, "
             f"statements {h.get('statements')}): calibration on in-memory databases, "
             f"synchronous=OFF, {cal['builds'][0]['rounds']} rounds: best round (median); "
             f"'adds' = best round minus SQLite alone's best (paired = round by round, "
             f"min..max); 'SQLite alone' = the C loop without timestamps")
    return title, cols, rows


def phase_table(doc: Dict[str, Any]) -> Optional[Tuple[str, List[str], List[List[str]]]]:
    phases = doc["params"]["bench"]["phases"]
    if len(phases) < 2:
        return None
    cols = ["mode"] + [f"{p} ops/s" for p in phases]
    rows = []
    for m in doc["modes"]:
        ph = (m["summary"] or {}).get("phases") or []
        cells = [m["label"]]
        for i in range(len(phases)):
            s = ph[i]["ops_per_s"] if i < len(ph) else None
            cells.append("-" if not s else f"{_ops(s['median'])} ({_ops(s['min'])}-{_ops(s['max'])})")
        rows.append(cells)
    return ("per phase: median (min-max) ops/s; each phase's wall time runs from its first "
            "transaction's start to its last one's end", cols, rows)


STATS_PER_TXN = ("log_writes", "buffered_writes", "frames_written", "page_overwrites",
                 "header_rewrites", "bytes_written", "flushes", "disk_reads", "cache_misses",
                 "prealloc_extends")


def waldio_stats_table(doc: Dict[str, Any]) -> Optional[Tuple[str, List[str], List[List[str]]]]:
    """PRAGMA waldio_stats per transaction (median over repetitions), waldio modes only."""
    rows = []
    for m in doc["modes"]:
        st = (m.get("summary") or {}).get("waldio_stats_per_txn")
        if not st:
            continue
        cells = [m["label"]]
        for k in STATS_PER_TXN:
            v = st.get(k)
            if v is None:
                cells.append("-")
            elif k.startswith("bytes"):
                cells.append(f"{v / 1024:,.1f}K")
            else:
                cells.append(f"{v:,.2f}" if v < 100 else f"{v:,.0f}")
        rows.append(cells)
    if not rows:
        return None
    return ("PRAGMA waldio_stats per transaction, timed region (median over repetitions): "
            "direct log writes, buffered (page-cache) writes, frames, page overwrites and "
            "checksum rewrites of uncommitted frames, bytes, fdatasyncs, reads from the device, "
            "slot-cache misses, preallocation extensions", ["mode"] + list(STATS_PER_TXN), rows)


def reader_table(doc: Dict[str, Any]) -> Optional[Tuple[str, List[str], List[List[str]]]]:
    bench = doc["params"]["bench"]
    if not bench.get("reader_scans"):
        return None
    base = doc["ratios"]["baseline"]
    rr = doc["ratios"].get("reader_time") or {}
    rs = doc["ratios"].get("reader_time_same_sync") or {}
    cols = ["mode", "ms/scan", "min-max", f"time x {base}", "time x same-sync stock",
            "first scan ms", "mean ms/scan",
            "log preads/scan", "KB read/scan", "slot-cache hits/scan"]
    rows = []
    for m in doc["modes"]:
        r = (m.get("summary") or {}).get("reader")
        if not r:
            continue
        sc, first = r.get("scan_ms"), r.get("first_scan_ms")
        st = r.get("waldio_stats_per_scan") or {}
        ratio = rr.get(m["label"]) or {}
        rows.append([m["label"] + (" *" if m["label"] == base else ""),
                     "-" if not sc else f"{sc['median']:.1f}",
                     "-" if not sc else f"{sc['min']:.1f}-{sc['max']:.1f}",
                     _ratio(ratio), _ratio(rs.get(m["label"])),
                     "-" if not first else f"{first['median']:.1f}",
                     "-" if not r.get("mean_scan_ms") else f"{r['mean_scan_ms']['median']:.1f}",
                     "n/a" if m["kind"] != "waldio" else _num(st.get("disk_reads"), 1),
                     "n/a" if m["kind"] != "waldio" else _num(
                         None if st.get("bytes_read") is None else st["bytes_read"] / 1024, 1),
                     "n/a" if m["kind"] != "waldio" else _num(st.get("cache_hits"), 1)])
    return (f"reader in another process, after the timed region with the writer's connections "
            f"open: {bench['reader_scans']} full scans of every table per repetition; ms/scan = "
            f"median scan of a repetition, median (min-max) over repetitions; time x {base}: "
            f"paired by round (lower is faster); first scan: the reader's first (its cold "
            f"start), median over repetitions; mean ms/scan: all scans of a repetition, first "
            f"included; log preads (disk_reads: reads of the log file, served by the page "
            f"cache or the device), KB read and slot-cache hits from PRAGMA waldio_stats of "
            f"the reader's connection",
            cols, rows)


def failure_lines(tag: str, reps: List[Dict[str, Any]]) -> List[str]:
    """``FAILED <tag> <round>: <why>`` for every error and failed check of ``reps``."""
    out = []
    for r in reps:
        if r["ok"]:
            continue
        what = f"{tag} " + ("warm-up" if r["warmup"] else f"round {r['index']}")
        if r.get("error"):
            out.append(f"FAILED {what}: {r['error']}")
        out += [f"FAILED {what}: {it['name']}: expected {it['expected']!r}, got "
                f"{it['actual']!r}" for it in r["checks"]["items"] if not it["ok"]]
    return out


def print_failures(out: Printer, doc: Dict[str, Any]) -> None:
    for m in doc["modes"]:
        for line in failure_lines(m["label"], m["repetitions"]):
            out.wrapped(line)


def _first_settings(m: Dict[str, Any]) -> Dict[str, Any]:
    for r in m["repetitions"]:
        if not r["warmup"] and r.get("settings"):
            return r["settings"]
    for r in m["repetitions"]:
        if r.get("settings"):
            return r["settings"]
    return {}


def settings_table(doc: Dict[str, Any]) -> Tuple[str, List[str], List[List[str]]]:
    cols = ["mode", "sqlite"] + list(_PER_MODE_SQLITE) + ["waldio sync", "group", "layout",
                                                           "io", "prealloc"]
    rows = []
    for m in doc["modes"]:
        st = _first_settings(m)
        sq = ((m.get("params") or {}).get("sqlite") or {})
        build = m.get("sqlite_build") or "-"
        if sq.get("sqlite_version"):
            build = f"{build} {sq['sqlite_version']}"
        if m["kind"] == "raw":
            rows.append([m["label"], "none"] + ["-"] * (len(cols) - 2))
            continue
        cells = [m["label"], build]
        for k in _PER_MODE_SQLITE:
            v = sq.get(k) if k == "vfs" else st.get(k, sq.get(k))
            cells.append(_params.format_value(v) if v is not None else _params.UNKNOWN)
        for k in ("waldio.sync", "waldio.group", "waldio.layout", "waldio.io",
                  "waldio.preallocated_bytes"):
            cells.append(_params.format_value(st[k]) if k in st else "-")
        rows.append(cells)
    return ("SQLite settings in effect per mode (read back from the run connection; "
            "'unknown' = could not be read)", cols, rows)


def header_params(doc: Dict[str, Any]) -> Dict[str, Any]:
    """The parameter header: provenance, workload, SQLite (per build), fs, device, system."""
    common = doc["params"].get("common") or {}
    out: Dict[str, Any] = {"schema_version": doc["schema_version"]}
    tool = dict(doc["tool"])
    out["provenance"] = dict(tool, _why={})
    bench = dict(doc["params"]["bench"])
    bench.pop("plan", None)
    bench.pop("modes", None)            # the settings table lists them
    if isinstance(bench.get("harness"), dict):   # the calibration has its own table
        bench["harness"] = {k: v for k, v in bench["harness"].items() if k != "calibration"}
    if "mixed" not in bench.get("phases", []):
        bench.pop("mix", None)
    for k in _HEADER_UNSET:
        if k in bench and bench[k] is None:
            bench[k] = "not set: SQLite's default, read back per mode below" \
                if k in _PER_MODE_SQLITE else "not set (libwaldio default; see PRAGMA waldio)"
    out["workload"] = dict(bench, _why={})
    builds: Dict[str, List[Dict[str, Any]]] = {}
    for m in doc["modes"]:
        if m.get("params") and m["params"].get("sqlite"):
            builds.setdefault(m.get("sqlite_build") or "?", []).append(m)
    for build, ms in builds.items():
        secs = [m["params"]["sqlite"] for m in ms]
        keys = [k for k in secs[0] if k != "_why"]
        sec: Dict[str, Any] = {}
        why: Dict[str, str] = {}
        for k in keys:
            if k in _PER_MODE_SQLITE:
                sec[k] = "per mode, see the settings table"
                continue
            if k == "reserve_bytes_source":
                continue  # in the JSON
            vals = [s.get(k) for s in secs]
            if all(v == vals[0] for v in vals):
                sec[k] = vals[0]
                if vals[0] == _params.UNKNOWN:
                    why[k] = secs[0].get("_why", {}).get(k, "")
            else:
                sec[k] = "varies by mode: " + ", ".join(
                    f"{m['label']}={_params.format_value(v)}" for m, v in zip(ms, vals))
        sec["_why"] = why
        out[f"sqlite ({build})"] = sec
    for k in ("filesystem", "device", "system"):
        if k in common:
            out[k] = common[k]
    tgt = dict(doc["params"]["target"])
    tgt.pop("note", None)               # printed under the results
    out["target"] = dict(tgt, _why={})
    return out


def print_header(out: Printer, doc: Dict[str, Any]) -> None:
    print_parameters(out, header_params(doc), settings_table(doc), doc["modes"])


def print_parameters(out: Printer, header: Dict[str, Any], settings: Tuple[Any, ...],
                     modes: List[Dict[str, Any]]) -> None:
    """The parameter header, the settings table and what each mode's commit does."""
    out.line("== parameters (read back from SQLite and the system; 'unknown (why)' = "
             "could not be read) ==")
    out.line(_params.format_params(header, width=110))
    out.line("")
    out.table(*settings)
    out.line("modes:")
    for m in modes:
        out.line(f"  {m['label']}: {m['commit']}; durability: {m['durability']}")
    out.line("")


def print_brief_header(out: Printer, doc: Dict[str, Any]) -> None:
    common = doc["params"].get("common") or {}
    fs = common.get("filesystem") or {}
    sysp = common.get("system") or {}
    dev = primary_device(doc)
    out.line(f"run {doc['tool'].get('started_utc')} by {doc['tool'].get('name')} "
             f"{doc['tool'].get('waldio_version')} (git {str(doc['tool'].get('git_commit'))[:12]}); "
             f"wall {doc['tool'].get('wall_s')} s")
    out.line(f"kernel {sysp.get('kernel')}; CPU {sysp.get('cpu_model')} x{sysp.get('cpu_count')}; "
             f"fs {fs.get('fstype')} ({fs.get('source')}), journals: {fs.get('journals')}; "
             f"device {dev['name'] if dev else 'unknown'}")
    out.table(*settings_table(doc))
