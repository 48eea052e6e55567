"""Recording a workload: a child process with the crash recorder loaded below waldio.

The recorder (``recorder.so``) is an SQLite VFS stacked under waldio that
also hooks waldio's own system calls, so every write (buffered, direct, FUA),
sync, truncate, create, rename and delete is logged with its bytes, in
completion order, with an ``ack`` mark after each acknowledged transaction.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import waldio

from .database import Runner, control_connection, load_recorder, make_base
from .events import commit_order, mark_name, parse_events
from .modes import get_mode
from .workload import (
    DB_NAME,
    MULTI_WORKLOADS,
    apsw_module,
    reference_digests,
    reference_digests_in_order,
)


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    root = str(Path(waldio.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def hook_lsmvbt() -> None:
    """Load lsmvbt.so (after the recorder: its VFS copies the recorder) and hook its
    system calls, so that the engine's writes, syncs and renames are recorded."""
    from . import lsmvbt
    c = apsw_module().Connection(":memory:")
    lsmvbt.load(c)
    hooked = c.execute("SELECT recorder_hook_waldio('lsmvbt')").fetchall()[0][0]
    c.close()
    if hooked < 8:
        raise SystemExit("recorder_hook_waldio('lsmvbt') hooked only %s system calls" % hooked)


class RecordingError(RuntimeError):
    """The workload failed while it was being recorded (before any crash)."""

    def __init__(self, msg: str, log_path: Path) -> None:
        super().__init__(msg)
        self.log_path = log_path

    def short(self) -> str:
        lines = [l for l in str(self).splitlines() if l.strip()]
        return lines[-1] if lines else str(self)


def record(mode_name: str, workload: str, seed: int, txns: int, out_dir: Path,
           timeout: float = 600) -> Path:
    """Record one run into out_dir (events.bin, meta.json, base/).
    Runs in a child process: the recorder must load before waldio."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    args = {"mode": mode_name, "workload": workload, "seed": seed, "txns": txns,
            "out": str(out_dir)}
    proc = subprocess.run([sys.executable, "-m", "waldio.crash", "_record", json.dumps(args)],
                          capture_output=True, text=True, timeout=timeout,
                          env=child_env({"WALDIO_RECORDER_SEED": str(seed)}))
    if proc.returncode == 0 and proc.stderr.strip():
        (out_dir / "record.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        (out_dir / "record.log").write_text(proc.stdout + proc.stderr)
        raise RecordingError("recording %s/%s failed (exit %d):\n%s%s" % (
            mode_name, workload, proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:]),
            out_dir / "record.log")
    meta = json.loads((out_dir / "meta.json").read_text())
    if workload in MULTI_WORKLOADS:
        # The commit order is the run's: read it from the writers' marks.
        try:
            order = commit_order(parse_events(out_dir / "events.bin"))
        except ValueError as e:
            raise RecordingError("recording %s/%s: inconsistent acknowledgements: %s"
                                 % (mode_name, workload, e), out_dir / "meta.json")
        meta["order"] = order
        meta["switches"] = sum(1 for a, b in zip(order, order[1:]) if a[1] != b[1])
        meta["digests"] = reference_digests_in_order(workload, seed, txns, order)
    else:
        meta["digests"] = reference_digests(workload, seed, txns)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    return out_dir


def role_record(args: Dict[str, Any]) -> None:
    mode = get_mode(args["mode"])
    out = Path(args["out"])
    live = out / "live"
    live.mkdir()
    load_recorder()
    vfs = "recorder"
    if mode.lsmvbt:
        hook_lsmvbt()
        ctl = control_connection()
    elif mode.waldio:
        waldio.load()
        ctl = control_connection()
        hooked = ctl.execute("SELECT recorder_hook_waldio('waldio')").fetchall()[0][0]
        if hooked < 10:
            raise SystemExit("recorder_hook_waldio hooked only %s system calls" % hooked)
        vfs = "waldio"
    else:
        ctl = control_connection()
    db = live / DB_NAME
    multi = args["workload"] in MULTI_WORKLOADS
    if multi:
        from . import procs
        skip, done = procs.make_base_multi(mode, db, args["workload"], args["seed"],
                                           args["txns"], vfs)
    else:
        steps, done_before = make_base(mode, db, args["workload"], args["seed"], args["txns"], vfs)
    (out / "base").mkdir()
    base_files = []
    for p in sorted(live.iterdir()):
        if p.name.endswith("-shm"):
            continue
        shutil.copyfile(p, out / "base" / p.name)
        base_files.append(p.name)
    ctl.execute("SELECT recorder_start(?)", (str(out / "events.bin"),)).fetchall()
    procs_report: Dict[str, Any] = {}
    if multi:
        # Acknowledged (and durable) before the recording: in the base.
        # The largest first, so that every crash point requires them all.
        for g, w, n in sorted(done, reverse=True):
            ctl.execute("SELECT recorder_mark(?, ?)", (mark_name("ack", w, n), g)).fetchall()
        if args["workload"] == "fork":
            procs_report = procs.run_fork(mode, db, args["seed"], args["txns"], vfs, skip, out)
        else:
            seed = int(os.environ.get("WALDIO_RECORDER_SEED") or args["seed"])
            procs_report = procs.run_processes(
                mode, args["workload"], args["seed"], args["txns"], db, out / "events.bin", skip,
                env_for=lambda i: child_env({"WALDIO_RECORDER_SEED": str(seed * 100 + i + 1)}))
    else:
        if done_before:
            # Acknowledged (and durable) before the recording: in the base.
            ctl.execute("SELECT recorder_mark('ack', ?)", (done_before,)).fetchall()

        def ack(n: int) -> None:
            ctl.execute("SELECT recorder_mark('ack', ?)", (n,)).fetchall()

        runner = Runner(mode, db, vfs=vfs, on_ack=ack)
        runner.run(steps)
        runner.close()
    ctl.execute("SELECT recorder_mark('end', 0)").fetchall()
    n_events = ctl.execute("SELECT recorder_stop()").fetchall()[0][0]
    apsw = apsw_module()
    meta = {"mode": mode.name, "workload": args["workload"], "seed": args["seed"],
            "txns": args["txns"], "live_dir": str(live.resolve()), "base_files": base_files,
            "events": n_events, "sqlite": apsw.sqlite_lib_version(), "apsw": apsw.apsw_version(),
            "recorder_seed": os.environ.get("WALDIO_RECORDER_SEED"), "processes": procs_report}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


def events_hash(rec_dir: Path) -> str:
    return hashlib.blake2b((Path(rec_dir) / "events.bin").read_bytes(), digest_size=6).hexdigest()
