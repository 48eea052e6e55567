"""Tests of `waldio bench` and `waldio report` (issue item 9).

* the CLI parses and validates: bad values exit 2 with a message naming the
  option and the accepted values;
* every preset runs at a tiny size in every mode and passes its correctness
  checks (plus the other workloads, regimes and thread layouts);
* the JSON validates against python/waldio/schemas/bench.schema.json;
* the parameters printed are what SQLite reports;
* one run on a fresh loop ext4 (root only; skipped with the reason elsewhere),
  one on the system SQLite (subprocess: that library gets its own copy of
  waldio.so), and the plots of `waldio report`.

Runs go to a private directory under $WALDIO_TEST_DIR (default /var/tmp: the
root file system has O_DIRECT, tmpfs has not).  No assertion here depends on
how fast anything ran.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from bench_dirs import in_tmp, rundir  # noqa: E402,F401 (fixtures)
from waldio import bench as B  # noqa: E402
from waldio import cli  # noqa: E402
from waldio import drivers  # noqa: E402
from waldio import fs as fsimage  # noqa: E402
from waldio import params  # noqa: E402
from waldio.bench import iostat  # noqa: E402
from waldio.bench import results  # noqa: E402
from waldio.bench.report import failure_lines  # noqa: E402

TINY = ["--transactions", "20", "--repetitions", "1", "--warmup", "0"]


def run_cli(argv: List[str], capsys: pytest.CaptureFixture[str]) -> tuple:
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def run_engine(rundir: str, preset: str, modes: str, **overrides: Any) -> Dict[str, Any]:
    base = {"transactions": 20, "repetitions": 1, "warmup": 0}
    base.update(overrides)
    s = B.resolve_settings(preset, base)
    specs = B.parse_modes(modes)
    bench = B.Bench(s, specs)
    with B.open_target(None, rundir, None, bench.need_odirect()) as target:
        return bench.run(target)


def failures(doc: Dict[str, Any]) -> List[str]:
    return [line for m in doc["modes"] for line in failure_lines(m["label"], m["repetitions"])]


# --------------------------------------------------------------------------
# 1. options parse and validate
# --------------------------------------------------------------------------

BAD_OPTIONS = [
    (["--modes", "bogus"], ["--modes", "unknown mode 'bogus'", "wal-full", "all-stock"]),
    (["--modes", "wal-full:pad4k"], ["--modes", "waldio modes only"]),
    (["--modes", "raw-dio@system"], ["--modes", "raw modes run no SQLite"]),
    (["--modes", "waldio-full:pad3k"], ["--modes", "embed, pad4k, pad8k"]),
    (["--regime", "sideways"], ["--regime", "growing", "reused", "open-close"]),
    (["--timed", "open,lunch"], ["--timed", "'lunch'", "open, checkpoint, close"]),
    (["--repetitions", "0"], ["--repetitions", ">= 1"]),
    (["--transactions", "many"], ["--transactions", "integer"]),
    (["--record-size", "-5"], ["--record-size", ">= 0"]),
    (["--key-order", "shuffled"], ["--key-order", "seq", "random"]),
    (["--page-size", "3000"], ["--page-size", "4096", "65536"]),
    (["--layout", "pad3k"], ["--layout", "embed"]),
    (["--sqlite", "mysql"], ["--sqlite", "apsw", "system"]),
    (["--fs", "ntfs"], ["--fs", "ext4", "xfs"]),
    (["--mix", "insert=50,drop=3"], ["--mix", "insert, update, delete, select"]),
    (["--workload", "upsert"], ["--workload", "insert", "mixed"]),
    (["--preset", "mobibench-1999"], ["--preset", "mobibench-2015", "apsys17"]),
    (["--think-ms", "-1"], ["--think-ms", ">= 0"]),
    (["--baseline", "nope"], ["--baseline", "unknown mode"]),
]


@pytest.mark.parametrize("argv,needles", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bad_values_are_argparse_errors(argv: List[str], needles: List[str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["bench"] + argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    for n in needles:
        assert n in err, err


BAD_COMBINATIONS = [
    (["--regime", "reused", "--timed", "open"], ["--timed", "reused"]),
    (["--modes", "wal-full,waldio-full", "--baseline", "delete-full"],
     ["--baseline", "not among the modes"]),
    (["--fs", "ext4"], ["--dir and --fs"]),
    (["--txn", "autocommit", "--tables", "3"], ["--txn", "begin"]),
    (["--workload", "delete", "--prepopulate", "5", "--transactions", "10"],
     ["runs out of rows", "--prepopulate"]),
    (["--prealloc", "lots"], ["--prealloc"]),
    (["--group-bytes", "1K"], ["--group-bytes", "4K..16M"]),
]


@pytest.mark.parametrize("argv,needles", BAD_COMBINATIONS,
                         ids=[" ".join(a) for a, _ in BAD_COMBINATIONS])
def test_bad_combinations_are_usage_errors(argv: List[str], needles: List[str], rundir: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--dir", rundir] + argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    for n in needles:
        assert n in err, err


def test_good_options_parse_typed() -> None:
    args = cli.build_parser().parse_args([
        "bench", "--modes", "all-waldio,wal-full@system", "--preset", "apsys17",
        "--workload", "insert,mixed", "--mix", "insert=3,select=1", "--transactions", "1_000",
        "--ops-per-txn", "4", "--record-size", "0", "--prepopulate", "100", "--tables", "2",
        "--key-order", "random", "--seed", "-3", "--threads", "2", "--db-per-thread",
        "--think-ms", "0.5", "--regime", "open-close", "--timed", "none", "--page-size", "8192",
        "--layout", "pad8k", "--baseline", "waldio-full", "--repetitions", "2", "--warmup", "0"])
    assert args.phases == ["insert", "mixed"]
    assert args.mix == {"insert": 3.0, "select": 1.0}
    assert args.transactions == 1000 and args.seed == -3 and args.think_ms == 0.5
    assert args.shared_db is False and args.timed == [] and args.page_size == 8192
    s = bench_settings(args)
    assert s.preset == "apsys17" and s.prepopulate == 100 and s.txn == "begin"
    assert s.insert_ids == "explicit" and any("explicit ids" in n for n in s.notes)
    specs = B.parse_modes(args.modes, args.layout, args.sqlite)
    assert [m.label for m in specs][:3] == ["waldio-full", "waldio-persistent", "waldio-normal"]
    assert specs[-1].label == "wal-full@system" and specs[-1].sqlite == "system"
    assert {m.layout for m in specs[:-1]} == {"pad8k"}


def bench_settings(args: Any) -> B.Settings:
    from waldio.bench import options
    return options.settings_from_args(args)


def test_presets_set_their_defaults_and_options_override() -> None:
    s = B.resolve_settings("mobibench-2015", {})
    assert (s.transactions, s.tables, s.schema, s.txn, s.record_size, s.timed) == \
        (1000, 1, "autoincrement", "autocommit", 100, ["checkpoint"])
    assert s.table_names() == ["tblMyList"] and s.repetitions == 5 and s.warmup == 1
    m = B.resolve_settings("mobibench", {"phases": ["update"]})
    assert (m.transactions, m.tables, m.txn, m.schema) == (10, 3, "begin", "rowid")
    assert m.table_names() == ["tblMyList0", "tblMyList1", "tblMyList2"]
    assert m.prepopulate == 296  # Mobibench's MIN_CHECK rule: max(-n, 296)
    a = B.resolve_settings("apsys17", {"transactions": 7})
    assert a.phases == ["insert", "update", "delete"] and a.prepopulate == 100_000
    assert a.transactions == 7 and a.insert_ids == "auto" and a.key_order == "random"
    assert B.PRESETS["mobibench"].native_modes == ("truncate-full",)


def test_mode_table_and_spec_grammar() -> None:
    assert len([m for m in B.MODES.values() if m.kind == "stock"]) == 18
    assert B.MODES["wal-normal"].journal_mode == "WAL" and B.MODES["wal-normal"].synchronous == "NORMAL"
    # The base modes switch group commit off (libwaldio's default is auto).
    assert B.MODES["waldio-persistent"].pragmas == ("PRAGMA waldio_sync=persistent",
                                                    "PRAGMA waldio_group=off")
    assert [m.label for m in B.parse_modes("quick")] == list(B.QUICK_MODES)
    specs = B.parse_modes("all-waldio:pad4k,delete-off@system,raw-dio", sqlite="apsw")
    assert [s.label for s in specs][:3] == ["waldio-full:pad4k", "waldio-persistent:pad4k",
                                            "waldio-normal:pad4k"]
    assert [s.label for s in specs][-2:] == ["delete-off@system", "raw-dio"]
    # 4 base modes (full, persistent, normal, ns) x (off, async, durable),
    # full and persistent x strict, full and normal x auto, waldio-off, and
    # the two explicit ones
    assert len(specs) == 4 * 3 + 2 + 2 + 1 + 2
    ns = B.MODES["waldio-ns"]
    assert (ns.synchronous, ns.waldio_sync, ns.pragmas) == (
        "NORMAL", "ns", ("PRAGMA waldio_sync=ns", "PRAGMA waldio_group=off"))
    assert B.MODES["waldio-off"].synchronous == "OFF" and B.MODES["waldio-off"].waldio_sync == "off"
    assert specs[-1].sqlite is None and specs[-2].sqlite == "system"
    g = B.MODES["waldio-persistent-async"]
    assert g.pragmas == ("PRAGMA waldio_sync=persistent", "PRAGMA waldio_group=async")
    assert (g.synchronous, g.waldio_sync, g.waldio_group) == ("FULL", "persistent", "async")
    assert B.MODES["waldio-normal-durable"].synchronous == "NORMAL"
    assert B.MODES["waldio-full"].waldio_group == "off"
    auto = B.MODES["waldio-full-auto"]
    assert (auto.synchronous, auto.waldio_group, auto.pragmas) == (
        "FULL", "auto", ("PRAGMA waldio_group=auto",))


def test_statistics_and_pairwise_ratios() -> None:
    assert B.percentile([1, 2, 3, 4], 50) == 2.5
    assert B.percentile([10], 99) == 10.0
    assert B.percentile(list(range(101)), 99) == 99.0
    s = B.summarize([2.0, 4.0, 6.0])
    assert s["median"] == 4.0 and s["min"] == 2.0 and s["max"] == 6.0 and s["stdev"] == 2.0
    assert abs(s["cov"] - 0.5) < 1e-12
    assert B.summarize([]) is None

    def rep(i: int, ops: float, ok: bool = True, warm: bool = False) -> Dict[str, Any]:
        return {"index": i, "ops_per_s": ops, "ok": ok, "warmup": warm}
    base = [rep(0, 1.0, warm=True), rep(1, 100.0), rep(2, 200.0), rep(3, 100.0, ok=False)]
    mode = [rep(0, 9.0, warm=True), rep(1, 300.0), rep(2, 200.0), rep(3, 50.0)]
    r = B.pair_ratios(mode, base)
    assert [p["index"] for p in r["per_rep"]] == [1, 2]  # warm-up and failed pairs left out
    assert (r["median"], r["min"], r["max"]) == (2.0, 1.0, 3.0)


def test_plan_is_seeded_and_knows_its_results() -> None:
    s = B.resolve_settings(None, {"phases": ["mixed"], "transactions": 300, "ops_per_txn": 3,
                                  "prepopulate": 50, "key_order": "random", "seed": 9,
                                  "tables": 2, "txn": "begin"})
    a, b = B.build_plan(s, 0), B.build_plan(s, 0)
    assert a.txns == b.txns and a.final_ids == b.final_ids
    ops = a.ops
    assert sum(ops.values()) == 900
    assert len(a.final_ids) == 50 + ops["insert"] - ops["delete"]
    assert a.expected_changes == 2 * (ops["insert"] + ops["update"] + ops["delete"])
    assert a.expected_select_rows == 2 * ops["select"]
    c = B.resolve_settings(None, {"phases": ["mixed"], "transactions": 300, "ops_per_txn": 3,
                                  "prepopulate": 50, "key_order": "random", "seed": 10,
                                  "tables": 2, "txn": "begin"})
    assert B.build_plan(c, 0).txns != a.txns


# --------------------------------------------------------------------------
# 2. every preset, every mode, tiny, correctness checks pass
# --------------------------------------------------------------------------

@pytest.mark.parametrize("preset,extra", [
    ("mobibench-2015", {}),
    ("mobibench", {"phases": ["insert", "update", "delete"]}),
    ("apsys17", {"prepopulate": 300}),
])
def test_every_preset_runs_in_every_mode(preset: str, extra: Dict[str, Any], rundir: str) -> None:
    doc = run_engine(rundir, preset, "all", **extra)
    assert failures(doc) == []
    assert doc["ok"] is True
    assert {m["label"] for m in doc["modes"]} == set(B.MODES)
    assert results.validate(doc) == []
    for m in doc["modes"]:
        (rep,) = m["repetitions"]
        assert rep["ok"] and rep["checks"]["items"], m["label"]
        assert rep["latency"]["count"] == rep["transactions"] == len(doc["params"]["bench"]["phases"]) * 20
        if m["kind"] != "raw":
            names = [i["name"] for i in rep["checks"]["items"]]
            assert any("integrity_check" in n for n in names)
            assert any("rows changed" in n for n in names)
        if m["kind"] == "waldio":
            st = rep["waldio_stats"]
            if m["name"].endswith("-async"):   # may all still sit in the group buffer
                assert st["group_commits"] > 0
            else:
                assert st["frames_written"] > 0
            names = [i["name"] for i in rep["checks"]["items"]]
            assert "PRAGMA waldio group" in names


@pytest.mark.parametrize("extra", [
    {"phases": ["mixed"], "ops_per_txn": 3, "prepopulate": 100, "key_order": "random"},
    {"phases": ["select", "update"], "prepopulate": 50, "record_size": 0},
    {"regime": "reused", "timed": []},
    {"regime": "open-close", "timed": ["checkpoint"]},
    {"threads": 3, "phases": ["mixed"], "prepopulate": 90, "transactions": 30},
    {"threads": 2, "shared_db": False, "timed": ["open", "checkpoint", "close"], "think_ms": 0.2},
], ids=["mixed-random", "select-update", "reused", "open-close", "threads-shared",
        "threads-per-db-timed-open-close"])
def test_workloads_regimes_and_threads(extra: Dict[str, Any], rundir: str) -> None:
    doc = run_engine(rundir, "mobibench-2015", "wal-full,delete-normal,waldio-full,"
                                                 "waldio-normal,raw-dio,raw-append", **extra)
    assert failures(doc) == []
    assert results.validate(doc) == []
    if extra.get("regime") == "reused":
        for m in doc["modes"]:
            if m["name"] in ("wal-full", "waldio-full"):
                log = m["repetitions"][0]["log_file"]
                assert log["before_bytes"] > 0 and log["grew"] is False, (m["label"], log)


def test_failed_check_makes_exit_status_nonzero(rundir: str, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    real = B.Bench._expected_rows

    def off_by_one(self: B.Bench) -> Dict[int, List[int]]:
        rows = real(self)
        return {k: v + [10 ** 9] for k, v in rows.items()}
    monkeypatch.setattr(B.Bench, "_expected_rows", off_by_one)
    status, out, _ = run_cli(["bench", "--dir", rundir, "--modes", "wal-full", "--plain"] + TINY,
                             capsys)
    assert status == 1
    assert "FAILED wal-full round 0: tblMyList rows left: expected 21, got 20" in out


# --------------------------------------------------------------------------
# 3. JSON schema, 4. printed parameters = what SQLite reports
# --------------------------------------------------------------------------

def test_json_validates_and_printed_parameters_match_sqlite(
        rundir: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import apsw
    import jsonschema
    out_json = tmp_path / "r.json"
    status, out, err = run_cli(
        ["bench", "--dir", rundir, "--modes", "wal-full,delete-normal,waldio-full:pad4k,raw-dio",
         "--page-size", "8192", "--cache-size", "-3000", "--wal-autocheckpoint", "500",
         "--journal-size-limit", "1048576", "--json", str(out_json), "--plain", "--verbose"]
        + TINY, capsys)
    assert status == 0, out + err
    doc = json.loads(out_json.read_text())
    jsonschema.validate(doc, results.schema())
    assert doc["schema_version"] == 1
    broken = dict(doc)
    del broken["modes"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, results.schema())

    ref = apsw.Connection(":memory:")
    version = ref.execute("SELECT sqlite_version()").fetchall()[0][0]
    source_id = ref.execute("SELECT sqlite_source_id()").fetchall()[0][0]
    compile_options = [r[0] for r in ref.execute("PRAGMA compile_options")]
    ref.close()
    assert re.search(rf"^  sqlite_version: +{re.escape(version)}$", out, re.M)
    assert re.search(rf"^  sqlite_source_id: +{re.escape(source_id)}$", out, re.M)
    flat = re.sub(r"\s+", " ", out)
    assert ", ".join(compile_options) in flat

    expect = {"wal-full": ("unix", "wal", "FULL", "0"),
              "delete-normal": ("unix", "delete", "NORMAL", "0"),
              "waldio-full:pad4k": ("waldio/unix", "wal", "FULL", "0")}
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in expect and "apsw" in line}
    for label, (vfs, jm, sync, reserve) in expect.items():
        cells = rows[label]
        # mode, sqlite (2 words), vfs, journal_mode, synchronous, page_size, reserve, cache_size,
        # mmap_size, locking_mode, wal_autocheckpoint, journal_size_limit
        assert cells[1:3] == ["apsw", version]
        assert cells[3:12] == [vfs, jm, sync, "8192", reserve, "-3000", "0", "normal", "500"], cells
        assert cells[12] == "1048576"
        mode = next(m for m in doc["modes"] if m["label"] == label)
        sq = mode["params"]["sqlite"]
        assert (sq["sqlite_version"], sq["sqlite_source_id"]) == (version, source_id)
        assert sq["compile_options"] == compile_options
        assert (sq["page_size"], sq["cache_size"], sq["wal_autocheckpoint"]) == (8192, -3000, 500)
        assert sq["journal_mode"] == jm and sq["synchronous"] == sync
    waldio_mode = next(m for m in doc["modes"] if m["label"] == "waldio-full:pad4k")
    assert waldio_mode["params"]["waldio"]["layout"] == "pad4k"
    assert rows["waldio-full:pad4k"][13:17] == ["full", "off", "pad4k", "direct"]
    # every unknown is printed as unknown with its reason, never guessed
    common = doc["params"]["common"]
    for section in ("filesystem", "device", "system"):
        for key, why in common[section]["_why"].items():
            assert common[section][key] == "unknown" and why
    unknown_lines = [ln for ln in out.splitlines() if ": unknown" in ln]
    assert all("unknown (" in ln for ln in unknown_lines)


# --------------------------------------------------------------------------
# loop ext4 (the default target), system SQLite, report
# --------------------------------------------------------------------------

def test_default_target_is_a_fresh_journaled_loop_ext4(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    reason = fsimage.unavailable_reason("ext4")
    if reason:
        pytest.skip(f"no loop ext4 here: {reason}")
    out_json = tmp_path / "loop.json"
    status, out, err = run_cli(["bench", "--modes", "wal-full,waldio-full,raw-dio", "--plain",
                                "--json", str(out_json)] + TINY, capsys)
    assert status == 0, out + err
    assert "target: a fresh ext4 on /dev/loop" in out and "(journaled, mounted" in out
    assert "it journals" in out_json.with_suffix(".txt").read_text()
    doc = json.loads(out_json.read_text())
    assert doc["params"]["target"]["kind"] == "loop"
    assert doc["params"]["common"]["filesystem"]["journals"] == "yes"
    assert doc["params"]["bench"]["devices"][0]["kind"] == "loop"
    assert fsimage.leftover_resources(pid=os.getpid()).to_dict() == \
        {"loop_devices": [], "mounts": [], "directories": []}


def test_system_sqlite_in_the_same_run(rundir: str, tmp_path: Path) -> None:
    try:
        system = drivers.driver_by_name("system")
    except LookupError as e:
        pytest.skip(str(e))
    out_json = tmp_path / "sys.json"
    p = subprocess.run(
        [sys.executable, "-m", "waldio", "bench", "--dir", rundir, "--plain", "--verbose", "--json",
         str(out_json), "--modes", "wal-full,wal-full@system,waldio-full@system"] + TINY,
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(ROOT / "python")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                     else []))))
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(out_json.read_text())
    versions = {m["label"]: m["params"]["sqlite"]["sqlite_version"] for m in doc["modes"]}
    assert versions["wal-full@system"] == system.sqlite_version
    assert versions["waldio-full@system"] == system.sqlite_version
    assert f"sqlite ({'system'})" in p.stdout


def test_report_prints_tables_and_draws_plots(rundir: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "quick.json"
    status, _, _ = run_cli(["bench", "--dir", rundir, "--quiet", "--json", str(out_json),
                            "--modes", "wal-full,waldio-full,raw-dio", "--transactions", "30",
                            "--repetitions", "2", "--warmup", "0"], capsys)
    assert status == 0
    plots = tmp_path / "plots"
    status, out, err = run_cli(["report", str(out_json), str(out_json), "--out", str(plots),
                                "--plain"], capsys)
    assert status == 0, err
    assert out.count("results: mobibench-2015 workload") == 2
    for name in ("combined-ops", "quick-bytes", "quick-latency"):
        png = plots / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (plots / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "modes": []}))
    with pytest.raises(SystemExit) as e:
        cli.main(["report", str(bad)])
    assert e.value.code == 2
    assert "does not match the bench schema" in capsys.readouterr().err


def test_memory_backed_dir_is_refused_for_direct_io_modes(capsys: pytest.CaptureFixture[str]) -> None:
    shm = "/dev/shm"
    if not os.path.isdir(shm) or params.mount_of(shm)["fstype"] != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    status, _, err = run_cli(["bench", "--dir", shm, "--modes", "wal-full,waldio-full"] + TINY,
                             capsys)
    assert status == 3
    assert "tmpfs is memory-backed" in err and "choose another --dir" in err


# --------------------------------------------------------------------------
# large transactions, a reader in another process, speedtest1 (issue 10)
# --------------------------------------------------------------------------

LARGE_MODES = "wal-full,waldio-full,wal-normal,waldio-normal,wal-off,waldio-off"


@pytest.mark.parametrize("extra", [
    # the spill workload, scaled down: a 50-page cache overflows inside every transaction
    {"schema": "rowid", "prepopulate": 3000, "phases": ["update"], "key_order": "random",
     "ops_per_txn": 400, "transactions": 3, "cache_size": -200},
    # one large insert transaction
    {"schema": "rowid", "phases": ["insert"], "transactions": 1, "ops_per_txn": 3000,
     "cache_size": -200},
    {"schema": "rowid", "phases": ["vacuum"], "prepopulate": 2000, "transactions": 2},
    {"schema": "rowid", "phases": ["create-index"], "prepopulate": 2000, "transactions": 2,
     "cache_size": -200},
], ids=["spill", "bulk-insert", "vacuum", "create-index"])
def test_large_transaction_workloads(extra: Dict[str, Any], rundir: str) -> None:
    doc = run_engine(rundir, "mobibench-2015", LARGE_MODES, **extra)
    assert failures(doc) == []
    assert results.validate(doc) == []
    for m in doc["modes"]:
        (rep,) = m["repetitions"]
        assert rep["transactions"] == extra["transactions"]
        names = [i["name"] for i in rep["checks"]["items"]]
        if extra["phases"] == ["create-index"]:
            item = next(i for i in rep["checks"]["items"] if i["name"] == "indexes created")
            assert item["expected"] == item["actual"] == 2
        assert "PRAGMA integrity_check" in names
        pt = m["summary"]["per_txn"]
        assert pt["process_wchar"]["median"] > 0
        if m["kind"] == "waldio":
            assert rep["waldio_stats"]["frames_written"] > 0
            assert pt["log_bytes_written"]["median"] > 0
            assert m["summary"]["waldio_stats_per_txn"]["frames_written"] > 0


def test_statement_workloads_plan_and_defaults() -> None:
    s = B.resolve_settings("mobibench-2015", {"phases": ["vacuum"], "transactions": 3,
                                              "tables": 2})
    assert s.prepopulate == 100_000 and any("vacuum" in n for n in s.notes)
    p = B.build_plan(s, 0)
    assert [t[1] for t in p.txns] == [(("VACUUM", (), False),)] * 3
    assert p.expected_changes == 0 and p.ops["vacuum"] == 3
    c = B.resolve_settings("mobibench-2015", {"phases": ["create-index"], "transactions": 2,
                                              "prepopulate": 10})
    q = B.build_plan(c, 0)
    sqls = [st[0] for _, stmts in q.txns for st in stmts]
    assert sqls == ["CREATE INDEX tblMyList_bench_idx0_0 ON tblMyList(Value)",
                    "CREATE INDEX tblMyList_bench_idx0_1 ON tblMyList(Value)"]
    assert q.indexes_created == 2


def test_reader_in_another_process(rundir: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--dir", rundir, "--plain", "--verbose", "--schema", "rowid",
            "--prepopulate", "2000",
            "--workload", "update", "--key-order", "random", "--ops-per-txn", "20",
            "--transactions", "15", "--wal-autocheckpoint", "0", "--timed", "none",
            "--reader-scans", "3", "--modes", "wal-full,waldio-full,wal-normal,waldio-normal",
            "--repetitions", "2", "--warmup", "0", "--json", os.path.join(rundir, "r.json")]
    status, out, err = run_cli(argv, capsys)
    assert status == 0, out + err
    assert "reader in another process" in out
    doc = json.loads(Path(rundir, "r.json").read_text())
    assert results.validate(doc) == []
    for m in doc["modes"]:
        for rep in m["repetitions"]:
            rd = rep["reader"]
            assert len(rd["scan_ns"]) == 3 and rd["pid"] != os.getpid()
            assert rd["check"]["ok"] and rd["check"]["expected"][0] == 2000
            assert rd["check"]["expected"][2] > 0          # the reader saw the updates
            assert rd["wal_file_bytes"] > 0                 # the WAL was not checkpointed away
            if m["kind"] == "waldio":
                assert rd["waldio_stats"] is not None
        assert m["summary"]["reader"]["scan_ms"]["n"] == 2
    assert set(doc["ratios"]["reader_time"]) == {m["label"] for m in doc["modes"]}
    assert doc["ratios"]["reader_time"]["wal-full"]["median"] == 1.0


NEW_BAD_COMBINATIONS = [
    (["--reader-scans", "2", "--regime", "open-close"], ["--reader-scans", "open-close"]),
    (["--reader-scans", "2", "--timed", "close"], ["--reader-scans", "'close'"]),
    (["--workload", "vacuum", "--ops-per-txn", "2"], ["--ops-per-txn", "VACUUM"]),
    (["--size", "5"], ["--size applies to --workload speedtest1 only"]),
    (["--workload", "speedtest1", "--transactions", "5"],
     ["--workload speedtest1", "--transactions", "do not apply"]),
    (["--workload", "speedtest1", "--modes", "waldio-normal"],
     ["--modes", "wal-normal", "not in the list"]),
    (["--workload", "speedtest1", "--modes", "delete-full"], ["--modes", "cannot run speedtest1"]),
    (["--workload", "speedtest1", "--size", "0"], ["--size", ">= 1"]),
]


@pytest.mark.parametrize("argv,needles", NEW_BAD_COMBINATIONS,
                         ids=[" ".join(a) for a, _ in NEW_BAD_COMBINATIONS])
def test_new_workloads_bad_combinations(argv: List[str], needles: List[str], rundir: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--dir", rundir] + argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    for n in needles:
        assert n in err, err
    with pytest.raises(SystemExit):
        cli.main(["bench", "--workload", "speedtest1,insert"])
    assert "runs alone" in capsys.readouterr().err


SPEEDTEST1_SAMPLE = """\
-- Speedtest1 for SQLite 3.40.1 2022-12-28 14:03:47 df5c253c0b3dd24916e4ec7cf77d
 100 - 500 INSERTs into table with no index......................    0.004s
 200 - VACUUM.....................................................    1.250s
 990 - ANALYZE.....................................................    0.002s
       TOTAL.......................................................    1.256s
Verification Hash: 826556 2ef302098d252181c4cb98b84a8a332a8e98506910393697
"""


def test_speedtest1_output_and_modes_parse() -> None:
    from waldio.bench import speedtest1 as S
    out = S.parse_output(SPEEDTEST1_SAMPLE)
    assert out["tests"] == [{"id": 100, "name": "500 INSERTs into table with no index", "ms": 4},
                            {"id": 200, "name": "VACUUM", "ms": 1250},
                            {"id": 990, "name": "ANALYZE", "ms": 2}]
    assert out["total_ms"] == 1256 and out["version"].startswith("3.40.1")
    assert out["hash"] == "826556 2ef302098d252181c4cb98b84a8a332a8e98506910393697"
    assert S.parse_modes(None) == list(S.DEFAULT_MODES)
    assert S.parse_sizes("25,100,25") == [25, 100]
    assert S.baseline_of("waldio-normal") == "wal-normal"


def _speedtest1_binary() -> str:
    """Build (or find cached) speedtest1; skip with the reason where it cannot be built."""
    from waldio.bench import speedtest1 as S
    import shutil as _sh
    for tool in ("apt-get", "gcc", "make", "tclsh", "xz"):
        if _sh.which(tool) is None:
            pytest.skip(f"speedtest1 cannot be built here: {tool} is missing")
    if not (ROOT / "build" / "libwaldio.a").is_file():
        pytest.skip("build/libwaldio.a is missing (make build)")
    try:
        return str(S.build())
    except B.BenchError as e:
        if "apt" in str(e) or "fetch" in str(e):
            pytest.skip(f"SQLite's source package is not reachable here: {e}")
        raise


def test_speedtest1_runs_stock_and_waldio_with_identical_hashes(
        rundir: str, capsys: pytest.CaptureFixture[str]) -> None:
    binary = _speedtest1_binary()
    out_json = os.path.join(rundir, "st1.json")
    status, out, err = run_cli(
        ["bench", "--workload", "speedtest1", "--size", "1", "--speedtest1-binary", binary,
         "--modes", "wal-full,waldio-full,wal-normal,waldio-normal,wal-off,waldio-off",
         "--repetitions", "2", "--warmup", "0", "--dir", rundir, "--plain", "--json", out_json],
        capsys)
    assert status == 0, out + err
    doc = json.loads(Path(out_json).read_text())
    assert results.validate(doc) == []
    assert len(doc["runs"]) == 2 * 6 and all(r["ok"] for r in doc["runs"])
    hashes = {r["hash"] for r in doc["runs"]}
    assert len(hashes) == 1
    for r in doc["runs"]:
        rep = r["report"]
        assert rep["journal_mode"] == "wal"
        assert rep["synchronous"] == {"FULL": "2", "NORMAL": "1", "OFF": "0"}[r["synchronous"]]
        if r["side"] == "waldio":
            assert rep["vfs"] == "waldio/unix" and rep["waldio"]["sync"] == r["synchronous"].lower()
            assert rep["waldio_stats"]["frames_written"] > 0
        else:
            assert rep["vfs"] == "unix" and rep["waldio"] is None
    (res,) = doc["results"]
    assert [c["mode"] for c in res["comparisons"]] == ["waldio-full", "waldio-normal",
                                                       "waldio-off"]
    assert all(c["hash_identical"] for c in res["comparisons"])
    ids = [t["id"] for t in res["tests"]]
    assert ids[0] == 100 and 990 in ids
    assert "TOTAL" in out and "synchronous NORMAL" in out
    # the order inside a pair alternates from round to round
    firsts = [r["mode"] for r in doc["runs"] if r["synchronous"] == "FULL"]
    assert firsts == ["wal-full", "waldio-full", "waldio-full", "wal-full"]
    status, out2, _ = run_cli(["report", out_json, "--plain"], capsys)
    assert status == 0 and "speedtest1 --size 1 --journal wal, synchronous OFF" in out2


def _cached(path: str) -> bool:
    """Whether the first 4 KiB of path are in the page cache (a read that may not wait)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT) == 4096
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.skipif(not os.access(iostat.DROP_CACHES, os.W_OK),
                    reason="needs root: /proc/sys/vm/drop_caches is not writable")
def test_drop_caches_empties_the_page_cache_before_timing(
        rundir: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(rundir, "probe")
    Path(path).write_bytes(os.urandom(4096))
    os.sync()
    Path(path).read_bytes()
    assert _cached(path)
    iostat.settle(rundir, drop_caches=False)
    assert _cached(path)                            # a sync alone keeps clean pages
    iostat.settle(rundir, drop_caches=True)
    assert not _cached(path)
    argv = ["bench", "--dir", rundir, "--plain", "--verbose", "--preset", "mobibench", "--modes",
            "wal-normal,waldio-normal", "--drop-caches", "--json",
            os.path.join(rundir, "d.json")] + TINY
    status, out, err = run_cli(argv, capsys)
    assert status == 0, out + err
    assert "page cache then dropped (echo 3 > /proc/sys/vm/drop_caches)" in out
    doc = json.loads(Path(rundir, "d.json").read_text())
    assert doc["params"]["bench"]["drop_caches"] is True
    assert "then dropped" in doc["params"]["bench"]["before_each_repetition"]
    assert failures(doc) == []
