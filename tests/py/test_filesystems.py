"""waldio on the file systems a phone or server may use: xfs and btrfs get
direct I/O (btrfs with a NOCOW log), ext4 data=journal has no O_DIRECT: the
standard layout (the default) leaves the WAL to SQLite there and says why,
embed is refused with the fix named. Needs root and loop devices (skipped
with the reason otherwise).
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import workloads as wl
from waldio import fs as fsimage
from waldio.drivers import SQLiteError


def run_workload(conn: Any) -> Any:
    wl.setup(conn)
    wl.crud(conn, 9, n=150)
    wl.big_transaction(conn, 10)
    return wl.dump(conn), wl.integrity(conn)


@pytest.mark.parametrize("layout", ["standard", "embed"])
@pytest.mark.parametrize("kind", ["xfs", "btrfs", "ext4-writeback", "ext4-fastcommit"])
def test_direct_io_file_systems(apsw_sqlite: Any, kind: str, layout: str) -> None:
    reason = fsimage.unavailable_reason(kind)
    if reason:
        pytest.skip(reason)
    with fsimage.loop_filesystem(kind) as fs:
        path = Path(fs.mountpoint) / "w.db"
        conn = apsw_sqlite.waldio(path, layout=layout)
        try:
            rows, ok = run_workload(conn)
            status = wl.status(conn)
        finally:
            conn.close()
        ref = apsw_sqlite.stock(Path(fs.mountpoint) / "s.db",
                                reserve=24 if layout == "embed" else 0)
        try:
            assert run_workload(ref) == (rows, ok)
        finally:
            ref.close()
        assert ok == "ok"
        assert status["io"] == "direct" and status["fs"] == kind.split("-")[0]
        assert status["layout"] == layout
        if kind == "btrfs":
            # NOCOW, or btrfs would turn direct writes into buffered COW ones.
            attrs = subprocess.run(["lsattr", str(path) + "-wal"], capture_output=True,
                                   text=True, check=True).stdout.split()[0]
            assert "C" in attrs


def test_ext4_data_journal_has_no_direct_io(apsw_sqlite: Any) -> None:
    reason = fsimage.unavailable_reason("ext4-journal")
    if reason:
        pytest.skip(reason)
    with fsimage.loop_filesystem("ext4-journal") as fs:
        path = Path(fs.mountpoint) / "s.db"
        conn = apsw_sqlite.waldio(path)
        try:
            rows, ok = run_workload(conn)
            status = wl.status(conn)
            assert ok == "ok" and (status["layout"], status["io"]) == ("standard", "stock")
            assert "no direct I/O" in status["io_reason"], status
        finally:
            conn.close()
        path = Path(fs.mountpoint) / "j.db"
        conn = apsw_sqlite.waldio(path, layout="embed")
        try:
            with pytest.raises(SQLiteError) as e:
                wl.setup(conn)
            assert e.value.code == 14
        finally:
            conn.close()
        probe = apsw_sqlite.driver.connect(":memory:", uri=False)
        msg = probe.execute("SELECT waldio_last_error()")[0][0]
        probe.close()
        assert "direct I/O is not available" in msg and "data=journal" in msg
        conn = apsw_sqlite.waldio(path, io="auto", layout="embed")
        try:
            rows, ok = run_workload(conn)
            assert ok == "ok" and wl.status(conn)["io"] == "buffered"
        finally:
            conn.close()
