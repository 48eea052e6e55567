"""Tests of waldio.fsimage (loop file systems) and waldio.blocktrace (attribution).

Owns: the proof that block-level byte counts are attributed correctly on a
fresh loop file system, and that every loop device, mount, image and trace
instance is released on every exit path.

Invariants:
* Tests needing root, loop devices or tracefs skip with the reason from
  ``available_kinds()`` / ``trace_unavailable_reason()``; the parsing and
  classification tests run anywhere.
* Every workload issues a known number of 4 KiB writes and fdatasyncs; the
  assertions compare bytes per class to that number within one 4 KiB block,
  so a misattribution of a single request makes them fail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable, Optional

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

from waldio import fs as fsimage
from waldio.fs import loop as fs_loop
from waldio.trace import block as bt
from waldio.trace.block.requests import RequestAssembler

N = 50
from io_patterns import BLOCK, aligned_block, preallocate_zeroed  # noqa: E402
TOLERANCE = BLOCK  # one block per class


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _skip_unless(kind: str, trace: bool = True) -> None:
    reason = fsimage.unavailable_reason(kind)
    if reason is None and trace:
        reason = bt.trace_unavailable_reason()
    if reason:
        pytest.skip(f"{kind}: {reason}")








def _direct_overwrites(path: str, count: int) -> None:
    buf = aligned_block(b"w")
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    try:
        for i in range(count):
            assert os.pwritev(fd, [buf], i * BLOCK) == BLOCK
            os.fdatasync(fd)
    finally:
        os.close(fd)
        buf.close()


def _buffered_appends(path: str, count: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for _ in range(count):
            assert os.write(fd, b"a" * BLOCK) == BLOCK
            os.fdatasync(fd)
    finally:
        os.close(fd)


def _traced(
    fs: fsimage.LoopFilesystem,
    workload: Callable[[], None],
    files: dict[str, list[str]],
    presync: bool = True,
    label: str = "",
) -> bt.Report:
    """Trace exactly ``workload`` (it makes its own writes durable with fdatasync)."""
    if presync:
        fs.sync()
    with bt.BlockTrace(fs.devices) as trace:
        workload()
    layout = bt.describe_layout(fs, files)
    report = bt.classify(trace.requests, layout, trace.stats)
    assert trace.stats.complete, f"trace lost events: {trace.stats.to_dict()}"
    print(f"\n{fs.kind}{label}: {_summary(report)}")
    return report


def _summary(report: bt.Report) -> str:
    parts = [f"{cls}={t.bytes_written}B/{t.write_requests}rq" for cls, t in sorted(report.classes.items()) if t.write_requests]
    return f"{', '.join(parts)}; total={report.total_bytes_written}B flushes={report.flushes} fua={report.fua_writes}"


def _assert_released(device: str, workdir: str, mountpoint: str, instance: Optional[str], pid: int) -> None:
    left = fsimage.leftover_resources(pid)
    assert not left, f"leftovers: {left.to_dict()}"
    assert not os.path.exists(workdir)
    assert all(target != mountpoint for target, *_ in fs_loop._mountinfo())
    backing = fs_loop._loop_backing_file(device)
    assert backing is None or fsimage.RESOURCE_PREFIX not in backing
    if instance is not None:
        assert not os.path.exists(instance)
    assert not bt.leftover_trace_instances(pid)


# --------------------------------------------------------------------------
# parsing and classification (no root needed)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, op, preflush, fua, sync, meta",
    [
        ("FF", "flush", True, False, False, False),
        ("WS", "write", False, False, True, False),
        ("FWFSM", "write", True, True, True, True),
        ("WFS", "write", False, True, True, False),
        ("RA", "read", False, False, False, False),
        ("RM", "read", False, False, False, True),
        ("D", "discard", False, False, False, False),
        ("WZ", "write-zeroes", False, False, False, False),
        ("F", "flush", False, False, False, False),
        ("N", "none", False, False, False, False),
    ],
)
def test_parse_rwbs(raw: str, op: str, preflush: bool, fua: bool, sync: bool, meta: bool) -> None:
    flags = bt.parse_rwbs(raw)
    assert (flags.op, flags.preflush, flags.fua, flags.sync, flags.meta) == (op, preflush, fua, sync, meta)


SAMPLE_PIPE = textwrap.dedent(
    """\
     python3-7737    [001] .....  1028.405803: block_rq_issue: 7,0 WS 4096 () 33112 + 8 be,0,4 [python3]
     ksoftirqd/0-14      [000] ..s..  1028.405863: block_rq_complete: 7,0 WS () 33112 + 8 be,0,4 [0]
    kworker/1:1H-44      [001] .....  1028.405910: block_rq_issue: 7,0 FF 0 () 0 + 0 none,0,0 [kworker/1:1H]
     ksoftirqd/1-22      [001] ..s..  1028.406176: block_rq_complete: 7,0 FF () 18446744073709551615 + 0 none,0,0 [0]
     ksoftirqd/1-22      [001] d.s1.  1028.406177: block_rq_complete: 7,0 WS () 0 + 0 be,0,4 [0]
    jbd2/loop0-8-312     [000] .....  1028.406300: block_rq_issue: 7,0 WSM 32768 () 262528 + 64 be,0,4 [jbd2/loop0-8]
    jbd2/loop0-8-312     [000] .....  1028.406301: block_rq_requeue: 7,0 WSM () 262528 + 64 be,0,4 [0]
    jbd2/loop0-8-312     [000] .....  1028.406302: block_rq_issue: 7,0 WSM 32768 () 262528 + 64 be,0,4 [jbd2/loop0-8]
    CPU:1 [LOST 3 EVENTS]
    """
)


def test_trace_text_assembly() -> None:
    stats = bt.CaptureStats()
    assembler = RequestAssembler(stats)
    for line in SAMPLE_PIPE.splitlines():
        assembler.line(line)
    assembler.finish()
    reqs = assembler.requests
    assert [(r.rwbs, r.sector, r.nr_sectors, r.comm) for r in reqs] == [
        ("WS", 33112, 8, "python3"),
        ("FF", 0, 0, "kworker/1:1H"),
        ("WSM", 262528, 64, "jbd2/loop0-8"),  # the requeued first issue is dropped
    ]
    assert reqs[1].is_flush and reqs[1].complete_ts == pytest.approx(1028.406176)
    assert (stats.requeued, stats.flush_sequence_completions, stats.unmatched_completions) == (1, 1, 0)
    assert stats.in_flight_at_stop == 1 and stats.lost_events == 3 and not stats.complete


def _request(sector: int, nr: int, rwbs: str, device: str = "7:0") -> bt.BlockRequest:
    f = bt.parse_rwbs(rwbs)
    return bt.BlockRequest(device, sector, nr, rwbs, f.op, f.preflush, f.fua, f.sync, f.meta, 0.0, "x", 1, 0)


def test_classify_by_sector_range() -> None:
    layout = bt.Layout("ext4", {"7:0": "main", "7:1": "journal"}, 4096)
    layout.add_region(bt.Region("7:1", 0, 1000, bt.FS_JOURNAL, "ext journal"), 0)
    layout.add_region(bt.Region("7:0", 0, 8, bt.FS_METADATA, "superblock"), 1)
    layout.add_snapshot(bt.FileSnapshot("wal", "/x/db-wal", 0.0, [bt.FileExtent(0, 800 * 512, 16 * 512, 1)]))
    requests = [
        _request(800, 16, "WS"),  # wal
        _request(808, 16, "WS"),  # half wal, half unattributed
        _request(40, 8, "WSM", "7:1"),  # journal device
        _request(0, 8, "WSM"),  # superblock
        _request(5000, 8, "WM"),  # metadata outside known ranges
        _request(800, 8, "WM"),  # metadata in a (stale) file extent
        _request(0, 0, "FF"),
        _request(900, 8, "WFS"),  # FUA, unattributed
        _request(100, 8, "D"),
        _request(100, 8, "R"),
        _request(0, 8, "WS", "8:0"),  # not our device
    ]
    report = bt.classify(requests, layout)
    assert report.written("wal") == 24 * 512
    assert report.written(bt.UNATTRIBUTED) == 16 * 512
    assert report.written(bt.FS_JOURNAL) == 4096
    assert report.written(bt.FS_METADATA) == 3 * 4096
    assert report.total_bytes_written == sum(t.bytes_written for t in report.classes.values())
    assert (report.flushes, report.fua_writes, report.discard_bytes, report.total_bytes_read) == (1, 1, 4096, 4096)
    assert report.write_requests == 7 and report.size_histogram == {8192: 2, 4096: 5}
    assert report.to_dict()["size_histogram"] == {"4096": 5, "8192": 2}


# --------------------------------------------------------------------------
# real file systems on loop devices
# --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ext4", "xfs"])
def test_direct_overwrites_are_pure_data(kind: str) -> None:
    """(a) O_DIRECT 4 KiB overwrites of a zero-filled file: data only, no journal, one flush each."""
    _skip_unless(kind)
    with fsimage.loop_filesystem(kind) as fs:
        path = fs.path("log")
        preallocate_zeroed(path, N)
        report = _traced(fs, lambda: _direct_overwrites(path, N), {"wal": [path]})
        # Not part of the per-commit cost: the mtime change, journaled at the next commit.
        _traced(fs, fs.sync, {"wal": [path]}, presync=False, label=" (later sync)")
    assert abs(report.written("wal") - N * BLOCK) <= TOLERANCE
    assert report.written(bt.FS_JOURNAL) <= TOLERANCE
    assert report.total_bytes_written - report.written("wal") <= TOLERANCE
    assert N <= report.flushes <= N + 1
    assert report.classes["wal"].write_requests >= N - 1


@pytest.mark.parametrize("kind", ["ext4", "ext4-extjournal", "xfs"])
def test_buffered_appends_journal(kind: str) -> None:
    """(b) buffered 4 KiB appends + fdatasync: the data, plus file-system journal writes."""
    _skip_unless(kind)
    with fsimage.loop_filesystem(kind) as fs:
        path = fs.path("log")
        preallocate_zeroed(path, 0)
        report = _traced(fs, lambda: _buffered_appends(path, N), {"wal": [path]})
        journal_device = fs.journal_device
    assert abs(report.written("wal") - N * BLOCK) <= TOLERANCE
    assert report.written(bt.FS_JOURNAL) > 0
    assert report.written(bt.UNATTRIBUTED) <= TOLERANCE
    assert report.flushes >= N
    if journal_device:
        assert report.classes[bt.FS_JOURNAL].write_requests >= N


def test_deleted_file_needs_snapshot() -> None:
    """Writes to a file deleted during the run are attributed only through a snapshot."""
    _skip_unless("ext4")
    rounds, size = 10, 2 * BLOCK
    with fsimage.loop_filesystem("ext4") as fs:
        journal = fs.path("db-journal")
        snapshots: list[bt.FileSnapshot] = []

        def workload(trace: bt.BlockTrace) -> None:
            for i in range(rounds):
                trace.mark(f"round {i}")
                fd = os.open(journal, os.O_CREAT | os.O_WRONLY, 0o644)
                os.write(fd, b"j" * size)
                os.fdatasync(fd)
                os.close(fd)
                snap = bt.snapshot_file("journal", journal)
                assert snap is not None
                snapshots.append(snap)
                os.unlink(journal)

        fs.sync()
        with bt.BlockTrace(fs.devices) as trace:
            workload(trace)
            fs.sync()
        assert [text for _ts, text in trace.markers] == [f"round {i}" for i in range(rounds)]
        with_snap = bt.classify(trace.requests, bt.describe_layout(fs, {"journal": [journal]}, snapshots))
        without = bt.classify(trace.requests, bt.describe_layout(fs, {"journal": [journal]}))
    print(f"\nwith snapshots: {_summary(with_snap)}\nwithout: {_summary(without)}")
    assert with_snap.written("journal") == rounds * size
    assert with_snap.written(bt.UNATTRIBUTED) <= TOLERANCE
    assert without.written("journal") == 0
    assert without.written(bt.UNATTRIBUTED) >= rounds * size - TOLERANCE


def test_snapshot_poller_sees_short_lived_file() -> None:
    _skip_unless("ext4")
    with fsimage.loop_filesystem("ext4") as fs:
        temp = fs.path("db-journal")
        fs.sync()
        with bt.BlockTrace(fs.devices) as trace, bt.SnapshotPoller({"journal": [temp]}, interval_s=0.01) as poller:
            fd = os.open(temp, os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"t" * 3 * BLOCK)
            os.fdatasync(fd)
            os.close(fd)
            deadline = time.monotonic() + 10
            while not poller.snapshots and time.monotonic() < deadline:
                time.sleep(0.01)
            os.unlink(temp)
        report = bt.classify(trace.requests, bt.describe_layout(fs, {}, poller.snapshots))
    assert report.written("journal") == 3 * BLOCK


@pytest.mark.parametrize("kind", fsimage.KINDS)
def test_every_kind_mounts_as_asked(kind: str) -> None:
    _skip_unless(kind, trace=False)
    with fsimage.loop_filesystem(kind) as fs:
        assert os.path.ismount(fs.mountpoint)
        assert fs.image_path.startswith(fs.workdir) and os.path.basename(fs.image_path).startswith(fsimage.RESOURCE_PREFIX)
        assert os.stat(fs.image_path).st_blocks * 512 < os.stat(fs.image_path).st_size  # sparse
        expected = {"ext4-writeback": "data=writeback", "ext4-journal": "data=journal"}.get(kind)
        if expected:
            assert expected in fs.mount_options.split(",")
        assert (fs.journal_device is not None) == (kind == "ext4-extjournal")
        workdir = fs.workdir
    assert not os.path.exists(workdir)
    assert not fsimage.leftover_resources(os.getpid())


def test_command_error_names_command_and_stderr() -> None:
    with pytest.raises(fsimage.CommandError) as info:
        fsimage.run_command([sys.executable, "-c", "import sys; sys.stderr.write('bad thing'); sys.exit(3)"])
    assert "bad thing" in str(info.value) and "status 3" in str(info.value) and sys.executable in str(info.value)


def test_failed_setup_releases_and_names_command() -> None:
    _skip_unless("ext4", trace=False)
    with pytest.raises(fsimage.CommandError) as info:
        with fsimage.loop_filesystem("ext4", mkfs_options=("-O", "no_such_feature")):
            pytest.fail("body must not run when mkfs fails")
    assert "mkfs.ext4" in str(info.value) and "no_such_feature" in str(info.value)
    assert not fsimage.leftover_resources(os.getpid())


@pytest.mark.parametrize("raised", [None, RuntimeError, KeyboardInterrupt])
def test_cleanup_on_every_exit(raised: Optional[type[BaseException]]) -> None:
    """(c) nothing of ours remains after success, an exception or KeyboardInterrupt."""
    _skip_unless("ext4")
    seen: dict[str, str] = {}

    def body() -> None:
        with fsimage.loop_filesystem("ext4") as fs:
            seen.update(device=fs.device, workdir=fs.workdir, mountpoint=fs.mountpoint)
            assert fs.device in fsimage.leftover_resources(os.getpid()).loop_devices
            assert fs.mountpoint in fsimage.leftover_resources(os.getpid()).mounts
            with bt.BlockTrace(fs.devices) as trace:
                seen["instance"] = trace.instance or ""
                assert os.path.isdir(seen["instance"])
                with open(fs.path("f"), "wb") as fh:
                    fh.write(b"x" * BLOCK)
                if raised is not None:
                    raise raised("raised inside the context")

    if raised is None:
        body()
    else:
        with pytest.raises(raised):
            body()
    _assert_released(seen["device"], seen["workdir"], seen["mountpoint"], seen["instance"], os.getpid())


CHILD = """
import sys, time
sys.path.insert(0, {path!r})
from waldio import fs as fsimage
with fsimage.loop_filesystem("ext4") as fs:
    print(fs.device, fs.workdir, fs.mountpoint, flush=True)
    time.sleep(60)
"""


def test_cleanup_on_sigterm() -> None:
    _skip_unless("ext4", trace=False)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(path=str(PYTHON_DIR))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        device, workdir, mountpoint = child.stdout.readline().split()
        assert fsimage.leftover_resources(child.pid)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
            time.sleep(0.1)
            fsimage.release_leftovers()
    _assert_released(device, workdir, mountpoint, None, child.pid)
