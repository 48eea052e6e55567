"""``waldio trace``: block-level I/O attribution of SQLite workloads.

What it does (docs/trace.md is the user-facing description):

1. **Capture** (:class:`Capture`): one private tracefs instance per traced
   repetition that records, besides :class:`waldio.trace.block.BlockTrace`'s
   block requests (``block_rq_issue/complete/requeue``, flush and FUA flags),
   the file-system *sync events*: which inode an ``fsync``/``fdatasync`` (or an
   O_DSYNC write) synced, when it started and when it returned.  On ext4:
   ``ext4_sync_file_enter/exit`` plus ``jbd2_start/end_commit`` and
   ``ext4_fc_commit_start``; on xfs ``xfs_file_fsync``/``xfs_dir_fsync``, on
   btrfs ``btrfs_sync_file``, each closed by the ``sys_exit_*`` of the same
   thread (``fsync``, ``fdatasync``, ``pwritev2``).
2. **File extents** (:class:`FileWatcher`): FIEMAP snapshots of the database's
   files (db, -wal, -journal, -shm) taken by a polling thread and at every
   open and close of a connection, so files deleted during the run (rollback
   journals, the stock WAL at close) stay attributable; plus the inode
   numbers of those files (``stat``), to tell which file a sync event synced.
3. **Brackets**: the start and end of every SQLite transaction on
   ``CLOCK_MONOTONIC``, the clock the capture uses (``trace_clock=mono``;
   checked on every capture with a marker), and the windows of a run.
4. **Analysis** (:func:`analyze_session`): every request is classified
   by device and sector range with :func:`waldio.trace.block.classify` (never
   by process name), and assigned to the transaction whose bracket holds its
   issue time and to the sync call in progress at that time.  Output: bytes,
   requests, flushes and FUA writes per class, per window and per
   transaction; JOJ bytes; a timeline.
5. **Workloads** (:class:`TracedBench`): ``waldio bench``'s own engine
   (:class:`waldio.bench.Bench`) runs the workload; this module only wraps its
   connection opener (to bracket transactions) and its repetition (to trace
   it).  Measured repetitions alternate traced / untraced, so the trace
   overhead is measured in the same run.

Definitions (also printed with every result and written into the JSON):

* ``data`` = bytes written to file data (db, wal, journal, shm, other files,
  and ``unattributed-data``: data blocks of no known file);
* ``journal`` = bytes written to the file-system journal: the ext4 journal
  (internal inode or external device, fast-commit area included), the xfs
  log; on btrfs, which has no journal region, metadata written *inside a sync
  call* (the fsync log tree and the superblocks it updates);
* ``metadata`` = file-system metadata written in place (all other REQ_META or
  static-metadata writes);
* ``total`` = data + journal + metadata = every byte written;
* **JOJ** = journal bytes written while an ``fsync``/``fdatasync`` of SQLite's
  own journal (the ``-wal`` or the ``-journal``) or of their directory was in
  progress (on ext4, a journal write inside a jbd2 commit belongs to the sync
  call during which that commit *started*; a commit that started outside any
  sync call is background and never JOJ).

Invariants:

* Every loop device, mount and tracefs instance is released on every exit
  path (:mod:`waldio.fs` and ``BlockTrace.__exit__``); the polling
  thread is stopped before the capture ends.
* The sum of the classes of a window equals its total bytes written, and the
  sum over transactions plus the bytes between transactions equals the window
  (checked on every analysis).
* Nothing here times anything: ops/s come from ``waldio bench``'s own clock.

Modules: :mod:`.block` (block requests: capture, layout, classification),
:mod:`.model` (classes, columns, definitions), :mod:`.fsevents` (sync calls and
journal commits), :mod:`.capture` (one traced repetition), :mod:`.analysis`,
:mod:`.workload` (bench's engine, traced), :mod:`.summary` (the document),
:mod:`.cli` (``waldio trace``).
"""
from __future__ import annotations

from .analysis import analyze, analyze_session
from .capture import Capture, FileWatcher, TraceSession
from .fsevents import FsEvent, SyncCall, parse_fs_line, sync_calls
from .model import (
    BACKGROUND,
    COLUMNS,
    DEFINITIONS,
    JOJ_SYNC_CLASSES,
    TraceError,
    sqlite_files,
    unavailable_reason,
)
from .summary import finish_document, mode_summary
from .workload import LoopFs, TracedBench, TraceOptions

__all__ = [
    "BACKGROUND", "FsEvent", "COLUMNS", "DEFINITIONS", "JOJ_SYNC_CLASSES", "Capture", "FileWatcher", "LoopFs", "SyncCall",
    "TraceError", "TraceOptions", "TraceSession", "TracedBench", "analyze", "analyze_session",
    "finish_document",
    "mode_summary", "parse_fs_line", "sqlite_files", "sync_calls", "unavailable_reason",
]
