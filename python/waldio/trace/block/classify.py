"""Attribution of written sectors to classes: bytes, requests, flushes, FUA.

:func:`classify` splits every request by the :class:`~.layout.Layout` of its
device into per-class bytes and requests (a request is accounted once, at
issue; requeued ones are dropped), counts flushes (never as bytes), FUA
writes, discards and write-zeroes apart, and keeps a request-size histogram.
A written sector outside all known ranges is "fs-metadata" if the request
carries REQ_META, otherwise "unattributed-data".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

from .classes import FS_JOURNAL, FS_METADATA, UNATTRIBUTED
from .layout import Layout
from .requests import SECTOR, BlockRequest, CaptureStats


@dataclass
class ClassTotals:
    """Accounting of one class."""

    bytes_written: int = 0
    write_requests: int = 0
    fua_writes: int = 0
    bytes_read: int = 0
    read_requests: int = 0


@dataclass
class Report:
    """Per-class accounting of one trace (JSON-serializable via ``to_dict``)."""

    classes: dict[str, ClassTotals] = field(default_factory=dict)
    total_bytes_written: int = 0
    write_requests: int = 0
    total_bytes_read: int = 0
    read_requests: int = 0
    flushes: int = 0
    flushes_by_device: dict[str, int] = field(default_factory=dict)
    preflush_writes: int = 0
    fua_writes: int = 0
    discard_bytes: int = 0
    discard_requests: int = 0
    write_zeroes_bytes: int = 0
    write_zeroes_requests: int = 0
    other_requests: int = 0
    size_histogram: dict[int, int] = field(default_factory=dict)  # write size in bytes -> requests
    definitions: list[str] = field(default_factory=list)
    capture: Optional[dict[str, Any]] = None

    def written(self, cls: str) -> int:
        """Bytes written to ``cls`` (0 if the class saw no write)."""
        totals = self.classes.get(cls)
        return totals.bytes_written if totals else 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["classes"] = {k: asdict(v) for k, v in sorted(self.classes.items())}
        data["size_histogram"] = {str(k): v for k, v in sorted(self.size_histogram.items())}
        return data


def _split(req: BlockRequest, layout: Layout) -> dict[str, int]:
    """Sectors of ``req`` per class (gaps: fs-metadata if REQ_META, else unattributed).

    File data is never written with REQ_META, so the pieces of a REQ_META
    request that fall in a file extent (a stale snapshot of a deleted file
    whose block now holds metadata, e.g. an extent-tree block) are metadata.
    """
    start, end = req.sector, req.sector + req.nr_sectors
    fallback = FS_METADATA if req.meta else UNATTRIBUTED
    pieces: dict[str, int] = {}
    cursor = start
    for s, e, cls in layout.lookup(req.device, start, end):
        if req.meta and cls != FS_JOURNAL:
            cls = FS_METADATA
        if s > cursor:
            pieces[fallback] = pieces.get(fallback, 0) + s - cursor
        pieces[cls] = pieces.get(cls, 0) + e - s
        cursor = e
    if cursor < end:
        pieces[fallback] = pieces.get(fallback, 0) + end - cursor
    return pieces


def _account_data(report: Report, req: BlockRequest, layout: Layout) -> None:
    for cls, sectors in _split(req, layout).items():
        totals = report.classes.setdefault(cls, ClassTotals())
        if req.is_write:
            totals.bytes_written += sectors * SECTOR
            totals.write_requests += 1
            totals.fua_writes += req.fua
        else:
            totals.bytes_read += sectors * SECTOR
            totals.read_requests += 1


def _account(report: Report, req: BlockRequest, layout: Layout) -> None:
    if req.is_flush:
        report.flushes += 1
        report.flushes_by_device[req.device] = report.flushes_by_device.get(req.device, 0) + 1
    elif req.is_write:
        report.total_bytes_written += req.nbytes
        report.write_requests += 1
        report.fua_writes += req.fua
        report.preflush_writes += req.preflush
        report.size_histogram[req.nbytes] = report.size_histogram.get(req.nbytes, 0) + 1
        _account_data(report, req, layout)
    elif req.is_read:
        report.total_bytes_read += req.nbytes
        report.read_requests += 1
        _account_data(report, req, layout)
    elif req.op in ("discard", "secure-erase"):
        report.discard_bytes += req.nbytes
        report.discard_requests += 1
    elif req.op == "write-zeroes":
        report.write_zeroes_bytes += req.nbytes
        report.write_zeroes_requests += 1
    else:
        report.other_requests += 1


def classify(
    requests: Iterable[BlockRequest], layout: Layout, capture: Optional[CaptureStats] = None
) -> Report:
    """Attribute every request by device and sector range (see module docstring).

    A request spanning several classes adds its sectors to each and counts as
    one request in each; the totals count it once.  Requests on devices that
    are not in the layout are ignored.
    """
    report = Report(definitions=list(layout.notes), capture=capture.to_dict() if capture else None)
    for req in requests:
        if req.device in layout.devices and not req.requeued:
            _account(report, req, layout)
    return report
