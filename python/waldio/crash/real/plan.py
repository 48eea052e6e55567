"""What `waldio crash --real` runs: one table entry per (mode, workload).

A mode is a name of :mod:`..modes` (its durability contract included), maybe
with ``+KEY=VALUE`` waldio URI options; a workload one of :mod:`..workload`
(the multi-process ones are recorded by :mod:`..procs`, every process
appending to one event log and marking the block log). A *control* is a mode
that is expected to lose acknowledged commits: its losses are counted and
reported, and they never fail a campaign; the campaign fails if a control
never loses (the method would be blind).

The two-process group-durable run is one row like the others: the workload
runner (``..procs``) starts the processes, each marks its own commits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

from ..modes import get_mode, mode_runs_workload
from ..workload import WORKLOADS


@dataclass(frozen=True)
class RealRun:
    mode: str
    workload: str
    control: bool = False      # expected to lose acknowledged commits
    image_mb: int = 32         # the ext4 image (journal: 4 MiB of it)
    pace_ms: float = 0         # a pause of 0..pace_ms after each commit (single writer)

    @property
    def name(self) -> str:
        return "%s/%s" % (self.mode, self.workload)


RUNS: List[RealRun] = [
    RealRun("waldio-full", "mixed"),
    # A fresh log pinned by a reader: the runway doubles from 256 KiB up to
    # the preallocation (1 MiB here, so that the log outgrows it), then a
    # TRUNCATE checkpoint gives back what lies beyond the preallocation.
    RealRun("waldio-full+prealloc=1M", "growth", image_mb=48),
    RealRun("waldio-persistent", "mixed"),
    RealRun("waldio-group-durable", "mixed"),
    # The default flush bound, 100 ms (the model's campaigns use 10 ms).
    RealRun("waldio-normal+flush_ms=100", "mixed"),
    # The same with SQLite's default wal_autocheckpoint (1000 pages) and
    # commits paced 0-20 ms apart: the flusher, not the checkpoints, makes
    # the commits durable; the loss ages measure its bound (issue 20).
    RealRun("waldio-normal+flush_ms=100+autocheckpoint=1000", "bank", pace_ms=20),
    # A live standard WAL, converted by waldio's first open (rename).
    RealRun("waldio-from-stock", "mixed"),
    RealRun("waldio-full", "two-procs"),
    # Two processes sharing group commit (one flush for the commits of both).
    RealRun("waldio-group-durable", "two-procs"),
    # Stock SQLite in the mix (the standard layout): a stock writer, and a
    # stock process's checkpoints of every kind and read transactions.
    RealRun("waldio-full", "stock-writer"),
    RealRun("waldio-group-durable", "stock-ckpt"),
    RealRun("wal-full", "mixed"),
    RealRun("wal-full", "growth", image_mb=48),
    RealRun("wal-normal", "mixed", control=True),
    RealRun("wal-off", "mixed", control=True),
]


def select(modes: Sequence[str] = (), workloads: Sequence[str] = ()) -> List[RealRun]:
    """The table's rows for these modes and workloads (empty: all). A mode or
    workload the table does not name runs as a new row where the model's
    campaigns would run it (mode_runs_workload)."""
    runs = [r for r in RUNS if (not modes or r.mode in modes)
            and (not workloads or r.workload in workloads)]
    for m in modes:
        mode = get_mode(m)                        # KeyError: unknown mode
        if mode.lsmvbt or "committed" in (mode.kill_contract, mode.os_contract,
                                          mode.power_contract):
            raise KeyError("mode %r is not checked on the real kernel (LS-MVBT, or a contract "
                           "read from the log's commit frames): use the model's campaign" % m)
        for w in workloads or ("mixed",):
            if w not in WORKLOADS:
                raise KeyError("unknown workload %r (expected one of %s)"
                               % (w, ", ".join(WORKLOADS)))
            if any(r.mode == m and r.workload == w for r in runs) \
                    or not mode_runs_workload(m, w):
                continue
            runs.append(RealRun(m, w, control=get_mode(m).testonly,
                                image_mb=48 if w == "growth" else 32))
    return runs
