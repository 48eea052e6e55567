"""A campaign: record once, check many crash states, replay one by id.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import waldio

from .database import open_db, state_dir_base
from .events import DEV, EVENT_NAMES, FUA, INF, StateKey
from .modes import CONVERT_MODE, MODELS
from .oracle import Outcome, check_files, verdict
from .recorder import control_connection, events_hash, load_recorder, record
from .states import Recording
from .workload import DB_NAME, TABLES, reference_rows


@dataclass
class StateResult:
    key: StateKey
    passed: bool
    reason: str
    k: Optional[int]
    required: int
    content: str


@dataclass
class CampaignTally:
    """What every campaign reports (this one, and real/campaign.py's): the
    run, and the states tried and passed, by model or kind."""
    mode: str
    workload: str
    seed: int
    txns: int
    rec_dir: str
    summary: Dict[str, Any]
    tried: Dict[str, int] = field(default_factory=dict)
    passed: Dict[str, int] = field(default_factory=dict)

    @property
    def total_tried(self) -> int:
        return sum(self.tried.values())

    @property
    def total_passed(self) -> int:
        return sum(self.passed.values())

    def to_json(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["total_tried"] = self.total_tried
        d["total_passed"] = self.total_passed
        return d


@dataclass
class CampaignResult(CampaignTally):
    distinct: int = 0
    failures: List[Dict[str, Any]] = field(default_factory=list)
    kinds: Dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    record_seconds: float = 0.0
    lost_allowed_max: int = 0
    flush_delay_ms: Optional[Dict[str, float]] = None
    commit_delay_ms: Optional[Dict[str, float]] = None


def check_states(rec: Recording, keys: Sequence[StateKey], workdir: Path,
                 progress: Optional[Callable[[int], None]] = None,
                 mutate: str = "") -> List[StateResult]:
    """Materialize and check each state (one process)."""
    waldio.load()
    cache: Dict[str, Outcome] = {}
    results: List[StateResult] = []
    sdir = workdir / ("state-%d" % os.getpid())
    convert = not rec.mode.waldio and rec.mode.journal == "WAL"
    for i, (key, img) in enumerate(rec.states(keys)):
        h = img.content_hash()
        out = cache.get(h)
        if out is None:
            img.write_to(sdir)
            out = check_files(rec.mode, sdir, rec.digests)
            if convert:
                out.converted = check_files(CONVERT_MODE, sdir, rec.digests)
            cache[h] = out
        req, up = rec.required(key), rec.upper(key)
        ok, reason = verdict(out, req, up)
        if ok and convert:
            c = out.converted
            if not (c.ok and c.integrity == "ok" and c.k == out.k):
                ok = False
                reason = ("waldio's conversion of the standard WAL differs: stock SQLite "
                          "recovered k=%s, waldio %s" % (out.k, ("k=%s" % c.k) if c.ok else c.error))
        results.append(StateResult(key, ok, reason, out.k, req, h))
        if progress and (i + 1) % 200 == 0:
            progress(i + 1)
    shutil.rmtree(sdir, ignore_errors=True)
    return results


def _worker_check(args: Tuple[str, List[str], str]) -> List[Tuple[str, bool, str, Optional[int], int, str]]:
    rec_dir, keys, workdir = args
    # A checker process of its own: its files are thrown away, so waldio's
    # own flushes (log creation, conversion) are skipped (recorder no_sync).
    load_recorder()
    waldio.load()
    ctl = control_connection()
    ctl.execute("SELECT recorder_hook_waldio('waldio')").fetchall()
    ctl.execute("SELECT recorder_config('no_sync', 1)").fetchall()
    rec = Recording(Path(rec_dir))
    if rec.mode.lsmvbt:          # and LS-MVBT's recovery syncs
        from .recorder import hook_lsmvbt
        hook_lsmvbt()
    res = check_states(rec, [StateKey.parse(k) for k in keys], Path(workdir))
    return [(r.key.text(), r.passed, r.reason, r.k, r.required, r.content) for r in res]


def run_campaign(mode_name: str, *, workload: str = "mixed", states: int = 1000, seed: int = 1,
                 txns: int = 200, out_root: Optional[Path] = None, jobs: int = 1,
                 models: Sequence[str] = MODELS, rec_dir: Optional[Path] = None,
                 log: Callable[[str], None] = lambda s: None,
                 drop_syncs: bool = False) -> CampaignResult:
    """Record (unless rec_dir is given) and check `states` crash states."""
    out_root = Path(out_root or state_dir_base() / "waldio-crash")
    t0 = time.monotonic()
    if rec_dir is None:
        rec_dir = out_root / ("%s-%s-s%d-n%d" % (mode_name, workload, seed, txns))
        log("recording %s (%s, %d transactions, seed %d) ..." % (mode_name, workload, txns, seed))
        record(mode_name, workload, seed, txns, rec_dir)
    t_rec = time.monotonic() - t0
    rec = Recording(rec_dir)
    if drop_syncs:
        _drop_syncs(rec)
    if "committed" in (rec.mode.kill_contract, rec.mode.os_contract, rec.mode.power_contract) \
            and not rec.commit_frames_ok:
        raise RuntimeError("%s: found %d commit frames in the recorded log writes for %d "
                           "acknowledged transactions; cannot check the group contract"
                           % (mode_name, len(rec.commit_items), rec.n_acked))
    # A mode is checked under the crash models it promises anything for.
    models = [m for m in models if m in rec.mode.models]
    keys = rec.sample(states, seed, models)
    log("%s: %d events, %d acknowledged transactions; checking %d states ..."
        % (mode_name, rec.n, rec.n_acked, len(keys)))
    res = CampaignResult(mode_name, workload, seed, txns, str(rec_dir), rec.summary(),
                         record_seconds=round(t_rec, 1))
    workdir = Path(tempfile.mkdtemp(prefix="waldio-crash-", dir=state_dir_base()))
    try:
        if jobs > 1 and not drop_syncs:
            import multiprocessing as mp
            chunks = [[k.text() for k in keys[w::jobs]] for w in range(jobs)]
            ctx = mp.get_context("spawn")
            with ctx.Pool(jobs) as pool:
                parts = pool.map(_worker_check, [(str(rec_dir), c, str(workdir)) for c in chunks])
            flat = [StateResult(StateKey.parse(a), b, c, d, e, f) for part in parts
                    for (a, b, c, d, e, f) in part]
        else:
            flat = check_states(rec, keys, workdir,
                                progress=lambda i: log("  %d/%d states" % (i, len(keys))))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    contents = set()
    for r in flat:
        m = r.key.model
        res.tried[m] = res.tried.get(m, 0) + 1
        res.passed[m] = res.passed.get(m, 0) + (1 if r.passed else 0)
        kind = "%s/%s" % (m, r.key.kind)
        res.kinds[kind] = res.kinds.get(kind, 0) + 1
        contents.add(r.content)
        if r.k is not None:
            res.lost_allowed_max = max(res.lost_allowed_max, rec.upper(r.key) - 1 - r.k)
        if not r.passed:
            res.failures.append({"id": rec.state_id(r.key), "reason": r.reason,
                                 "k": r.k, "required": r.required})
    res.distinct = len(contents)
    if rec.mode.waldio and rec.mode.power_contract == "flush":
        d = sorted(rec.flush_delays_ms())
        bound = float(rec.mode.uri_options().get("flush_ms", "100"))
        never = sum(1 for it in rec.items if it.cls == DEV and it.durable_at >= INF)
        if d:
            res.flush_delay_ms = {"median": round(d[len(d) // 2], 2), "max": round(d[-1], 2),
                                  "writes": len(d), "bound": bound,
                                  "over_bound": sum(1 for x in d if x > bound),
                                  "never_flushed": never}
    if rec.mode.waldio:
        d = sorted(rec.commit_delays_ms())
        if d:
            res.commit_delay_ms = {"median": round(d[len(d) // 2], 2), "max": round(d[-1], 2),
                                   "commits": len(d)}
            if "group_ms" in rec.mode.uri_options():
                bound = float(rec.mode.uri_options()["group_ms"])
                res.commit_delay_ms["bound"] = bound
                res.commit_delay_ms["over_bound"] = sum(1 for x in d if x > bound)
    res.seconds = round(time.monotonic() - t0, 1)
    return res


def _drop_syncs(rec: Recording) -> None:
    """Mutation (tests only): pretend no sync ever reached the device, so the
    checker must report lost transactions for a mode that relies on them."""
    for it in rec.items:
        if it.cls != FUA:
            it.durable_at = INF
    rec.items.sort(key=lambda it: it.idx)
    rec.recount_volatile()


def replay(state_id: str, out_root: Optional[Path] = None, keep: Optional[Path] = None,
           rec_dir: Optional[Path] = None) -> Tuple[bool, str]:
    """Rebuild and re-check one state; returns (passed, report text)."""
    parts = state_id.split("/")
    if len(parts) != 5:
        raise ValueError("a state id looks like MODE/WORKLOAD/seed=S/txns=N/MODEL:T:KIND:P")
    mode_name, workload, s, n, keytext = parts
    seed, txns = int(s.split("=")[1]), int(n.split("=")[1])
    key = StateKey.parse(keytext)
    out_root = Path(out_root or state_dir_base() / "waldio-crash")
    lines: List[str] = []
    if rec_dir is None:
        rec_dir = out_root / ("%s-%s-s%d-n%d" % (mode_name, workload, seed, txns))
        if not (rec_dir / "events.bin").exists():
            lines.append("no saved recording at %s: recording again (seeded; exact for "
                         "single-threaded modes)" % rec_dir)
            record(mode_name, workload, seed, txns, rec_dir)
    rec = Recording(Path(rec_dir))
    lines.append("recording: %s (%d events, events hash %s)" % (rec_dir, rec.n, events_hash(rec_dir)))
    (k2, img), = list(rec.states([key]))
    waldio.load()
    sdir = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="waldio-replay-", dir=state_dir_base()))
    img.write_to(sdir)
    out = check_files(rec.mode, sdir, rec.digests)
    req, up = rec.required(key), rec.upper(key)
    ok, reason = verdict(out, req, up)
    t = rec.effective_t(key)
    lines.append("state %s" % rec.state_id(key))
    if 0 <= key.t < rec.n:
        ev = rec.events[key.t]
        lines.append("crash point: after event #%d (%s), %d transactions acknowledged by then"
                     % (key.t, EVENT_NAMES.get(ev.type), rec.A[t] if t >= 0 else 0))
    lines.append("files: " + ", ".join("%s (%d bytes)" % (nm, len(b)) for nm, b in sorted(img.files().items())))
    lines.append("volatile items kept: %d, dropped: %d" % (len(img.kept), len(img.dropped)))
    for it in img.dropped[:12]:
        lines.append("  dropped " + it.describe())
    if img.torn_desc:
        lines.append("torn: " + img.torn_desc + "  (n=new o=old g=garbage per 512-byte sector)")
    lines.append("content hash %s" % img.content_hash())
    lines.append("outcome: integrity=%r k=%s meta.txn=%s error=%r" % (out.integrity, out.k, out.meta_txn, out.error))
    lines.append("verdict: %s — %s" % ("PASS" if ok else "FAIL", reason))
    if not ok and out.ok and out.integrity == "ok" and (out.k is None or out.k < req):
        lines.extend(_diff(rec, sdir, req))
    if keep:
        lines.append("state files kept in %s" % sdir)
    else:
        shutil.rmtree(sdir, ignore_errors=True)
    return ok, "\n".join(lines)


def _diff(rec: Recording, sdir: Path, k: int, limit: int = 12) -> List[str]:
    """Rows that differ between the state and the database after k transactions."""
    m = rec.meta
    want = reference_rows(m["workload"], m["seed"], m["txns"], k, m.get("order"))
    conn = open_db(rec.mode, sdir / DB_NAME)
    lines = ["diff against the database after %d transactions (- expected, + found):" % k]
    shown = 0
    try:
        for t in TABLES:
            have = {r[0]: r for r in conn.execute("SELECT * FROM %s ORDER BY id" % t)}
            exp = {r[0]: r for r in want[t]}
            for rid in sorted(set(have) | set(exp)):
                if have.get(rid) != exp.get(rid) and shown < limit:
                    shown += 1
                    if rid in exp:
                        lines.append("  - %s %s" % (t, _short(exp[rid])))
                    if rid in have:
                        lines.append("  + %s %s" % (t, _short(have[rid])))
    finally:
        conn.close()
    return lines


def _short(row: Tuple[Any, ...]) -> str:
    return "(" + ", ".join(("<%d-byte blob %s>" % (len(v), hashlib.md5(v).hexdigest()[:6])
                            if isinstance(v, bytes) else repr(v)) for v in row) + ")"
