"""Tests of ``waldio trace`` (waldio.trace, waldio.trace_cli).

Owns: the proof that the trace attributes known I/O patterns exactly (bytes
per class within one 4 KiB block, JOJ by its definition), that the CLI
reproduces docs/results.md's per-commit figures ("Bytes"), and that loop
devices, mounts and tracefs instances are released after success, failure
and interruption.

* Parsing and the JOJ attribution rules run anywhere (synthetic events).
* Everything on a loop file system needs root, loop devices and tracefs and
  is skipped with the reason elsewhere.
* CI-sized: the whole file runs in well under two minutes here.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

from waldio import fs as fsimage  # noqa: E402
from waldio import trace as T  # noqa: E402
from waldio.trace import block as bt  # noqa: E402
from waldio.trace import cli as TC  # noqa: E402
from waldio.trace.fsevents import is_fs_event_line  # noqa: E402

N = 40
from io_patterns import BLOCK, aligned_block, preallocate_zeroed  # noqa: E402
TOLERANCE = BLOCK                   # one block


def _skip_unless(kind: str) -> None:
    reason = T.unavailable_reason(kind)
    if reason:
        pytest.skip(f"{kind}: {reason}")


# --------------------------------------------------------------------------
# parsing (no root)
# --------------------------------------------------------------------------

LINES = {
    "python3-31731   [001] .....  4477.268439: ext4_sync_file_enter: dev 7,0 ino 13 parent 2 datasync 1 ":
        ("sync_enter", 13, 2, 1),
    "python3-31731   [001] .....  4477.269063: ext4_sync_file_exit: dev 7,0 ino 13 ret 0":
        ("sync_exit", 13, None, None),
    "jbd2/loop0-8-31781   [001] .....  4477.268507: jbd2_start_commit: dev 7,0 transaction 10 sync 0":
        ("commit_start", 0, None, None),
    "jbd2/loop0-8-31781   [001] .....  4477.269059: jbd2_end_commit: dev 7,0 transaction 10 sync 0 head 2":
        ("commit_end", 0, None, None),
    "python3-32299   [000] .....  4599.912168: xfs_file_fsync: dev 7:0 ino 0x84 iflags 0x0":
        ("sync_enter", 0x84, None, None),
    "python3-32299   [000] .....  4599.912168: xfs_dir_fsync: dev 7:0 ino 0x80 iflags 0x0":
        ("dir_sync_enter", 0x80, None, None),
    "python3-32358   [000] .....  4600.287611: btrfs_sync_file: ac4e9ea2-caa3-45dd-8f19-e591ca4e0303: "
    "root=5(FS_TREE) ino=262 parent=256 datasync=1": ("sync_enter", 262, 256, 1),
    "python3-32299   [000] .....  4599.913198: sys_fdatasync -> 0x0": ("sys_exit", 0, None, None),
}


@pytest.mark.parametrize("line", list(LINES))
def test_parse_fs_line(line: str) -> None:
    ev = T.parse_fs_line(line)
    assert ev is not None
    kind, ino, parent, datasync = LINES[line]
    assert (ev.kind, ev.ino, ev.parent, ev.datasync) == (kind, ino, parent, datasync)
    assert ev.ts > 4000 and ev.tid > 0


def test_block_lines_are_not_fs_events() -> None:
    line = " python3-7737    [001] .....  1028.405803: block_rq_issue: 7,0 WS 4096 () 33112 + 8 be,0,4 [python3]"
    assert T.parse_fs_line(line) is None
    assert not is_fs_event_line(line)


def _ev(ts: float, tid: int, kind: str, **kw: Any) -> T.FsEvent:
    return T.FsEvent(ts, tid, kind, **kw)


def test_sync_calls_pairing() -> None:
    # ext4: exit matched by inode, per thread
    ext4 = T.sync_calls([_ev(1.0, 7, "sync_enter", ino=13, parent=2, datasync=1),
                         _ev(1.5, 8, "sync_enter", ino=12, parent=2, datasync=0),
                         _ev(2.0, 7, "sync_exit", ino=13), _ev(2.5, 8, "sync_exit", ino=12)], "ext4")
    assert [(c.ino, c.start, c.end, c.terminated) for c in ext4] == [(13, 1.0, 2.0, True), (12, 1.5, 2.5, True)]
    # xfs: closed by the same thread's syscall exit; other threads' exits do not count
    xfs = T.sync_calls([_ev(1.0, 7, "sync_enter", ino=0x84), _ev(1.2, 9, "sys_exit", syscall="sys_fsync"),
                        _ev(1.4, 7, "sys_exit", syscall="sys_fdatasync"),
                        _ev(2.0, 7, "dir_sync_enter", ino=0x80)], "xfs")
    assert [(c.ino, c.end, c.terminated, c.directory) for c in xfs] == [(0x84, 1.4, True, False),
                                                                          (0x80, 2.0, False, True)]
    # btrfs: events of another btrfs file system are dropped
    btrfs = T.sync_calls([_ev(1.0, 7, "sync_enter", ino=262, parent=256, fsid="aaa"),
                          _ev(1.1, 7, "sync_enter", ino=263, parent=256, fsid="bbb"),
                          _ev(1.2, 7, "sys_exit", syscall="sys_fdatasync")], "btrfs", btrfs_fsid="aaa")
    assert [c.ino for c in btrfs] == [262]


# --------------------------------------------------------------------------
# the JOJ rules on a synthetic trace (no root)
# --------------------------------------------------------------------------

def _req(ts: float, sector: int, nr: int, rwbs: str) -> bt.BlockRequest:
    f = bt.parse_rwbs(rwbs)
    return bt.BlockRequest("1:3", sector, nr, rwbs, f.op, f.preflush, f.fua, f.sync, f.meta, ts, "x", 1, 0)


def test_joj_follows_the_sync_that_started_the_commit() -> None:
    """wal sync -> JOJ; db sync -> journal, not JOJ; a background commit that
    overlaps a sync call -> journal, not JOJ; wal data is data."""
    fs = T.LoopFs("ext4", "/dev/null", "/", None)        # /dev/null: a device number, no I/O
    session = T.TraceSession(fs, poll_ms=0)
    layout = bt.Layout("ext4", {"1:3": "main"}, 4096)
    layout.add_region(bt.Region("1:3", 1000, 2000, bt.FS_JOURNAL, "journal"), 0)
    layout.add_snapshot(bt.FileSnapshot("wal", "/x/db-wal", 0.0, [bt.FileExtent(0, 100 * 512, 100 * 512, 1)]))
    layout.add_snapshot(bt.FileSnapshot("db", "/x/db", 0.0, [bt.FileExtent(0, 300 * 512, 100 * 512, 1)]))
    session.watcher.inodes.update({12: "db", 13: "wal"})
    session.watcher.directories[2] = "/x"
    cap = session.capture
    cap.markers = [(9.5, "waldio-trace clock check")]
    session.clock_check = {"python_before_s": 9.49, "python_after_s": 9.51}
    cap.fs_events = [
        # transaction 0: a wal fdatasync that forces commit 5
        _ev(10.001, 7, "sync_enter", ino=13, parent=2, datasync=1), _ev(10.002, 50, "commit_start", number=5),
        _ev(10.004, 50, "commit_end", number=5), _ev(10.005, 7, "sync_exit", ino=13),
        # transaction 1: background commit 6 starts before the db sync it overlaps
        _ev(10.0205, 50, "commit_start", number=6), _ev(10.021, 7, "sync_enter", ino=12, parent=2, datasync=1),
        _ev(10.022, 50, "commit_end", number=6), _ev(10.023, 7, "sync_exit", ino=12),
        # ... then a wal sync forcing commit 7
        _ev(10.024, 7, "sync_enter", ino=13, parent=2, datasync=1), _ev(10.025, 50, "commit_start", number=7),
        _ev(10.027, 50, "commit_end", number=7), _ev(10.028, 7, "sync_exit", ino=13),
    ]
    cap.requests = [
        _req(10.0015, 100, 8, "WS"), _req(10.0025, 1000, 16, "WSM"), _req(10.0035, 1016, 8, "WSM"),
        _req(10.0036, 0, 0, "FF"),
        _req(10.0215, 1024, 24, "WSM"), _req(10.0218, 300, 8, "WS"),
        _req(10.0245, 108, 8, "WS"), _req(10.026, 1048, 8, "WSM"), _req(10.0265, 0, 0, "FF"),
        _req(10.040, 1056, 8, "WSM"),          # after the window: ignored
    ]
    session.brackets = [(10.0, 10.010), (10.020, 10.030)]
    doc = T.analyze(session, layout, per_txn=True, expected_transactions=2)
    per = doc["per_txn"]
    assert per["joj"] == [24 * 512, 8 * 512]
    assert per["journal"] == [24 * 512, 32 * 512]
    assert per["data"] == [8 * 512, 16 * 512]
    assert per["flushes"] == [1, 1]
    assert doc["columns"]["total"]["joj"] == 32 * 512
    assert doc["columns"]["total"]["total"] == 80 * 512
    assert doc["classes"]["total"] == {"db": 4096, "wal": 8192, bt.FS_JOURNAL: 56 * 512}
    assert doc["syncs"]["by_class"]["db"]["journal_bytes"] == 0
    assert doc["syncs"]["by_class"][T.BACKGROUND]["journal_bytes"] == 24 * 512
    assert doc["journal_commits"]["by_sync_class"] == {"wal": 2, T.BACKGROUND: 1}
    assert doc["outside_window_bytes"]["after"] == 4096
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]


def test_analysis_checks_can_fail() -> None:
    """A clock marker outside the Python clock reads and overlapping brackets are reported."""
    fs = T.LoopFs("ext4", "/dev/null", "/", None)
    session = T.TraceSession(fs, poll_ms=0)
    layout = bt.Layout("ext4", {"1:3": "main"}, 4096)
    session.capture.markers = [(20.0, "waldio-trace clock check")]
    session.clock_check = {"python_before_s": 9.0, "python_after_s": 9.1}
    session.capture.requests = [_req(10.001, 100, 8, "WS")]
    session.brackets = [(10.0, 10.010), (10.005, 10.02)]
    doc = T.analyze(session, layout, expected_transactions=3)
    failed = {c["name"] for c in doc["checks"] if not c["ok"]}
    assert not doc["ok"]
    assert any("clock" in n for n in failed)
    assert any("overlap" in n for n in failed)
    assert any("one bracket per transaction" in n for n in failed)
    assert doc["columns"]["total"]["data"] == 4096 and doc["classes"]["total"] == {bt.UNATTRIBUTED: 4096}


# --------------------------------------------------------------------------
# known patterns on real loop file systems
# --------------------------------------------------------------------------







def _traced(fs: Any, files: Dict[str, List[str]], body: Callable[[T.TraceSession], None],
            elimination: Optional[str] = None, poll_ms: float = 1.0) -> Dict[str, Any]:
    fs.sync()
    with T.TraceSession(fs, files, poll_ms=poll_ms, elimination_class=elimination) as session:
        body(session)
    doc = T.analyze_session(session, steady_after=0)
    assert doc["capture"]["complete"], doc["capture"]
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
    return doc


@pytest.mark.parametrize("kind", ["ext4", "xfs"])
def test_direct_overwrites_are_one_block_and_no_journal(kind: str) -> None:
    _skip_unless(kind)
    with fsimage.loop_filesystem(kind) as fs:
        path = fs.path("log-wal")
        preallocate_zeroed(path, N)

        def body(ts: T.TraceSession) -> None:
            buf = aligned_block(b"w")
            fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
            try:
                for i in range(N):
                    with ts.transaction():
                        assert os.pwritev(fd, [buf], i * BLOCK) == BLOCK
                        os.fdatasync(fd)
            finally:
                os.close(fd)
                buf.close()
        doc = _traced(fs, {"wal": [path]}, body)
    tx = doc["columns"]["transactions"]
    assert abs(doc["classes"]["transactions"].get("wal", 0) - N * BLOCK) <= TOLERANCE
    assert tx["journal"] <= TOLERANCE and tx["joj"] == 0
    assert abs(tx["total"] - N * BLOCK) <= TOLERANCE
    assert sum(1 for b in doc["per_txn"]["total"] if b == BLOCK) >= N - 1
    assert tx["flushes"] >= N
    assert doc["syncs"]["by_class"]["wal"]["calls"] == N


@pytest.mark.parametrize("kind", ["ext4", "xfs", "btrfs"])
def test_buffered_appends_journal_their_journal(kind: str) -> None:
    """appends + fdatasync of a wal: every journal byte in the transactions is JOJ."""
    _skip_unless(kind)
    with fsimage.loop_filesystem(kind) as fs:
        path = fs.path("app.db-wal")
        preallocate_zeroed(path, 0)

        def body(ts: T.TraceSession) -> None:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                for _ in range(N):
                    with ts.transaction():
                        assert os.write(fd, b"a" * BLOCK) == BLOCK
                        os.fdatasync(fd)
            finally:
                os.close(fd)
        doc = _traced(fs, {"wal": [path]}, body)
    tx = doc["columns"]["transactions"]
    assert abs(doc["classes"]["transactions"].get("wal", 0) - N * BLOCK) <= TOLERANCE
    assert abs(tx["data"] - N * BLOCK) <= TOLERANCE
    assert tx["journal"] >= N * 512              # xfs logs in 512-byte sectors, ext4 in blocks
    assert tx["joj"] == tx["journal"]
    assert all(j > 0 for j in doc["per_txn"]["joj"][1:])
    assert doc["classes"]["transactions"].get(bt.UNATTRIBUTED, 0) <= TOLERANCE


def test_appends_to_the_database_are_journal_but_not_joj() -> None:
    _skip_unless("ext4")
    with fsimage.loop_filesystem("ext4") as fs:
        path = fs.path("app.db")
        preallocate_zeroed(path, 0)

        def body(ts: T.TraceSession) -> None:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                for _ in range(N):
                    with ts.transaction():
                        os.write(fd, b"d" * BLOCK)
                        os.fdatasync(fd)
            finally:
                os.close(fd)
        doc = _traced(fs, {"db": [path]}, body)
    tx = doc["columns"]["transactions"]
    assert abs(doc["classes"]["transactions"].get("db", 0) - N * BLOCK) <= TOLERANCE
    assert tx["journal"] >= N * BLOCK and tx["joj"] == 0
    assert doc["syncs"]["by_class"]["db"]["journal_bytes"] == tx["journal"]


@pytest.mark.parametrize("watched", [True, False])
def test_deleted_rollback_journals(watched: bool) -> None:
    """A journal created, synced and deleted per transaction: its data is attributed
    although the file is gone at the end (FIEMAP snapshot before the unlink, and the
    file system's own map events); its syncs by stat (watched) or by elimination
    (parent = the database directory)."""
    _skip_unless("ext4")
    rounds, size = 20, 2 * BLOCK
    with fsimage.loop_filesystem("ext4") as fs:
        journal = fs.path("app.db-journal")
        preallocate_zeroed(fs.path("app.db"), 1)

        def body(ts: T.TraceSession) -> None:
            for _ in range(rounds):
                with ts.transaction():
                    fd = os.open(journal, os.O_CREAT | os.O_WRONLY, 0o644)
                    os.write(fd, b"j" * size)
                    os.fdatasync(fd)
                    os.close(fd)
                    if watched:
                        ts.poll()
                    os.unlink(journal)
        files = T.sqlite_files(fs.path("app.db"))
        if not watched:
            files = {"db": files["db"]}
        doc = _traced(fs, files, body, elimination="journal", poll_ms=0)
    tx = doc["columns"]["transactions"]
    assert doc["classes"]["transactions"].get("journal", 0) == rounds * size
    assert doc["classes"]["transactions"].get(bt.UNATTRIBUTED, 0) == 0
    assert doc["file_watcher"]["online_map"]["kept"] >= rounds
    by = doc["syncs"]["by_class"]["journal"]
    assert by["calls"] == rounds
    assert ("stat of a watched path" in by["identified_by"]) == watched
    assert tx["journal"] > 0 and tx["joj"] == tx["journal"]


def test_failure_inside_a_trace_releases_everything() -> None:
    _skip_unless("ext4")
    seen: Dict[str, str] = {}
    with pytest.raises(RuntimeError, match="boom"):
        with fsimage.loop_filesystem("ext4") as fs:
            seen.update(device=fs.device, workdir=fs.workdir)
            with T.TraceSession(fs, {"wal": [fs.path("x-wal")]}) as session:
                seen["instance"] = session.capture.instance or ""
                assert os.path.isdir(seen["instance"])
                raise RuntimeError("boom")
    assert not os.path.exists(seen["instance"])
    assert not os.path.exists(seen["workdir"])
    assert not fsimage.leftover_resources(os.getpid())
    assert not bt.leftover_trace_instances(os.getpid())


# --------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------

def _cli(args: List[str], **kw: Any) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "waldio", "trace", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _assert_no_leftovers(pid: int) -> None:
    assert not fsimage.leftover_resources(pid), fsimage.leftover_resources(pid).to_dict()
    assert not bt.leftover_trace_instances(pid)


def test_cli_help_has_examples() -> None:
    proc = _cli(["--help"])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "examples:" in out and "--steady-after" in out and "--transactions" in out


def test_cli_refuses_raw_modes_and_dir() -> None:
    for args in (["--modes", "raw-dio"], ["--dir", "/var/tmp"]):
        proc = _cli(args)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, err
        assert ("raw-dio" in err) if "--modes" in args else ("--dir" in err)


def test_cli_reproduces_the_readme_per_commit_figures(tmp_path: Path) -> None:
    """waldio full: one 4 KiB block per commit and no journal; stock WAL FULL: its
    fdatasyncs journal the growing WAL (all of that journal is JOJ)."""
    _skip_unless("ext4")
    out = tmp_path / "out"
    proc = _cli(["--modes", "wal-full,waldio-full", "--transactions", "30", "--out", str(out), "--plain"])
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    _assert_no_leftovers(proc.pid)
    doc = json.loads((out / "trace.json").read_text())
    assert TC.validate(doc) == []
    assert doc["tool"]["name"] == "waldio trace" and doc["params"]["bench"]["transactions"] == 30
    modes = {m["label"]: m for m in doc["modes"]}
    for m in modes.values():
        traced = [r for r in m["repetitions"] if r["traced"]]
        assert len(traced) == 1 and len([r for r in m["repetitions"] if not r["traced"]]) == 2
        t = traced[0]["trace"]
        assert t["cross_check"]["device_stat_write_bytes"] == t["cross_check"]["trace_write_bytes"]
        assert t["cross_check"]["device_stat_flushes"] == t["cross_check"]["trace_flushes"]
        assert t["transactions"] == 30 and t["capture"]["complete"]
    w = modes["waldio-full"]["trace_summary"]["per_txn"]["steady"]
    assert w["total"]["median"] == BLOCK and w["journal"]["median"] == 0 and w["joj"]["median"] == 0
    assert w["requests"]["median"] == 1
    s = modes["wal-full"]["trace_summary"]["per_txn"]["steady"]
    assert s["journal"]["median"] >= 3 * BLOCK and s["joj"]["median"] == s["journal"]["median"]
    assert 2 * BLOCK <= s["data"]["median"] <= 3 * BLOCK
    assert modes["waldio-full"]["trace_summary"]["overhead"]["slowdown"] is not None
    assert "steady: data" in stdout and "JOJ" in stdout
    png = out / "timeline.png"
    assert png.stat().st_size > 10_000 and (out / "timeline.svg").exists()


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_cli_interrupted_releases_everything(tmp_path: Path, sig: int, status: int) -> None:
    _skip_unless("ext4")
    # As from an interactive shell: a job started with `&` by a non-interactive
    # one (a CI script) inherits SIGINT ignored, and Python then keeps it so.
    proc = _cli(["--modes", "wal-full", "--transactions", "1000000", "--warmup", "0",
                 "--out", str(tmp_path), "--plain", "--quiet"],
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not bt.leftover_trace_instances(proc.pid):       # inside a traced repetition
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the trace never started"
            time.sleep(0.05)
        assert fsimage.leftover_resources(proc.pid).loop_devices
        time.sleep(0.3)
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status, err[-2000:]
    _assert_no_leftovers(proc.pid)
