"""The default output of `waldio bench` fits a terminal (issue 20).

* at most 80 lines and 120 columns, the headline first (each waldio mode against
  stock WAL with its synchronous setting, median and spread), then the compact
  table, then where the full checklist went;
* the checklist is complete and written to a text file beside the JSON (under
  ./results by default), and `--verbose` prints the same text;
* a plain sentence says when the rounds cannot support a conclusion (the rules
  are unit-tested on made-up ratios);
* a record that cannot be written is reported and the checklist printed instead;
* `--plot DIR` draws the run's plots.

Runs go to a private directory under $WALDIO_TEST_DIR (default /var/tmp); no
assertion depends on how fast anything ran.
"""
from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from bench_dirs import in_tmp, rundir  # noqa: E402,F401 (fixtures)
from waldio import cli  # noqa: E402
from waldio.bench import results  # noqa: E402
from waldio.bench import verdict as V  # noqa: E402

SMALL = ["--transactions", "20", "--repetitions", "2", "--warmup", "0", "--plain"]


def bench(argv: List[str], capsys: pytest.CaptureFixture[str]) -> Tuple[int, List[str]]:
    status = cli.main(["bench"] + argv)
    return status, capsys.readouterr().out.splitlines()


def test_default_output_fits_a_terminal_and_the_record_is_written(
        rundir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    status, lines = bench(["--dir", rundir] + SMALL, capsys)       # the default modes
    assert status == 0, "\n".join(lines)
    assert len(lines) <= 80, len(lines)
    assert max(len(line) for line in lines) <= 120
    head = next(i for i, line in enumerate(lines) if line.startswith("headline:"))
    table = next(i for i, line in enumerate(lines) if line.startswith("mode "))
    where = next(i for i, line in enumerate(lines) if line.startswith("full parameter checklist"))
    assert head < table < where
    for mode, stock in (("waldio-full", "wal-full"), ("waldio-normal", "wal-normal"),
                        ("waldio-persistent", "wal-full")):
        row = next(line for line in lines[head:table] if line.strip().startswith(mode + " "))
        assert f"x {stock} " in row and "(" in row
    # the record: results/waldio-bench-<stamp>.json and .txt, both named in the output
    (json_path,) = list((tmp_path / "results").glob("waldio-bench-*.json"))
    text_path = json_path.with_suffix(".txt")
    assert f"full parameter checklist: results/{text_path.name}" in lines[where]
    assert any(f"JSON: results/{json_path.name}" in line for line in lines[where:])
    doc = results.load(str(json_path))
    assert doc["ok"] is True and len(doc["modes"]) == 6
    text = text_path.read_text()
    for needle in ("sqlite_source_id:", "compile_options:", "[filesystem]", "[device]",
                   "[system]", "[provenance]", "SQLite settings in effect per mode",
                   "harness overhead per transaction", "PRAGMA waldio_stats per transaction",
                   "- ops/s = transactions / wall time of the timed region",
                   "of raw-dio", "flush/txn"):
        assert needle in text, needle
    assert len(text.splitlines()) > 3 * len(lines)       # moved out of the way, not dropped


def test_verbose_prints_the_checklist_and_one_round_says_why_it_cannot_conclude(
        rundir: str, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = os.path.join(rundir, "v.json")
    status, lines = bench(["--dir", rundir, "--modes", "wal-full,waldio-full", "--transactions",
                           "20", "--repetitions", "1", "--warmup", "0", "--plain", "--verbose",
                           "--json", out_json], capsys)
    assert status == 0
    out = "\n".join(lines)
    assert Path(rundir, "v.txt").read_text().strip() in out
    row = next(line for line in lines if line.strip().startswith("waldio-full "))
    assert "too noisy to conclude: one round only" in row
    flat = " ".join(out.split())            # the note is wrapped where its words fall
    assert "1 of 1 cannot be told from noise" in flat and "Rerun with more --repetitions" in flat


def test_an_unwritable_record_is_reported_and_the_checklist_printed(
        rundir: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocked = os.path.join(rundir, "blocked")
    for path in (blocked + ".json", blocked + ".txt"):     # directories: neither file can be
        os.mkdir(path)
    status, lines = bench(["--dir", rundir, "--modes", "wal-normal", "--json",
                           blocked + ".json"] + SMALL, capsys)
    assert status == 0
    out = "\n".join(lines)
    flat = " ".join(out.split())                             # wrapped lines joined
    assert f"could not write {blocked}.json: " in flat and f"; {blocked}.txt: " in flat
    assert "sqlite_source_id:" in out and "[filesystem]" in out


def test_plot_flag_draws_this_runs_plots(rundir: str, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    pytest.importorskip("matplotlib")
    plots = os.path.join(rundir, "plots")
    status, lines = bench(["--dir", rundir, "--modes", "wal-normal,waldio-normal", "--json",
                           os.path.join(rundir, "r.json"), "--plot", plots] + SMALL, capsys)
    assert status == 0
    for name in ("r-ops", "r-bytes", "r-latency"):
        assert Path(plots, f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert Path(plots, f"{name}.svg").is_file()
    assert any(line.startswith("JSON: ") and "r-ops.png" in line for line in lines)


def ratio(*values: float) -> Dict[str, Any]:
    vals = sorted(values)
    mid = len(vals) // 2
    med = vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
    return {"per_rep": [{"index": i, "ratio": v} for i, v in enumerate(values)],
            "median": med, "min": vals[0], "max": vals[-1]}


def test_the_noise_verdict() -> None:
    assert V.too_noisy(ratio(1.4, 1.5, 1.6)) is None                 # clearly faster
    assert V.too_noisy(ratio(0.5, 0.55, 0.6)) is None                # clearly slower
    assert V.too_noisy(ratio(0.81, 1.2, 7.44)) == "the rounds fall on both sides of 1.0"
    assert V.too_noisy(ratio(1.05, 1.1, 1.9)) == \
        "3 rounds spread 1.05-1.90 cannot tell the 0.10 effect from noise (paired t 1.4 < 4.3, 5%)"
    assert V.too_noisy(ratio(1.01, 1.03, 1.10)) is not None          # small, one-sided
    assert V.too_noisy(ratio(1.31, 1.40, 1.45, 1.60, 1.87)) is None  # wide but all clear of 1.0
    assert V.too_noisy(ratio(1.4, 1.5)) is not None                  # 2 rounds: t needs 12.7
    assert V.too_noisy(ratio(1.0, 1.0, 1.0)) is not None             # no difference at all
    assert isinstance(V.too_noisy(ratio(0.0, 0.5, 0.6)), str)         # a round at 0 ops/s: no crash
    assert V.too_noisy(ratio(1.5)) == "one round only, no spread to judge by"
    assert V.too_noisy(None) == "no paired round passed"
    assert V.ratio_text(ratio(0.97, 1.47, 1.91)) == "1.47x (0.97-1.91)"
    assert V.marked(ratio(0.97, 1.47, 1.91)) == "1.47~" and V.marked(ratio(2, 2.1, 2.2)) == "2.10"


def test_a_table_too_wide_for_the_terminal_loses_no_figure(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    pytest.importorskip("rich")
    from waldio.bench.printer import Printer
    columns = ["mode", "ops/s", "min-max", "x wal-full", "p50 ms", "p99 ms", "loop0 KB/tx",
               "flush/tx", "check"]
    row = ["waldio-persistent", "3,257", "2,683-3,427", "1.43x (1.10-1.74)", "0.288", "1.09",
           "16.6", "1.02", "ok"]
    optional = ("min-max", "p50 ms", "check", "flush/tx")

    def printed(width: int, **kw: Any) -> str:
        monkeypatch.setenv("COLUMNS", str(width))       # rich's terminal width
        buf = io.StringIO()
        out = Printer(plain=False, stream=buf)
        assert out.console is not None and out.console.width == width
        out.table("results: a title long enough to be wrapped on a narrow terminal, "
                  "which it must be, at the terminal's width", columns, [row], **kw)
        out.wrapped("word " * 40)
        text = buf.getvalue()
        assert "…" not in text
        assert max(len(line) for line in text.splitlines()) <= width or "─" not in text
        return text

    wide = printed(160, optional=optional)               # rich, every column
    assert "─" in wide and all(cell in wide for cell in row + columns)
    assert "Left out" not in wide
    plain = printed(80)                                  # too wide, nothing optional
    assert "─" not in plain and all(cell in plain for cell in row + columns)
    narrow = printed(80, optional=optional)              # rich, fewest columns left out
    kept = [i for i, c in enumerate(columns) if c not in ("min-max", "p50 ms", "check")]
    assert "─" in narrow and all(row[i] in narrow and columns[i] in narrow for i in kept)
    assert "2,683-3,427" not in narrow
    assert "Left out to fit 80 columns: min-max, p50 ms, check" in narrow
