"""``waldio bench --workload webapp --processes N,...``: a real web app, stock SQLite and
waldio side by side (issue 27).

What one cell runs
==================

The app is ``examples/webapp`` of the checkout: Flask, Python's own ``sqlite3`` module
(the system SQLite), one connection per worker process, served by gunicorn with N sync
workers; the load is wrk (Debian's) running ``mix.lua``.  A mode reaches the app the
way a user's choice would: stock modes run it as it is; waldio modes start gunicorn in
the environment ``waldio env`` prints (``LD_PRELOAD`` of the preload library, and
``WALDIO_GROUP``/``WALDIO_SYNC``/``WALDIO_LAYOUT`` for the mode).  ``synchronous`` is
the app's setting (``WEBAPP_SYNCHRONOUS``).

1. A copy of the mix's template (users with 10 posts each; reserved bytes as the
   mode's page format needs, :func:`~.template.reserve_for`; WAL mode).
2. gunicorn starts; every worker opens its connection and writes the settings it
   read back (``PRAGMA journal_mode``, ``synchronous``, ``waldio``) before it
   takes a request.
3. A warm-up wrk run (:data:`WARM_S`), then the timed wrk run, with device and
   machine counters (``/proc/stat``: busy CPU time, context switches) and every
   worker's CPU time around it.
4. SIGTERM to the gunicorn master: a graceful stop, as a deployment does it.  The
   log beside the database is read afterwards.
5. Checks on a new connection (the mode's own, :class:`~.sqlite_env.Opener`):
   every post id and every visit count a 200 reply acknowledged, in both wrk runs,
   is in the database; ``integrity_check``; no failed request; every worker's
   settings as the mode says; for waldio modes, what the graceful stop left: no
   frames, no in-use guard, at most the idle bound (wal_log.h L8).

Rounds interleave every mode for each mix and worker count; ratios against stock WAL
FULL and NORMAL are paired round by round (requests/s, and p99 latency).

Invariants: a cell passes only with every check ok; a request that failed (a status
other than 200, a socket error, a timeout) fails it; nothing of a cell survives into
the next (fresh copy, fresh server, every process of the server ended).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from waldio import logformat
from waldio import params as _params
from waldio.library import checkout_root
from waldio.run import environment

from .iostat import Snapshot, cpu_busy_share, device_windows, devices_for, settle
from .modes import ModeSpec
from .provenance import timestamp
from .settings import BenchError, Settings
from .sqlite_env import Opener, SqliteEnv
from .processes import open_modes, result_document, run_rounds, stock_ratios
from .stats import pair_ratios, sum_counters, summarize
from .target import Target
from .template import building, reserve_for
from .worker_pool import file_tail

KIND = "webapp"
WORKLOAD = "webapp"
# mix -> (% reads, % inserts); the rest are visit updates
MIXES: Dict[str, Tuple[int, int]] = {"read": (80, 10), "write": (50, 25)}
WORKLOADS = (WORKLOAD,) + tuple(f"{WORKLOAD}-{m}" for m in MIXES)
MIX_DOCS = {"read": "read-heavy: 80% GET /users/<id> (3 indexed SELECTs), 10% POST /posts "
                    "(one INSERT), 10% POST /users/<id>/visit (BEGIN IMMEDIATE counter update)",
            "write": "write-heavy: 50% reads, 25% inserts, 25% visit updates"}
DEFAULT_MODES = ("wal-full", "wal-normal", "waldio-full", "waldio-full-durable",
                 "waldio-full-strict", "waldio-full-async")
DEFAULT_DURATION_S = 5
DEFAULT_USERS = 1000
DEFAULT_BUSY_TIMEOUT_MS = 5000   # the app's own default
CONNECTIONS_PER_WORKER = 4
WRK_THREADS = 2
WRK_TIMEOUT_S = 30
WARM_S = 1                   # wrk counts whole seconds
BASE_FS_MIB = 1024          # the loop image (sparse): templates, one cell's files, and
LOG_MIB_PER_S = 128         # its logs (they need not restart under a saturating load)
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0        # gunicorn's graceful_timeout (30 s) and then some
PERCENTILES = (("p50", "50"), ("p90", "90"), ("p99", "99"), ("p999", "99.9"))

ProgressFn = Callable[[Dict[str, Any]], None]


def app_dir() -> Path:
    """examples/webapp of the checkout this package runs from."""
    root = checkout_root()
    d = root / "examples" / "webapp" if root else None
    if d is None or not (d / "app.py").is_file():
        raise BenchError("--workload webapp runs examples/webapp of a waldio checkout; this "
                         "waldio is not installed from one")
    return d


def parse_mixes(words: Sequence[str]) -> Optional[List[str]]:
    """The mixes a ``--workload`` list asks for (``webapp``: both), or None if it names
    no web-app workload; ValueError if it mixes them with other workloads."""
    mixes = []
    for w in words:
        if w == WORKLOAD:
            mixes += list(MIXES)
        elif w.startswith(WORKLOAD + "-") and w[len(WORKLOAD) + 1:] in MIXES:
            mixes.append(w[len(WORKLOAD) + 1:])
    if not mixes:
        return None
    if len(mixes) != sum(2 if w == WORKLOAD else 1 for w in words):
        raise ValueError("--workload webapp runs on its own (webapp, webapp-read or "
                         "webapp-write; not with insert, update, web)")
    return list(dict.fromkeys(mixes))


@dataclass
class WebappSettings:
    """What the web-app bench runs besides the modes."""

    base: Settings              # repetitions, warm-up rounds, page size, busy timeout, seed...
    processes: List[int]        # gunicorn worker counts
    mixes: List[str]
    duration_s: int = DEFAULT_DURATION_S
    users: int = DEFAULT_USERS
    connections_per_worker: int = CONNECTIONS_PER_WORKER

    def __post_init__(self) -> None:
        if not self.processes or any(n < 1 for n in self.processes):
            raise ValueError("--processes: expected a comma list of integers >= 1")
        self.processes = list(dict.fromkeys(self.processes))
        if int(self.duration_s) != self.duration_s or self.duration_s < 1:
            raise ValueError("--duration: wrk runs whole seconds (an integer >= 1)")
        self.duration_s = int(self.duration_s)
        if self.users < 1:
            raise ValueError("--prepopulate: the web app needs at least one user")

    def to_json(self) -> Dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "base"}

    def fs_size_mib(self) -> int:
        return BASE_FS_MIB + LOG_MIB_PER_S * (self.duration_s + WARM_S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _proc_cpu_ticks(pid: int) -> Optional[int]:
    """utime + stime of a process, in clock ticks (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def log_state(db: str) -> Dict[str, Any]:
    """What is beside the database: the log (waldio's block 0 in the slotted layouts,
    or SQLite's own header: stock SQLite's WAL and waldio's standard layout, which
    has no in-use guard and holds frames if SQLite's recovery would replay any)."""
    wal = f"{db}-wal"
    out: Dict[str, Any] = {"wal_exists": os.path.exists(wal),
                           "shm_exists": os.path.exists(f"{db}-shm"),
                           "wal_shm_exists": os.path.exists(f"{db}-wal-shm")}
    if out["wal_exists"]:
        out["wal_bytes"] = os.path.getsize(wal)
        with open(wal, "rb") as f:
            data = f.read()
        sb = logformat.describe_superblock(data[:4096])
        out["waldio"] = sb["present"]
        if sb["present"]:
            out["holds_frames"] = sb.get("holds_frames")
            out["in_use_guard"] = sb.get("in_use_guard")
        else:
            out["wal_header"] = logformat.describe_wal_header(data[:32]).get("kind")
            out["holds_frames"] = logformat.standard_frames(data)["committed_frames"] > 0
            out["in_use_guard"] = False
    return out


class Server:
    """One gunicorn for one cell: started, waited for, stopped gracefully, or killed."""

    def __init__(self, d: str, db: str, n: int, env: Dict[str, str], app: Path) -> None:
        self.ready_dir = os.path.join(d, "ready")
        os.mkdir(self.ready_dir)
        self.log_path = os.path.join(d, "gunicorn.log")
        self.port = _free_port()
        self.n = n
        env = dict(env, WEBAPP_DB=db, WEBAPP_READY_DIR=self.ready_dir)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", str(app / "gunicorn.conf.py"),
                 "--chdir", str(app), "-w", str(n), "-b", f"127.0.0.1:{self.port}", "app:app"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tail(self) -> str:
        return file_tail(self.log_path, 1200)

    def wait_ready(self) -> List[Dict[str, Any]]:
        """Every worker's settings read back, once all N have opened their connection."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            names = [f for f in os.listdir(self.ready_dir)
                     if f.endswith(".json") and not f.endswith(".stats.json")]
            if len(names) >= self.n:
                break
            if self.proc.poll() is not None:
                raise BenchError(f"gunicorn exited with status {self.proc.returncode} before "
                                 f"its {self.n} workers were ready: {self.tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"gunicorn: {len(names)} of {self.n} workers ready after "
                                 f"{START_TIMEOUT_S:.0f} s: {self.tail()}")
            time.sleep(0.05)
        out = []
        for name in sorted(names):
            with open(os.path.join(self.ready_dir, name)) as f:
                out.append(json.load(f))
        return out

    def exit_stats(self) -> Optional[Dict[str, Any]]:
        """PRAGMA waldio_stats of every worker as it exited (gunicorn.conf.py), summed;
        None without waldio."""
        stats = []
        for name in os.listdir(self.ready_dir):
            if name.endswith(".stats.json"):
                with open(os.path.join(self.ready_dir, name)) as f:
                    stats.append(json.load(f))
        return sum_counters(stats) if stats else None

    def stop(self) -> Dict[str, Any]:
        """SIGTERM to the master, as a deployment stops it; its status and how long."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BenchError(f"gunicorn did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM "
                             f"(killed): {self.tail()}") from None
        return {"exit_status": rc, "seconds": round(time.monotonic() - t0, 3)}

    def kill(self) -> None:
        """Every process of the server, whatever state it is in."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def run_wrk(url: str, seconds: int, conns: int, mix: str, users: int, body: int, seed: int,
            out: str, app: Path) -> Dict[str, Any]:
    """One wrk run; what mix.lua recorded (counts, errors, latency, acknowledged writes)
    and wrk's own CPU time."""
    reads, inserts = MIXES[mix]
    wrk = shutil.which("wrk")
    if wrk is None:
        raise BenchError("wrk is not installed (Debian: apt-get install wrk)")
    argv = [wrk, "-t", str(min(WRK_THREADS, conns)), "-c", str(conns), "-d", f"{seconds}s",
            "--timeout", f"{WRK_TIMEOUT_S}s", "-s", str(app / "mix.lua"), url, "--",
            str(reads), str(inserts), str(users), out, str(seed), str(body)]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    import resource
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, capture_output=True, text=True, env=env,
                       timeout=seconds + WRK_TIMEOUT_S + 60)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0 or not os.path.exists(out):
        raise BenchError(f"wrk exited with status {p.returncode}: {p.stderr.strip()[-400:]}")
    with open(out) as f:
        doc = json.load(f)
    doc["wrk_cpu_s"] = round((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime), 6)
    doc["argv"] = argv
    return doc


def per_request(rep: Dict[str, Any], key: str) -> Optional[float]:
    """A waldio_stats counter of the whole server life (both wrk runs) per request."""
    st = rep.get("waldio_stats")
    n = sum((rep.get(k) or {}).get("requests", 0) for k in ("warm_wrk", "wrk"))
    return st.get(key, 0) / n if st and n else None


class Acked:
    """The writes a server acknowledged over a cell's wrk runs: every post id, and per
    user the largest visit count a reply carried."""

    def __init__(self) -> None:
        self.posts: List[int] = []
        self.visits: Dict[int, int] = {}

    def take(self, run: Dict[str, Any]) -> Dict[str, Any]:
        """Keep a run's acknowledgements; the run's record without them."""
        self.posts += run.pop("acked_posts")
        for u, v in run.pop("acked_visits").items():
            self.visits[int(u)] = max(self.visits.get(int(u), 0), int(v))
        return run


class WebappBench:
    """Runs every cell (mix x worker count x mode), interleaved; returns the result
    document (schemas/bench-webapp.schema.json)."""

    def __init__(self, ws: WebappSettings, modes: Sequence[ModeSpec], env: SqliteEnv, *,
                 progress: Optional[ProgressFn] = None) -> None:
        if not modes:
            raise BenchError("no modes to run")
        for m in modes:
            if m.mode.kind not in ("stock", "waldio") or m.mode.journal_mode != "WAL":
                raise BenchError(f"--workload webapp: {m.label} is not a WAL mode (wal-*, "
                                 f"waldio-*)")
        self.ws, self.s = ws, ws.base
        self.modes = list(modes)
        self.labels = [m.label for m in self.modes]
        self.env = env
        self.progress = progress or (lambda ev: None)
        self.app = app_dir()
        self._templates: Dict[int, str] = {}
        self.devices: List[Any] = []
        self.root = ""

    def need_odirect(self) -> bool:
        return any(m.mode.kind == "waldio" for m in self.modes)

    # ------------------------------------------------------------- templates

    def _template(self, reserve: int) -> str:
        if reserve in self._templates:
            return self._templates[reserve]
        import importlib.util
        spec = importlib.util.spec_from_file_location("waldio_webapp_example",
                                                      self.app / "app.py")
        assert spec is not None and spec.loader is not None
        example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(example)
        d = os.path.join(self.root, "templates")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"webapp-r{reserve}.db")
        with building(path, self.s.page_size, reserve) as db:
            example.init_db(db, self.ws.users, "x" * self.s.record_size)
        import apsw
        conn = apsw.Connection(path, vfs="unix")
        try:
            conn.execute("PRAGMA journal_mode=WAL")      # as the app's database is
        finally:
            conn.close()
        self._templates[reserve] = path
        return path

    # ------------------------------------------------------------------- run

    def run(self, target: Target) -> Dict[str, Any]:
        ws, s = self.ws, self.s
        started, t_start = timestamp(), time.perf_counter()
        self.root = target.path
        self.devices = devices_for(self.root)
        openers = open_modes(self.modes, s, self.env)
        mode_docs = {m.label: self._mode_doc(m) for m in self.modes}
        cells = run_rounds(
            s.warmup + s.repetitions, s.warmup, ws.mixes, ws.processes, self.modes, "mix",
            lambda mix: f"webapp-{mix}",
            lambda spec, mix, n, rnd, warm: self._run_cell(
                spec, openers[spec.label], mix, n, rnd, warm, mode_docs[spec.label]),
            self.progress)
        for cell in cells.values():
            cell["summary"] = self._summary(cell)
        ratios = stock_ratios(cells, self.labels, "mix", lambda reps, base: {
            "p99": pair_ratios(reps, base, key="p99_ms")})
        return result_document(
            KIND, started, t_start,
            {"bench": self._bench_params(),
             "target": dict(target.info, note=target.note),
             "common": self._common_params()},
            [mode_docs[m.label] for m in self.modes], cells, ratios)

    def _server_env(self, spec: ModeSpec) -> Dict[str, str]:
        """The app's environment: as it is (stock), or what `waldio env` prints for the
        mode; synchronous and the busy timeout are the app's own settings."""
        base = {k: v for k, v in os.environ.items()
                if k != "LD_PRELOAD" and not k.startswith("WALDIO_")}
        m, s = spec.mode, self.s
        base.update(WEBAPP_SYNCHRONOUS=str(m.synchronous),
                    WEBAPP_BUSY_MS=str(s.busy_timeout_ms))
        if m.kind != "waldio":
            return base
        opts = argparse.Namespace(
            layout=spec.layout, group=m.waldio_group or "off",
            sync=m.waldio_sync if m.waldio_sync in ("persistent", "ns") else None,
            prealloc=s.prealloc, flush_ms=s.flush_ms, group_ms=s.group_ms,
            group_bytes=s.group_bytes)
        return environment(opts, base)

    def _bench_params(self) -> Dict[str, Any]:
        ws, s = self.ws, self.s
        d: Dict[str, Any] = dict(ws.to_json())
        d["workload"] = WORKLOAD
        d["mix_docs"] = {m: MIX_DOCS[m] for m in ws.mixes}
        d["rounds"] = {"warmup": s.warmup, "measured": s.repetitions}
        d["record_size"] = s.record_size
        d["seed"] = s.seed
        d["sqlite_settings"] = {"page_size": s.page_size, "busy_timeout_ms": s.busy_timeout_ms,
                                "stock_reserve": s.stock_reserve, "layout": s.layout,
                                "other": "SQLite's defaults (the app sets journal_mode=WAL and "
                                         "synchronous only)"}
        d["app"] = {"directory": str(self.app),
                    "server": f"gunicorn, sync workers, python {sys.version.split()[0]} "
                              f"({sys.executable}), one sqlite3 connection per worker, "
                              f"opened before the first request (gunicorn.conf.py)",
                    "python_sqlite": self._python_sqlite()}
        d["load"] = {"generator": f"wrk ({shutil.which('wrk')}) with mix.lua, "
                                  f"{WRK_THREADS} threads, {ws.connections_per_worker} "
                                  f"connections per worker process, --timeout {WRK_TIMEOUT_S}s",
                     "warm_s": WARM_S,
                     "note": "closed loop: each connection sends its next request when the "
                             "reply to the last arrived (latency includes queueing in "
                             "gunicorn's listen backlog); gunicorn's sync workers close the "
                             "connection after each reply, so every request also connects"}
        d["cell"] = ("a copy of the template (WAL mode); gunicorn started with the mode's "
                     "environment; every worker's connection opened; a warm-up wrk run of "
                     f"{WARM_S} s, then the timed wrk run; SIGTERM to the gunicorn master "
                     "(graceful stop); checks on a new connection")
        d["interleave"] = ("for each round: for each mix, for each worker count, every mode "
                           "in the order given")
        d["rate"] = "requests/s: wrk's completed requests / its duration (timed run)"
        d["commits"] = ("commits/s: acknowledged writes (inserts + visit updates answered with "
                        "200) / wrk's duration")
        d["latency"] = ("per request, from wrk (connect + send + reply), percentiles of the "
                        "timed run; summaries: the median of the measured rounds' values")
        d["cpu"] = ("machine: busy time of all CPUs in the timed window (/proc/stat; wrk, "
                    "gunicorn, kernel threads and anything else running included), per "
                    "request and per acknowledged commit; context switches the same way "
                    "(/proc/stat ctxt); server: utime + stime of the gunicorn workers "
                    "(/proc/<pid>/stat) over the window; wrk: its own CPU time; loadavg_before: "
                    "the 1-minute load average as each cell started (other work on the "
                    "machine counts in the machine-wide figures)")
        d["waldio_stats"] = ("waldio modes: PRAGMA waldio_stats of every worker as it exited "
                             "(gunicorn's worker_exit), summed: both wrk runs, per request of "
                             "both; device_reads are log reads the page cache could not serve")
        d["devices"] = [asdict(x) for x in self.devices]
        d["modes"] = [{"label": m.label, "mode": m.name, "layout": m.layout}
                      for m in self.modes]
        d["waldio_extension"] = dict(self.env.extensions)
        d["notes"] = list(s.notes)
        return d

    @staticmethod
    def _python_sqlite() -> str:
        import sqlite3
        return sqlite3.sqlite_version

    def _mode_doc(self, spec: ModeSpec) -> Dict[str, Any]:
        m = spec.mode
        env = self._server_env(spec)
        shown = {k: v for k, v in env.items()
                 if k == "LD_PRELOAD" or k.startswith("WALDIO_") or k.startswith("WEBAPP_")}
        return {"label": spec.label, "name": m.name, "kind": m.kind, "layout": spec.layout,
                "journal_mode": m.journal_mode, "synchronous": m.synchronous,
                "waldio_group": m.waldio_group, "environment": shown,
                "commit": m.commit, "durability": m.durability, "params": None}

    def _common_params(self) -> Optional[Dict[str, Any]]:
        try:
            return {"schema_version": _params.SCHEMA_VERSION,
                    "filesystem": _params.filesystem_params(self.root),
                    "device": _params.device_params(self.root),
                    "system": _params.system_params()}
        except Exception:  # noqa: BLE001
            return None

    # ------------------------------------------------------------------ cells

    def _run_cell(self, spec: ModeSpec, opener: Opener, mix: str, n: int, rnd: int,
                  warm: bool, mode_doc: Dict[str, Any]) -> Dict[str, Any]:
        ws, s = self.ws, self.s
        rep: Dict[str, Any] = {"index": rnd, "warmup": warm, "ok": False, "error": None,
                               "ops_per_s": None, "commits_per_s": None, "p99_ms": None,
                               "latency_ms": {}, "wrk": None, "warm_wrk": None, "cpu": None,
                               "io": None, "workers": [], "stop": None, "waldio_stats": None,
                               "checks": {"ok": False, "items": []}}
        safe = spec.label.replace(":", "_").replace("@", "_")
        d = os.path.join(self.root, f"r{rnd}-{mix}-w{n}-{safe}")
        shutil.rmtree(d, ignore_errors=True)
        os.mkdir(d)
        db = os.path.join(d, "app.db")
        server: Optional[Server] = None
        conns = ws.connections_per_worker * n
        wrk_args = (mix, ws.users, s.record_size, s.seed * 1000 + rnd)
        rep["loadavg_before"] = os.getloadavg()[0]
        try:
            shutil.copyfile(self._template(reserve_for(spec, s.stock_reserve)), db)
            settle(d, False)
            server = Server(d, db, n, self._server_env(spec), self.app)
            rep["workers"] = server.wait_ready()
            warm_run = run_wrk(server.url, WARM_S, conns, *wrk_args,
                               os.path.join(d, "wrk-warm.json"), self.app)
            pids = [w["pid"] for w in rep["workers"]]
            cpu0 = [_proc_cpu_ticks(p) for p in pids]
            snap0 = Snapshot(self.devices)
            timed = run_wrk(server.url, ws.duration_s, conns, *wrk_args,
                            os.path.join(d, "wrk.json"), self.app)
            snap1 = Snapshot(self.devices)
            cpu1 = [_proc_cpu_ticks(p) for p in pids]
            rep["stop"] = server.stop()
            rep["waldio_stats"] = server.exit_stats()
            server = None
            rep["stop"]["log"] = log_state(db)
            acked = Acked()
            rep["warm_wrk"] = acked.take(warm_run)
            rep["wrk"] = acked.take(timed)
            self._bookkeeping(rep, snap0, snap1, cpu0, cpu1)
            self._check(rep, spec, opener, db, acked, mode_doc, warm)
        except Exception as e:  # noqa: BLE001 - recorded; the run goes on, the exit status fails
            rep["ok"] = False
            rep["error"] = f"{type(e).__name__}: {e}"
        finally:
            if server is not None:
                server.kill()
            shutil.rmtree(d, ignore_errors=True)
        return rep

    def _bookkeeping(self, rep: Dict[str, Any], s0: Snapshot, s1: Snapshot,
                     cpu0: List[Optional[int]], cpu1: List[Optional[int]]) -> None:
        w = rep["wrk"]
        secs = w["duration_us"] / 1e6
        kinds = w["kinds"]
        commits = kinds["insert"] + kinds["visit"]
        rep["ops_per_s"] = w["requests"] / secs if secs > 0 else None
        rep["commits_per_s"] = commits / secs if secs > 0 else None
        pct = w["latency_us"]["percentiles"]
        rep["latency_ms"] = {name: pct[q] / 1000 for name, q in PERCENTILES}
        rep["latency_ms"].update(max=w["latency_us"]["max"] / 1000,
                                 mean=w["latency_us"]["mean"] / 1000)
        rep["p99_ms"] = rep["latency_ms"]["p99"]
        tick = os.sysconf("SC_CLK_TCK")
        busy_s = (s1.cpu["busy"] - s0.cpu["busy"]) / tick if s0.cpu and s1.cpu else None
        ctxt = s1.cpu["ctxt"] - s0.cpu["ctxt"] if s0.cpu and s1.cpu else None
        server_ticks = [b - a for a, b in zip(cpu0, cpu1) if a is not None and b is not None]

        def per(v: Optional[float], k: int, scale: float = 1.0) -> Optional[float]:
            return v * scale / k if v is not None and k else None
        rep["cpu"] = {"machine_busy": cpu_busy_share(s0.cpu, s1.cpu),
                      "machine_cpu_s": busy_s,
                      "machine_cpu_us_per_request": per(busy_s, w["requests"], 1e6),
                      "machine_cpu_us_per_commit": per(busy_s, commits, 1e6),
                      "context_switches": ctxt,
                      "context_switches_per_request": per(ctxt, w["requests"]),
                      "context_switches_per_commit": per(ctxt, commits),
                      "server_cpu_s": sum(server_ticks) / tick,
                      "server_cpu_us_per_request": per(sum(server_ticks) / tick,
                                                       w["requests"], 1e6),
                      "wrk_cpu_s": w["wrk_cpu_s"]}
        rep["io"] = {"devices": device_windows(self.devices, s0, s1, s1)}

    def _check(self, rep: Dict[str, Any], spec: ModeSpec, opener: Opener, db: str,
               acked: "Acked", mode_doc: Dict[str, Any], warm: bool) -> None:
        items: List[Dict[str, Any]] = []

        def item(name: str, expected: Any, actual: Any) -> None:
            items.append({"name": name, "expected": expected, "actual": actual,
                          "ok": expected == actual})

        m = spec.mode
        sync_level = {"OFF": 0, "NORMAL": 1, "FULL": 2}[str(m.synchronous)]
        for i, st in enumerate(rep["workers"]):
            want = ["wal", sync_level]
            got = [st.get("journal_mode"), st.get("synchronous")]
            wal = st.get("waldio")
            if m.kind == "waldio":
                want += ["waldio", m.waldio_group or "off", spec.layout]
                got += [wal.get("vfs"), wal.get("group"), wal.get("layout")] if wal \
                    else ["not running waldio (is this Python's sqlite3 the system "
                          "libsqlite3?)", None, None]
            else:
                want.append(None)
                got.append(wal)
            item(f"worker {i}: journal_mode, synchronous, " +
                 ("waldio vfs, group, layout" if m.kind == "waldio" else "no waldio") +
                 " read back", want, got)
        wrk_runs = [rep["warm_wrk"], rep["wrk"]]
        e = rep["wrk"]["errors"]
        item("failed requests (non-200 replies, socket errors, timeouts)", 0,
             sum(r["kinds"]["failed"] + r["errors"]["connect"] + r["errors"]["timeout"]
                 for r in wrk_runs) + e["read"] + e["write"])
        item("gunicorn's exit status after SIGTERM", 0, rep["stop"]["exit_status"])
        log = rep["stop"]["log"]
        bound = (rep["workers"][0].get("waldio") or {}).get("idle_log_bytes") \
            if rep["workers"] else None
        if m.kind == "waldio" and spec.layout == "standard":
            item("after the graceful stop: no log, or one in SQLite's own format "
                 "(standard layout)", True,
                 not log["wal_exists"] or log.get("wal_header") == logformat.STANDARD_HEADER_KIND)
        if m.kind == "waldio":
            # L8 holds in every layout while no stock process shares the database,
            # and none does here.
            item("after the graceful stop: the log holds no frames, no in-use guard, at most "
                 "the idle bound (bytes)", [False, False, bound],
                 [log.get("holds_frames"), log.get("in_use_guard"),
                  max(log.get("wal_bytes", 0), bound or 0)])   # larger: shown
        posts, visits = acked.posts, acked.visits
        c = opener.open(db)
        try:
            c.run("CREATE TEMP TABLE acked_posts(id INTEGER PRIMARY KEY)")
            c.run("CREATE TEMP TABLE acked_visits(user INTEGER PRIMARY KEY, visits INTEGER)")
            c.run("BEGIN")
            for p in posts:
                c.run("INSERT INTO acked_posts VALUES (?)", (p,))
            for u, v in visits.items():
                c.run("INSERT INTO acked_visits VALUES (?, ?)", (u, v))
            c.run("COMMIT")
            item("acknowledged post ids present (no lost insert)", len(posts),
                 c.rows("SELECT count(*) FROM acked_posts JOIN posts USING(id)")[0][0])
            item("users whose visits are below the largest acknowledged count (lost "
                 "updates)", 0, c.rows("SELECT count(*) FROM acked_visits a JOIN users u "
                                       "ON u.id = a.user WHERE u.visits < a.visits")[0][0])
            item("PRAGMA integrity_check", ["ok"],
                 [r[0] for r in c.rows("PRAGMA integrity_check")])
            if not warm and mode_doc["params"] is None:
                full = _params.all_params(c.raw, db, {"_why": {}})
                full.pop("workload", None)
                mode_doc["params"] = full
        finally:
            c.close()
        rep["checks"] = {"ok": all(x["ok"] for x in items), "items": items}
        rep["ok"] = rep["checks"]["ok"]
        rep["acked"] = {"posts": len(posts), "users_visited": len(visits)}

    # -------------------------------------------------------------- summaries

    def _summary(self, cell: Dict[str, Any]) -> Dict[str, Any]:
        reps = [r for r in cell["repetitions"] if not r["warmup"] and r["ok"]]
        measured = [r for r in cell["repetitions"] if not r["warmup"]]

        def over(get: Callable[[Dict[str, Any]], Optional[float]]) -> Optional[Dict[str, Any]]:
            return summarize([v for r in reps if (v := get(r)) is not None])

        def dev(key: str) -> Callable[[Dict[str, Any]], Optional[float]]:
            def g(r: Dict[str, Any]) -> Optional[float]:
                devs = (r.get("io") or {}).get("devices") or []
                n = r["commits_per_s"] * r["wrk"]["duration_us"] / 1e6
                return devs[0]["timed"][key] / n if devs and n else None
            return g
        return {
            "repetitions_ok": len(reps),
            "repetitions_failed": len(measured) - len(reps),
            "requests_per_s": over(lambda r: r["ops_per_s"]),
            "commits_per_s": over(lambda r: r["commits_per_s"]),
            "latency_ms": {name: over(lambda r, k=name: r["latency_ms"].get(k))
                           for name, _ in PERCENTILES},
            "cpu": {k: over(lambda r, k=k: (r.get("cpu") or {}).get(k)) for k in (
                "machine_busy", "machine_cpu_us_per_request", "machine_cpu_us_per_commit",
                "context_switches_per_request", "context_switches_per_commit",
                "server_cpu_us_per_request")},
            "per_commit": {"device_write_bytes": over(dev("write_bytes")),
                           "device_flushes": over(dev("flushes"))},
            "loadavg_before": over(lambda r: r.get("loadavg_before")),
            "waldio_per_request": {k: over(lambda r, k=k: per_request(r, k)) for k in (
                "device_reads", "disk_reads", "buffered_writes", "flushes", "group_waits")},
            "ok": bool(cell["repetitions"]) and all(r["ok"] for r in cell["repetitions"]),
        }
