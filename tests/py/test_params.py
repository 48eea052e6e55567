"""Tests for waldio.params: every reported value is what is really in effect.

Expected values come from an independent source each time (the PRAGMA itself,
the database file's bytes, dumpe2fs, sysfs, findmnt), never from params.py.
File-system tests on loop devices need root and loop support; they skip
otherwise.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

apsw = pytest.importorskip("apsw")
from waldio import params as P  # noqa: E402

SQLITE_FCNTL_RESERVE_BYTES = 38


# ---------------------------------------------------------------- helpers

def set_reserve(conn, n: int) -> int:
    """Request n reserve bytes; returns the previously requested value."""
    v = ctypes.c_int(n)
    assert conn.file_control("main", SQLITE_FCNTL_RESERVE_BYTES, ctypes.addressof(v))
    return v.value


def pragma(conn, sql: str):
    return list(conn.execute(sql))[0][0]


def header_byte(path: Path, offset: int) -> int:
    return path.read_bytes()[offset]


def section_lines(text: str, section: str) -> list[str]:
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("["):
            inside = line == f"[{section}]"
        elif inside:
            out.append(line)
    return out


def printed(text: str, section: str, key: str) -> str:
    """The value printed for `key` in `section` (continuation lines joined)."""
    lines = section_lines(text, section)
    for i, line in enumerate(lines):
        m = re.match(rf"^  {re.escape(key)}:\s+(.*)$", line)
        if m:
            value = m.group(1)
            for more in lines[i + 1:]:
                if re.match(r"^  \S", more):
                    break
                value += " " + more.strip()
            return value
    raise AssertionError(f"{section}.{key} not printed:\n{text}")


def leaf_keys(d, prefix=""):
    """Dotted keys of every leaf, written independently of params.flatten."""
    for k, v in d.items():
        if k == "_why":
            continue
        if isinstance(v, dict):
            yield from leaf_keys(v, f"{prefix}{k}.")
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                yield from leaf_keys(x, f"{prefix}{k}.{i}.")
        else:
            yield f"{prefix}{k}"


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, check=False,
                          env=dict(os.environ, LC_ALL="C"))


def dumpe2fs(device: str):
    """{'key': 'value'} from dumpe2fs -h, or None if it cannot read the device."""
    if shutil.which("dumpe2fs") is None:
        return None
    p = run(["dumpe2fs", "-h", device])
    if p.returncode != 0:
        return None
    return {k.strip(): v.strip() for k, _, v in
            (line.partition(":") for line in p.stdout.splitlines()) if _}


@pytest.fixture
def wal_db(tmp_path):
    path = tmp_path / "bench.db"
    conn = apsw.Connection(str(path), vfs="unix")
    conn.execute("PRAGMA page_size=8192")
    set_reserve(conn, 24)
    assert pragma(conn, "PRAGMA journal_mode=WAL") == "wal"
    # one statement per execute, rows consumed: apsw runs the statements after
    # one that returns rows only when iterated (silently unapplied settings
    # are exactly what read-back exists to catch)
    for sql in ("PRAGMA synchronous=NORMAL", "PRAGMA cache_size=-4000",
                "PRAGMA wal_autocheckpoint=500", "PRAGMA journal_size_limit=1048576",
                "PRAGMA mmap_size=1048576", "PRAGMA temp_store=MEMORY",
                "PRAGMA foreign_keys=ON"):
        list(conn.execute(sql))
    conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
    with conn:
        for i in range(50):
            conn.execute("INSERT INTO t(v) VALUES (randomblob(3072))")
    yield conn, path
    conn.close()


# ---------------------------------------------------------------- SQLite

def test_sqlite_settings_read_back_and_printed(wal_db):
    conn, path = wal_db
    sq = P.sqlite_params(conn)
    assert sq["_why"] == {}, sq["_why"]
    expected = {
        "journal_mode": "wal",
        "synchronous": "NORMAL",
        "page_size": 8192,
        "cache_size": -4000,
        "wal_autocheckpoint": 500,
        "journal_size_limit": 1048576,
        "mmap_size": 1048576,
        "temp_store": "MEMORY",
        "foreign_keys": 1,
        "locking_mode": "normal",
        "reserve_bytes": 24,
    }
    for key, value in expected.items():
        assert sq[key] == value, key
    # ... and equal to what SQLite itself says, read here without params.py
    assert sq["journal_mode"] == pragma(conn, "PRAGMA journal_mode")
    assert pragma(conn, "PRAGMA synchronous") == 1
    for key in ("page_size", "cache_size", "wal_autocheckpoint", "journal_size_limit",
                "mmap_size", "page_count", "freelist_count", "foreign_keys"):
        assert sq[key] == pragma(conn, f"PRAGMA {key}"), key
    assert sq["sqlite_version"] == apsw.sqlite_lib_version()
    assert sq["sqlite_source_id"] == pragma(conn, "SELECT sqlite_source_id()")
    assert sq["compile_options"] == [r[0] for r in conn.execute("PRAGMA compile_options")]
    assert sq["vfs"] == conn.vfsname("main")
    # reserve bytes: byte 20 of the header, after everything reached the file
    list(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
    assert header_byte(path, 20) == 24 and sq["reserve_bytes"] == 24
    assert header_byte(path, 16) * 256 + header_byte(path, 17) == 8192

    text = P.format_params({"sqlite": sq})
    for key, value in expected.items():
        assert printed(text, "sqlite", key) == str(value), key
    for opt in sq["compile_options"]:
        assert opt in printed(text, "sqlite", "compile_options")


def test_reserve_bytes_page1_in_wal_beats_stale_file_header(wal_db):
    conn, path = wal_db
    list(conn.execute("PRAGMA wal_autocheckpoint=0"))
    list(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
    set_reserve(conn, 32)
    conn.execute("VACUUM")  # new page 1 goes to the WAL only
    assert header_byte(path, 20) == 24, "file header should be stale here"
    sq = P.sqlite_params(conn)
    assert sq["reserve_bytes"] == 32
    assert sq["reserve_bytes_source"] == "page 1 in the WAL file"

    # the WAL reader honours checksums: a torn page-1 frame is not used
    wal = Path(str(path) + "-wal")
    copy = path.parent / "copy-wal"
    copy.write_bytes(wal.read_bytes())
    assert P.wal_page1_header(str(copy))[20] == 32
    data = bytearray(copy.read_bytes())
    frame = 24 + 8192
    for i in range((len(data) - 32) // frame):
        if int.from_bytes(data[32 + i * frame:36 + i * frame], "big") == 1:
            data[32 + i * frame + 24 + 50] ^= 0xFF
    copy.write_bytes(bytes(data))
    assert P.wal_page1_header(str(copy)) is None

    list(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
    assert header_byte(path, 20) == 32
    sq = P.sqlite_params(conn)
    assert (sq["reserve_bytes"], sq["reserve_bytes_source"]) == (32, "database file header")


class DbpageConn:
    """Wraps a connection and answers sqlite_dbpage as if the vtab existed."""

    def __init__(self, conn, page1: bytes):
        self.conn, self.page1 = conn, page1

    def execute(self, sql):
        if "sqlite_dbpage" in sql:
            return iter([(self.page1,)])
        return self.conn.execute(sql)


def test_reserve_bytes_prefers_sqlite_dbpage(wal_db):
    conn, path = wal_db
    page1 = bytearray(path.read_bytes()[:8192])
    page1[20] = 40
    sq = P.sqlite_params(DbpageConn(conn, bytes(page1)))
    assert (sq["reserve_bytes"], sq["reserve_bytes_source"]) == (40, "page 1 via sqlite_dbpage")


class RaisingConn:
    def execute(self, sql):
        raise RuntimeError(f"refused: {sql}")

    def vfsname(self, name):
        raise RuntimeError("no vfs")


SQLITE_KEYS = ["sqlite_version", "sqlite_source_id", "vfs", "compile_options",
               "journal_mode", "synchronous", "page_size", "cache_size", "mmap_size",
               "locking_mode", "wal_autocheckpoint", "journal_size_limit", "temp_store",
               "auto_vacuum", "foreign_keys", "reserve_bytes", "page_count",
               "freelist_count"]


def test_every_failing_pragma_is_unknown_with_reason():
    sq = P.sqlite_params(RaisingConn())
    text = P.format_params({"sqlite": sq})
    for key in SQLITE_KEYS:
        assert sq[key] == "unknown", key
        assert sq["_why"][key], key
        assert printed(text, "sqlite", key).startswith("unknown ("), key
    assert "refused: PRAGMA \"main\".synchronous" in sq["_why"]["synchronous"]
    json.dumps(sq)


class OddConn:
    """Answers some queries with values that must not be passed off as real."""

    answers = {
        'PRAGMA "main".synchronous': [(7,)],
        'PRAGMA "main".journal_mode': [(None,)],
        "PRAGMA compile_options": [],
        "PRAGMA database_list": [(0, "main", "")],
        "SELECT sqlite_version()": [("3.99.0",)],
    }

    def execute(self, sql):
        if sql in self.answers:
            return iter(self.answers[sql])
        if sql.startswith("PRAGMA"):
            return iter([])
        raise RuntimeError("no such table")


def test_odd_answers_are_unknown_not_guessed():
    sq = P.sqlite_params(OddConn())
    assert sq["sqlite_version"] == "3.99.0"
    assert sq["synchronous"] == "unknown" and "7" in sq["_why"]["synchronous"]
    assert sq["journal_mode"] == "unknown"
    assert sq["compile_options"] == "unknown"
    assert "OMIT_COMPILEOPTION_DIAGS" in sq["_why"]["compile_options"]
    assert sq["page_size"] == "unknown" and "no rows" in sq["_why"]["page_size"]
    assert sq["reserve_bytes"] == "unknown" and "no file" in sq["_why"]["reserve_bytes"]
    assert sq["vfs"] == "unknown"


# ---------------------------------------------------------------- root fs

def findmnt(target: str, column: str) -> str:
    if shutil.which("findmnt") is None:
        pytest.skip("findmnt not installed")
    p = run(["findmnt", "-n", "-o", column, "--target", target])
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_root_filesystem_journal_as_dumpe2fs_or_kernel_says():
    fstype = findmnt("/", "FSTYPE")
    source = findmnt("/", "SOURCE")
    fs = P.filesystem_params("/")
    assert fs["fstype"] == fstype
    assert fs["mount_point"] == "/"
    assert fs["source"] == source
    if fstype != "ext4":
        pytest.skip(f"root is {fstype}, not ext4")
    # dumpe2fs first; if the device cannot be opened (a sandbox's device
    # cgroup refuses even root), the kernel's own jbd2 state is the witness
    info = dumpe2fs(source)
    if info is not None:
        has_journal = "has_journal" in info["Filesystem features"].split()
        assert fs["ext4"]["has_journal"] is has_journal
        assert fs["ext4"]["features"] == info["Filesystem features"].split()
        expected = "yes" if has_journal else "no"
    else:
        assert fs["ext4"]["features"] == "unknown"
        assert "dumpe2fs" in fs["ext4"]["_why"]["features"]
        kname = os.path.basename(os.path.realpath(
            f"/sys/dev/block/{os.major(os.stat('/').st_dev)}:{os.minor(os.stat('/').st_dev)}"))
        task = Path(f"/sys/fs/ext4/{kname}/journal_task").read_text().strip()
        expected = "no" if task == "<none>" else "yes"
    assert fs["journals"] == expected
    assert fs["journal_evidence"]
    text = P.format_params({"filesystem": fs})
    assert printed(text, "filesystem", "fstype") == "ext4"
    assert printed(text, "filesystem", "journals") == expected


def test_root_device_write_cache_and_fua_equal_sysfs():
    with tempfile.NamedTemporaryFile(dir=tempfile.gettempdir()) as f:
        if findmnt(f.name, "TARGET") != "/":
            pytest.skip("the temp directory is not on the root file system")
        disk = os.path.basename(findmnt(f.name, "SOURCE"))
        dev = P.device_params(f.name)
    assert dev["_why"] == {}
    top = dev["chain"][0]
    assert top["name"] == disk
    queue = Path(f"/sys/block/{top.get('disk', disk)}/queue")
    assert top["write_cache"] == (queue / "write_cache").read_text().strip()
    assert str(top["fua"]) == (queue / "fua").read_text().strip()
    assert str(top["rotational"]) == (queue / "rotational").read_text().strip()
    text = P.format_params({"device": dev})
    assert printed(text, "device", "chain.0.write_cache") == top["write_cache"]
    assert printed(text, "device", "chain.0.fua") == (queue / "fua").read_text().strip()


# ---------------------------------------------------------------- loop-mounted fs

@pytest.fixture
def loop_mount(tmp_path):
    mounted = []

    def make(fstype, size_mb, mkfs_args=(), options=""):
        mkfs = shutil.which(f"mkfs.{fstype}")
        if os.geteuid() != 0 or mkfs is None:
            pytest.skip(f"needs root and mkfs.{fstype}")
        img = tmp_path / f"{fstype}.img"
        with open(img, "wb") as f:
            f.truncate(size_mb << 20)
        p = run([mkfs, *mkfs_args, str(img)])
        assert p.returncode == 0, p.stderr
        mnt = tmp_path / f"mnt-{fstype}"
        mnt.mkdir()
        opts = "loop" + ("," + options if options else "")
        p = run(["mount", "-o", opts, str(img), str(mnt)])
        if p.returncode != 0:
            pytest.skip(f"cannot loop-mount {fstype}: {p.stderr.strip()}")
        mounted.append(mnt)
        return img, mnt

    yield make
    for mnt in reversed(mounted):
        run(["umount", str(mnt)])


def loop_of(img: Path) -> str:
    p = run(["losetup", "-j", str(img)])
    return os.path.basename(p.stdout.split(":")[0])


def check_loop_chain(dev, img: Path):
    loop = loop_of(img)
    top = dev["chain"][0]
    assert (top["name"], top["kind"]) == (loop, "loop")
    sysdir = Path(f"/sys/block/{loop}")
    assert top["backing_file"] == (sysdir / "loop/backing_file").read_text().strip()
    assert str(top["dio"]) == (sysdir / "loop/dio").read_text().strip()
    assert top["write_cache"] == (sysdir / "queue/write_cache").read_text().strip()
    assert str(top["fua"]) == (sysdir / "queue/fua").read_text().strip()
    # the next device down holds the image file
    st = os.stat(img)
    below = os.path.basename(os.path.realpath(
        f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"))
    assert dev["chain"][1]["name"] == below
    assert dev["stack"].startswith(f"{loop} -> {below}")


def test_ext4_loop_with_journal_fast_commit_writeback(loop_mount):
    img, mnt = loop_mount("ext4", 64, ["-q", "-F", "-O", "fast_commit"],
                          "data=writeback,lazytime")
    fs = P.filesystem_params(mnt / "bench.db")  # not created yet: parent is used
    info = dumpe2fs(f"/dev/{loop_of(img)}")
    assert info is not None
    feats = info["Filesystem features"].split()
    assert fs["fstype"] == "ext4" and fs["mount_point"] == str(mnt)
    assert fs["ext4"]["features"] == feats
    assert fs["ext4"]["has_journal"] is ("has_journal" in feats) is True
    assert fs["ext4"]["fast_commit"] is ("fast_commit" in feats)
    assert fs["ext4"]["journal_size"] == info["Total journal size"]
    assert fs["ext4"]["data_mode"] == "writeback"
    assert fs["lazytime"] is True
    assert fs["journals"] == "yes"
    check_loop_chain(P.device_params(mnt), img)


def test_ext4_loop_without_journal(loop_mount):
    img, mnt = loop_mount("ext4", 64, ["-q", "-F", "-O", "^has_journal"])
    fs = P.filesystem_params(mnt)
    info = dumpe2fs(f"/dev/{loop_of(img)}")
    assert "has_journal" not in info["Filesystem features"].split()
    assert fs["ext4"]["has_journal"] is False
    assert fs["journals"] == "no"
    assert fs["ext4"]["data_mode"] == "none"
    assert fs["lazytime"] is False


def test_xfs_loop(loop_mount):
    if shutil.which("xfs_info") is None:
        pytest.skip("xfs_info not installed")
    img, mnt = loop_mount("xfs", 600, ["-q", "-f"])
    fs = P.filesystem_params(mnt)
    assert fs["fstype"] == "xfs" and fs["journals"] == "yes"
    text = run(["xfs_info", str(mnt)]).stdout
    blocks = re.search(r"^log\s*=.*?blocks=(\d+)", text, re.M).group(1)
    assert fs["xfs"]["xfs_info"]["log.blocks"] == blocks
    assert fs["xfs"]["xfs_info"]["log.location"] == "internal log"
    check_loop_chain(P.device_params(mnt), img)


def test_btrfs_loop(loop_mount):
    img, mnt = loop_mount("btrfs", 300, ["-q", "-f"])
    fs = P.filesystem_params(mnt)
    assert fs["fstype"] == "btrfs" and fs["journals"] == "no"
    base = Path("/sys/fs/btrfs") / fs["btrfs"]["fsid"]
    assert fs["btrfs"]["nodesize"] == int((base / "nodesize").read_text())
    assert fs["btrfs"]["features"] == sorted(os.listdir(base / "features"))
    assert fs["btrfs"]["tree_log"] is True
    check_loop_chain(P.device_params(mnt), img)


# ---------------------------------------------------------------- host, all

def test_system_params_hostname_free():
    sysp = P.system_params()
    blob = json.dumps(sysp)
    node = os.uname().nodename
    if len(node) >= 4:
        assert node not in blob
    assert sysp["kernel"].endswith(os.uname().release)
    assert sysp["apsw_version"] == apsw.apsw_version()
    assert sysp["cpu_count"] == os.cpu_count()
    for key, value in sysp.items():
        if value == "unknown":
            assert sysp["_why"][key]


def test_all_params_json_and_format_has_every_key(wal_db):
    conn, path = wal_db
    extra = {"operation": "insert", "txns": 1000, "record_bytes": 3072, "seed": 7}
    allp = P.all_params(conn, path, extra=extra)
    assert allp["schema_version"] == P.SCHEMA_VERSION
    assert allp["workload"]["txns"] == 1000
    assert allp == json.loads(json.dumps(allp))
    again = P.all_params(conn, extra=extra)  # path from PRAGMA database_list
    for key in ("mount_point", "source", "fstype", "journals"):
        assert again["filesystem"][key] == allp["filesystem"][key]
    assert again["device"]["stack"] == allp["device"]["stack"]
    text = P.format_params(allp)
    for section in ("workload", "sqlite", "filesystem", "device", "system"):
        assert f"[{section}]" in text
        for key in leaf_keys(allp[section]):
            printed(text, section, key)
    assert "schema_version: 1" in text
    # every unknown carries its reason in the printed text too
    for line in text.splitlines():
        if re.search(r":\s+unknown$", line):
            raise AssertionError(f"unknown without reason: {line}")
    with pytest.raises(TypeError):
        P.all_params(conn, path, extra={"bad": object()})
