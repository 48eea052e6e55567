"""`waldio crash --real`: crash states from the real kernel (issue 19).

ext4 on a loop device over the image file of the FUSE block recorder
(crash/block_recorder.c); docs/crash.md "Crash states from the real kernel".
Skipped, with the reason, only where /dev/fuse or loop devices are missing;
anything else missing (root, the recorder binary, e2fsprogs) is a failure.

* the recorder sees what the kernel sends: writes, the loop device's flushes
  (fdatasync, RWF_DSYNC), the marks;
* a recorded log replayed in full gives the recorder's image byte for byte;
* a hand-made log that lost unflushed writes is caught (lost transactions);
* the model cross-check flags a state that lost data the model calls durable;
* the campaign: every row of the table, more than 500 states, no failure of
  a durable mode, and the synchronous=OFF control loses acknowledged commits.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from waldio.crash.database import state_dir_base
from waldio.crash.real import blocklog, machine, plan
from waldio.crash.real.campaign import check_keys, run_real_campaign
from waldio.crash.real.check import RealResult, read_dir
from waldio.crash.real.model import ModelCheck
from waldio.crash.real.record import BLOCK_LOG, DB_DIR, META, record_real
from waldio.crash.real.recording import RealRecording
from waldio.crash.real.states import ImageBuilder, RealKey, StateSpace

if not os.path.exists("/dev/fuse") or not os.path.exists("/dev/loop-control"):
    pytest.skip("real-kernel crash states need /dev/fuse and loop devices (missing here)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def out_root() -> Iterator[Path]:
    reason = machine.unavailable_reason()
    assert reason is None, reason
    d = Path(tempfile.mkdtemp(prefix="waldio-real-test-", dir=state_dir_base()))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def full_rec(out_root: Path) -> Path:
    """A short waldio-full recording, its final image kept."""
    return record_real(plan.RealRun("waldio-full", "mixed"), 1, 30, out_root / "full",
                       keep_image=True)


def test_flushes_reach_the_recorder(out_root: Path) -> None:
    """The loop device's flushes arrive as fsync of the image file: after an
    O_DIRECT write and fdatasync, after an RWF_DSYNC write (the loop device
    has no FUA: write + flush); the control file gives the sequence number
    and logs marks."""
    work = out_root / "flushes"
    work.mkdir()
    image = work / "image.img"
    machine.mkfs(image, 32 << 20)
    log = work / BLOCK_LOG
    with machine.block_recorder(image, log, work / "fuse") as ctl:
        with machine.loop_device(work / "fuse" / "disk") as dev:
            with machine.mounted(dev, work / "mnt") as mnt:
                path = mnt / "f"
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
                try:
                    import mmap
                    buf = mmap.mmap(-1, 8192)
                    buf.write(b"a" * 8192)
                    os.pwrite(fd, buf, 0)
                    os.fdatasync(fd)
                    before = int(ctl.read_text())
                    ctl.write_text("after-fdatasync 1\n")
                    buf.seek(0)
                    buf.write(b"b" * 8192)
                    os.pwritev(fd, [buf], 0, os.RWF_DSYNC)
                    ctl.write_text("after-dsync 2\n")
                finally:
                    os.close(fd)
    recs = blocklog.parse(log).records
    marks = {r.text: r.seq for r in recs if r.type == blocklog.MARK}
    assert before == marks["after-fdatasync 1"] - 1
    data = [r for r in recs if r.type == blocklog.WRITE and r.data is not None
            and bytes(r.data[:8192]) == b"a" * 8192]
    assert data, "the direct write never reached the recorder"
    assert any(r.type == blocklog.FLUSH for r in recs[data[0].seq:marks["after-fdatasync 1"]])
    dsync = [r for r in recs if r.type == blocklog.WRITE and r.data is not None
             and bytes(r.data[:8192]) == b"b" * 8192]
    assert dsync and dsync[0].seq < marks["after-dsync 2"]
    assert any(r.type == blocklog.FLUSH for r in recs[dsync[0].seq:marks["after-dsync 2"]]), \
        "no flush after the RWF_DSYNC write"


def test_block_log_replays_to_the_final_image(full_rec: Path) -> None:
    log = blocklog.parse(full_rec / BLOCK_LOG)
    image = blocklog.read_image(full_rec / "base.img")
    assert bytes(image) != (full_rec / "image.img").read_bytes()
    for r in log.records:
        blocklog.apply(image, r)
    assert bytes(image) == (full_rec / "image.img").read_bytes()
    assert '"replays_to_image": true' in (full_rec / META).read_text()


def test_state_recipes(full_rec: Path) -> None:
    """What each kind of state keeps: a flush point and an in-order prefix
    everything received; a subset only writes since the last flush; a torn
    write some but not all of its sectors, on top of earlier writes only."""
    rec = RealRecording(full_rec)
    space = StateSpace(rec)
    keys = space.sample(200, 3)
    assert {k.kind for k in keys} == {"flush", "prefix", "subset", "torn"}
    assert all(k.cut >= rec.start for k in keys)
    for k in keys:
        r = space.recipe(k)
        vol = space.volatile(k.position)
        assert r.flush == space.last_flush(k.position) and r.flush <= k.position
        assert all(rec.log.record(s).changes_image for s in r.kept)
        if k.kind in ("flush", "prefix"):
            assert list(r.kept) == vol and not r.torn
            if k.kind == "flush":
                assert rec.log.record(k.cut).type == blocklog.FLUSH and not vol
        elif k.kind == "subset":
            assert set(r.kept) <= set(vol) and not r.torn
        else:
            assert r.torn == k.cut and set(r.kept) <= set(vol) and k.cut not in r.kept
            assert len(r.torn_sectors) < blocklog.n_sectors(rec.log.record(k.cut))
        assert space.recipe(k) == r                      # seeded: the same state again


def test_a_lost_unflushed_write_is_caught(full_rec: Path, out_root: Path) -> None:
    """A hand-made log: the recording with the flushes of its last commit
    removed, so that commit's writes were never flushed when it was
    acknowledged. States that drop them lose an acknowledged transaction and
    must fail; the in-order prefix (the device kept everything) must pass."""
    bad = out_root / "unflushed"
    shutil.copytree(full_rec, bad, ignore=shutil.ignore_patterns("image.img"))
    rec = RealRecording(full_rec)
    acks = [m.seq for m in rec.marks if m.kind == "ack"]
    prev, last = acks[-2], acks[-1]
    log = rec.log
    log.records = [r for r in log.records if not (r.type == blocklog.FLUSH and prev < r.seq < last)]
    blocklog.write(bad / BLOCK_LOG, log)
    mutated = RealRecording(bad)
    last = max(m.seq for m in mutated.marks if m.kind == "ack")
    space = StateSpace(mutated)
    assert space.volatile(last), "the last commit wrote nothing?"
    keys = [RealKey("subset", last, s) for s in range(12)] + [RealKey("prefix", last)]
    results = {r["key"]: RealResult(**r) for r in check_keys(bad, keys, jobs=2)}
    lost = [r for k, r in results.items() if "subset" in k and not r.passed]
    assert lost, "no state lost the unflushed commit"
    n = mutated.n_acked
    assert any(r.reason == "lost transactions: holds %d, the contract requires %d" % (n - 1, n)
               for r in lost), [r.reason for r in lost]
    assert results[RealKey("prefix", last).text()].passed
    # The recording as made loses nothing in the same states.
    same = [RealKey("subset", acks[-1], s) for s in range(4)]
    good = {r["key"]: RealResult(**r) for r in check_keys(full_rec, same, jobs=2)}
    assert all(r.passed for r in good.values()), [r.reason for r in good.values()]


def test_model_cross_check_flags_lost_durable_data(full_rec: Path) -> None:
    """A flush point after the last acknowledgement is explained by the model;
    the same files with a block of the database zeroed (data the model
    calls durable, lost) are not."""
    rec = RealRecording(full_rec)
    space = StateSpace(rec)
    last_ack = max(m.seq for m in rec.marks if m.kind == "ack")
    flush = next(f for f in space.flush_points() if f > last_ack)
    ((key, _recipe, image),) = list(ImageBuilder(space).images([RealKey("flush", flush)]))
    work = Path(tempfile.mkdtemp(prefix="waldio-real-xcheck-", dir=state_dir_base()))
    try:
        img = work / "state.img"
        blocklog.write_image(img, image)
        with machine.loop_device(img) as dev:
            with machine.mounted(dev, work / "mnt") as mnt:
                files = read_dir(mnt / DB_DIR)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert ModelCheck(rec).explain(key.position, files) == []
    db = bytearray(files["c.db"])
    db[8192:12288] = bytes(4096)
    findings = ModelCheck(rec).explain(key.position, dict(files, **{"c.db": bytes(db)}))
    assert any(f.startswith("unexplained: c.db") for f in findings), findings


def test_real_campaign(out_root: Path) -> None:
    """Every row of the table: more than 500 real-kernel states in all, no
    failure of a mode that promises durability, and the controls lose
    acknowledged commits (synchronous=OFF in some states)."""
    results = []
    for run in plan.RUNS:
        results.append(run_real_campaign(run, states=48, seed=1, txns=40, out_root=out_root,
                                         jobs=os.cpu_count() or 1))
    total = sum(r.total_tried for r in results)
    print("\nreal-kernel states: %d" % total)
    for r in results:
        print("  %-48s %-9s %4d states, %3d failed, %3d of them lost acknowledged commits%s"
              % (r.mode, r.workload, r.total_tried, len(r.failures), r.losing_states,
                 " (control)" if r.control else ""))
    assert total >= 500
    failed = {"%s/%s" % (r.mode, r.workload): r.failures[:3] for r in results
              if r.failures and not r.control}
    assert not failed, failed
    off = [r for r in results if r.mode == "wal-off"]
    assert off and off[0].losing_states > 0, "synchronous=OFF never lost an acknowledged commit"
    assert all(r.losing_states > 0 for r in results if r.control)
