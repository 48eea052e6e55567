"""The vocabulary of a trace: file classes, columns, definitions, errors.

The classes of SQLite's own files (db, wal, journal, shm, and the directory;
lsmvbt: an LS-MVBT virtual table's file),
the columns every table and JSON document reports (data, journal, JOJ,
metadata, total) with their definitions (printed with every result), and
where tracing cannot run here (:func:`unavailable_reason`).
"""
from __future__ import annotations

import glob
import time
from typing import Dict, List, Optional

from waldio.trace import block as bt

SCHEMA_VERSION = 1


# Class names of SQLite's files (blocktrace: named file classes).
DB, WAL, JOURNAL, SHM, DIRECTORY = "db", "wal", "journal", "shm", "directory"


LSMVBT = "lsmvbt"                   # an LS-MVBT table's file (the table's own database)


SQLITE_CLASSES = (DB, WAL, JOURNAL, SHM)


# Syncs whose journal writes are JOJ: SQLite's own journal and its directory
# (SQLite fsyncs the directory only after creating a journal or a WAL).
JOJ_SYNC_CLASSES = (WAL, JOURNAL, DIRECTORY)


UNIDENTIFIED = "unidentified"


BACKGROUND = "none"                 # no sync call in progress


COLUMNS = ("data", "journal", "joj", "metadata", "total")


COUNTS = ("requests", "flushes", "fua_writes", "preflush_writes")


TIMELINE_LIMIT = 50_000             # rows kept per traced repetition


DEFINITIONS = {
    "data": "bytes written to file data: db, wal, journal, shm, other files and "
            "unattributed-data (data blocks of no known file)",
    "journal": "bytes written to the file-system journal: the ext4 journal (journal inode or "
               "external device, fast-commit area included) or the xfs log; btrfs has no journal "
               "region: there it is metadata written inside a sync call (fsync log tree and the "
               "superblocks it updates)",
    "metadata": "file-system metadata written in place (static metadata ranges and every other "
                "REQ_META write outside the journal)",
    "total": "data + journal + metadata: every byte written to the traced devices",
    "joj": "journal bytes written while an fsync/fdatasync of SQLite's own journal (-wal or "
           "-journal) or of their directory was in progress; on ext4 a journal write inside a "
           "jbd2 commit belongs to the sync call during which that commit started, and a commit "
           "that started outside every sync call is background, never JOJ",
    "transaction window": "from just before a transaction's first statement (BEGIN, or the "
                          "autocommit statement; the open in the open-close regime) to just after "
                          "its COMMIT returned, on CLOCK_MONOTONIC; a request belongs to it when "
                          "it was issued to the driver inside it",
    "total window": "from the start of the timed region (first transaction, or the timed open) "
                    "to the first open of the correctness check, i.e. after the untimed close and "
                    "waldio bench's final os.sync(): deferred write-back and the checkpoint at "
                    "close are included",
    "first transaction": "transaction 0 of a repetition: the first insert into the fresh copy of "
                         "the template database (empty table), right after the connection was "
                         "opened (the stock WAL file already exists then: SQLite creates it at "
                         "open)",
    "steady state": "the mean over transactions steady_after..N-1 of a repetition (the first "
                    "steady_after transactions are its warm-up)",
}


class TraceError(Exception):
    """Tracing cannot run or cannot be trusted; the message says why."""


def mono() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def unavailable_reason(kind: str = "ext4") -> Optional[str]:
    """None if ``kind`` can be traced here, else why not (for pytest.skip and the CLI)."""
    from waldio import fs as fsimage
    return fsimage.unavailable_reason(kind) or bt.trace_unavailable_reason()


def sqlite_files(db: str) -> Dict[str, List[str]]:
    """The files SQLite and libwaldio keep next to database ``db``, by class
    (``lsmvbt``: the LS-MVBT tables' files that exist now, lsmvbt/DESIGN.md §7)."""
    return {DB: [db], WAL: [db + "-wal"], JOURNAL: [db + "-journal"],
            SHM: [db + "-shm", db + "-wal-shm"],
            LSMVBT: sorted(glob.glob(glob.escape(db) + "-*.lsmvbt"))}
