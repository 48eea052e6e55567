"""waldio crash on LS-MVBT (issue 12): the lsmvbt-* modes of python/waldio/crash/.

The workload's rows live in one lsmvbt virtual table under three views
(python/waldio/crash/lsmvbt.py); the recorder hooks the engine's system-call
table (recorder_hook_waldio('lsmvbt')). Each full mode must recover exactly a
prefix covering every acknowledged transaction after a simulated process
kill, OS crash and power loss (torn sector writes included) and after real
SIGKILLs; lsmvbt-normal (no fdatasync per commit) after kills only. The
checker must also be able to fail here: the same recording with its flushes
removed loses acknowledged transactions. About a minute in all.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from waldio import crash

STATES = int(os.environ.get("WALDIO_CRASH_STATES", "250"))
KILLS = int(os.environ.get("WALDIO_CRASH_KILLS", "4"))
TXNS = 60
STORE = "c.db-store.lsmvbt"


@pytest.fixture(scope="module")
def out_root(apsw_sqlite: Any) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="waldio-crash-lsmvbt-", dir=str(crash.state_dir_base())))
    yield d
    shutil.rmtree(d, ignore_errors=True)


_recordings: Dict[str, Path] = {}


def recording(mode: str, out_root: Path) -> Path:
    if mode not in _recordings:
        _recordings[mode] = crash.record(mode, "mixed", 7, TXNS, out_root / mode)
    return _recordings[mode]


def test_the_modes_and_their_workloads() -> None:
    assert crash.LSMVBT_MODES == ["lsmvbt-full", "lsmvbt-mvbt", "lsmvbt-normal"]
    assert not set(crash.LSMVBT_MODES) & set(crash.DEFAULT_MODES)
    assert set(crash.LSMVBT_MODES) <= set(crash.ALL_MODES)
    for m in crash.LSMVBT_MODES:
        assert crash.mode_runs_workload(m, "mixed") and crash.mode_runs_workload(m, "bank")
        for wl in ("two-writers", "two-procs", "ckpt-proc", "fork"):
            assert not crash.mode_runs_workload(m, wl)      # one handle per file
    assert crash.MODES["lsmvbt-normal"].models == ("kill",)


def test_recorder_sees_the_engines_writes_and_syncs(out_root: Path) -> None:
    rec = crash.Recording(recording("lsmvbt-full", out_root))
    assert rec.n_acked == TXNS
    writes: Dict[tuple, int] = {}
    for it in rec.items:
        if it.op == crash.W:
            k = (rec.ino_name[it.ino], it.cls)
            writes[k] = writes.get(k, 0) + 1
    # Every commit writes its pages into the table's file through the page
    # cache; the database file (schema only) is never written.
    assert writes.get((STORE, crash.PAGE), 0) >= TXNS
    assert writes.get(("c.db", crash.PAGE), 0) == 0
    assert rec.n_by_type["sync-begin"] == rec.n_by_type["sync-end"] >= TXNS


@pytest.mark.parametrize("mode", ["lsmvbt-full", "lsmvbt-mvbt", "lsmvbt-normal"])
def test_campaign(mode: str, out_root: Path) -> None:
    res = crash.run_campaign(mode, states=STATES, seed=7, txns=TXNS,
                             rec_dir=recording(mode, out_root))
    assert not res.failures, "\n".join("%s: %s" % (f["id"], f["reason"])
                                       for f in res.failures[:10])
    assert set(res.tried) == set(crash.MODES[mode].models)
    assert res.total_tried > STATES // 2
    if mode != "lsmvbt-normal":
        # torn writes of the table's pages, and states that lose the commit in flight
        assert res.kinds.get("power/torn", 0) > 0 and res.kinds.get("os/lose", 0) > 0


def test_checker_fails_when_the_flushes_are_removed(out_root: Path) -> None:
    res = crash.run_campaign("lsmvbt-full", states=200, seed=7, txns=TXNS,
                             rec_dir=recording("lsmvbt-full", out_root), drop_syncs=True)
    assert any("lost transactions" in f["reason"] for f in res.failures)
    assert res.passed["kill"] == res.tried["kill"]


@pytest.mark.parametrize("mode", ["lsmvbt-full", "lsmvbt-normal"])
def test_sigkill(mode: str, out_root: Path) -> None:
    res = crash.run_kills(mode, KILLS, 11, txns=40, workdir=out_root / ("kill-" + mode))
    assert res["rounds"] == KILLS
    assert not res["failures"], res["failures"]
    assert res["acked_total"] > 0
