"""Analysis of a traced repetition: every written byte to a class, a window, a transaction.

:func:`analyze` (and :func:`analyze_session`, which takes the file layout from the
session itself) classifies each request by device and sector range (never by
process name), assigns it to the transaction whose bracket holds its issue
time and to the sync call in progress then, and reports bytes, requests,
flushes and FUA writes per class, per window and per transaction, the JOJ
bytes and a timeline.  Invariants checked on every analysis: the classes of a
window sum to its total, and the transactions plus the gaps between them sum
to the window.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from waldio import bench as B
from waldio.trace import block as bt

from .capture import Intervals, TraceSession, classified_sync_calls
from .fsevents import SyncCall, journal_commits
from .model import BACKGROUND, COLUMNS, COUNTS, JOJ_SYNC_CLASSES, TIMELINE_LIMIT, TraceError


@dataclass
class _Acc:
    """Sums of one group of requests: the Table-1 columns, counts and classes."""

    columns: Dict[str, int] = field(default_factory=lambda: {k: 0 for k in COLUMNS + COUNTS})
    classes: Dict[str, int] = field(default_factory=dict)
    read_bytes: int = 0
    read_requests: int = 0
    histogram: Dict[int, int] = field(default_factory=dict)

    def add(self, other: "_Acc") -> None:
        for k, v in other.columns.items():
            self.columns[k] += v
        for k, v in other.classes.items():
            self.classes[k] = self.classes.get(k, 0) + v
        for k, v in other.histogram.items():
            self.histogram[k] = self.histogram.get(k, 0) + v
        self.read_bytes += other.read_bytes
        self.read_requests += other.read_requests


def _accumulate(report: bt.Report, in_sync: bool, joj: bool, btrfs: bool) -> _Acc:
    acc = _Acc()
    classes = {cls: t.bytes_written for cls, t in report.classes.items() if t.bytes_written}
    if btrfs and in_sync and classes.get(bt.FS_METADATA):
        # btrfs: metadata written inside a sync call is the fsync log (see DEFINITIONS)
        classes[bt.FS_JOURNAL] = classes.get(bt.FS_JOURNAL, 0) + classes.pop(bt.FS_METADATA)
    journal = classes.get(bt.FS_JOURNAL, 0)
    metadata = classes.get(bt.FS_METADATA, 0)
    c = acc.columns
    c["total"] = report.total_bytes_written
    c["journal"] = journal
    c["metadata"] = metadata
    c["data"] = report.total_bytes_written - journal - metadata
    c["joj"] = journal if joj else 0
    c["requests"] = report.write_requests
    c["flushes"] = report.flushes
    c["fua_writes"] = report.fua_writes
    c["preflush_writes"] = report.preflush_writes
    acc.classes = classes
    acc.read_bytes, acc.read_requests = report.total_bytes_read, report.read_requests
    acc.histogram = dict(report.size_histogram)
    return acc


def _request_class(req: bt.BlockRequest, layout: bt.Layout, in_sync: bool, btrfs: bool) -> str:
    if req.is_flush:
        return "flush"
    rep = bt.classify([req], layout)
    if not rep.classes:
        return "other"
    cls = max(rep.classes.items(), key=lambda kv: kv[1].bytes_written + kv[1].bytes_read)[0]
    if btrfs and in_sync and cls == bt.FS_METADATA and req.is_write:
        return bt.FS_JOURNAL
    return cls


def analyze_session(session: TraceSession, *, timeline: bool = True, steady_after: int = 0,
                    per_txn: bool = True, device_stat: Optional[Dict[str, int]] = None,
                    expected_transactions: Optional[int] = None) -> Dict[str, Any]:
    """Classify a finished session's capture against its own file layout; see
    :func:`analyze` for the result."""
    fsid = session.btrfs_fsid()
    calls = classified_sync_calls(session, fsid)
    return analyze(session, session.layout(calls, fsid), btrfs_fsid=fsid, timeline=timeline,
                   steady_after=steady_after, per_txn=per_txn, device_stat=device_stat,
                   expected_transactions=expected_transactions)


def analyze(session: TraceSession, layout: bt.Layout, *, btrfs_fsid: str = "",
            timeline: bool = True, steady_after: int = 0, per_txn: bool = True,
            device_stat: Optional[Dict[str, int]] = None,
            expected_transactions: Optional[int] = None) -> Dict[str, Any]:
    """Attribute every captured request; the result is JSON-serializable.

    ``device_stat``: bytes written and flushes the main device's own counters
    (``/sys/class/block/*/stat``) saw over the total window, for a
    cross-check.  ``per_txn`` False skips per-transaction lists (several
    threads: brackets overlap).
    """
    cap = session.capture
    btrfs = session.fstype == "btrfs"
    brackets = sorted(session.brackets)
    w = session.windows
    t0 = w.start if w.start is not None else (brackets[0][0] if brackets else session.started_at)
    t_end = w.end if w.end is not None else (brackets[-1][1] if brackets else session.stopped_at)
    t_timed = w.timed_end if w.timed_end is not None else t_end
    if t0 is None or t_end is None:
        raise TraceError("no window: nothing was bracketed")

    calls = classified_sync_calls(session, btrfs_fsid)
    sync_index = Intervals((c.start, c.end, c) for c in calls)
    commits = journal_commits(cap.fs_events) if session.fstype == "ext4" else []
    commit_index = Intervals((c.start, c.end, c) for c in commits if c.end is not None)
    bracket_index = Intervals((s, e, i) for i, (s, e) in enumerate(brackets))

    def sync_of(ts: float) -> Optional[SyncCall]:
        return sync_index.find(ts)

    def journal_sync_of(req: bt.BlockRequest) -> Optional[SyncCall]:
        commit = commit_index.find(req.issue_ts) if commits else None
        if commit is not None:
            return sync_of(commit.start)
        return sync_of(req.issue_ts)

    # Group the requests of the total window by (transaction, sync classes, timed?).
    groups: Dict[Tuple[Optional[int], str, bool], List[bt.BlockRequest]] = {}
    outside = {"before": 0, "after": 0}
    timeline_rows: List[List[Any]] = []
    per_device: Dict[str, Dict[str, int]] = {}
    for req in cap.requests:
        if req.device not in layout.devices:
            continue
        if req.issue_ts < t0 or req.issue_ts > t_end:
            if req.is_write:
                outside["before" if req.issue_ts < t0 else "after"] += req.nbytes
            continue
        txn = bracket_index.find(req.issue_ts)
        call = sync_of(req.issue_ts)
        jcall = journal_sync_of(req) if req.is_write else call
        # A request writes into the journal or it does not; the JOJ path only
        # matters for journal bytes, so requests carry the journal-sync class
        # (commit-based on ext4) and the plain sync class for everything else.
        key_cls = (jcall.cls if jcall else BACKGROUND) + "|" + (call.cls if call else BACKGROUND)
        groups.setdefault((txn, key_cls, req.issue_ts <= t_timed), []).append(req)
        role = layout.devices[req.device]
        d = per_device.setdefault(role, {"bytes_written": 0, "write_requests": 0, "flushes": 0})
        if req.is_write:
            d["bytes_written"] += req.nbytes
            d["write_requests"] += 1
        elif req.is_flush:
            d["flushes"] += 1
        if timeline and len(timeline_rows) < TIMELINE_LIMIT and (req.is_write or req.is_flush):
            in_sync = call is not None
            timeline_rows.append([round((req.issue_ts - t0) * 1e3, 4), role, req.sector,
                                  req.nr_sectors, _request_class(req, layout, in_sync, btrfs),
                                  req.rwbs, txn])

    total, timed, in_txn, between = _Acc(), _Acc(), _Acc(), _Acc()
    txn_accs: List[_Acc] = [_Acc() for _ in brackets]
    by_sync: Dict[str, _Acc] = {}
    for (txn, key_cls, is_timed), reqs in groups.items():
        jcls, scls = key_cls.split("|")
        # (only ext4 has commit events, so elsewhere jcls == scls)
        acc = _accumulate(bt.classify(reqs, layout), in_sync=scls != BACKGROUND,
                          joj=jcls in JOJ_SYNC_CLASSES, btrfs=btrfs)
        total.add(acc)
        if is_timed:
            timed.add(acc)
        if txn is None:
            between.add(acc)
        else:
            in_txn.add(acc)
            txn_accs[txn].add(acc)
        # Journal bytes by the sync that forced them; everything else by the sync in progress.
        j = by_sync.setdefault(jcls, _Acc())
        j.columns["journal"] += acc.columns["journal"]
        s = by_sync.setdefault(scls, _Acc())
        for k in ("data", "metadata", "flushes", "requests", "fua_writes"):
            s.columns[k] += acc.columns[k]
        for k, v in acc.classes.items():
            if k not in (bt.FS_JOURNAL, bt.FS_METADATA):
                s.classes[k] = s.classes.get(k, 0) + v

    # -- syncs and commits in the total window
    in_window = [c for c in calls if t0 <= c.start <= t_end]
    sync_stats: Dict[str, Dict[str, Any]] = {}
    for c in in_window:
        st = sync_stats.setdefault(c.cls, {"calls": 0, "fdatasync": 0, "fsync": 0, "time_s": 0.0,
                                           "identified_by": {}})
        st["calls"] += 1
        if c.datasync is not None:
            st["fdatasync" if c.datasync else "fsync"] += 1
        st["time_s"] += max(0.0, c.end - c.start)
        st["identified_by"][c.identified_by] = st["identified_by"].get(c.identified_by, 0) + 1
    for cls, acc in by_sync.items():
        st = sync_stats.setdefault(cls, {"calls": 0, "fdatasync": 0, "fsync": 0, "time_s": 0.0,
                                         "identified_by": {}})
        st["journal_bytes"] = acc.columns["journal"]
        st["data_bytes"] = acc.columns["data"]
        st["metadata_bytes"] = acc.columns["metadata"]
        st["flushes"] = acc.columns["flushes"]
        st["data_classes"] = dict(sorted(acc.classes.items()))
    for st in sync_stats.values():
        st["time_s"] = round(st["time_s"], 6)
        for k in ("journal_bytes", "data_bytes", "metadata_bytes", "flushes"):
            st.setdefault(k, 0)
        st.setdefault("data_classes", {})
    # Data blocks of no known file (deleted before any snapshot, or rewritten
    # elsewhere by a copy-on-write file system), by the sync call in progress
    # when they were written: a hint at their owner, never a classification.
    unattributed_by_sync = {cls: st["data_classes"].get(bt.UNATTRIBUTED, 0)
                            for cls, st in sync_stats.items()
                            if st["data_classes"].get(bt.UNATTRIBUTED, 0)}
    commit_doc: Optional[Dict[str, Any]] = None
    if session.fstype == "ext4":
        in_commits = [c for c in commits if t0 <= c.start <= t_end]
        by_cls: Dict[str, int] = {}
        for c in in_commits:
            call = sync_of(c.start)
            k = call.cls if call else BACKGROUND
            by_cls[k] = by_cls.get(k, 0) + 1
        fc = [e for e in cap.fs_events if e.kind == "fc_commit" and t0 <= e.ts <= t_end]
        commit_doc = {"jbd2_commits": len(in_commits), "by_sync_class": by_cls,
                      "fast_commits": len(fc),
                      "per_txn": [sum(1 for c in in_commits if s <= c.start <= e)
                                  for s, e in brackets] if per_txn else None}

    # -- per transaction
    n = len(brackets)
    txn_doc: Optional[Dict[str, Any]] = None
    if per_txn and n:
        txn_doc = {k: [a.columns[k] for a in txn_accs] for k in COLUMNS + COUNTS}
        all_classes = sorted({c for a in txn_accs for c in a.classes})
        txn_doc["classes"] = {c: [a.classes.get(c, 0) for a in txn_accs] for c in all_classes}
        txn_doc["latency_us"] = [round((e - s) * 1e6, 1) for s, e in brackets]
    steady_after = min(max(steady_after, 0), max(n - 1, 0))
    summary = _txn_summary(txn_doc, n, steady_after) if txn_doc else None

    # -- checks (each can fail)
    checks: List[Dict[str, Any]] = []

    def check(name: str, expected: Any, actual: Any, ok: Optional[bool] = None) -> None:
        checks.append({"name": name, "expected": expected, "actual": actual,
                       "ok": bool(expected == actual) if ok is None else bool(ok)})

    marker_ts = [ts for ts, text in cap.markers if text == "waldio-trace clock check"]
    cc = dict(session.clock_check)
    cc["marker_s"] = marker_ts[0] if marker_ts else None
    cc["ok"] = bool(marker_ts) and cc["python_before_s"] - 2e-6 <= marker_ts[0] <= cc["python_after_s"] + 2e-6
    check("trace clock = CLOCK_MONOTONIC (marker between two clock reads)", True, cc["ok"])
    check("no event lost or unparsed", True, cap.stats.complete)
    check("classes sum to the total (total window)", total.columns["total"],
          sum(total.classes.values()))
    if expected_transactions is not None:
        check("one bracket per transaction", expected_transactions, n)
    if n > 1 and per_txn:
        overlaps = sum(1 for (s1, e1), (s2, _e2) in zip(brackets, brackets[1:]) if s2 < e1)
        check("transaction brackets do not overlap", 0, overlaps)
    unterminated = sum(1 for c in in_window if not c.terminated)
    check("every sync call has an end", 0, unterminated)
    cross: Optional[Dict[str, Any]] = None
    if device_stat is not None:
        main = per_device.get("main", {"bytes_written": 0, "flushes": 0})
        cross = {"device_stat_write_bytes": device_stat.get("write_bytes"),
                 "trace_write_bytes": main["bytes_written"],
                 "device_stat_flushes": device_stat.get("flushes"),
                 "trace_flushes": main["flushes"]}
        diff = abs((device_stat.get("write_bytes") or 0) - main["bytes_written"])
        check("bytes written: trace = the device's own counter, within one 4 KiB block",
              "|diff| <= 4096", diff, ok=diff <= 4096)

    hist = dict(sorted(total.histogram.items()))
    doc: Dict[str, Any] = {
        "transactions": n,
        "steady_after": steady_after,
        "windows": {
            "total": {"start_s": t0, "end_s": t_end, "duration_s": round(t_end - t0, 6)},
            "timed": {"start_s": t0, "end_s": t_timed, "duration_s": round(t_timed - t0, 6)},
            "transactions": {"count": n, "time_s": round(sum(e - s for s, e in brackets), 6)},
        },
        "columns": {"total": total.columns, "timed": timed.columns,
                    "transactions": in_txn.columns, "between": between.columns},
        "classes": {"total": dict(sorted(total.classes.items())),
                    "transactions": dict(sorted(in_txn.classes.items())),
                    "between": dict(sorted(between.classes.items()))},
        "reads": {"bytes": total.read_bytes, "requests": total.read_requests},
        "outside_window_bytes": outside,
        "devices": per_device,
        "size_histogram": {str(k): v for k, v in hist.items()},
        "summary": summary,
        "per_txn": txn_doc,
        "syncs": {"by_class": dict(sorted(sync_stats.items())), "unterminated": unterminated},
        "unattributed_by_sync": unattributed_by_sync,
        "journal_commits": commit_doc,
        "cross_check": cross,
        "capture": dict(cap.stats.to_dict(), fs_events=len(cap.fs_events),
                        fs_unparsed=cap.fs_unparsed, enabled_events=cap.enabled_events,
                        missing_events=cap.missing_events, buffer_kib_per_cpu=cap.buffer_kib_per_cpu),
        "clock_check": cc,
        "layout": layout.to_dict(),
        "file_watcher": {"poll_ms": session.poll_ms, "snapshots": len(session.watcher.snapshots),
                         "inodes_seen": len(session.watcher.inodes),
                         "online_map": dict(session.online_map_stats)},
        "timeline": {"columns": ["t_ms", "device", "sector", "sectors", "class", "rwbs", "txn"],
                     "rows": timeline_rows, "truncated": len(timeline_rows) >= TIMELINE_LIMIT,
                     "brackets_ms": [[round((s - t0) * 1e3, 4), round((e - t0) * 1e3, 4)]
                                     for s, e in brackets]}
        if timeline else None,
        "checks": checks,
        "ok": all(c["ok"] for c in checks),
    }
    return doc


def _txn_summary(txn: Dict[str, Any], n: int, steady_after: int) -> Dict[str, Any]:
    """First transaction, steady-state mean, all-transaction mean and distribution."""
    keys = COLUMNS + COUNTS
    steady_idx = range(steady_after, n)
    first = {k: txn[k][0] for k in keys}
    steady = {k: sum(txn[k][i] for i in steady_idx) / len(steady_idx) for k in keys}
    mean = {k: sum(txn[k]) / n for k in keys}
    totals = sorted(txn["total"][i] for i in steady_idx)
    dist = {"min": totals[0], "p50": B.percentile(totals, 50), "p90": B.percentile(totals, 90),
            "max": totals[-1]}
    classes_steady = {c: sum(v[i] for i in steady_idx) / len(steady_idx)
                      for c, v in txn["classes"].items()}
    return {"first": first, "steady": steady, "mean": mean, "steady_total_distribution": dist,
            "steady_classes": classes_steady, "steady_transactions": len(steady_idx)}
