"""Block-request capture on loop devices and attribution of written sectors.

Owns three things, one module each (plus :mod:`.requests`, the parsing of
block-request events, and :mod:`.extents`, FIEMAP):

1. **Capture** (:class:`BlockTrace`): a private tracefs instance
   (``/sys/kernel/tracing/instances/waldio-bt-<pid>-<n>``) with
   ``block:block_rq_issue``, ``block:block_rq_complete`` and
   ``block:block_rq_requeue`` enabled and filtered to the traced devices'
   ``dev_t``.  A reader thread drains ``trace_pipe`` while the workload runs,
   so the ring buffer only has to absorb bursts.  ``block_rq_insert`` is not
   used: its only extra information is the submitting task, and waldio never
   classifies by task.
2. **Layout** (:func:`describe_layout`, :class:`Layout`): which sector ranges
   of which device belong to the file-system journal, to static file-system
   metadata, to the files the caller names (by class, e.g. "wal", "db"), to
   other files, and to directories.
3. **Classification** (:func:`classify`, :class:`Report`): per class bytes
   and requests, flushes, FUA writes and a request-size histogram.

Invariants:

* Attribution is by (device, sector range) only, never by process name:
  journal commits and flushes are issued by kernel threads.
* A request is accounted once, at issue.  A request that was requeued is
  dropped from the accounting (it is issued again and counted then).
* Flush requests (``REQ_OP_FLUSH``, rwbs ``FF``/``F``) carry no data: they
  count as flushes, never as bytes.  Discard and write-zeroes requests are
  counted apart from written bytes.
* Sectors are 512-byte units relative to the traced device (a loop device has
  no partition offset).
* Priority when ranges overlap: fs-journal > static fs-metadata > named file
  extents (the most recent snapshot first) > other files > directory blocks.
  A written sector outside all known ranges is "fs-metadata" if the request
  carries REQ_META (``M``), otherwise "unattributed-data".  A REQ_META
  request is never file data: outside the journal it is always "fs-metadata".
* The trace instance is removed on every exit path; nothing is synced or
  dropped implicitly: the caller syncs before leaving the trace context.
"""
from __future__ import annotations

from .classes import FS_JOURNAL, FS_METADATA, OTHER_FILE, UNATTRIBUTED
from .classify import ClassTotals, Report, classify
from .extents import FileExtent, FileSnapshot, SnapshotPoller, fiemap, snapshot_file
from .layout import Layout, Region, describe_layout
from .requests import BlockRequest, CaptureStats, Rwbs, devno_of, parse_rwbs
from .tracefs import (
    BlockTrace,
    leftover_trace_instances,
    release_trace_leftovers,
    trace_unavailable_reason,
    tracefs_root,
)

__all__ = [
    "FS_JOURNAL",
    "FS_METADATA",
    "OTHER_FILE",
    "UNATTRIBUTED",
    "BlockRequest",
    "BlockTrace",
    "CaptureStats",
    "ClassTotals",
    "FileExtent",
    "FileSnapshot",
    "Layout",
    "Region",
    "Report",
    "Rwbs",
    "SnapshotPoller",
    "classify",
    "describe_layout",
    "devno_of",
    "fiemap",
    "leftover_trace_instances",
    "parse_rwbs",
    "release_trace_leftovers",
    "snapshot_file",
    "trace_unavailable_reason",
    "tracefs_root",
]
