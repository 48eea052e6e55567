"""Tables of ``waldio bench --workload speedtest1`` results (the run's own output and
``waldio report`` of its JSON): everything printed is read from the result document
(:mod:`.speedtest1`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from .printer import Printer

STAT_KEYS = ("log_writes", "buffered_writes", "frames_written", "bytes_written", "flushes",
             "disk_reads", "cache_misses", "prealloc_extends")


def _ms(s: Optional[Dict[str, Any]]) -> str:
    if not s:
        return "-"
    return f"{s['median']:,.0f}"


def _spread(s: Optional[Dict[str, Any]]) -> str:
    if not s:
        return "-"
    return f"{s['min']:,.0f}-{s['max']:,.0f}"


def _ratio(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}"


def _mb(s: Optional[Dict[str, Any]]) -> str:
    return "-" if not s else f"{s['median'] / 1e6:,.1f}"


def _cpu_cells(cpu: Optional[Dict[str, Any]]) -> List[str]:
    if not cpu or not cpu.get("stock_s") or not cpu.get("waldio_s"):
        return ["-", "-", "-"]
    return [f"{cpu['stock_s']['median']:.2f}", f"{cpu['waldio_s']['median']:.2f}",
            _ratio(cpu.get("ratio"))]


def summary_table(doc: Dict[str, Any]) -> tuple:
    cols = ["size", "synchronous", "stock", "stock TOTAL ms", "min-max", "waldio",
            "waldio TOTAL ms", "min-max", "ratio", "paired min-max", "CPU s stock",
            "CPU s waldio", "CPU ratio",
            f"tests >{doc['params']['speedtest1']['goal']['test_ratio_max']}x", "hash", "goal"]
    rows = []
    for res in doc["results"]:
        for c in res["comparisons"]:
            t = c["total"]
            sync = doc["params"]["speedtest1"]["modes_table"][c["mode"]]["synchronous"]
            p = t["paired"]
            rows.append([str(res["size"]), sync, c["baseline"], _ms(t["stock_ms"]),
                         _spread(t["stock_ms"]), c["mode"], _ms(t["waldio_ms"]),
                         _spread(t["waldio_ms"]), _ratio(t["ratio"]),
                         "-" if p["min"] is None else f"{p['min']:.2f}-{p['max']:.2f}",
                         *_cpu_cells(c.get("cpu")),
                         ", ".join(map(str, c["goal"]["tests_over"])) or "none",
                         "identical" if c["hash_identical"] else "DIFFERENT",
                         "met" if c["goal"]["ok"] else "NOT met"])
    sp = doc["params"]["speedtest1"]
    title = (f"speedtest1 (SQLite {sp['sqlite_version']}), --journal wal: TOTAL, median of "
             f"{sp['repetitions']} interleaved runs per mode (ms); ratio = waldio median / "
             f"stock median; CPU s: user + system time of the speedtest1 process (getrusage), "
             f"which other jobs on the machine disturb far less than wall time")
    return title, cols, rows


def test_table(doc: Dict[str, Any], res: Dict[str, Any], comp: Dict[str, Any]) -> tuple:
    sp = doc["params"]["speedtest1"]
    sync = sp["modes_table"][comp["mode"]]["synchronous"]
    cols = ["test", "name", f"{comp['baseline']} ms", "min-max", f"{comp['mode']} ms",
            "min-max", "ratio", "slower in", ""]
    rows = []
    for t in comp["tests"]:
        flag = "OVER" if t["over_goal"] else ("" if t["counted_in_goal"] else "(<20 ms)")
        sl = t.get("slower") or {}
        rows.append([str(t["id"]), t["name"][:48], _ms(t["stock_ms"]), _spread(t["stock_ms"]),
                     _ms(t["waldio_ms"]), _spread(t["waldio_ms"]), _ratio(t["ratio"]),
                     f"{sl.get('waldio_slower', '-')}/{sl.get('rounds', '-')}", flag])
    tot = comp["total"]
    per = tot["paired"]["per_round"]
    rows.append(["", "TOTAL", _ms(tot["stock_ms"]), _spread(tot["stock_ms"]),
                 _ms(tot["waldio_ms"]), _spread(tot["waldio_ms"]), _ratio(tot["ratio"]),
                 f"{sum(p['ratio'] > 1 for p in per)}/{len(per)}",
                 "met" if comp["goal"]["total_ok"] else "OVER"])
    title = (f"speedtest1 --size {res['size']} --journal wal, synchronous {sync}: per test, "
             f"median (min-max) of {sp['repetitions']} runs; slower in: rounds in which "
             f"waldio took longer than stock in the same round")
    return title, cols, rows


def io_table(doc: Dict[str, Any], res: Dict[str, Any]) -> tuple:
    devs = doc["params"]["speedtest1"].get("devices") or []
    dev = devs[0]["name"] if devs else "device"
    cols = ["mode", f"{dev} MB/run", "flushes/run", "syscall write MB"] + list(STAT_KEYS)
    rows = []
    for mode, m in res["modes"].items():
        st = m.get("waldio_stats") or {}
        fl = m.get("device_flushes")
        cells = [mode, _mb(m.get("device_write_bytes")),
                 "-" if not fl else f"{fl['median']:,.0f}", _mb(m.get("process_wchar"))]
        for k in STAT_KEYS:
            v = st.get(k)
            if v is None:
                cells.append("-")
            elif k.startswith("bytes"):
                cells.append(f"{v / 1e6:,.1f}M")
            else:
                cells.append(f"{v:,.0f}")
        rows.append(cells)
    return (f"speedtest1 --size {res['size']}: I/O per run (medians): device bytes until a "
            f"final os.sync(), flush requests, bytes passed to write system calls "
            f"(/proc/self/io wchar), and PRAGMA waldio_stats at the close", cols, rows)


def notes(doc: Dict[str, Any]) -> List[str]:
    sp = doc["params"]["speedtest1"]
    g = sp["goal"]
    b = sp.get("build") or {}
    out = [
        f"times: {sp['timing']}. Median over {sp['repetitions']} measured rounds after "
        f"{sp['warmup']} warm-up round(s); {sp['interleave']}.",
        f"goal (issue 10): TOTAL ratio <= {g['total_ratio_max']}, no test taking >= "
        f"{g['test_min_stock_ms']:.0f} ms on stock above {g['test_ratio_max']}x, verification "
        f"hashes identical.",
        f"binary: {b.get('binary', '?')} (speedtest1.c and amalgamation of SQLite "
        f"{sp['sqlite_version']} from {b.get('source', '?')}; {b.get('cflags', '?')}; linked "
        f"with {b.get('libwaldio', '?')}, sha256 {str(b.get('libwaldio_sha256', '?'))[:16]})",
    ]
    for m, inv in sp["invocation"].items():
        env = " ".join(f"{k}={v}" for k, v in inv["env"].items()
                       if k != "WALDIO_SPEEDTEST1_REPORT")
        out.append(f"{m}: {env} speedtest1 {' '.join(inv['argv'])}")
    if doc["params"]["target"].get("note"):
        out.append(doc["params"]["target"]["note"])
    return out


def print_results(out: Printer, doc: Dict[str, Any], detail: bool = True) -> None:
    if detail:
        for res in doc["results"]:
            for comp in res["comparisons"]:
                out.table(*test_table(doc, res, comp))
            out.table(*io_table(doc, res))
    out.table(*summary_table(doc))
    for n in notes(doc):
        out.line(f"- {n}")
    out.line("")


def print_failures(out: Printer, doc: Dict[str, Any]) -> None:
    for r in doc["runs"]:
        if r["ok"]:
            continue
        what = "warm-up" if r["warmup"] else f"round {r['round']}"
        if r.get("error"):
            out.line(f"FAILED {r['mode']} size {r['size']} {what}: {r['error']}")
        for it in r["checks"]:
            if not it["ok"]:
                out.line(f"FAILED {r['mode']} size {r['size']} {what}: {it['name']}: "
                         f"expected {it['expected']!r}, got {it['actual']!r}")
