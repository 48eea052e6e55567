"""Benchmark parameters, read back as actually in effect.

This module owns the "what was this result measured under" record that every
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

No function here changes the database or the system: the SQLite side runs
only read-only PRAGMAs and SELECTs, never a checkpoint.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

SCHEMA_VERSION = 1
UNKNOWN = "unknown"
WHY = "_why"

Params = Dict[str, Any]

# Largest WAL file scanned (with checksums) for a newer copy of page 1.
WAL_SCAN_LIMIT = 64 << 20


class Unknown(Exception):
    """Raised by a reader to say "this value is unknown, for this reason"."""


class _Section:
    """Collects one section: values plus a reason for every unknown one."""

    def __init__(self) -> None:
        self.values: Params = {}
        self.why: Dict[str, str] = {}

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value
        self.why.pop(key, None)

    def unknown(self, key: str, why: str) -> None:
        self.values[key] = UNKNOWN
        self.why[key] = why

    def read(self, key: str, reader: Callable[[], Any]) -> Any:
        """Store reader()'s value, or "unknown" with the exception as reason."""
        try:
            value = reader()
        except Unknown as e:
            self.unknown(key, str(e))
            return UNKNOWN
        except Exception as e:  # noqa: BLE001 - any failure means "unknown"
            self.unknown(key, f"{type(e).__name__}: {e}")
            return UNKNOWN
        self.set(key, value)
        return value

    def done(self) -> Params:
        out = dict(self.values)
        out[WHY] = dict(self.why)
        return out


def is_known(value: Any) -> bool:
    return not (isinstance(value, str) and value == UNKNOWN)


# --------------------------------------------------------------------------
# small readers
# --------------------------------------------------------------------------

def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().strip()


def _read_int(path: str) -> int:
    return int(_read_text(path))


def _run(argv: List[str], timeout: float = 20.0) -> str:
    """stdout of a command; Unknown (with stderr) if missing or failing."""
    if shutil.which(argv[0]) is None:
        raise Unknown(f"{argv[0]} not found")
    env = dict(os.environ, LC_ALL="C", LANG="C")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       env=env, check=False)
    if p.returncode != 0:
        lines = [ln.strip() for ln in p.stderr.splitlines() if ln.strip()]
        err = (lines[-1] if lines else "no message")[-300:]
        raise Unknown(f"{' '.join(argv)} exited {p.returncode}: {err}")
    return p.stdout


def _existing(path: "os.PathLike[str] | str") -> str:
    """The path itself, or its nearest existing ancestor (db not yet created)."""
    p = os.path.abspath(os.fspath(path))
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _majmin(dev: int) -> str:
    return f"{os.major(dev)}:{os.minor(dev)}"


# --------------------------------------------------------------------------
# SQLite
# --------------------------------------------------------------------------

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


def _reserve_bytes(conn: Any, schema: str) -> Tuple[int, str]:
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
    s = _Section()
    s.read("sqlite_version", lambda: str(_scalar(conn, "SELECT sqlite_version()")))
    s.read("sqlite_source_id", lambda: str(_scalar(conn, "SELECT sqlite_source_id()")))
    s.read("vfs", lambda: _vfs_name(conn, schema))
    for key, name, qualified, names in _PRAGMAS:
        s.read(key, lambda n=name, q=qualified, m=names: _pragma(conn, schema, n, q, m))
    reserve = s.read("reserve_bytes", lambda: _reserve_bytes(conn, schema))
    if is_known(reserve):
        s.set("reserve_bytes", reserve[0])
        s.set("reserve_bytes_source", reserve[1])
    else:
        s.unknown("reserve_bytes_source", "reserve_bytes is unknown")
    s.read("compile_options", lambda: _compile_options(conn))
    return s.done()


# --------------------------------------------------------------------------
# mount table and file system
# --------------------------------------------------------------------------

def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts(mountinfo: str = "/proc/self/mountinfo") -> List[Params]:
    """Parsed /proc/self/mountinfo, in file order."""
    out = []
    with open(mountinfo, encoding="utf-8", errors="replace") as f:
        for line in f:
            left, _, right = line.rstrip("\n").partition(" - ")
            a, b = left.split(), right.split()
            if len(a) < 6 or len(b) < 3:
                continue
            out.append({
                "major_minor": a[2],
                "mount_point": _unescape(a[4]),
                "mount_options": a[5].split(","),
                "fstype": b[0],
                "source": _unescape(b[1]),
                "super_options": b[2].split(","),
            })
    return out


def mount_of(path: "os.PathLike[str] | str") -> Params:
    """The mountinfo entry of the mount holding `path` (the topmost one)."""
    real = os.path.realpath(_existing(path))
    dev = _majmin(os.stat(real).st_dev)
    best: Optional[Tuple[int, int, int]] = None
    found: Optional[Params] = None
    for i, m in enumerate(mounts()):
        mp = m["mount_point"]
        if not (mp == "/" or real == mp or real.startswith(mp.rstrip("/") + "/")):
            continue
        rank = (len(mp), int(m["major_minor"] == dev), i)
        if best is None or rank > best:
            best, found = rank, m
    if found is None:
        raise Unknown(f"no mount in /proc/self/mountinfo holds {real}")
    return found


def _kernel_name(majmin: str) -> str:
    """Kernel block-device name (vda, loop0, dm-0, sda1) of major:minor."""
    link = f"/sys/dev/block/{majmin}"
    if not os.path.exists(link):
        raise Unknown(f"{link} does not exist (not a block device)")
    return os.path.basename(os.path.realpath(link))


def _block_source(m: Params) -> Optional[str]:
    """major:minor of the mount's block device, or None (tmpfs, nfs, ...)."""
    if not m["major_minor"].startswith("0:") and \
            os.path.exists(f"/sys/dev/block/{m['major_minor']}"):
        return m["major_minor"]
    src = m["source"]
    if src.startswith("/dev/"):
        try:
            st = os.stat(src)
        except OSError:
            return None
        if st.st_rdev:
            return _majmin(st.st_rdev)
    return None


def _options_dict(options: Iterable[str]) -> Dict[str, str]:
    out = {}
    for opt in options:
        k, _, v = opt.partition("=")
        out[k] = v
    return out


def _dumpe2fs(device: str) -> Dict[str, str]:
    text = _run(["dumpe2fs", "-h", device])
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    if "Filesystem features" not in out:
        raise Unknown(f"dumpe2fs -h {device}: no 'Filesystem features' line")
    return out


def _ext4(kname: str, device: str) -> Tuple[Params, str, str]:
    """ext4 details, and (journals, evidence)."""
    s = _Section()
    opts = s.read("effective_options",
                  lambda: _read_text(f"/proc/fs/ext4/{kname}/options").split())
    task = s.read("journal_task",
                  lambda: _read_text(f"/sys/fs/ext4/{kname}/journal_task"))
    try:
        d2 = _dumpe2fs(device)
    except Exception as e:  # noqa: BLE001
        s.unknown("features", str(e) if isinstance(e, Unknown)
                  else f"{type(e).__name__}: {e}")
        for key in ("has_journal", "fast_commit", "block_size",
                    "journal_size", "journal_features", "journal_location",
                    "fast_commit_blocks", "default_mount_options"):
            s.unknown(key, "needs dumpe2fs (see ext4.features)")
    else:
        feats = d2["Filesystem features"].split()
        s.set("features", feats)
        s.set("has_journal", "has_journal" in feats)
        s.set("fast_commit", "fast_commit" in feats)
        s.read("block_size", lambda: int(d2["Block size"]))
        s.set("default_mount_options", d2.get("Default mount options", UNKNOWN))
        if "has_journal" in feats:
            s.read("journal_size", lambda: d2["Total journal size"])
            s.read("journal_features", lambda: d2["Journal features"].split())
            s.set("journal_location",
                  "external" if "Journal device" in d2 or "Journal UUID" in d2
                  else "internal")
            s.read("fast_commit_blocks", lambda: int(d2["Fast commit length"]))
        else:
            for key in ("journal_size", "journal_features", "journal_location",
                        "fast_commit_blocks"):
                s.set(key, "none")
    # journals: the kernel's live view first, the on-disk feature second
    if is_known(task):
        journals = "no" if task == "<none>" else "yes"
        evidence = (f"/sys/fs/ext4/{kname}/journal_task = {task} "
                    f"({'no jbd2 journal loaded' if journals == 'no' else 'jbd2 running'})")
    elif is_known(s.values.get("has_journal", UNKNOWN)):
        hj = s.values["has_journal"]
        noload = is_known(opts) and ("noload" in opts or "norecovery" in opts)
        journals = "yes" if hj and not noload else "no"
        evidence = f"dumpe2fs: has_journal {'present' if hj else 'absent'}" + \
            (" but mounted noload" if hj and noload else "")
    else:
        journals, evidence = UNKNOWN, "neither journal_task nor dumpe2fs readable"
    if is_known(s.values.get("has_journal", UNKNOWN)):
        verb = "include" if s.values["has_journal"] else "lack"
        evidence += f"; dumpe2fs features {verb} has_journal"
    else:
        evidence += f"; dumpe2fs: {s.why.get('features', '')}"
    eff = _options_dict(opts) if is_known(opts) else {}
    if journals == "no":
        s.set("data_mode", "none")
    elif "data" in eff:
        s.set("data_mode", eff["data"])
    else:
        s.unknown("data_mode", "no data= in the effective options")
    for key, opt in (("commit_s", "commit"),):
        if opt in eff:
            s.read(key, lambda o=opt: int(eff[o]))
        else:
            s.unknown(key, f"no {opt}= in the effective options")
    if is_known(opts):
        s.set("barrier", "nobarrier" not in opts)
        s.set("discard", "discard" in opts)
        s.set("dioread_nolock", "dioread_nolock" in opts)
        s.set("journal_checksum", "journal_checksum" in opts)
        s.set("journal_async_commit", "journal_async_commit" in opts)
    else:
        for key in ("barrier", "discard", "dioread_nolock", "journal_checksum",
                    "journal_async_commit"):
            s.unknown(key, "effective options unreadable")
    return s.done(), journals, evidence


def _xfs(mount_point: str) -> Tuple[Params, str, str]:
    s = _Section()
    try:
        text = _run(["xfs_info", mount_point])
    except Exception as e:  # noqa: BLE001
        s.unknown("xfs_info", str(e))
        return s.done(), "yes", f"XFS always logs metadata; xfs_info: {e}"
    info: Dict[str, str] = {}
    section = ""
    for line in text.splitlines():
        head, eq, rest = line.partition("=")
        if not eq:
            continue
        if head.strip():
            section = head.strip()
            m = re.match(r"\s*([^=]*?)\s+(?=\S+=)", rest + " x=")
            location = m.group(1) if m else rest.strip()
            if location and section != "meta-data":
                info[f"{section}.location"] = location
        for k, v in re.findall(r"([\w-]+)=([^\s,]+)", rest):
            info[f"{section}.{k}"] = v
    s.set("xfs_info", info)
    try:
        s.set("log_bytes", int(info["log.bsize"]) * int(info["log.blocks"]))
    except (KeyError, ValueError) as e:
        s.unknown("log_bytes", f"xfs_info has no log bsize/blocks ({e})")
    return s.done(), "yes", (f"XFS always logs metadata; xfs_info log = "
                             f"{info.get('log.location', UNKNOWN)}, "
                             f"{info.get('log.blocks', UNKNOWN)} blocks")


def _btrfs_uuid(kname: str) -> str:
    root = "/sys/fs/btrfs"
    for uuid in sorted(os.listdir(root)):
        if os.path.exists(os.path.join(root, uuid, "devices", kname)):
            return uuid
    raise Unknown(f"no /sys/fs/btrfs/*/devices/{kname}")


def _btrfs(kname: str, options: List[str]) -> Tuple[Params, str, str]:
    s = _Section()
    uuid = s.read("fsid", lambda: _btrfs_uuid(kname))
    base = f"/sys/fs/btrfs/{uuid}"
    for key in ("nodesize", "sectorsize"):
        s.read(key, lambda k=key: _read_int(f"{base}/{k}"))
    s.read("checksum", lambda: _read_text(f"{base}/checksum"))
    s.read("features", lambda: sorted(os.listdir(f"{base}/features")))
    s.read("devices", lambda: sorted(os.listdir(f"{base}/devices")))
    for kind in ("data", "metadata"):
        s.read(f"{kind}_profile", lambda k=kind: sorted(
            d for d in os.listdir(f"{base}/allocation/{k}")
            if os.path.isdir(f"{base}/allocation/{k}/{d}")))
    tree_log = "notreelog" not in options
    s.set("tree_log", tree_log)
    return s.done(), "no", ("btrfs is copy-on-write (no metadata journal); fsync "
                            + ("writes the log tree" if tree_log
                               else "commits a transaction (notreelog)"))


def filesystem_params(path: "os.PathLike[str] | str") -> Params:
    """File system holding `path`: mount, options, features, journal."""
    s = _Section()
    try:
        m = mount_of(path)
    except Exception as e:  # noqa: BLE001
        why = str(e)
        for key in ("mount_point", "source", "fstype", "mount_options",
                    "super_options", "journals", "journal_evidence"):
            s.unknown(key, why)
        return s.done()
    for key in ("mount_point", "source", "fstype", "mount_options", "super_options"):
        s.set(key, m[key])
    mopts, sopts = m["mount_options"], m["super_options"]
    s.set("read_only", "ro" in mopts or "ro" in sopts)
    s.set("atime", next((o for o in ("noatime", "relatime") if o in mopts),
                        "strictatime"))
    s.set("lazytime", "lazytime" in sopts or "lazytime" in mopts)
    s.set("sync", "sync" in sopts or "sync" in mopts)
    try:
        st = os.statvfs(_existing(path))
    except OSError as e:
        for key in ("block_size", "size_bytes", "free_bytes", "used_percent"):
            s.unknown(key, f"statvfs: {e}")
    else:
        s.set("block_size", st.f_bsize)
        s.set("size_bytes", st.f_blocks * st.f_frsize)
        s.set("free_bytes", st.f_bavail * st.f_frsize)
        used = st.f_blocks - st.f_bfree  # as df computes Use%
        s.set("used_percent", round(100.0 * used / (used + st.f_bavail), 1)
              if used + st.f_bavail else 0.0)
    fstype = m["fstype"]
    majmin = _block_source(m)
    kname = None
    if majmin:
        try:
            kname = _kernel_name(majmin)
        except Unknown:
            kname = None
    if fstype in ("ext2", "ext3", "ext4"):
        if kname:
            dev = m["source"] if m["source"].startswith("/dev/") else f"/dev/{kname}"
            detail, journals, evidence = _ext4(kname, dev)
            s.set("ext4", detail)
        else:
            journals, evidence = UNKNOWN, f"no block device found for {m['source']}"
    elif fstype == "xfs":
        detail, journals, evidence = _xfs(m["mount_point"])
        s.set("xfs", detail)
    elif fstype == "btrfs" and kname:
        detail, journals, evidence = _btrfs(kname, sopts + mopts)
        s.set("btrfs", detail)
    elif fstype in ("tmpfs", "ramfs"):
        journals, evidence = "no", f"{fstype} lives in memory"
    else:
        journals, evidence = UNKNOWN, f"no journal detection for {fstype}"
    if journals == UNKNOWN:
        s.unknown("journals", evidence)
    else:
        s.set("journals", journals)
    s.set("journal_evidence", evidence)
    return s.done()


# --------------------------------------------------------------------------
# block devices
# --------------------------------------------------------------------------

_QUEUE_INT = ("rotational", "fua", "logical_block_size", "physical_block_size",
              "nr_requests", "write_zeroes_max_bytes", "discard_max_bytes")


def _scheduler(text: str) -> str:
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip()


def _describe_block(sysdir: str, via: str) -> Tuple[Params, List[Tuple[str, str]]]:
    """One device in the chain, and the (major:minor, via) devices below it."""
    s = _Section()
    name = os.path.basename(sysdir)
    s.set("name", name)
    below: List[Tuple[str, str]] = []
    if os.path.isdir(f"{sysdir}/loop"):
        kind = "loop"
    elif os.path.isdir(f"{sysdir}/dm"):
        kind = "dm"
    elif os.path.isdir(f"{sysdir}/md"):
        kind = "md"
    elif os.path.exists(f"{sysdir}/partition"):
        kind = "partition"
    else:
        kind = "disk"
    s.set("kind", kind)
    s.set("via", via)
    s.read("major_minor", lambda: _read_text(f"{sysdir}/dev"))
    s.read("size_bytes", lambda: _read_int(f"{sysdir}/size") * 512)
    disk = os.path.dirname(sysdir) if kind == "partition" else sysdir
    if kind == "partition":
        s.set("disk", os.path.basename(disk))
        s.read("start_sector", lambda: _read_int(f"{sysdir}/start"))
    if kind in ("disk", "partition"):
        s.read("driver", lambda: _driver(disk))
        for key, files in (("model", ("model",)), ("vendor", ("vendor",)),
                           ("firmware", ("firmware_rev", "rev"))):
            s.read(key, lambda fs=files: _first_file(f"{disk}/device", fs))
    s.read("write_cache", lambda: _read_text(f"{disk}/queue/write_cache"))
    for key in _QUEUE_INT:
        s.read(key, lambda k=key: _read_int(f"{disk}/queue/{k}"))
    s.read("scheduler", lambda: _scheduler(_read_text(f"{disk}/queue/scheduler")))
    if os.path.isdir(f"{disk}/loop"):  # a loop device or a partition of one
        backing = s.read("backing_file", lambda: _read_text(f"{disk}/loop/backing_file"))
        for key in ("dio", "offset", "sizelimit"):
            s.read(key, lambda k=key: _read_int(f"{disk}/loop/{k}"))
        if is_known(backing):
            try:
                st = os.stat(backing)
                below.append((_majmin(st.st_dev), f"holds {name}'s backing file"))
                bm = mount_of(backing)
                s.set("backing_fstype", bm["fstype"])
                s.set("backing_mount_point", bm["mount_point"])
                if os.major(st.st_dev) == 0 and _block_source(bm):
                    below[-1] = (_block_source(bm), below[-1][1])
            except Exception as e:  # noqa: BLE001
                s.unknown("backing_fstype", f"backing file not reachable here: {e}")
    if kind in ("dm", "md"):
        if kind == "dm":
            s.read("dm_name", lambda: _read_text(f"{sysdir}/dm/name"))
        slaves = sorted(os.listdir(f"{sysdir}/slaves")) if \
            os.path.isdir(f"{sysdir}/slaves") else []
        s.set("slaves", slaves)
        for sl in slaves:
            try:
                below.append((_read_text(f"{sysdir}/slaves/{sl}/dev"), f"under {name}"))
            except OSError:
                pass
    return s.done(), below


def _raise(why: str) -> Any:
    raise Unknown(why)


def _driver(disk: str) -> str:
    link = f"{disk}/device/driver"
    if not os.path.exists(link):
        raise Unknown(f"no {link} in sysfs")
    return os.path.basename(os.path.realpath(link))


def _first_file(directory: str, names: Iterable[str]) -> str:
    for n in names:
        p = f"{directory}/{n}"
        if os.path.exists(p):
            value = _read_text(p)
            if value:
                return value
    where = "/".join(directory.split("/")[-2:])
    raise Unknown(f"sysfs has no {where}/{'|'.join(names)}")


def device_params(path: "os.PathLike[str] | str") -> Params:
    """Block-device chain under `path`: loop -> backing file's device -> disk."""
    s = _Section()
    try:
        m = mount_of(path)
        st = os.stat(_existing(path))
    except Exception as e:  # noqa: BLE001
        s.unknown("chain", str(e))
        return s.done()
    start: List[Tuple[str, str]] = []
    if os.major(st.st_dev) != 0 and os.path.exists(f"/sys/dev/block/{_majmin(st.st_dev)}"):
        start.append((_majmin(st.st_dev), "holds the path"))
    else:
        src = _block_source(m)
        if m["fstype"] == "btrfs" and src:
            try:
                uuid = _btrfs_uuid(_kernel_name(src))
                for dev in sorted(os.listdir(f"/sys/fs/btrfs/{uuid}/devices")):
                    start.append((_read_text(f"/sys/fs/btrfs/{uuid}/devices/{dev}/dev"),
                                  "btrfs member device"))
            except Exception:  # noqa: BLE001
                start = [(src, "mount source")]
        elif src:
            start.append((src, "mount source"))
    if not start:
        s.set("stack", f"no block device under {m['fstype']} ({m['source']})")
        s.set("chain", [])
        return s.done()
    chain: List[Params] = []
    seen = set()
    todo = list(start)
    while todo and len(chain) < 16:
        majmin, via = todo.pop(0)
        if majmin in seen:
            continue
        seen.add(majmin)
        link = f"/sys/dev/block/{majmin}"
        if not os.path.exists(link):
            chain.append({"name": UNKNOWN, "major_minor": majmin, "via": via,
                          WHY: {"name": f"{link} does not exist"}})
            continue
        node, below = _describe_block(os.path.realpath(link), via)
        chain.append(node)
        todo.extend(below)
    s.set("stack", " -> ".join(str(n["name"]) for n in chain))
    s.set("chain", chain)
    return s.done()


# --------------------------------------------------------------------------
# host
# --------------------------------------------------------------------------

def _os_release() -> str:
    for p in ("/etc/os-release", "/usr/lib/os-release"):
        if os.path.exists(p):
            fields = dict(line.split("=", 1) for line in _read_text(p).splitlines()
                          if "=" in line)
            if "PRETTY_NAME" in fields:
                return fields["PRETTY_NAME"].strip().strip('"')
    raise Unknown("no PRETTY_NAME in os-release")


def _cpuinfo_field(name: str) -> str:
    for line in _read_text("/proc/cpuinfo").splitlines():
        k, _, v = line.partition(":")
        if k.strip() == name:
            return v.strip()
    raise Unknown(f"no '{name}' in /proc/cpuinfo")


def _meminfo_bytes(name: str) -> int:
    for line in _read_text("/proc/meminfo").splitlines():
        if line.startswith(name + ":"):
            parts = line.split()
            return int(parts[1]) * (1024 if parts[-1] == "kB" else 1)
    raise Unknown(f"no {name} in /proc/meminfo")


def _apsw() -> Any:
    import apsw  # noqa: PLC0415 - optional at import time of this module
    return apsw


def system_params() -> Params:
    """Host facts; no host name, user name or home directory."""
    s = _Section()
    u = os.uname()
    s.set("kernel", f"{u.sysname} {u.release}")
    s.set("kernel_build", u.version)
    s.set("machine", u.machine)
    s.read("os", _os_release)
    s.read("cpu_model", lambda: _cpuinfo_field("model name"))
    s.read("cpu_count", lambda: os.cpu_count() or _raise("os.cpu_count() is None"))
    s.read("cpus_usable", lambda: len(os.sched_getaffinity(0)))
    s.read("cpu_governor", lambda: _read_text(
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
        if os.path.exists("/sys/devices/system/cpu/cpu0/cpufreq") else
        _raise("no cpufreq in sysfs (virtual machine or fixed clock)"))
    s.read("cpu_hypervisor_flag", lambda: "hypervisor" in _cpuinfo_field("flags").split())
    s.read("memory_bytes", lambda: _meminfo_bytes("MemTotal"))
    for key in ("dirty_ratio", "dirty_background_ratio", "dirty_bytes",
                "dirty_background_bytes", "dirty_expire_centisecs",
                "dirty_writeback_centisecs"):
        s.read(f"vm.{key}", lambda k=key: _read_int(f"/proc/sys/vm/{k}"))
    s.set("python", f"{platform.python_implementation()} {platform.python_version()}")
    s.read("apsw_version", lambda: _apsw().apsw_version())
    s.read("apsw_sqlite_lib_version", lambda: _apsw().sqlite_lib_version())
    return s.done()


# --------------------------------------------------------------------------
# all together, and printing
# --------------------------------------------------------------------------

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


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def flatten(section: Any, prefix: str = "") -> List[Tuple[str, str]]:
    """(dotted key, printed value) pairs; unknowns carry their reason."""
    out: List[Tuple[str, str]] = []
    if isinstance(section, dict):
        why = section.get(WHY, {}) if isinstance(section.get(WHY), dict) else {}
        for key, value in section.items():
            if key == WHY:
                continue
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                out.extend(flatten(value, name + "."))
            elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
                for i, v in enumerate(value):
                    out.extend(flatten(v, f"{name}.{i}."))
            elif isinstance(value, list):
                out.append((name, ", ".join(_text(v) for v in value) or "(empty)"))
            elif not is_known(value):
                reason = why.get(key)
                out.append((name, f"{UNKNOWN} ({reason})" if reason else UNKNOWN))
            else:
                out.append((name, _text(value)))
    else:
        out.append((prefix.rstrip(".") or "value", _text(section)))
    return out


def _wrap(text: str, indent: int, width: int) -> str:
    if indent + len(text) <= width or ", " not in text:
        return text
    lines, line = [], ""
    for part in text.split(", "):
        piece = part if not line else line + ", " + part
        if line and indent + len(piece) + 1 > width:
            lines.append(line + ",")
            line = part
        else:
            line = piece
    lines.append(line)
    return ("\n" + " " * indent).join(lines)


_ORDER = ("workload", "sqlite", "filesystem", "device", "system")


def format_params(params: Params, width: int = 100) -> str:
    """Aligned "key: value" lines grouped by section, for a table header."""
    lines: List[str] = []
    scalars = [(k, v) for k, v in params.items() if not isinstance(v, dict)]
    for k, v in scalars:
        lines.append(f"{k}: {_text(v)}")
    names = [k for k in _ORDER if isinstance(params.get(k), dict)]
    names += [k for k, v in params.items() if isinstance(v, dict) and k not in _ORDER]
    for name in names:
        pairs = flatten(params[name])
        lines.append(f"[{name}]")
        if not pairs:
            lines.append("  (none)")
            continue
        keyw = max(len(k) for k, _ in pairs) + 1
        for key, text in pairs:
            lines.append(f"  {key + ':':<{keyw}} {_wrap(text, keyw + 3, width)}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m waldio.params DB_FILE
    _db = sys.argv[1] if len(sys.argv) > 1 else ":memory:"
    _conn = _apsw().Connection(_db)
    _p = all_params(_conn, _db if _db != ":memory:" else os.getcwd())
    print(format_params(_p))
