"""Benchmark parameters, read back as actually in effect.

This package owns the "what was this result measured under" record that every
waldio benchmark prints and stores next to its numbers: the SQLite settings
(read back from the connection, never taken from what the harness asked for),
the file system (mount table, mkfs-time features, journal), the block-device
stack under the database file (loop -> backing file -> disk, write cache, FUA)
and the host.  The checklist it follows is section 9 of
shared/research/bench-anchors.md; the reason is Purohith et al. (APSys'17):
unreported SQLite settings swing results by up to 28x.

Conventions (every section is a plain JSON-serialisable dict):

* a value is either the real value or the string ``"unknown"``;
* each section has a ``"_why"`` dict mapping every unknown key to the reason
  (an empty dict when everything was read);
* nothing is guessed: a value that cannot be read is "unknown", and a value
  derived from other facts (e.g. ``journals``) says what it was derived from.

No function in it changes the database or the system: the SQLite side runs
only read-only PRAGMAs and SELECTs, never a checkpoint.

Modules, one section each: :mod:`.sqlite`, :mod:`.filesystem`, :mod:`.device`,
:mod:`.system`; :mod:`.common` holds the section record and the readers they
share, :mod:`.text` prints a record for people. :func:`all_params` gathers
every section.  ``python -m waldio.params DB_FILE`` prints them for a database.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional

from .common import (
    SCHEMA_VERSION,
    UNKNOWN,
    WHY,
    Params,
    Section,
    Unknown,
    is_known,
    read_int,
    read_text,
)
from .device import device_params
from .filesystem import btrfs_uuid, filesystem_params, mount_of, mounts
from .sqlite import db_filename, reserve_bytes, sqlite_params, wal_page1_header
from .system import system_params
from .text import flatten, format_params, format_value

__all__ = ["SCHEMA_VERSION", "UNKNOWN", "WHY", "Params", "Section", "Unknown", "is_known",
           "read_int", "read_text", "device_params", "btrfs_uuid", "filesystem_params",
           "mount_of", "mounts", "db_filename", "reserve_bytes", "sqlite_params",
           "wal_page1_header", "system_params", "flatten", "format_params", "format_value",
           "all_params"]


def all_params(conn: Any, path: "os.PathLike[str] | str | None" = None,
               extra: Optional[Params] = None) -> Params:
    """Every section in one dict; `path` defaults to conn's main database file.

    `extra` holds the caller's workload settings and must be JSON-serialisable.
    """
    if path is None:
        path = db_filename(conn)
        if path is None:
            raise ValueError("path is required: the connection has no database file")
    workload = dict(extra or {})
    json.dumps(workload)  # TypeError early, not when the result is saved
    workload.setdefault(WHY, {})
    return {
        "schema_version": SCHEMA_VERSION,
        "workload": workload,
        "sqlite": sqlite_params(conn),
        "filesystem": filesystem_params(path),
        "device": device_params(path),
        "system": system_params(),
    }
