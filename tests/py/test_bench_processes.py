"""Tests of `waldio bench --processes` (issue 18): N processes on one database.

* the processes really ran at once: distinct pids (none of them this process), one
  start instant, every process still running when the last one began;
* counts add up: what each process counted (its histogram, its transactions per
  kind, the rows its SELECTs returned) equals what the database holds afterwards;
* a fixed count per process runs exactly that count;
* the JSON validates against schemas/bench-processes.schema.json, and a broken one
  does not;
* errors surface: a process that fails its run, a process that dies, a check that
  does not hold, a bad option, each named, each making the exit status non-zero;
* the C loop's histogram and the Python decoding agree.

Runs go to a private directory under $WALDIO_TEST_DIR (default /var/tmp).  Nothing
here depends on how fast anything ran.
"""
from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from bench_dirs import in_tmp, rundir  # noqa: E402,F401 (fixtures)
from waldio import bench as B  # noqa: E402
from waldio import cli  # noqa: E402
from waldio.bench import histogram as H  # noqa: E402
from waldio.bench import processes as P  # noqa: E402
from waldio.bench import results  # noqa: E402
from waldio.bench.report import failure_lines  # noqa: E402
from waldio.bench.process_workloads import WORKLOADS  # noqa: E402
from waldio.bench.runner import process_env  # noqa: E402
from waldio.bench.worker_pool import WorkerError, WorkerPool  # noqa: E402



def run_engine(rundir: str, modes: str, processes: List[int], workloads: List[str],
               worker_argv: Any = None, **kw: Any) -> Dict[str, Any]:
    base = B.resolve_settings("mobibench-2015", {"repetitions": kw.pop("repetitions", 1),
                                                 "warmup": 0})
    ps = P.ProcessSettings(base=base, processes=processes, workloads=workloads, **kw)
    bench = P.ProcessBench(ps, B.parse_modes(modes), process_env(), worker_argv=worker_argv)
    with B.open_target(None, rundir, None, bench.need_odirect()) as target:
        return bench.run(target)


def failed_items(doc: Dict[str, Any]) -> List[str]:
    return [line for c in doc["cells"] for line in failure_lines(
        f"{c['workload']} x{c['processes']} {c['mode']}", c["repetitions"])]


# --------------------------------------------------------------------------
# the processes ran at once, and their counts add up
# --------------------------------------------------------------------------

def test_processes_run_at_once_and_their_counts_add_up(rundir: str) -> None:
    doc = run_engine(rundir, "wal-full,wal-normal,waldio-full", [1, 3],
                     ["insert", "update", "web"], duration_s=0.3)
    assert failed_items(doc) == []
    assert doc["ok"] is True
    assert results.validate(doc) == []
    assert len(doc["cells"]) == 3 * 2 * 3
    for c in doc["cells"]:
        (rep,) = c["repetitions"]
        n = c["processes"]
        procs = rep["processes"]
        assert len(procs) == n
        pids = {p["pid"] for p in procs}
        assert len(pids) == n and os.getpid() not in pids
        # one start instant: every process began after it and before the earliest end
        assert max(p["first_start_ns"] for p in procs) < min(p["last_end_ns"] for p in procs)
        assert rep["overlap_ns"] > 0
        deadline_ns = 0.3e9
        for p in procs:
            assert p["done"] >= 1
            assert p["last_end_ns"] - p["first_start_ns"] + p["start_late_ns"] >= deadline_ns
            assert sum(p["kinds"].values()) == p["done"]
        kinds = WORKLOADS[c["workload"]].kinds
        assert set(rep["kinds"]) == set(kinds)
        assert rep["transactions"] == sum(p["done"] for p in procs) == sum(rep["kinds"].values())
        assert sum(H.total(h) for h in rep["hist"].values()) == rep["transactions"]
        assert rep["latency"]["all"]["count"] == rep["transactions"]
        names = {i["name"]: i for i in rep["checks"]["items"]}
        if c["workload"] == "insert":
            item = names["rows in tblMyList = pre-populated + inserts"]
            assert item["actual"] == rep["transactions"]
        elif c["workload"] == "update":
            item = names["sum(updates) = updates per transaction x transactions"]
            assert item["actual"] == 5 * rep["transactions"]
        else:
            assert rep["kinds"]["read"] > 0 and rep["kinds"]["write"] > 0
            assert names["sum(users.visits) = write requests"]["actual"] == rep["kinds"]["write"]
            assert names["rows returned by the SELECTs"]["actual"] == 12 * rep["kinds"]["read"]
        assert names["PRAGMA integrity_check"]["actual"] == ["ok"]
        readback = [i for i in rep["checks"]["items"] if i["name"].startswith("process ")]
        assert len(readback) == n
        if c["mode"] == "waldio-full":
            assert rep["waldio_stats"]["frames_written"] > 0
            assert readback[0]["actual"] == ["wal", "FULL", "full", "off"]
    # every mode against both stock references, paired by round
    pairs = {(r["workload"], r["processes"], r["mode"], r["stock"]) for r in doc["ratios"]}
    assert ("web", 3, "waldio-full", "wal-full") in pairs
    assert ("web", 3, "waldio-full", "wal-normal") in pairs
    assert ("web", 3, "wal-full", "wal-normal") in pairs
    assert len(pairs) == 3 * 2 * 4


def test_a_fixed_count_per_process(rundir: str) -> None:
    doc = run_engine(rundir, "wal-normal,waldio-full-durable", [1], ["insert", "web"],
                     duration_s=None, transactions=40, repetitions=2)
    assert failed_items(doc) == []
    for c in doc["cells"]:
        assert c["summary"]["repetitions_ok"] == 2
        for rep in c["repetitions"]:
            assert rep["transactions"] == 40
            item = next(i for i in rep["checks"]["items"]
                        if i["name"] == "transactions done = processes x --transactions")
            assert item["ok"]
    assert {r["stock"] for r in doc["ratios"]} == {"wal-normal"}   # wal-full did not run


def test_group_commit_modes_in_several_processes(rundir: str) -> None:
    doc = run_engine(rundir, "waldio-full-durable,waldio-full-async,waldio-full-strict", [3],
                     ["insert", "web"], duration_s=0.3)
    assert failed_items(doc) == []
    for c in doc["cells"]:
        (rep,) = c["repetitions"]
        group = c["mode"].rsplit("-", 1)[1]
        readback = [i["actual"] for i in rep["checks"]["items"] if i["name"].startswith("process ")]
        assert readback == [["wal", "FULL", "full", group]] * 3
        assert rep["waldio_stats"]["group_commits"] > 0


def test_the_json_schema_rejects_a_broken_document(rundir: str) -> None:
    doc = run_engine(rundir, "wal-normal", [2], ["update"], duration_s=0.2)
    assert results.validate(doc) == []
    for breakage in ("cells", "kind"):
        broken = copy.deepcopy(doc)
        del broken[breakage]
        assert results.validate(broken) != []
    broken = copy.deepcopy(doc)
    broken["cells"][0]["repetitions"][0]["hist"]["commit"] = [[1, 2, 3]]
    assert any("hist" in p for p in results.validate(broken))
    path = Path(rundir, "p.json")
    path.write_text(json.dumps(doc))
    assert results.load(str(path))["kind"] == "processes"
    with pytest.raises(ValueError, match="not a bench result"):
        results.load(str(path), kind="bench")


# --------------------------------------------------------------------------
# errors surface
# --------------------------------------------------------------------------

FAILING_WORKER = """
import sys
from waldio.bench import process_worker as W

class Failing(W.Worker):
    def open(self, req):
        self.index = req["process"]
        return super().open(req)

    def go(self, req):
        if self.index == 1:
            raise RuntimeError("process 1 fails its run on purpose")
        return super().go(req)

W.Worker = Failing
sys.exit(W.serve(sys.stdin, sys.stdout))
"""

DYING_WORKER = """
import os, sys
from waldio.bench import process_worker as W

class Dying(W.Worker):
    def go(self, req):
        os._exit(7)

W.Worker = Dying
sys.exit(W.serve(sys.stdin, sys.stdout))
"""


@pytest.mark.parametrize("code,needle", [
    (FAILING_WORKER, "process 1 (pid "),
    (DYING_WORKER, "exited with status 7"),
], ids=["fails", "dies"])
def test_a_failing_process_fails_its_cell_loudly(code: str, needle: str, rundir: str) -> None:
    doc = run_engine(rundir, "wal-normal", [2], ["insert"], duration_s=0.2, repetitions=2,
                     worker_argv=[sys.executable, "-c", code])
    assert doc["ok"] is False
    (cell,) = doc["cells"]
    for rep in cell["repetitions"]:             # the second round runs with fresh workers
        assert rep["ok"] is False and needle in rep["error"]
        assert rep["error"].startswith("WorkerError: the timed run: ")
    assert cell["summary"]["repetitions_failed"] == 2
    assert results.validate(doc) == []


def test_the_pool_names_the_worker_and_replaces_a_dead_one(rundir: str) -> None:
    with WorkerPool(rundir) as pool:
        (w,) = pool.take(1)
        with pytest.raises(WorkerError, match=r"go: process 0 \(pid \d+\): BenchError: go "
                                              r"before open"):
            pool.ask([w], lambda w: {"cmd": "go", "start_at_ns": 0, "deadline_ns": 0}, 60, "go")
        assert pool.ask([w], lambda w: {"cmd": "close"}, 60, "close") == [{"closed": True}]
        w.proc.kill()
        w.proc.wait()
        with pytest.raises(WorkerError, match="process 0"):
            pool.ask([w], lambda w: {"cmd": "close"}, 60, "close")
        (w2,) = pool.take(1)
        assert w2 is not w and w2.proc.poll() is None
        assert pool.started == 2


def test_a_check_that_does_not_hold_fails_the_run(rundir: str, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    w = WORKLOADS["insert"]
    monkeypatch.setitem(WORKLOADS, "insert", w.__class__(
        w.name, w.summary, w.kinds, w.default_rows, w.setup, w.plan,
        lambda sh, kinds: [(n, q, v + 1) for n, q, v in w.checks(sh, kinds)]))
    out_json = os.path.join(rundir, "bad.json")
    status = cli.main(["bench", "--processes", "1", "--workload", "insert", "--modes",
                       "wal-normal", "--duration", "0.2", "--repetitions", "1", "--warmup", "0",
                       "--dir", rundir, "--plain", "--json", out_json])
    out = capsys.readouterr().out
    assert status == 1
    assert "FAILED insert x1 wal-normal round 0: rows in tblMyList = pre-populated + inserts: " \
           "expected" in out
    assert "FAIL 1/1" in out
    assert json.loads(Path(out_json).read_text())["ok"] is False


BAD = [
    (["--processes", "0"], ["--processes", ">= 1"]),
    (["--processes", "2,x"], ["--processes", "'x'"]),
    (["--processes", "2", "--workload", "mixed"], ["--workload", "insert, update, web"]),
    (["--workload", "web"], ["--workload", "'web'", "insert, update, delete"]),
    (["--duration", "1"], ["--duration applies to --processes only"]),
    (["--processes", "2", "--duration", "1", "--transactions", "5"],
     ["--duration and --transactions exclude each other"]),
    (["--processes", "2", "--reader-scans", "3", "--threads", "2"],
     ["--threads", "--reader-scans", "do not apply"]),
    (["--processes", "2", "--modes", "raw-dio"], ["raw-dio is not a WAL mode"]),
    (["--processes", "2", "--modes", "delete-full"], ["delete-full is not a WAL mode"]),
    (["--processes", "2", "--workload", "update", "--prepopulate", "0"],
     ["--prepopulate", "at least one row"]),
    (["--processes", "2", "--locking-mode", "exclusive"], ["exclusive lets one process only"]),
    (["--processes", "2", "--duration", "0"], ["--duration", "> 0"]),
]


@pytest.mark.parametrize("argv,needles", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_options_are_usage_errors(argv: List[str], needles: List[str], rundir: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--dir", rundir] + argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    for n in needles:
        assert n in err, err


def test_the_default_image_grows_with_what_a_cell_may_log() -> None:
    """Under a saturating load the log never restarts unaided (docs/durability.md,
    "Checkpoints and the log's length"): a longer cell, or more processes
    running a fixed count, gets a larger image; the
    default 2 s cell keeps room beyond the templates' 1 GiB."""
    base = B.resolve_settings("mobibench-2015", {})

    def size(**kw: Any) -> int:
        return P.ProcessSettings(base=base, processes=kw.pop("processes", [8]),
                                 workloads=["insert"], **kw).fs_size_mib()

    assert size() > P.BASE_FS_MIB
    assert size(duration_s=10.0) > size() > size(duration_s=0.5)
    assert size(duration_s=None, transactions=10_000, processes=[1, 16]) > \
        size(duration_s=None, transactions=10_000, processes=[1, 2])
    assert size(duration_s=10.0) % 64 == 0


# --------------------------------------------------------------------------
# the command line: headline, tables, record, plots
# --------------------------------------------------------------------------

def test_the_command_prints_the_headline_and_writes_the_record(
        rundir: str, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = os.path.join(rundir, "p.json")
    plots = os.path.join(rundir, "plots")
    status = cli.main(["bench", "--processes", "1,2", "--workload", "insert,web", "--modes",
                       "wal-full,wal-normal,waldio-full", "--duration", "0.2", "--repetitions",
                       "2", "--warmup", "0", "--busy-timeout", "7000", "--dir", rundir,
                       "--plain", "--json", out_json, "--plot", plots])
    out = capsys.readouterr().out
    assert status == 0, out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 120
    first_headline = next(i for i, l in enumerate(lines) if l.startswith("headline: x stock"))
    first_table = next(i for i, l in enumerate(lines) if l.startswith("insert: autocommit"))
    assert first_headline < first_table
    assert any(l.startswith("web: web requests") for l in lines)
    assert f"full parameter checklist: {rundir}/p.txt" in out
    text = Path(rundir, "p.txt").read_text()
    assert "busy_timeout_ms:    7000" in text and "[filesystem]" in text and "[system]" in text
    assert "insert: every cell" in text and "read p50/p99/p99.9/max ms" in text
    doc = results.load(out_json)
    assert doc["params"]["bench"]["sqlite_settings"]["busy_timeout_ms"] == 7000
    for name in ("p-insert", "p-web"):
        assert Path(plots, f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    status = cli.main(["report", out_json, "--plain"])
    assert status == 0
    assert "headline: x stock wal-normal" in capsys.readouterr().out


# --------------------------------------------------------------------------
# histograms: the C loop's buckets, decoded
# --------------------------------------------------------------------------

def test_histogram_buckets_and_percentiles() -> None:
    for v in [0, 1, 255, 256, 257, 511, 512, 1000, 123_456, 10 ** 9, 2 ** 41 - 1]:
        lo, hi = H.bounds(H.index_of(v))
        assert lo <= v < hi and (hi - lo) <= max(1, v / 128)
    assert H.index_of(2 ** 50) == H.BUCKETS - 1
    assert [H.index_of(v) for v in (255, 256)] == [255, 256]
    values = [1000 * k for k in range(1, 1001)]             # 1 us .. 1 ms
    hist = H.merge([[[H.index_of(v), 1]] for v in values])
    assert H.total(hist) == 1000
    for q, exact in ((50, 500_000), (99, 990_000), (99.9, 999_000)):
        assert abs(H.percentile(hist, q) - exact) <= exact / 256 + 1
    assert H.summary([])["count"] == 0
