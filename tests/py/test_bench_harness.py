"""waldio bench's timed loop (issue 13): the C transaction loop, the calibration round,
and the Mobibench side-by-side plumbing.

Behaviour only, never timing thresholds: the machine is shared and noisy.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from bench_dirs import in_tmp, rundir  # noqa: E402,F401 (fixtures)
from waldio import bench as B
from waldio import drivers

from test_bench import failures  # noqa: E402  (one reading of a run's checks)
from waldio.bench import cli as bench_cli
from waldio.bench import compare_mobibench as C
from waldio.bench import mobibench as M
from waldio.bench import native as N
from waldio.bench import results
from waldio.bench.runner import process_env



def run_engine(rundir: str, preset: str, modes: str, loop: str = "native",
               statements: str = "prepared", calibrate: bool = False,
               **overrides: Any) -> Dict[str, Any]:
    base = {"transactions": 20, "repetitions": 1, "warmup": 0}
    base.update(overrides)
    s = B.resolve_settings(preset, base)
    bench = B.Bench(s, B.parse_modes(modes), loop=loop, statements=statements,
                    calibrate=calibrate)
    with B.open_target(None, rundir, None, bench.need_odirect()) as target:
        return bench.run(target)




# --------------------------------------------------------------------------
# the C loop runs the plan: same checks, both builds, both statement styles
# --------------------------------------------------------------------------

@pytest.mark.parametrize("statements", N.STATEMENT_STYLES)
@pytest.mark.parametrize("preset,extra", [
    ("mobibench-2015", {}),
    ("mobibench", {"phases": ["insert", "update", "delete"]}),
    ("apsys17", {"prepopulate": 300}),
    (None, {"phases": ["mixed"], "ops_per_txn": 3, "prepopulate": 100, "key_order": "random"}),
    (None, {"phases": ["select", "update"], "prepopulate": 50, "record_size": 0}),
    (None, {"threads": 3, "phases": ["mixed"], "prepopulate": 90, "transactions": 30}),
    (None, {"regime": "reused", "timed": ["checkpoint", "close"]}),
    (None, {"threads": 2, "shared_db": False, "timed": ["open", "checkpoint", "close"],
            "think_ms": 0.2}),
], ids=["mobibench-2015", "mobibench", "apsys17", "mixed", "select-update", "threads",
        "reused-timed-close", "per-db-timed-open-think"])
def test_c_loop_passes_every_check(preset: Any, extra: Dict[str, Any], statements: str,
                                   rundir: str) -> None:
    modes = "wal-full,wal-normal@system,waldio-normal,waldio-full@system,delete-full"
    doc = run_engine(rundir, preset or "mobibench-2015", modes, statements=statements, **extra)
    assert failures(doc) == []
    assert results.validate(doc) == []
    assert doc["params"]["bench"]["harness"]["loop"] == "native"
    for m in doc["modes"]:
        (rep,) = m["repetitions"]
        assert rep["harness"] == {"loop": "native", "statements": statements}
        assert rep["latency"]["count"] == rep["transactions"]
        assert all(x > 0 for x in rep["latency"]["samples_ns"])


def test_python_loop_still_available_and_used_for_open_close(rundir: str) -> None:
    doc = run_engine(rundir, "mobibench-2015", "wal-full,wal-full@system", loop="python")
    assert failures(doc) == []
    assert {m["repetitions"][0]["harness"]["loop"] for m in doc["modes"]} == {"python"}
    doc = run_engine(rundir, "mobibench-2015", "wal-full@system", regime="open-close")
    assert failures(doc) == []
    assert doc["modes"][0]["repetitions"][0]["harness"]["loop"] == "python"
    assert doc["params"]["bench"]["harness"]["loop"] == "python"


def test_exec_style_needs_the_c_loop() -> None:
    s = B.resolve_settings("mobibench-2015", {})
    with pytest.raises(B.BenchError, match="exec"):
        B.Bench(s, B.parse_modes("wal-full"), loop="python", statements="exec")
    s = B.resolve_settings("mobibench-2015", {"regime": "open-close"})
    with pytest.raises(B.BenchError, match="open-close"):
        B.Bench(s, B.parse_modes("wal-full"), statements="exec")


# --------------------------------------------------------------------------
# the calibration round: measured per build, stored and printed
# --------------------------------------------------------------------------

def test_calibration_is_stored_and_printed(rundir: str, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    status = bench_cli_main(["bench", "--dir", rundir, "--modes", "wal-normal,wal-normal@system",
                             "--transactions", "30", "--repetitions", "1", "--warmup", "0",
                             "--plain", "--quiet", "--json", os.path.join(rundir, "r.json")])
    out, _err = capsys.readouterr()
    assert status == 0
    assert "harness overhead" not in out                 # --quiet: the table only
    text = Path(rundir, "r.txt").read_text()             # the checklist has it
    assert "harness overhead per transaction" in text
    assert "apsw 3." in text and "system 3." in text
    doc = results.load(os.path.join(rundir, "r.json"))
    cal = doc["params"]["bench"]["harness"]["calibration"]
    assert cal["loop_used"] == "native"
    assert {b["build"] for b in cal["builds"]} == {"apsw", "system"}
    for b in cal["builds"]:
        assert b["transactions"] == 30
        assert set(b["us_per_txn"]) == {"bare", "native", "python"}
        assert set(b["overhead_us_per_txn"]) == {"native", "python"}
        for ov in b["overhead_us_per_txn"].values():
            assert isinstance(ov["best"], float) and ov["paired"]["n"] == b["rounds"]
        assert b["us_per_txn"]["bare"]["median"] > 0
        assert b["us_per_txn"]["bare"]["n"] == b["rounds"]


def bench_cli_main(argv: List[str]) -> int:
    from waldio import cli
    return cli.main(argv)


def test_no_calibration_and_exec_style_from_the_command_line(
        rundir: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = bench_cli_main(["bench", "--dir", rundir, "--modes", "wal-full@system",
                             "--statements", "exec", "--no-calibration", "--transactions", "10",
                             "--repetitions", "1", "--warmup", "0", "--plain", "--quiet"])
    out, _ = capsys.readouterr()
    assert status == 0
    assert "harness overhead" not in out
    with pytest.raises(SystemExit):
        bench_cli_main(["bench", "--dir", rundir, "--loop", "python", "--statements", "exec"])
    assert "exec" in capsys.readouterr().err


# --------------------------------------------------------------------------
# the C loop itself
# --------------------------------------------------------------------------

def _plan(preset: str, **kw: Any) -> Any:
    s = B.resolve_settings(preset, dict({"transactions": 5}, **kw))
    return s, B.build_plan(s, 0)


def test_exec_text_is_the_mobibench_shape() -> None:
    s, plan = _plan("mobibench")
    cp = N.CompiledPlan(plan, "exec", s.txn, s.phases)
    assert cp.ntxn == 5
    text = cp.sql[0]
    assert text.startswith("BEGIN;INSERT INTO tblMyList0(id, Value) VALUES(1, 'aaaa")
    assert text.count("INSERT") == 3 and text.endswith(";COMMIT;")
    s, plan = _plan("mobibench-2015")
    cp = N.CompiledPlan(plan, "exec", s.txn, s.phases)
    assert cp.sql[0].startswith("INSERT INTO tblMyList(Value) VALUES('aaaaaaaaaabbbb")
    assert N.literal("it's") == "'it''s'" and N.literal(None) == "NULL"
    assert N.literal(b"\x01\xff") == "X'01ff'"
    with pytest.raises(ValueError):
        N.render("SELECT ?, ?", (1,))


@pytest.mark.parametrize("build", ["apsw", "system"])
def test_error_stops_the_loop_rolls_back_and_names_the_transaction(build: str) -> None:
    s, plan = _plan("mobibench", insert_ids="explicit")
    loop = N.TxnLoop.get()
    env = process_env()
    conn = env.connect(build, ":memory:", "unix", {})
    try:
        for t in s.table_names():
            conn.run(B.create_table_sql(s, t))
        conn.run("INSERT INTO tblMyList1(id, Value) VALUES(3, 'taken')")  # txn 2 collides
        prepared = loop.prepare(build, conn, N.CompiledPlan(plan, "prepared", s.txn, s.phases))
        try:
            with pytest.raises(N.TxnLoopError) as exc:
                loop.run(prepared)
        finally:
            prepared.close()
        assert exc.value.txn == 2 and exc.value.rc & 0xFF == 19   # SQLITE_CONSTRAINT
        assert "UNIQUE" in exc.value.message
        # the failed transaction was rolled back: its first insert is not there
        assert conn.rows("SELECT count(*) FROM tblMyList0")[0][0] == 2
        conn.run("BEGIN")          # no transaction left open
        conn.run("COMMIT")
    finally:
        conn.close()


def test_bare_loop_and_think_time() -> None:
    s, plan = _plan("mobibench-2015")
    loop = N.TxnLoop.get()
    env = process_env()
    conn = env.connect("apsw", ":memory:", "unix", {})
    try:
        conn.run(B.create_table_sql(s, "tblMyList"))
        prepared = loop.prepare("apsw", conn, N.CompiledPlan(plan, "prepared", s.txn, s.phases))
        try:
            bare = loop.run(prepared, stamps=False)
            assert len(bare.t_start) == 1 and bare.t_end[0] > bare.t_start[0]
            slow = loop.run(prepared, think_ns=200_000)
            assert len(slow.t_start) == 5
            assert all(b >= a for a, b in zip(slow.t_start, slow.t_end))
            assert all(b >= a for a, b in zip(slow.t_end, slow.t_start[1:]))
            assert slow.slept_ns >= 4 * 200_000
        finally:
            prepared.close()
        assert conn.rows("SELECT count(*) FROM tblMyList")[0][0] == 10
    finally:
        conn.close()


def test_drivers_hand_out_the_sqlite3_pointer() -> None:
    for drv in drivers.available_drivers():
        conn = drv.connect(":memory:", uri=False)
        assert conn.sqlite3_pointer() > 0
        conn.close()
        with pytest.raises(drivers.SQLiteError):
            conn.sqlite3_pointer()


# --------------------------------------------------------------------------
# Mobibench side by side: the recipe and command-line plumbing
# --------------------------------------------------------------------------

MOBIBENCH_OUTPUT = """\
[DB information]
sqlite_version=3.40.1
page_size=4096
journal_mode=wal
synchronous=2
00%01%100%-----------------------------------------
[Messurement Result]
[CPU] : Active,Idle,IoWait : 84.59 0.00 15.41
[TIME] :       6 sec 211856us. \t160.98 Transactions/sec
"""


def test_mobibench_recipe_commands_and_output() -> None:
    assert M.build_command("m.c", "mb") == ["gcc", "-O2", "-w", "-o", "mb", "m.c",
                                            "-lsqlite3", "-lpthread", "-ldl"]
    assert M.command("mb", "/d", 1000, "wal", "full") == [
        "mb", "-p", "/d", "-d", "0", "-n", "1000", "-j", "3", "-s", "2"]
    out = M.parse_output(MOBIBENCH_OUTPUT)
    assert out.tps == 160.98 and abs(out.seconds - 6.211856) < 1e-9
    assert out.echoed == {"sqlite_version": "3.40.1", "page_size": "4096",
                          "journal_mode": "wal", "synchronous": "2"}
    with pytest.raises(M.MobibenchError):
        M.parse_output("sqlite3_open error")
    cmd = C.waldio_command("mobibench", 500, "truncate", "full", "/d", "exec", "o.json", False)
    assert cmd[1:] == ["-m", "waldio", "bench", "--sqlite", "system", "--preset", "mobibench",
                       "--transactions", "500", "--modes", "truncate-full", "--statements",
                       "exec", "--dir", "/d", "--repetitions", "1", "--warmup", "0",
                       "--no-calibration", "--quiet", "--plain", "--json", "o.json"]
    assert C.waldio_command("mobibench", 500, "wal", "normal", "/d", "exec", "o.json",
                            True)[-3:] == ["--drop-caches", "--json", "o.json"]
    assert M.VERSIONS == {"1ad7644": "mobibench-2015", "f56ea5e": "mobibench"}


def test_compare_mobibench_dry_run_and_bench_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert C.main(["--dry-run", "--mobibench-source", "/nonexistent"]) == 0
    out = capsys.readouterr().out
    # 2 targets x 2 versions x 4 journal modes, two commands each
    assert out.count("-d 0 -n 1000") == 16 and out.count("--statements exec") == 16
    assert "gcc -O2 -w -o mobibench-1ad7644 mobibench.c -lsqlite3 -lpthread -ldl" in out
    parser = bench_cli_parser()
    args = parser.parse_args(["bench", "--compare-mobibench", "--repetitions", "3",
                              "--transactions", "200", "--dir", "/x", "--json", "c.json"])
    assert bench_cli.compare_mobibench_argv(args) == [
        "--repetitions", "3", "--transactions", "200", "--json", "c.json", "--root-dir", "/x"]
    with pytest.raises(SystemExit):
        bench_cli_main(["bench", "--compare-mobibench", "--modes", "wal-full"])
    assert "do not apply" in capsys.readouterr().err


def bench_cli_parser() -> Any:
    import argparse
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    bench_cli.register(sub)
    return p


def _mobibench_source() -> str:
    src = M.default_source()
    if src == M.DEFAULT_URL:
        pytest.skip(f"no Mobibench source on this machine (set {M.SOURCE_ENV} to a clone of "
                    f"{M.DEFAULT_URL}); the test does not reach GitHub")
    return src


@pytest.mark.parametrize("version", list(M.VERSIONS))
def test_mobibench_builds_against_the_system_sqlite(version: str, tmp_path: Any) -> None:
    src = _mobibench_source()
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    b = M.build(M.repository(src), version, str(tmp_path))
    d = tmp_path / "run"
    d.mkdir()
    res = subprocess.run(M.command(b.binary, str(d), 5, "wal", "off"), capture_output=True,
                         text=True, timeout=120)
    out = M.parse_output(res.stdout)
    assert out.echoed["sqlite_version"] == drivers.driver_by_name("system").sqlite_version
    assert out.echoed["journal_mode"] == "wal" and out.echoed["synchronous"] == "0"
    ldd = subprocess.run(["ldd", b.binary], capture_output=True, text=True).stdout
    assert "libsqlite3" in ldd
    assert sys.platform.startswith("linux")


def test_compare_self_check_runs_mobibench_against_itself(tmp_path: Any,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """--self-check (A/A): both sides of every cell are Mobibench runs, so the ratios
    measure the machine's noise, not a difference between tools."""
    src = _mobibench_source()
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    out_json = tmp_path / "aa.json"
    assert C.main(["--self-check", "--mobibench-source", src, "--targets", "root",
                   "--root-dir", str(tmp_path), "--versions", "1ad7644", "--journal-modes",
                   "wal", "--synchronous", "off", "--transactions", "20", "--repetitions", "2",
                   "--json", str(out_json)]) == 0
    assert "Mobibench again tx/s" in capsys.readouterr().out
    doc = json.loads(out_json.read_text())
    assert doc["self_check"] is True and len(doc["rows"]) == 1
    runs = doc["runs"][0]["runs"]
    assert len(runs) == 2
    for r in runs:
        assert r["waldio"]["echoed"]["journal_mode"] == "wal"       # Mobibench's own output
        assert r["waldio_command"][0].endswith("mobibench-1ad7644")
        assert r["ratio"] == r["waldio"]["tps"] / r["mobibench"]["tps"] > 0


# --------------------------------------------------------------------------
# the system driver's statement cache (the Python loop's cost with ctypes)
# --------------------------------------------------------------------------

def test_system_driver_caches_statements_without_holding_locks(tmp_path: Any) -> None:
    try:
        drv = drivers.driver_by_name("system")
    except LookupError:
        pytest.skip("no system libsqlite3")
    path = str(tmp_path / "c.db")
    a = drv.connect(path, uri=False, timeout_ms=0)
    b = drv.connect(path, uri=False, timeout_ms=0)
    try:
        a.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
        for i in range(3):
            a.execute("INSERT INTO t(id, v) VALUES(?, ?)", (i, f"v{i}"))
        with pytest.raises(drivers.SQLiteError) as exc:       # reused after an error
            a.execute("INSERT INTO t(id, v) VALUES(?, ?)", (1, "dup"))
        assert exc.value.code == 19
        a.execute("INSERT INTO t(id, v) VALUES(?, ?)", (3, None))
        assert a.execute("SELECT count(*), sum(id) FROM t") == [(4, 6)]
        # a cached, reset SELECT holds no SHARED lock: another connection can write
        b.execute("INSERT INTO t(id, v) VALUES(?, ?)", (4, b"x"))
        assert a.execute("SELECT count(*), sum(id) FROM t") == [(5, 10)]
        # the schema changes under a cached statement: SQLite re-prepares it
        a.execute("DROP TABLE t")
        a.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v, w)")
        assert a.execute("SELECT count(*), sum(id) FROM t") == [(0, None)]
        for i in range(drivers._CtypesConnection.STATEMENT_CACHE + 5):   # eviction
            assert a.execute(f"SELECT {i}") == [(i,)]
        with pytest.raises(ValueError):
            a.execute("SELECT 1; SELECT 2")
    finally:
        a.close()
        b.close()
