"""A real-kernel campaign: record a run, check many of its crash states in
worker processes, keep every failure as a small reproducible artifact, and
replay one state by id.

A state id is ``MODE/WORKLOAD/seed=S/txns=N/real:KIND:CUT:PARAM``; the
recording lives in ``OUT/MODE-WORKLOAD-sS-nN`` (base.img, blocks.bin, file/).
A failure's artifact, ``OUT/failures/<id>/``: the state's disk image
(sparse), ``acked.json`` (every acknowledged transaction: position, writer,
block-log record, time) and ``replay.sh`` (the command that rebuilds and
re-checks the state from the recording).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..campaign import CampaignTally
from ..database import state_dir_base
from ..states import write_sparse
from .check import RealResult, StateChecker
from .model import FINDING_KINDS
from .plan import RealRun
from .record import record_real
from .recording import RealRecording
from .states import ImageBuilder, RealKey, StateSpace

Progress = Callable[[int, int], None]


@dataclass
class RealCampaignResult(CampaignTally):
    control: bool = False
    distinct_images: int = 0
    failures: List[Dict[str, Any]] = field(default_factory=list)
    losing_states: int = 0              # states missing acknowledged transactions
    max_lost: int = 0
    loss_ages_ms: List[float] = field(default_factory=list)
    outside_model: Dict[str, int] = field(default_factory=dict)   # findings by kind
    states_outside_model: int = 0
    outside_states_by_kind: Dict[str, int] = field(default_factory=dict)   # by state kind
    outside_examples: List[Dict[str, str]] = field(default_factory=list)
    fsck_complaints: int = 0
    fs_torn: int = 0                    # torn states that damaged ext4 itself
    unjudged: int = 0                   # ... so badly that it does not mount
    fs_torn_examples: List[Dict[str, str]] = field(default_factory=list)
    ack_to_durable_ms: Optional[Dict[str, Any]] = None
    record_seconds: float = 0.0
    check_seconds: float = 0.0

    @property
    def states_per_minute(self) -> float:
        return 60.0 * self.total_tried / self.check_seconds if self.check_seconds else 0.0

    def to_json(self) -> Dict[str, Any]:
        d = super().to_json()
        d.update(states_per_minute=round(self.states_per_minute, 1),
                 loss_age_ms=age_summary(self.loss_ages_ms))
        return d


def age_summary(ages: Sequence[float]) -> Optional[Dict[str, Any]]:
    """Median, spread and deciles of the ages of the oldest lost acknowledged
    transaction (ms)."""
    if not ages:
        return None
    a = sorted(ages)
    q = statistics.quantiles(a, n=10) if len(a) >= 2 else [a[0]] * 9
    return {"states": len(a), "min": round(a[0], 2), "median": round(statistics.median(a), 2),
            "p90": round(q[8], 2), "max": round(a[-1], 2),
            "deciles": [round(x, 2) for x in q]}


def recording_dir(out_root: Path, run: RealRun, seed: int, txns: int) -> Path:
    return Path(out_root) / ("%s-%s-s%d-n%d" % (run.mode, run.workload, seed, txns))


def default_out_root() -> Path:
    return state_dir_base() / "waldio-crash-real"


# ---------------------------------------------------------------- workers

_RECORDINGS: Dict[str, RealRecording] = {}      # per checker process


def _init_worker() -> None:
    """A checker process: the crash recorder below waldio with its syncs
    switched off (the state copies are thrown away), as the model's checkers.
    SIGTERM (Pool.terminate, a campaign stopped) becomes SystemExit, so the
    finally blocks unmount and detach what the check had set up."""
    signal.signal(signal.SIGTERM, exit_on_term)
    import waldio
    from ..database import control_connection, load_recorder
    load_recorder()
    waldio.load()
    ctl = control_connection()
    ctl.execute("SELECT recorder_hook_waldio('waldio')").fetchall()
    ctl.execute("SELECT recorder_config('no_sync', 1)").fetchall()


def exit_on_term(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _check_chunk(args: Tuple[str, List[str], str, bool]) -> List[Dict[str, Any]]:
    rec_dir, keys, workdir, cross_check = args
    rec = _RECORDINGS.get(rec_dir)
    if rec is None:
        _RECORDINGS.clear()
        rec = _RECORDINGS[rec_dir] = RealRecording(Path(rec_dir))
    checker = StateChecker(rec, Path(workdir), cross_check=cross_check)
    try:
        return [r.to_json() for r in checker.check([RealKey.parse(k) for k in keys])]
    finally:
        checker.close()


def check_keys(rec_dir: Path, keys: Sequence[RealKey], *, jobs: int, cross_check: bool = True,
               progress: Optional[Progress] = None) -> List[Dict[str, Any]]:
    """Check states in `jobs` processes, in chunks of neighbouring crash
    points (each chunk builds its images incrementally)."""
    order = sorted(keys, key=lambda k: (k.position, k.cut, k.kind, k.param))
    size = max(8, min(40, len(order) // max(1, jobs * 6)))
    chunks = [[k.text() for k in order[i:i + size]] for i in range(0, len(order), size)]
    workdir = Path(tempfile.mkdtemp(prefix="waldio-real-", dir=state_dir_base()))
    out: List[Dict[str, Any]] = []
    try:
        tasks = [(str(rec_dir), c, str(workdir), cross_check) for c in chunks]
        # Always processes of their own (also for one job): the checkers
        # switch waldio's syncs off, which must not leak into the caller.
        import multiprocessing as mp
        pool = mp.get_context("spawn").Pool(max(1, jobs), initializer=_init_worker)
        try:
            for part in pool.imap_unordered(_check_chunk, tasks):
                out += part
                if progress:
                    progress(len(out), len(order))
            # Done: the workers leave at the end of the task queue. Not
            # Pool.terminate (what `with Pool` does): its SIGTERM can find a
            # worker blocked on the queue lock that terminate holds, with
            # the signal taken by another thread, and the join then waits
            # forever.
            pool.close()
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out


# -------------------------------------------------------------- campaigns

def run_real_campaign(run: RealRun, *, states: int, seed: int, txns: int,
                      out_root: Optional[Path] = None, jobs: int = 1,
                      cross_check: bool = True,
                      loop_direct_io: bool = False, rec_dir: Optional[Path] = None,
                      progress: Optional[Progress] = None,
                      log: Callable[[str], None] = lambda s: None) -> RealCampaignResult:
    """Record run (unless rec_dir is given) and check `states` crash states."""
    out_root = Path(out_root or default_out_root())
    t0 = time.monotonic()
    if rec_dir is None:
        rec_dir = recording_dir(out_root, run, seed, txns)
        record_real(run, seed, txns, rec_dir, loop_direct_io=loop_direct_io, log=log)
    t_rec = time.monotonic() - t0
    rec = RealRecording(rec_dir)
    keys = StateSpace(rec).sample(states, seed)
    log("%s: %d block records, %d acknowledged transactions; checking %d states ..."
        % (run.name, rec.n, rec.n_acked, len(keys)))
    t1 = time.monotonic()
    raw = check_keys(rec_dir, keys, jobs=jobs, cross_check=cross_check, progress=progress)
    res = RealCampaignResult(run.mode, run.workload, seed, txns, str(rec_dir), rec.summary(),
                             control=run.control, record_seconds=round(t_rec, 1),
                             check_seconds=round(time.monotonic() - t1, 1))
    summarize(res, rec, [RealResult(**r) for r in raw], out_root)
    return res


def summarize(res: RealCampaignResult, rec: RealRecording, results: List[RealResult],
              out_root: Path) -> None:
    images = set()
    for r in sorted(results, key=lambda r: RealKey.parse(r.key).position):
        kind = RealKey.parse(r.key).kind
        res.tried[kind] = res.tried.get(kind, 0) + 1
        res.passed[kind] = res.passed.get(kind, 0) + int(r.passed)
        images.add(r.image)
        if r.lost:
            res.losing_states += 1
            res.max_lost = max(res.max_lost, r.lost)
            if r.loss_age_ms is not None:
                res.loss_ages_ms.append(round(r.loss_age_ms, 3))
        res.fsck_complaints += int(bool(r.fsck) and not r.fs_torn)
        if r.fs_torn:
            res.fs_torn += 1
            if len(res.fs_torn_examples) < 3:
                res.fs_torn_examples.append({"id": rec.state_id(r.key), "reason": r.reason,
                                             "fsck": "; ".join(r.fsck)})
        if r.outside_model:
            res.states_outside_model += 1
            res.outside_states_by_kind[kind] = res.outside_states_by_kind.get(kind, 0) + 1
        for f in r.outside_model:
            k = f.split(":")[0]
            k = k if k in FINDING_KINDS else "other"
            res.outside_model[k] = res.outside_model.get(k, 0) + 1
            if sum(1 for e in res.outside_examples if e["kind"] == k) < 3:
                res.outside_examples.append({"kind": k, "id": rec.state_id(r.key), "finding": f})
        if not r.judged:
            res.unjudged += 1
        elif not r.passed:
            fail = {"id": rec.state_id(r.key), "reason": r.reason, "k": r.k,
                    "required": r.required, "acked": r.acked, "recipe": r.recipe}
            if len(res.failures) < 20:
                fail["artifact"] = str(keep_artifact(rec, RealKey.parse(r.key), out_root, fail))
            res.failures.append(fail)
    res.distinct_images = len(images)
    res.ack_to_durable_ms = ack_to_durable(rec, results)


def ack_to_durable(rec: RealRecording, results: List[RealResult]) -> Optional[Dict[str, Any]]:
    """From the checked flush points: for each acknowledged transaction, the
    time from its acknowledgement to the first flush point whose state holds
    it (the device made it durable there): how long an acknowledged commit
    was exposed to a power loss. Only when every flush point was checked
    (else a commit may have been durable at an unchecked, earlier one)."""
    flushes = sorted((RealKey.parse(r.key).cut, r.k) for r in results
                     if r.key.startswith("real:flush:") and r.k is not None)
    if not flushes or len(flushes) != len(StateSpace(rec).flush_points()):
        return None
    cuts = [c for c, _k in flushes]
    ks = [k for _c, k in flushes]
    exposed: List[float] = []
    before = never = 0
    run_acks = {m.g: rec.log.record(m.seq).t_ns for m in rec.marks
                if m.kind in ("ack", "ack-async") and m.seq > rec.start}
    for g, t_ack in sorted(run_acks.items()):
        i = next((j for j, k in enumerate(ks) if k >= g), None)
        if i is None:
            never += 1
            continue
        ms = (rec.log.record(cuts[i]).t_ns - t_ack) / 1e6
        if ms <= 0:
            before += 1
        else:
            exposed.append(ms)
    return {"commits": len(run_acks), "durable_before_ack": before,
            "never_durable": never, "after_ack": age_summary(exposed)}


def acked_list(rec: RealRecording) -> List[Dict[str, Any]]:
    out = []
    for m in rec.marks:
        if m.kind in ("ack", "ack-async", "commit"):
            t = rec.log.record(m.seq).t_ns
            out.append({"kind": m.kind, "g": m.g, "writer": m.writer, "n": m.n, "record": m.seq,
                        "t_ms": round((t - rec.log.t_start_ns) / 1e6, 3),
                        "wall_ns": rec.log.wall_ns(t)})
    return out


def _safe(state_id: str) -> str:
    return state_id.replace("/", "__").replace(":", "_")


def keep_artifact(rec: RealRecording, key: RealKey, out_root: Path,
                  verdict: Dict[str, Any]) -> Path:
    """The failing state's image, the acknowledged list and the replay command."""
    d = Path(out_root) / "failures" / _safe(rec.state_id(key.text()))
    d.mkdir(parents=True, exist_ok=True)
    ((_k, _r, image),) = list(ImageBuilder(StateSpace(rec)).images([key]))
    write_sparse(d / "state.img", image)
    (d / "acked.json").write_text(json.dumps(acked_list(rec), indent=0))
    (d / "verdict.json").write_text(json.dumps(verdict, indent=1))
    (d / "replay.sh").write_text(
        "#!/bin/sh\n# rebuild and re-check this state from the recording in %s\n"
        "exec python3 -m waldio crash --real --out '%s' --replay '%s' \"$@\"\n"
        % (rec.dir, out_root, rec.state_id(key.text())))
    os.chmod(d / "replay.sh", 0o755)
    return d


def replay(state_id: str, out_root: Optional[Path] = None, keep: Optional[Path] = None,
           log: Callable[[str], None] = lambda s: None) -> Tuple[bool, str]:
    """Rebuild and re-check one state; (passed, report). Without its
    recording the run is recorded again: on the real kernel that is another
    run (timing differs), so the state may differ too; the report says so."""
    parts = state_id.split("/")
    if len(parts) != 5:
        raise ValueError("a real-kernel state id looks like "
                         "MODE/WORKLOAD/seed=S/txns=N/real:KIND:CUT:PARAM")
    mode, workload, s, n, keytext = parts
    seed, txns = int(s.split("=")[1]), int(n.split("=")[1])
    key = RealKey.parse(keytext)
    out_root = Path(out_root or default_out_root())
    run = RealRun(mode, workload)
    rec_dir = recording_dir(out_root, run, seed, txns)
    lines: List[str] = []
    if not (rec_dir / "real.json").exists():
        lines.append("no recording at %s: recording the run again (the real kernel's timing "
                     "differs from run to run: this is another block log)" % rec_dir)
        record_real(run, seed, txns, rec_dir, log=log)
    rec = RealRecording(rec_dir)
    (raw,) = check_keys(rec_dir, [key], jobs=1)
    r = RealResult(**raw)
    p = key.position
    lines.append("recording: %s (%d block records, kernel %s)" % (rec_dir, rec.n, rec.meta["kernel"]))
    lines.append("state %s" % state_id)
    lines.append("crash point: after record #%d (%s), %d transactions acknowledged, %d required "
                 "by the contract (%s)" % (p, rec.log.record(max(p, 1)).describe(), r.acked,
                                           r.required, key.model))
    lines.append("image: " + r.recipe)
    if r.fsck:
        lines.append("e2fsck -fn: " + "; ".join(r.fsck))
    lines.append("database: k=%s" % r.k)
    if r.lost:
        lines.append("lost: %d acknowledged transactions, the oldest acknowledged %.1f ms "
                     "before the crash" % (r.lost, r.loss_age_ms or 0.0))
    for f in r.outside_model:
        lines.append("outside the model: " + f)
    lines.append("verdict: %s — %s" % ("PASS" if r.passed else "FAIL", r.reason))
    if keep:
        ((_k, _r, image),) = list(ImageBuilder(StateSpace(rec)).images([key]))
        Path(keep).mkdir(parents=True, exist_ok=True)
        write_sparse(Path(keep) / "state.img", image)
        lines.append("state image kept in %s/state.img (mount it with: mount -o loop %s/state.img "
                     "MOUNTPOINT)" % (keep, keep))
    return r.passed, "\n".join(lines)
