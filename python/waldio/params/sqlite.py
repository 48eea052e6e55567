"""The SQLite section: settings read back from the connection, as in effect.

Every value comes from a PRAGMA or a SELECT on the connection that ran (never
from what the harness asked for), plus what only the files can tell: the
reserved bytes per page (from the newest page 1, in the WAL if there is one)
and whether the log is waldio's.
"""
from __future__ import annotations

import os
import struct
from typing import Any, Dict, List, Optional, Tuple

from .common import WAL_SCAN_LIMIT, Params, Section, Unknown, is_known

_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


_TEMP_STORE = {0: "DEFAULT", 1: "FILE", 2: "MEMORY"}


_AUTO_VACUUM = {0: "NONE", 1: "FULL", 2: "INCREMENTAL"}


_SECURE_DELETE = {0: "OFF", 1: "ON", 2: "FAST"}


# (key, pragma, schema-qualified?, value names or None for the raw value)
_PRAGMAS: List[Tuple[str, str, bool, Optional[Dict[int, str]]]] = [
    ("journal_mode", "journal_mode", True, None),
    ("synchronous", "synchronous", True, _SYNCHRONOUS),
    ("page_size", "page_size", True, None),
    ("cache_size", "cache_size", True, None),
    ("mmap_size", "mmap_size", True, None),
    ("locking_mode", "locking_mode", True, None),
    ("wal_autocheckpoint", "wal_autocheckpoint", False, None),
    ("journal_size_limit", "journal_size_limit", True, None),
    ("temp_store", "temp_store", False, _TEMP_STORE),
    ("auto_vacuum", "auto_vacuum", True, _AUTO_VACUUM),
    ("secure_delete", "secure_delete", True, _SECURE_DELETE),
    ("cell_size_check", "cell_size_check", False, None),
    ("foreign_keys", "foreign_keys", False, None),
    ("page_count", "page_count", True, None),
    ("freelist_count", "freelist_count", True, None),
]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _rows(conn: Any, sql: str) -> List[tuple]:
    return [tuple(r) for r in conn.execute(sql)]


def _scalar(conn: Any, sql: str) -> Any:
    rows = _rows(conn, sql)
    if not rows or not rows[0]:
        raise Unknown(f"{sql!r} returned no rows")
    return rows[0][0]


def _pragma(conn: Any, schema: str, name: str, qualified: bool,
            names: Optional[Dict[int, str]]) -> Any:
    sql = f"PRAGMA {_ident(schema)}.{name}" if qualified else f"PRAGMA {name}"
    value = _scalar(conn, sql)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise Unknown(f"{sql!r} returned {value!r}")
    if names is None:
        return value
    if not isinstance(value, int) or value not in names:
        raise Unknown(f"{sql!r} returned {value!r}, not one of {sorted(names)}")
    return names[value]


def _compile_options(conn: Any) -> List[str]:
    opts = [str(r[0]) for r in _rows(conn, "PRAGMA compile_options")]
    if not opts:
        raise Unknown("PRAGMA compile_options returned nothing "
                      "(built with SQLITE_OMIT_COMPILEOPTION_DIAGS?)")
    return opts


def _vfs_name(conn: Any, schema: str) -> str:
    get = getattr(conn, "vfsname", None)
    if get is None:
        raise Unknown("connection has no vfsname() (not apsw)")
    name = get(schema)
    if not name:
        raise Unknown(f"vfsname({schema!r}) returned {name!r}")
    return str(name)


def db_filename(conn: Any, schema: str = "main") -> Optional[str]:
    """The file behind `schema` per PRAGMA database_list (None if in memory)."""
    for row in _rows(conn, "PRAGMA database_list"):
        if len(row) >= 3 and row[1] == schema:
            return str(row[2]) if row[2] else None
    raise Unknown(f"schema {schema!r} not in PRAGMA database_list")


def _wal_checksum(data: bytes, big_endian: bool, s1: int, s2: int) -> Tuple[int, int]:
    """SQLite's WAL checksum (walChecksumBytes) continued from (s1, s2)."""
    n = len(data) // 4
    words = struct.unpack(("<", ">")[big_endian] + f"{n}I", data)
    mask = 0xFFFFFFFF
    for i in range(0, n, 2):
        s1 = (s1 + words[i] + s2) & mask
        s2 = (s2 + words[i + 1] + s1) & mask
    return s1, s2


def wal_page1_header(wal_path: str, limit: int = WAL_SCAN_LIMIT) -> Optional[bytes]:
    """First 100 bytes of the newest committed copy of page 1 in a WAL file.

    None when the WAL is absent, empty, invalid or holds no committed page 1
    (then the database file's own page 1 is current).  Frames count only
    while their salts match the WAL header and the checksum chain holds, up
    to the last commit frame: the rule SQLite's WAL recovery uses.
    """
    try:
        size = os.path.getsize(wal_path)
    except FileNotFoundError:
        return None
    if size < 32:
        return None
    with open(wal_path, "rb") as f:
        head = f.read(32)
        magic, _ver, page_size, _seq, salt1, salt2, c1, c2 = struct.unpack(">8I", head)
        if magic not in (0x377F0682, 0x377F0683):
            return None
        big = bool(magic & 1)
        if _wal_checksum(head[:24], big, 0, 0) != (c1, c2):
            return None
        frame = 24 + page_size
        nframes = (size - 32) // frame
        has_page1 = False
        for i in range(nframes):  # cheap pass: frame headers only
            f.seek(32 + i * frame)
            pgno, _, fs1, fs2 = struct.unpack(">4I", f.read(16))
            if (fs1, fs2) != (salt1, salt2):
                break
            if pgno == 1:
                has_page1 = True
                break
        if not has_page1:
            return None
        if size > limit:
            raise Unknown(f"page 1 may be in the {size}-byte WAL; "
                          f"not scanned (limit {limit} bytes)")
        f.seek(32)
        s = (c1, c2)
        latest: Optional[bytes] = None
        committed: Optional[bytes] = None
        for _ in range(nframes):
            fh = f.read(24)
            page = f.read(page_size)
            if len(page) < page_size:
                break
            pgno, commit_size, fs1, fs2, k1, k2 = struct.unpack(">6I", fh)
            if (fs1, fs2) != (salt1, salt2):
                break
            s = _wal_checksum(fh[:8], big, *s)
            s = _wal_checksum(page, big, *s)
            if s != (k1, k2):
                break
            if pgno == 1:
                latest = page[:100]
            if commit_size:
                committed = latest
        return committed


def reserve_bytes(conn: Any, schema: str) -> Tuple[int, str]:
    """(reserved bytes per page, where it was read) from page 1's header."""
    try:
        rows = _rows(conn, f"SELECT data FROM sqlite_dbpage({_literal(schema)}) "
                           "WHERE pgno=1")
    except Exception as e:  # noqa: BLE001 - vtab not compiled in
        dbpage_error = f"sqlite_dbpage: {e}"
    else:
        if not rows or rows[0][0] is None or len(bytes(rows[0][0])) < 100:
            raise Unknown("sqlite_dbpage has no page 1 (empty database)")
        return bytes(rows[0][0])[20], "page 1 via sqlite_dbpage"
    filename = db_filename(conn, schema)
    if not filename:
        raise Unknown(f"{dbpage_error}; and the database has no file")
    with open(filename, "rb") as f:
        header = f.read(100)
    if len(header) < 100:
        raise Unknown(f"{dbpage_error}; and the file has no page 1 yet")
    if not header.startswith(b"SQLite format 3\x00"):
        raise Unknown(f"{dbpage_error}; and the file header is not SQLite's "
                      "(encrypted or not a database)")
    if header[18] == 2 or header[19] == 2:  # WAL mode: page 1 may be newer
        wal = wal_page1_header(filename + "-wal")
        if wal is not None:
            return wal[20], "page 1 in the WAL file"
        reserve = _reserve_from_sqlite(conn, schema) if _is_waldio_log(filename + "-wal") else None
        if reserve is not None:      # page 1 may be in a waldio log: ask SQLite
            return reserve, "SQLITE_FCNTL_RESERVE_BYTES"
    return header[20], "database file header"


def _is_waldio_log(path: str) -> bool:
    """A waldio log has its superblock magic at offset 32 (docs/format.md)."""
    try:
        with open(path, "rb") as f:
            return f.read(40)[32:40] == b"WALDIOSB"
    except OSError:
        return False


def _reserve_from_sqlite(conn: Any, schema: str) -> Optional[int]:
    """SQLite's own answer (RESERVE_BYTES with -1 reads without changing)."""
    import ctypes
    cell = ctypes.c_int(-1)
    try:
        if hasattr(conn, "file_control_int"):          # waldio.drivers
            return int(conn.file_control_int(38, -1, schema))
        conn.file_control(schema, 38, ctypes.addressof(cell))   # apsw
    except Exception:  # noqa: BLE001 - not every connection type has it
        return None
    return cell.value if cell.value >= 0 else None


def sqlite_params(conn: Any, schema: str = "main") -> Params:
    """SQLite settings in effect on `conn` (apsw-like: .execute(sql) -> rows)."""
    s = Section()
    s.read("sqlite_version", lambda: str(_scalar(conn, "SELECT sqlite_version()")))
    s.read("sqlite_source_id", lambda: str(_scalar(conn, "SELECT sqlite_source_id()")))
    s.read("vfs", lambda: _vfs_name(conn, schema))
    for key, name, qualified, names in _PRAGMAS:
        s.read(key, lambda n=name, q=qualified, m=names: _pragma(conn, schema, n, q, m))
    reserve = s.read("reserve_bytes", lambda: reserve_bytes(conn, schema))
    if is_known(reserve):
        s.set("reserve_bytes", reserve[0])
        s.set("reserve_bytes_source", reserve[1])
    else:
        s.unknown("reserve_bytes_source", "reserve_bytes is unknown")
    s.read("compile_options", lambda: _compile_options(conn))
    return s.done()
