"""A damaged block 0: libwaldio's refusal says what and why, and `waldio
recover` keeps exactly the frames that can be proven committed.

Each test leaves a log holding committed, uncheckpointed frames (a writer
process that dies without closing: worker.py crash), damages it, and checks
the refusal, then the recovery against a reference database that ran the same
transactions on stock SQLite.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

import waldio
import workloads as wl
from test_safety import crash_writer, expected_rows, new_db
from waldio import cli, recover
from waldio.logformat import wal_checksum

# (byte of block 0 changed, layout): every field of the superblock
# (docs/format.md §2) that tells where frames are and which are the
# log's, each layout once at least: refused.
DAMAGE = [(33, "pad4k"), (41, "embed"), (45, "pad8k"), (50, "pad4k"),
          (54, "embed"), (58, "pad8k"), (62, "pad4k"), (75, "pad4k"),
          (90, "embed"), (101, "pad8k")]
# The fields a torn block-0 write may garble while the SQLite header copy,
# which carries its own checksum, stays whole: the flags, the spare word,
# the superblock's checksum. Read from the copy, as nothing was lost.
TORN = [(67, "embed"), (70, "pad8k"), (104, "pad4k"), (111, "embed")]


def crashed_log(sqlite: Any, path: Path, layout: str, n: int = 25) -> int:
    """A database whose log holds n committed transfers nobody checkpointed."""
    new_db(sqlite, path, layout=layout)
    return crash_writer(sqlite, path, n, uri={"layout": layout},
                        pragmas=["wal_autocheckpoint=0"])


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ 0x5A]))


def waldio_cli(capsys: Any, *args: str) -> tuple[int, str]:
    rc = cli.main(list(args))
    return rc, capsys.readouterr().out


@pytest.mark.parametrize("offset,layout", DAMAGE)
def test_damaged_superblock_is_explained_and_recovered(
        apsw_sqlite: Any, dbdir: Path, capsys: Any, offset: int, layout: str) -> None:
    path = dbdir / "d.db"
    log = Path(str(path) + "-wal")
    assert crashed_log(apsw_sqlite, path, layout) == 25
    flip(log, offset)
    damaged = log.read_bytes()
    with pytest.raises(waldio.WaldioError) as e:
        waldio.connect(path)
    msg = str(e.value)
    assert "malformed" in msg                      # SQLite's own words
    assert str(log) in msg and "block 0 of the log is damaged" in msg
    assert "waldio recover %s" % path in msg and "proven committed" in msg
    rc, out = waldio_cli(capsys, "info", "--json", str(path))
    assert rc == 0 and "waldio recover" in json.loads(out)["wal_file"]["superblock"]["damage"]

    rc, out = waldio_cli(capsys, "recover", "--json", str(path))
    rep = json.loads(out)
    assert rc == 0
    assert rep["frames_kept"] > 0 and rep["transactions"] == 25
    assert rep["dropped"] == 0
    # The damaged log is kept as it was (a fresh salt in the rewritten block 0
    # may equal the flipped byte: compare with the damaged file, not with it).
    assert Path(rep["backup"]).read_bytes() == damaged
    assert log.read_bytes()[:4096] != damaged[:4096]
    conn = apsw_sqlite.waldio(path, layout=layout)
    assert wl.dump(conn) == expected_rows(apsw_sqlite, dbdir / "ref.db", 25)
    assert wl.integrity(conn) == "ok"
    conn.close()


@pytest.mark.parametrize("offset,layout", TORN)
def test_torn_flags_or_checksum_are_read_from_the_header_copy(
        apsw_sqlite: Any, dbdir: Path, capsys: Any, offset: int, layout: str) -> None:
    path = dbdir / "d.db"
    log = Path(str(path) + "-wal")
    assert crashed_log(apsw_sqlite, path, layout) == 25
    flip(log, offset)
    conn = apsw_sqlite.waldio(path, layout=layout)
    assert wl.dump(conn) == expected_rows(apsw_sqlite, dbdir / "ref.db", 25)
    assert wl.integrity(conn) == "ok"
    conn.close()
    rc, out = waldio_cli(capsys, "info", "--json", str(path))   # block 0 rewritten whole
    assert rc == 0 and not json.loads(out)["wal_file"]["superblock"].get("damage")


def test_uncommitted_tail_and_broken_chain_are_dropped_and_counted(
        apsw_sqlite: Any, dbdir: Path, capsys: Any) -> None:
    path = dbdir / "u.db"
    log = Path(str(path) + "-wal")
    assert crashed_log(apsw_sqlite, path, "pad4k", n=30) == 30
    rc, out = waldio_cli(capsys, "recover", "--dry-run", "--force", "--json", str(path))
    whole = json.loads(out)
    assert whole["damage"] is None and whole["transactions"] == 30
    # Slot layout of pad4k, 4 KiB blocks: frame i (1-based) at 4096 + (i-1)*8192,
    # its page at +4096. Turn the last commit frame into a non-commit frame
    # (nTruncate 0, checksums fixed up as SQLite would have written them):
    # the last transaction never committed.
    last = whole["frames_kept"]
    data = bytearray(log.read_bytes())
    hdr = 4096 + (last - 1) * 8192
    big = bool(struct.unpack_from(">I", data, 72)[0] & 1)
    prev = (struct.unpack_from(">II", data, hdr - 8192 + 16) if last > 1
            else struct.unpack_from(">II", data, 72 + 24))
    struct.pack_into(">I", data, hdr + 4, 0)
    s = wal_checksum(bytes(data[hdr + 4096:hdr + 8192]), big,
                     wal_checksum(bytes(data[hdr:hdr + 8]), big, tuple(prev)))
    struct.pack_into(">II", data, hdr + 16, *s)
    log.write_bytes(bytes(data))
    tail = recover.recover(path, dry_run=True, force=True)
    assert tail.transactions == 29 and tail.dropped_after_break == 0
    assert tail.dropped_uncommitted == last - tail.frames_kept > 0
    # Damage a page in the middle: every frame after it is unproven.
    broken = last // 2
    data[4096 + (broken - 1) * 8192 + 4096 + 100] ^= 0xFF
    data[40] ^= 1                                  # and the superblock
    log.write_bytes(bytes(data))

    rep = recover.recover(path)
    assert rep.damage and "checksum" in rep.damage
    assert rep.frames_kept < broken and rep.dropped_after_break == last - broken + 1
    assert rep.dropped_uncommitted == broken - 1 - rep.frames_kept
    text = "\n".join(recover.summary(rep))
    assert "dropped %d" % rep.dropped in text
    conn = apsw_sqlite.waldio(path)
    kept = rep.transactions
    assert 0 < kept < 30
    assert wl.dump(conn) == expected_rows(apsw_sqlite, dbdir / "ref.db", kept)
    conn.close()


def test_recover_refuses_a_log_in_use_and_an_intact_one(
        apsw_sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "b.db"
    conn = apsw_sqlite.waldio(path)
    wl.setup(conn)
    with pytest.raises(waldio.WaldioError, match="open in another process"):
        recover.recover(path, force=True)
    conn.close()
    with pytest.raises(waldio.WaldioError, match="is intact"):
        recover.recover(path)


def test_nothing_provable_leaves_no_log(apsw_sqlite: Any, dbdir: Path) -> None:
    path = dbdir / "z.db"
    log = Path(str(path) + "-wal")
    assert crashed_log(apsw_sqlite, path, "embed", n=3) == 3
    data = bytearray(log.read_bytes())
    data[0:32] = bytes(32)                         # no guard header,
    data[72:104] = bytes(32)                       # no copy of SQLite's header
    data[108] ^= 1
    log.write_bytes(bytes(data))
    rep = recover.recover(path)
    assert rep.header_from is None and rep.frames_kept == 0
    assert not log.exists() and Path(rep.backup).exists()
    conn = apsw_sqlite.waldio(path)             # the database file as it was
    assert wl.integrity(conn) == "ok"
    conn.close()


@pytest.mark.parametrize("layout", ["embed", "pad4k"])
def test_block0_torn_over_a_checkpointed_log_loses_nothing(
        apsw_sqlite: Any, dbdir: Path, layout: str) -> None:
    """Block 0 torn while SQLite began a new generation (its salts and
    checksums half written) over a log a checkpoint copied whole into the
    database: every frame behind it is in the database, so waldio opens the
    database with every row, as stock SQLite opens a WAL whose header tore.
    Once one page of the database differs from its newest copy in the log,
    the same damage is refused as above."""
    path = dbdir / "t.db"
    conn = apsw_sqlite.waldio(path, layout=layout)
    wl.setup(conn)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    for i in range(20):
        conn.execute("INSERT INTO t(k, v) VALUES(?, randomblob(2000))", (i,))
    assert conn.execute("PRAGMA wal_checkpoint(PASSIVE)")[0][0] == 0
    rows = wl.dump(conn)
    raw = bytearray(Path(str(path) + "-wal").read_bytes())
    conn.close()
    for off in range(72 + 16, 72 + 24):    # the header copy's salts, half new
        raw[off] ^= 0x5A
    for name in ("ok.db", "newer.db"):
        (dbdir / name).write_bytes(path.read_bytes())
        (dbdir / (name + "-wal")).write_bytes(bytes(raw))
    conn = apsw_sqlite.waldio(dbdir / "ok.db", layout=layout)
    assert wl.dump(conn) == rows and wl.integrity(conn) == "ok"
    conn.close()
    with open(dbdir / "newer.db", "r+b") as f:
        f.seek(-4096 + 300, 2)
        f.write(b"\x01")
    with pytest.raises(waldio.WaldioError, match="block 0 of the log is damaged"):
        waldio.connect(dbdir / "newer.db")
