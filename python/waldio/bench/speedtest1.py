"""SQLite's own benchmark, speedtest1, stock and waldio side by side.

``waldio bench --workload speedtest1`` runs ``test/speedtest1.c`` of SQLite 3.40.1,
built by ``bench/speedtest1/build.sh`` against the 3.40.1 amalgamation with
libwaldio linked in (:func:`build`).  One binary is both sides: the environment
variable ``WALDIO_SPEEDTEST1_VFS`` makes libwaldio the default VFS or leaves
SQLite's ``unix`` VFS alone (``bench/speedtest1/waldio_speedtest1.c``).

A mode is one of the bench's own mode names:

============  =======================  ==================================
mode          VFS                      synchronous
============  =======================  ==================================
wal-full      unix (stock)             FULL (speedtest1's default)
wal-normal    unix                     NORMAL (PRAGMA on every connection)
wal-off       unix                     OFF (speedtest1 ``--nosync``)
waldio-full   waldio                   FULL
waldio-normal waldio                   NORMAL
waldio-off    waldio                   OFF (``--nosync``)
============  =======================  ==================================

always with ``--journal wal --verify --size N``.  Each waldio mode is compared
with the stock mode of the same synchronous setting.

Per round, for every size, every pair (stock, waldio) runs once; the order
inside a pair alternates from round to round (A B, B A, ...), so a carry-over
from one run to the next (write-back, cache state) does not always favour the
same side.  Every run starts in a fresh directory, after ``os.sync()``.  The
times are speedtest1's own: per test, wall clock in milliseconds, and its
TOTAL (the sum of the tests; opening and closing the database are outside).

Checks per run: exit status 0, TOTAL and the verification hash printed, and
what the connection reported just before it closed (``WALDIO_SPEEDTEST1_REPORT``):
the VFS, ``journal_mode=wal``, the ``synchronous`` level asked for, and for
waldio ``PRAGMA waldio``'s sync.  Across runs: the verification hash of every
run of one size must be identical (every mode, every round).

The result document (:func:`Speedtest1.run`) is JSON-ready; its schema is
``schemas/speedtest1.schema.json``; :mod:`.speedtest1_report` prints it.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from waldio import params as _params
from waldio.library import checkout_root

from .iostat import Snapshot, device_delta, devices_for, sync_dir
from .provenance import timestamp, tool_info
from .settings import BenchError
from .stats import summarize
from .target import Target

SCHEMA_VERSION = 1

SQLITE_VERSION = "3.40.1"

# mode -> (side, synchronous asked, how)
SPEEDTEST1_MODES: Dict[str, Tuple[str, str]] = {
    "wal-full": ("stock", "FULL"),
    "wal-normal": ("stock", "NORMAL"),
    "wal-off": ("stock", "OFF"),
    "waldio-full": ("waldio", "FULL"),
    "waldio-normal": ("waldio", "NORMAL"),
    "waldio-off": ("waldio", "OFF"),
}
DEFAULT_MODES = ("wal-full", "waldio-full", "wal-normal", "waldio-normal", "wal-off",
                 "waldio-off")
DEFAULT_SIZES = (25, 100)
_SYNC_LEVEL = {"OFF": "0", "NORMAL": "1", "FULL": "2"}

# The goal of issue 10, checked and printed with every comparison.
GOAL_TOTAL_RATIO = 1.03
GOAL_TEST_RATIO = 1.15
GOAL_TEST_MIN_MS = 20.0

_TEST_LINE = re.compile(r"^\s*(\d+) - (.*?)\.*\s+(\d+)\.(\d{3})s\s*$")
_TOTAL_LINE = re.compile(r"^\s*TOTAL\.*\s+(\d+)\.(\d{3})s\s*$")
_HASH_LINE = re.compile(r"^Verification Hash: (\d+) ([0-9a-f]+)\s*$")
_VERSION_LINE = re.compile(r"^-- Speedtest1 for SQLite (.*)$")

ProgressFn = Callable[[Dict[str, Any]], None]


def baseline_of(mode: str) -> str:
    """The stock mode a waldio mode is compared with (same synchronous setting)."""
    side, sync = SPEEDTEST1_MODES[mode]
    return mode if side == "stock" else f"wal-{sync.lower()}"


def parse_modes(text: Optional[str]) -> List[str]:
    """``--modes`` for speedtest1: a comma list of :data:`SPEEDTEST1_MODES`; every waldio
    mode needs its stock baseline in the list.  ValueError names what is wrong."""
    if not text:
        return list(DEFAULT_MODES)
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in SPEEDTEST1_MODES]
    if bad or not words:
        raise ValueError(f"--modes: {', '.join(map(repr, bad)) or 'nothing'} cannot run "
                         f"speedtest1 (accepted: {', '.join(SPEEDTEST1_MODES)})")
    out = list(dict.fromkeys(words))
    for m in out:
        if baseline_of(m) not in out:
            raise ValueError(f"--modes: {m} is compared with {baseline_of(m)}, which is not "
                             f"in the list; add it")
    return out


def parse_sizes(text: Optional[str]) -> List[int]:
    if not text:
        return list(DEFAULT_SIZES)
    out = []
    for w in text.split(","):
        w = w.strip()
        try:
            v = int(w)
        except ValueError:
            raise ValueError(f"--size: expected a comma list of integers >= 1, got {text!r}")
        if v < 1:
            raise ValueError(f"--size: expected integers >= 1, got {v}")
        out.append(v)
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------ build

def build_script() -> Path:
    root = checkout_root()
    if root is None:
        raise BenchError("speedtest1 is built by bench/speedtest1/build.sh of a waldio source "
                         "checkout, and this waldio is installed without one: run from a "
                         "checkout, or pass --speedtest1-binary")
    return root / "bench" / "speedtest1" / "build.sh"


def default_lib() -> Optional[Path]:
    root = checkout_root()
    return root / "build" / "libwaldio.a" if root else None


def build(lib: Optional[str] = None, cache: Optional[str] = None,
          log: Optional[Callable[[str], None]] = None) -> Path:
    """Build (or find up to date) the speedtest1 binary; returns its path.

    The first build fetches SQLite's source and compiles the amalgamation
    (minutes); later ones relink only when libwaldio.a changed.
    """
    script = build_script()
    argv = ["bash", str(script)]
    if lib:
        argv += ["--lib", lib]
    if cache:
        argv += ["--cache", cache]
    p = subprocess.run(argv, capture_output=True, text=True)
    if log:
        for line in p.stderr.splitlines():
            log(line)
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-15:])
        raise BenchError(f"building speedtest1 failed ({' '.join(argv)}, exit {p.returncode}):"
                         f"\n{tail}")
    path = Path(p.stdout.strip().splitlines()[-1])
    if not os.access(path, os.X_OK):
        raise BenchError(f"{script} printed {path}, which is not an executable")
    return path


def build_info(binary: Path) -> Dict[str, str]:
    info: Dict[str, str] = {"binary": str(binary)}
    f = binary.with_name(binary.name + ".build-info")
    try:
        for line in f.read_text().splitlines():
            k, eq, v = line.partition("=")
            if eq:
                info[k] = v
    except OSError as e:
        info["build_info"] = f"unknown ({f}: {e.strerror})"
    return info


# ------------------------------------------------------------------ parsing

def parse_output(text: str) -> Dict[str, Any]:
    """speedtest1's stdout: tests (id, name, ms), TOTAL ms, verification hash, version."""
    tests: List[Dict[str, Any]] = []
    total = hash_bytes = hash_hex = version = None
    for line in text.splitlines():
        m = _TEST_LINE.match(line)
        if m:
            tests.append({"id": int(m.group(1)), "name": m.group(2).strip(),
                          "ms": int(m.group(3)) * 1000 + int(m.group(4))})
            continue
        m = _TOTAL_LINE.match(line)
        if m:
            total = int(m.group(1)) * 1000 + int(m.group(2))
            continue
        m = _HASH_LINE.match(line)
        if m:
            hash_bytes, hash_hex = int(m.group(1)), m.group(2)
            continue
        m = _VERSION_LINE.match(line)
        if m:
            version = m.group(1).strip()
    return {"tests": tests, "total_ms": total,
            "hash": None if hash_hex is None else f"{hash_bytes} {hash_hex}",
            "version": version}


def parse_proc_io(text: Optional[str]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for line in (text or "").splitlines():
        k, _, v = line.partition(":")
        try:
            out[k.strip()] = int(v)
        except ValueError:
            pass
    return out


# ------------------------------------------------------------------ settings

@dataclass
class Speedtest1Settings:
    sizes: List[int] = field(default_factory=lambda: list(DEFAULT_SIZES))
    modes: List[str] = field(default_factory=lambda: list(DEFAULT_MODES))
    repetitions: int = 5
    warmup: int = 1
    stock_reserve: int = 0
    binary: Optional[str] = None         # prebuilt binary; None: build
    lib: Optional[str] = None            # libwaldio.a to link; None: the checkout's build/
    cache: Optional[str] = None          # build.sh --cache
    timeout_s: float = 1800.0            # per run

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)


def default_fs_size_mib(s: Speedtest1Settings) -> int:
    """A sparse loop image: speedtest1 --size 100 leaves a ~60 MB database and WAL."""
    return max(512, 8 * max(s.sizes) + 256)


# ------------------------------------------------------------------ runner

class Speedtest1:
    """Runs speedtest1 in every mode, interleaved; returns the result document."""

    def __init__(self, settings: Speedtest1Settings, *,
                 progress: Optional[ProgressFn] = None,
                 log: Optional[Callable[[str], None]] = None) -> None:
        self.s = settings
        self.progress = progress or (lambda ev: None)
        self.log = log or (lambda line: None)
        self.binary: Optional[Path] = None

    def prepare(self) -> Path:
        if self.s.binary:
            b = Path(self.s.binary)
            if not os.access(b, os.X_OK):
                raise BenchError(f"--speedtest1-binary {b}: not an executable")
            self.binary = b
        else:
            self.binary = build(self.s.lib, self.s.cache, self.log)
        return self.binary

    def _pairs(self) -> List[Tuple[str, ...]]:
        """Each stock mode with the waldio modes compared with it, in the order given."""
        out: List[Tuple[str, ...]] = []
        seen = set()
        for m in self.s.modes:
            base = baseline_of(m)
            if base in seen:
                continue
            seen.add(base)
            out.append(tuple([base] + [x for x in self.s.modes
                                       if x != base and baseline_of(x) == base]))
        return out

    def argv_env(self, mode: str, size: int, db: str, report: str
                 ) -> Tuple[List[str], Dict[str, str]]:
        side, sync = SPEEDTEST1_MODES[mode]
        assert self.binary is not None
        argv = [str(self.binary), "--size", str(size), "--journal", "wal", "--verify"]
        env = {"WALDIO_SPEEDTEST1_VFS": side, "WALDIO_SPEEDTEST1_REPORT": report}
        if sync == "OFF":
            argv.append("--nosync")
        elif sync == "NORMAL":
            env["WALDIO_SPEEDTEST1_SYNCHRONOUS"] = "normal"
        if side == "stock" and self.s.stock_reserve:
            argv += ["--reserve", str(self.s.stock_reserve)]
        argv.append(db)
        return argv, env

    def run(self, target: Target) -> Dict[str, Any]:
        s = self.s
        if self.binary is None:
            self.prepare()
        started, t_start = timestamp(), time.perf_counter()
        root = target.path
        devices = devices_for(root)
        pairs = self._pairs()
        rounds = s.warmup + s.repetitions
        total = rounds * len(s.sizes) * len(s.modes)
        runs: List[Dict[str, Any]] = []
        step = 0
        for rnd in range(rounds):
            warm = rnd < s.warmup
            for size in s.sizes:
                for pair in pairs:
                    order = list(pair) if rnd % 2 == 0 else list(reversed(pair))
                    for mode in order:
                        step += 1
                        self.progress({"event": "start", "step": step, "total": total,
                                       "mode": f"{mode} size {size}", "round": rnd,
                                       "warmup": warm})
                        run = self._run_one(mode, size, rnd, warm, root, devices)
                        runs.append(run)
                        self.progress({"event": "done", "step": step, "total": total,
                                       "mode": f"{mode} size {size}", "round": rnd,
                                       "warmup": warm, "ok": run["ok"],
                                       "error": run["error"], "total_ms": run["total_ms"]})
        self._check_hashes(runs)
        results = [self._summarize_size(size, runs) for size in s.sizes]
        common = None
        try:
            common = {"filesystem": _params.filesystem_params(root),
                      "device": _params.device_params(root),
                      "system": _params.system_params()}
        except Exception:  # noqa: BLE001
            common = None
        example = {m: self.argv_env(m, s.sizes[0], "speedtest1.db",
                                    "<run dir>/report.jsonl") for m in s.modes}
        doc = {
            "schema_version": SCHEMA_VERSION,
            "kind": "speedtest1",
            "tool": dict(tool_info(), name="waldio bench --workload speedtest1",
                         started_utc=started, finished_utc=timestamp(),
                         wall_s=round(time.perf_counter() - t_start, 3)),
            "params": {
                "speedtest1": dict(
                    s.to_json(),
                    sqlite_version=SQLITE_VERSION,
                    build=build_info(self.binary) if self.binary else {},
                    journal="wal",
                    invocation={m: {"argv": a[1:], "env": e} for m, (a, e) in example.items()},
                    modes_table={m: {"side": SPEEDTEST1_MODES[m][0],
                                     "synchronous": SPEEDTEST1_MODES[m][1],
                                     "baseline": baseline_of(m)} for m in s.modes},
                    interleave="every round: for each size, each stock mode and the waldio "
                               "modes compared with it, the order reversed every other round",
                    before_each_run="a fresh directory; os.sync() and fsync of the directory; "
                                    "page cache not dropped",
                    timing="speedtest1's own clock: wall time per test in ms; TOTAL = sum of "
                           "the tests (open and close of the database not included)",
                    io_window="device counters from just before the process starts to after "
                              "it exits and a final os.sync()",
                    temp_files="SQLite's temporary files (VACUUM, sorter) go where SQLite puts "
                               "them ($TMPDIR or /var/tmp), not counted on a loop device",
                    goal={"total_ratio_max": GOAL_TOTAL_RATIO,
                          "test_ratio_max": GOAL_TEST_RATIO,
                          "test_min_stock_ms": GOAL_TEST_MIN_MS},
                    devices=[asdict(x) for x in devices]),
                "target": dict(target.info, note=target.note),
                "common": common,
            },
            "runs": runs,
            "results": results,
            "ok": all(r["ok"] for r in runs),
        }
        return doc

    # -------------------------------------------------------------- one run

    def _run_one(self, mode: str, size: int, rnd: int, warm: bool, root: str,
                 devices: Sequence[Any]) -> Dict[str, Any]:
        side, sync = SPEEDTEST1_MODES[mode]
        run: Dict[str, Any] = {"mode": mode, "size": size, "round": rnd, "warmup": warm,
                               "side": side, "synchronous": sync, "ok": False, "error": None,
                               "returncode": None, "wall_ns": None, "total_ms": None,
                               "tests": [], "hash": None, "version": None, "report": None,
                               "io": None, "checks": []}
        d = os.path.join(root, f"r{rnd}-s{size}-{mode}")
        shutil.rmtree(d, ignore_errors=True)
        os.mkdir(d)
        report = os.path.join(d, "report.jsonl")
        db = os.path.join(d, "speedtest1.db")
        argv, extra = self.argv_env(mode, size, db, report)
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("WALDIO_SPEEDTEST1_"):
                del env[k]
        env.update(extra)
        try:
            os.sync()
            sync_dir(d)
            snap0 = Snapshot(list(devices))
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter_ns()
            try:
                p = subprocess.run(argv, env=env, cwd=d, capture_output=True, text=True,
                                   timeout=self.s.timeout_s)
            except subprocess.TimeoutExpired:
                run["error"] = f"speedtest1 did not finish within {self.s.timeout_s:.0f} s"
                return run
            t1 = time.perf_counter_ns()
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            snap1 = Snapshot(list(devices))
            os.sync()
            snap2 = Snapshot(list(devices))
            run["returncode"] = p.returncode
            run["wall_ns"] = t1 - t0
            out = parse_output(p.stdout)
            run.update(tests=out["tests"], total_ms=out["total_ms"], hash=out["hash"],
                       version=out["version"])
            if p.returncode != 0:
                run["error"] = (f"speedtest1 exited with status {p.returncode}: "
                                + (p.stderr.strip()[-400:] or p.stdout.strip()[-400:]))
            run["stderr"] = p.stderr[-2000:]
            run["report"] = self._read_report(report)
            run["io"] = {
                "devices": [{"name": dv.name, "role": dv.role, "kind": dv.kind,
                             "process_lifetime": device_delta(snap0.dev[i], snap1.dev[i]),
                             "total": device_delta(snap0.dev[i], snap2.dev[i])}
                            for i, dv in enumerate(devices)],
                "rusage": {"user_s": ru1.ru_utime - ru0.ru_utime,
                           "system_s": ru1.ru_stime - ru0.ru_stime,
                           "out_blocks": ru1.ru_oublock - ru0.ru_oublock,
                           "in_blocks": ru1.ru_inblock - ru0.ru_inblock}}
            self._check_run(run, mode)
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            run["error"] = f"{type(e).__name__}: {e}"
            run["ok"] = False
        finally:
            shutil.rmtree(d, ignore_errors=True)
        return run

    @staticmethod
    def _read_report(path: str) -> Optional[Dict[str, Any]]:
        try:
            lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip()]
        except OSError:
            return None
        if not lines:
            return None
        doc = json.loads(lines[-1])      # the main connection closes last
        doc["connections"] = len(lines)
        doc["proc_io"] = parse_proc_io(doc.get("proc_io"))
        return doc

    def _check_run(self, run: Dict[str, Any], mode: str) -> None:
        side, sync = SPEEDTEST1_MODES[mode]
        rep = run["report"] or {}
        items: List[Dict[str, Any]] = []

        def item(name: str, expected: Any, actual: Any, ok: Optional[bool] = None) -> None:
            items.append({"name": name, "expected": expected, "actual": actual,
                          "ok": (expected == actual) if ok is None else ok})

        item("exit status", 0, run["returncode"])
        item("TOTAL printed", True, run["total_ms"] is not None)
        item("verification hash printed", True, run["hash"] is not None)
        item("tests printed", True, bool(run["tests"]))
        item("report written before the close", True, bool(rep))
        vfs = rep.get("vfs")
        if side == "stock":
            item("VFS", "unix", vfs)
            item("reserved bytes", self.s.stock_reserve, rep.get("reserve_bytes"))
        else:
            item("VFS", "waldio/unix", vfs)
            item("PRAGMA waldio sync", sync.lower(), (rep.get("waldio") or {}).get("sync"))
        item("journal_mode", "wal", str(rep.get("journal_mode")).lower())
        item("synchronous", _SYNC_LEVEL[sync], str(rep.get("synchronous")))
        item("SQLite version", SQLITE_VERSION, rep.get("sqlite_version"))
        run["checks"] = items
        run["ok"] = run["error"] is None and all(i["ok"] for i in items)

    @staticmethod
    def _check_hashes(runs: List[Dict[str, Any]]) -> None:
        """Every run of one size must print the same verification hash."""
        by_size: Dict[int, Dict[str, int]] = {}
        for r in runs:
            if r["hash"]:
                by_size.setdefault(r["size"], {})
                by_size[r["size"]][r["hash"]] = by_size[r["size"]].get(r["hash"], 0) + 1
        for r in runs:
            hashes = by_size.get(r["size"], {})
            common = max(hashes, key=lambda h: hashes[h]) if hashes else None
            ok = r["hash"] is not None and len(hashes) == 1
            r["checks"].append({"name": f"verification hash identical in every run of size "
                                        f"{r['size']}", "expected": common, "actual": r["hash"],
                                "ok": ok})
            r["ok"] = r["ok"] and ok

    # ------------------------------------------------------------ summaries

    def _summarize_size(self, size: int, runs: List[Dict[str, Any]]) -> Dict[str, Any]:
        measured = [r for r in runs if r["size"] == size and not r["warmup"]]
        modes: Dict[str, Any] = {}
        names: Dict[int, str] = {}
        order: List[int] = []
        for mode in self.s.modes:
            mine = [r for r in measured if r["mode"] == mode and r["ok"]]
            per_test: Dict[int, List[float]] = {}
            for r in mine:
                for t in r["tests"]:
                    if t["id"] not in names:
                        names[t["id"]] = t["name"]
                        order.append(t["id"])
                    per_test.setdefault(t["id"], []).append(t["ms"])
            stats = [r["report"].get("waldio_stats") for r in mine
                     if r.get("report") and r["report"].get("waldio_stats")]
            modes[mode] = {
                "runs_ok": len(mine),
                "runs_failed": sum(1 for r in measured if r["mode"] == mode and not r["ok"]),
                "total_ms": summarize([r["total_ms"] for r in mine]),
                "cpu_s": summarize([_cpu(r) for r in mine if _cpu(r) is not None]),
                "tests": {str(k): summarize(v) for k, v in per_test.items()},
                "device_write_bytes": summarize([_dev(r, "write_bytes") for r in mine
                                                 if _dev(r, "write_bytes") is not None]),
                "device_flushes": summarize([_dev(r, "flushes") for r in mine
                                             if _dev(r, "flushes") is not None]),
                "process_wchar": summarize([r["report"]["proc_io"].get("wchar", 0) for r in mine
                                            if r.get("report")]),
                "waldio_stats": _median_stats(stats) if stats else None,
            }
        comparisons = []
        for mode in self.s.modes:
            base = baseline_of(mode)
            if base == mode:
                continue
            comparisons.append(self._compare(size, mode, base, measured, modes, names, order))
        return {"size": size, "tests": [{"id": i, "name": names[i]} for i in order],
                "modes": modes, "comparisons": comparisons}

    def _compare(self, size: int, mode: str, base: str, measured: List[Dict[str, Any]],
                 modes: Dict[str, Any], names: Dict[int, str], order: List[int]
                 ) -> Dict[str, Any]:
        mine, theirs = modes[mode], modes[base]
        by_round = {(r["round"], r["mode"]): r for r in measured if r["ok"]}
        rounds = sorted({rnd for (rnd, m) in by_round if m == mode and (rnd, base) in by_round})

        def slower(tid: int) -> Dict[str, int]:
            """In how many rounds waldio took longer than stock (paired by round)."""
            n = k = 0
            for rnd in rounds:
                a = {t["id"]: t["ms"] for t in by_round[(rnd, base)]["tests"]}.get(tid)
                b = {t["id"]: t["ms"] for t in by_round[(rnd, mode)]["tests"]}.get(tid)
                if a is not None and b is not None:
                    n += 1
                    k += b > a
            return {"rounds": n, "waldio_slower": k}
        rows = []
        over = []
        for tid in order:
            a = theirs["tests"].get(str(tid))
            b = mine["tests"].get(str(tid))
            ratio = (b["median"] / a["median"]) if a and b and a["median"] > 0 else None
            counted = bool(a and a["median"] >= GOAL_TEST_MIN_MS)
            flagged = counted and ratio is not None and ratio > GOAL_TEST_RATIO
            rows.append({"id": tid, "name": names[tid],
                         "stock_ms": a, "waldio_ms": b, "ratio": ratio,
                         "slower": slower(tid),
                         "counted_in_goal": counted, "over_goal": flagged})
            if flagged:
                over.append(tid)
        paired = []
        for (rnd, m), r in sorted(by_round.items()):
            if m != mode:
                continue
            b = by_round.get((rnd, base))
            if b and b["total_ms"]:
                paired.append({"round": rnd, "ratio": r["total_ms"] / b["total_ms"]})
        ts, tw = theirs["total_ms"], mine["total_ms"]
        total_ratio = (tw["median"] / ts["median"]) if ts and tw and ts["median"] else None
        ps = summarize([p["ratio"] for p in paired])
        ca, cb = theirs.get("cpu_s"), mine.get("cpu_s")
        hashes = {r["hash"] for r in measured if r["mode"] in (mode, base) and r["hash"]}
        return {
            "mode": mode, "baseline": base,
            "total": {"stock_ms": ts, "waldio_ms": tw, "ratio": total_ratio,
                      "paired": {"per_round": paired,
                                 "median": ps["median"] if ps else None,
                                 "min": ps["min"] if ps else None,
                                 "max": ps["max"] if ps else None}},
            "cpu": {"stock_s": ca, "waldio_s": cb,
                    "ratio": (cb["median"] / ca["median"]) if ca and cb and ca["median"]
                    else None},
            "tests": rows,
            "hash_identical": len(hashes) == 1,
            "hashes": sorted(hashes),
            "goal": {"total_ok": total_ratio is not None and total_ratio <= GOAL_TOTAL_RATIO,
                     "tests_over": over,
                     "ok": (total_ratio is not None and total_ratio <= GOAL_TOTAL_RATIO
                            and not over and len(hashes) == 1)},
        }


def _cpu(run: Dict[str, Any]) -> Optional[float]:
    """CPU seconds (user + system) of the speedtest1 process."""
    ru = (run.get("io") or {}).get("rusage")
    return None if not ru else ru["user_s"] + ru["system_s"]


def _dev(run: Dict[str, Any], key: str) -> Optional[float]:
    devs = (run.get("io") or {}).get("devices") or []
    return devs[0]["total"].get(key) if devs else None


def _median_stats(stats: List[Dict[str, Any]]) -> Dict[str, float]:
    keys = sorted({k for s in stats for k, v in s.items() if isinstance(v, (int, float))})
    out = {}
    for k in keys:
        sm = summarize([s.get(k, 0) for s in stats])
        out[k] = sm["median"] if sm else 0
    return out
