"""Tests of `waldio bench --workload webapp` (issue 27): a Flask app under gunicorn,
driven by wrk, stock and waldio side by side.

* a tiny run (2 workers, 1 s of wrk per cell, one round) through the command line:
  exit status 0, the JSON validates against schemas/bench-webapp.schema.json, every
  cell is there with its rates, latency, CPU and graceful-stop record, and its checks
  passed, the lost-write check among them, over the writes wrk saw acknowledged;
* the lost-write check can fail: an acknowledged post id or visit count the database
  does not hold fails it;
* a broken document does not validate; options that do not apply are refused.

Skipped where wrk, Flask or gunicorn is missing (``.ci/apt-packages``, ``pip install
-e .[webapp]``).  Nothing here depends on how fast anything ran.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from bench_dirs import in_tmp, rundir  # noqa: E402,F401 (fixtures)
from waldio import bench as B  # noqa: E402
from waldio import cli  # noqa: E402
from waldio import logformat  # noqa: E402
from waldio.bench import results  # noqa: E402
from waldio.bench import webapp as W  # noqa: E402
from waldio.bench.runner import process_env  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which("wrk") is None or not all(
        importlib.util.find_spec(m) for m in ("flask", "gunicorn")),
    reason="needs wrk (apt-get install wrk), Flask and gunicorn (pip install -e .[webapp])")

MODES = ["wal-full", "waldio-full-durable"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """One tiny run through the command line, shared by the tests that read it."""
    out = tmp_path_factory.mktemp("webapp") / "run.json"
    d = tmp_path_factory.mktemp("webapp-dir", numbered=True)
    status = cli.main(["bench", "--workload", "webapp", "--processes", "2",
                       "--modes", ",".join(MODES), "--duration", "1", "--repetitions", "1",
                       "--warmup", "0", "--dir", str(d), "--json", str(out), "--quiet"])
    return {"status": status, "doc": json.loads(out.read_text())}


def test_a_tiny_run_has_every_cell_and_passes_its_checks(tiny: Dict[str, Any]) -> None:
    doc = tiny["doc"]
    assert results.validate(doc) == []
    assert (tiny["status"], doc["ok"]) == (0, True)
    cells = {(c["mix"], c["processes"], c["mode"]) for c in doc["cells"]}
    assert cells == {(mix, 2, m) for mix in W.MIXES for m in MODES}
    for c in doc["cells"]:
        (rep,) = c["repetitions"]
        assert rep["ok"], rep["error"] or [i for i in rep["checks"]["items"] if not i["ok"]]
        assert len(rep["workers"]) == 2 and len({w["pid"] for w in rep["workers"]}) == 2
        kinds = rep["wrk"]["kinds"]
        assert kinds["read"] > 0 and kinds["insert"] + kinds["visit"] > 0
        assert rep["wrk"]["requests"] >= sum(kinds[k] for k in ("read", "insert", "visit"))
        names = [i["name"] for i in rep["checks"]["items"]]
        assert "acknowledged post ids present (no lost insert)" in names
        lost = next(i for i in rep["checks"]["items"] if i["name"].startswith("acknowledged"))
        assert lost["expected"] == rep["acked"]["posts"] > 0
        assert rep["stop"]["exit_status"] == 0
        assert 0 < rep["cpu"]["machine_busy"] <= 1
        assert all(rep["latency_ms"][k] > 0 for k in ("p50", "p99", "p999"))
        s = c["summary"]
        assert s["repetitions_ok"] == 1 and s["requests_per_s"]["n"] == 1
    waldio_cells = [c for c in doc["cells"] if c["mode"] != "wal-full"]
    for c in waldio_cells:
        rep = c["repetitions"][0]
        log = rep["stop"]["log"]
        assert (log["waldio"], log["holds_frames"], log["in_use_guard"]) == (True, False, False)
        assert rep["waldio_stats"]["frames_written"] > 0      # every worker's, at its exit
        assert c["summary"]["waldio_per_request"]["flushes"]["median"] > 0
    for c in doc["cells"]:
        if c["mode"] == "wal-full":
            assert c["repetitions"][0]["waldio_stats"] is None
    ratio = {(r["mix"], r["mode"]) for r in doc["ratios"]}
    assert ratio == {(mix, "waldio-full-durable") for mix in W.MIXES}


def test_a_broken_document_does_not_validate(tiny: Dict[str, Any]) -> None:
    bad = copy.deepcopy(tiny["doc"])
    bad["cells"][0]["mix"] = "everything"
    del bad["cells"][1]["repetitions"][0]["stop"]
    assert results.validate(bad) != []


def test_the_lost_write_check_fails_on_a_missing_acknowledged_write(rundir: str) -> None:
    base = B.resolve_settings(None, {"repetitions": 1, "warmup": 0})
    ws = W.WebappSettings(base=base, processes=[1], mixes=["write"], users=10)
    spec = B.parse_modes("wal-full")[0]
    bench = W.WebappBench(ws, [spec], process_env())
    bench.root = rundir
    db = str(Path(rundir) / "app.db")
    shutil.copyfile(bench._template(0), db)
    acked = W.Acked()
    acked.take({"acked_posts": [1, 10 ** 9], "acked_visits": {"3": 0, "4": 7}})
    no_errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    run = {"errors": no_errors, "kinds": {"failed": 0}}
    rep: Dict[str, Any] = {"workers": [], "warm_wrk": run, "wrk": run,
                           "stop": {"exit_status": 0, "log": {"wal_exists": False}}}
    from waldio.bench.sqlite_env import Opener
    bench._check(rep, spec, Opener(spec, base, bench.env), db, acked, {"params": {}}, True)
    failed = {i["name"]: (i["expected"], i["actual"]) for i in rep["checks"]["items"]
              if not i["ok"]}
    assert failed == {
        "acknowledged post ids present (no lost insert)": (2, 1),
        "users whose visits are below the largest acknowledged count (lost updates)": (0, 1)}
    assert rep["ok"] is False


def test_the_stop_check_holds_the_standard_layout_to_the_last_close_promise(
        rundir: str) -> None:
    """A graceful stop in the standard layout is held to what the slotted layouts
    are (wal_log.h L8, no stock process here): a log in SQLite's format that still
    holds frames, or is longer than the idle bound, fails the cell."""
    base = B.resolve_settings(None, {"repetitions": 1, "warmup": 0})
    ws = W.WebappSettings(base=base, processes=[1], mixes=["write"], users=10)
    spec = B.parse_modes("waldio-full", layout="standard")[0]
    bench = W.WebappBench(ws, [spec], process_env())
    bench.root = rundir
    db = str(Path(rundir) / "app.db")
    shutil.copyfile(bench._template(0), db)
    no_errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    run = {"errors": no_errors, "kinds": {"failed": 0}}
    name = ("after the graceful stop: the log holds no frames, no in-use guard, at "
            "most the idle bound (bytes)")
    bound = 256 << 10
    for holds, size, ok in ((False, bound, True), (True, bound, False),
                            (False, 4352 << 10, False)):
        log = {"wal_exists": True, "wal_bytes": size, "waldio": False,
               "wal_header": logformat.STANDARD_HEADER_KIND, "holds_frames": holds,
               "in_use_guard": False}
        rep: Dict[str, Any] = {"workers": [{"waldio": {"idle_log_bytes": bound}}],
                               "warm_wrk": run, "wrk": run,
                               "stop": {"exit_status": 0, "log": log}}
        from waldio.bench.sqlite_env import Opener
        bench._check(rep, spec, Opener(spec, base, bench.env), db, W.Acked(),
                     {"params": {}}, True)
        (item,) = [i for i in rep["checks"]["items"] if i["name"] == name]
        assert item["ok"] is ok, (holds, size, item)


def test_options_that_do_not_apply_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, says in ((["--transactions", "10"], "--transactions"),
                       (["--connections", "2", "--workload", "insert"], "--connections"),
                       (["--duration", "1.5"], "whole seconds"),
                       (["--workload", "webapp,insert"], "on its own")):
        if "--workload" not in argv:
            argv = ["--workload", "webapp"] + argv
        with pytest.raises(SystemExit) as e:
            cli.main(["bench", "--processes", "2"] + argv)
        assert e.value.code == 2
        assert says in capsys.readouterr().err


def test_log_state_reads_a_standard_log(tmp_path: Path) -> None:
    """The graceful-stop check in the standard layout (SQLite's own WAL bytes, no
    in-use guard): frames SQLite's recovery would replay are frames left behind."""
    import apsw
    db = str(tmp_path / "s.db")
    conn = apsw.Connection(db, vfs="unix")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x); INSERT INTO t VALUES(1)")
    held = W.log_state(db)
    assert (held["waldio"], held["holds_frames"], held["in_use_guard"]) == (False, True, False)
    conn.execute("PRAGMA wal_checkpoint(RESTART)")
    conn.execute("INSERT INTO t VALUES(2)")         # a new generation over the old frames
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    empty = W.log_state(db)
    assert empty["wal_bytes"] == 0 and empty["holds_frames"] is False
    conn.close()
