"""The names of the classes written sectors are attributed to.

Four are reserved for what is not a named file: the file-system journal,
file-system metadata, other files, and data blocks of no known file. Every
other class is named by the caller after the file it stands for ("db", "wal",
"journal", "shm"...).
"""
from __future__ import annotations

FS_JOURNAL = "fs-journal"


FS_METADATA = "fs-metadata"


OTHER_FILE = "other-file"


UNATTRIBUTED = "unattributed-data"


RESERVED_CLASSES = frozenset({FS_JOURNAL, FS_METADATA, OTHER_FILE, UNATTRIBUTED})


def check_class_name(cls: str) -> None:
    if cls in RESERVED_CLASSES or cls.startswith("fs-"):
        raise ValueError(f"class name {cls!r} is reserved for file-system regions")
