"""waldio crash: crash-consistency checking of every journal mode.

The pieces (docs/crash.md has the model in full):

* **Recording.** A workload runs in a child process with the crash recorder
  (``recorder.so``, built from crash/recorder.c) loaded below waldio: every write (buffered,
  direct, FUA), sync, truncate, create, rename and delete of the database,
  its journal and its log is logged with its bytes, in completion order,
  together with an ``ack`` mark after each acknowledged transaction. The
  multi-process workloads (:mod:`.procs`: two writer processes, a writer and a
  checkpointing process, fork) append every process's events to the same
  log (one O_APPEND write per event: the file order is the global order), and
  each mark names its writer and the transaction's place in the commit order.
* **Crash states.** :class:`Recording` replays the log into file images with
  two cache layers: a page cache per file (buffered writes, made durable by
  that file's fsync/fdatasync) and one volatile device write cache shared by
  all files (direct writes; any flush makes everything in it durable; an
  RWF_DSYNC write is durable by itself). Crash models: process kill (every
  completed call survives), OS crash (the device cache survives, unsynced
  page-cache data may be lost), power loss (only durable data, plus any
  subset of the volatile writes, survives; the write in flight may tear at
  512-byte sectors).
* **Oracle.** Each state is materialized in a directory and opened (through
  waldio for waldio modes, through stock SQLite's unix VFS for stock modes).
  It must pass ``PRAGMA integrity_check``, equal the database after exactly
  the first k acknowledged transactions (a prefix, no holes), and k must
  cover every transaction the mode's contract makes durable at that point.
* **Reproducers.** Every state has an id; ``waldio crash --replay ID``
  rebuilds exactly that state from the saved recording and re-checks it.

Also here: real process kills (SIGKILL), corruption of the physical log
(bit flips, zeroed blocks, stale frames, truncation), fault injection
(EIO/ENOSPC through the recorder) and the fuzz-target runner.

The package, one concern per module: :mod:`.modes` (modes and their
contracts), :mod:`.workload` (transactions and reference digests),
:mod:`.database` (opening and running), :mod:`.recorder` (recording in a
child process), :mod:`.procs` (the processes of the multi-process workloads), :mod:`.events` (the event log), :mod:`.states` (crash states),
:mod:`.oracle` (checking a state), :mod:`.campaign` (record, check, replay),
:mod:`.lsmvbt` (the LS-MVBT modes' schema: one lsmvbt table under three views),
:mod:`.kills` (one writer), :mod:`.proc_kills` (one of several), :mod:`.corruption`, :mod:`.faults`, :mod:`.fuzz`;
:mod:`.cli` is ``waldio crash``, ``__main__`` the child processes' entry.
"""
from __future__ import annotations

from .campaign import CampaignResult, StateResult, check_states, replay, run_campaign
from .corruption import CORRUPTIONS, run_corruptions
from .database import fuzz_binary_path, open_db, recorder_path, state_dir_base
from .events import (
    CR,
    DEV,
    FUA,
    HDR,
    PAGE,
    REC_DIRSYNC,
    REC_MAGIC,
    REC_FORK,
    REC_MARK,
    REC_OPEN,
    REC_SYNC_BEGIN,
    REC_SYNC_END,
    REC_WRITE,
    Event,
    Mark,
    StateKey,
    W,
    commit_order,
    parse_events,
    parse_mark,
)
from .faults import FAULT_CASES, fault_skip, run_fault
from .fuzz import run_fuzz
from .kills import run_kills
from .proc_kills import run_proc_kills
from .modes import (
    ALL_MODES,
    DEFAULT_MODES,
    LAYOUTS,
    LSMVBT_MODES,
    MODELS,
    MODES,
    Mode,
    get_mode,
    mode_runs_workload,
)
from .oracle import Outcome, check_files, verdict
from .recorder import RecordingError, record
from .states import Image, Recording
from .workload import (
    MULTI_WORKLOADS,
    SINGLE_WORKLOADS,
    WORKLOADS,
    digest,
    make_steps,
    reference_digests,
)

__all__ = [
    "CampaignResult", "StateResult", "check_states", "replay", "run_campaign", "CORRUPTIONS",
    "run_corruptions", "fuzz_binary_path", "open_db", "recorder_path", "state_dir_base", "CR",
    "DEV", "FUA", "HDR", "PAGE", "REC_DIRSYNC", "REC_FORK", "REC_MAGIC", "REC_MARK", "REC_OPEN",
    "REC_SYNC_BEGIN", "REC_SYNC_END", "REC_WRITE", "W", "Event", "Mark", "StateKey",
    "commit_order", "parse_events", "parse_mark",
    "FAULT_CASES", "fault_skip", "run_fault", "run_fuzz", "run_kills", "run_proc_kills", "DEFAULT_MODES", "LAYOUTS",
    "ALL_MODES", "LSMVBT_MODES",
    "MODELS", "MODES", "Mode", "get_mode", "mode_runs_workload", "Outcome", "check_files", "verdict", "RecordingError",
    "record", "Image", "Recording", "MULTI_WORKLOADS", "SINGLE_WORKLOADS", "WORKLOADS", "digest",
    "make_steps", "reference_digests",
]
