"""Where a run happens: a fresh loop-mounted file system or a directory.

:func:`open_target` makes a throw-away file system with :mod:`waldio.fs`
(default: ext4, journaled like a phone's) or uses a private sub-directory of
``--dir``; everything created is removed.  Directories without O_DIRECT
(tmpfs) are refused up front for waldio modes.
"""
from __future__ import annotations

import contextlib
import math
import mmap
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional, Tuple

from waldio import params as _params

from .modes import RAW_BLOCK
from .provenance import UNKNOWN
from .settings import BenchError, Settings


@dataclass
class Target:
    path: str                        # directory where the run's files go
    kind: str                        # "loop" or "dir"
    info: Dict[str, Any]
    note: str
    device: Any = None               # the emulated device under the loop (--device), if any

    @property
    def brief(self) -> str:
        """One short line: what the file system is and whether it journals."""
        return brief_target(self.info)


def brief_target(info: Dict[str, Any]) -> str:
    j = {"yes": "journaled", "no": "NOT journaled"}.get(str(info.get("journals")),
                                                         "journaling unknown")
    if info.get("kind") == "loop":
        loop = info.get("loop") or {}
        dev = info.get("device")
        on = (f" over an emulated {dev['profile']['name']} device (waldio device show "
              f"{dev['profile']['name']})" if dev else "")
        return (f"a fresh {info.get('fs_kind')} on {loop.get('device')}{on} ({j}, mounted "
                f"{loop.get('mount_options')}), made for this run and removed afterwards")
    return f"{info.get('directory')} ({info.get('fs_kind')}, {j}), removed afterwards"


def _odirect_ok(directory: str) -> Tuple[bool, str]:
    probe = os.path.join(directory, f".waldio-odirect-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
    except OSError as e:
        return False, f"O_DIRECT open failed: {e.strerror}"
    try:
        buf = mmap.mmap(-1, RAW_BLOCK)
        try:
            os.pwrite(fd, buf, 0)
        except OSError as e:
            return False, f"O_DIRECT write failed: {e.strerror}"
        finally:
            buf.close()
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return True, "O_DIRECT works"


def describe_fs(path: str) -> Tuple[Dict[str, Any], str]:
    fs = _params.filesystem_params(path)
    journals = fs.get("journals", UNKNOWN)
    evidence = fs.get("journal_evidence", "")
    fstype = fs.get("fstype", UNKNOWN)
    source = fs.get("source", UNKNOWN)
    if journals == "yes":
        j = f"it journals ({evidence})"
    elif journals == "no":
        j = (f"it does NOT journal ({evidence}): stock SQLite shows no journaling-of-journal "
             f"here, unlike on a phone's journaled ext4")
    else:
        j = f"whether it journals is unknown ({fs.get('_why', {}).get('journals', evidence)})"
    return fs, f"{fstype} on {source}; {j}"


@contextlib.contextmanager
def open_target(fs_kind: Optional[str], directory: Optional[str], size_mib: Optional[int],
                need_odirect: bool, device: Optional[str] = None) -> Iterator[Target]:
    """Where the run happens: a fresh loop file system, or a private dir in ``directory``.

    fs_kind None and directory None: loop ext4 when it can be made here, else a
    temporary directory under the current directory (with a note saying why).
    ``device``: a device profile (waldio.device); the loop file system is made over
    that emulated device.
    """
    from waldio import fs as fsimage
    reason = None
    emulated = None
    if device is not None:
        from waldio import device as D
        if directory is not None:
            raise BenchError("--device and --dir exclude each other: the emulated device "
                             "carries a fresh loop file system (--fs)")
        try:
            emulated = D.EmulatedDevice(D.load(device))
        except D.ProfileError as e:
            raise BenchError(f"--device: {e}") from e
        why = D.unavailable_reason() or fsimage.unavailable_reason(fs_kind or "ext4")
        if why:
            raise BenchError(f"--device {device}: cannot emulate it here: {why}")
    if directory is None:
        kind = fs_kind or "ext4"
        if kind not in fsimage.KINDS:
            raise BenchError(f"--fs: unknown kind {kind!r} (accepted: {', '.join(fsimage.KINDS)})")
        reason = fsimage.unavailable_reason(kind)
        if reason and fs_kind is not None:
            raise BenchError(f"--fs {fs_kind}: cannot create it here: {reason}")
        if not reason:
            with fsimage.loop_filesystem(kind, size_mib, image_device=emulated) as lfs:
                base = lfs.path("bench")
                os.mkdir(base)
                fs, desc = describe_fs(base)
                info = {"kind": "loop", "fs_kind": kind, "loop": lfs.describe(),
                        "directory": base, "odirect": "yes",
                        "journals": fs.get("journals", UNKNOWN)}
                if emulated:
                    info["device"] = emulated.describe()
                on = (f" over an emulated {emulated.profile.name} device ({emulated.profile.summary}"
                      f"; requests back-dated by {emulated.overhead['overhead_us']:.0f} us + "
                      f"{emulated.overhead['overhead_us_per_kib']:.2f} us/KiB, this machine's own "
                      f"overhead)" if emulated else "")
                note = (f"target: a fresh {kind} file system on {lfs.device}{on} "
                        f"({lfs.size_mib} MiB sparse image {lfs.image_path}), mounted "
                        f"{lfs.mount_options}, created for this run and removed afterwards; "
                        f"{desc.split('; ', 1)[1]}")
                ok, why = _odirect_ok(base)
                info["odirect"] = "yes" if ok else f"no ({why})"
                yield Target(base, "loop", info, note, emulated)
            return
    parent = directory if directory is not None else os.getcwd()
    if not os.path.isdir(parent):
        raise BenchError(f"--dir {parent}: not a directory")
    base = tempfile.mkdtemp(prefix=f"waldio-bench-{os.getpid()}-", dir=parent)
    try:
        fs, desc = describe_fs(base)
        ok, why = _odirect_ok(base)
        if fs.get("fstype") in ("tmpfs", "ramfs"):
            # Linux >= 6.6 accepts O_DIRECT on tmpfs, but it is buffered I/O in
            # disguise there (and libwaldio refuses to open a log on it)
            ok, why = False, (f"{fs['fstype']} is memory-backed: O_DIRECT there is buffered "
                              "I/O in disguise")
        how = (f"--dir {directory}" if directory is not None else
               f"the current directory, because a loop file system cannot be made here "
               f"({reason})")
        note = (f"target: {base} (private sub-directory of {how}, removed afterwards) on {desc}")
        if not ok:
            note += f"; {why}"
            if need_odirect:
                raise BenchError(f"{base}: {why}; waldio and raw-dio modes need real direct "
                                 f"I/O to a block device: choose another --dir, e.g. /var/tmp")
        info = {"kind": "dir", "fs_kind": fs.get("fstype", UNKNOWN), "directory": base,
                "requested_dir": directory, "odirect": "yes" if ok else f"no ({why})",
                "loop_unavailable_reason": reason, "journals": fs.get("journals", UNKNOWN)}
        yield Target(base, "dir", info, note)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def default_fs_size_mib(s: Settings, fs_kind: Optional[str] = None) -> int:
    """A loop image comfortably larger than template + copy + logs (sparse
    anyway), and never below what mkfs accepts for fs_kind."""
    from waldio import fs as fsimage
    rows = s.prepopulate + s.transactions * s.ops_per_txn * len(s.phases)
    per_db = s.tables * rows * (s.record_size + 40) * 1.5 + 64 * 1024 * s.tables
    dbs = 1 if s.shared_db else s.threads
    need = (per_db * (2 + dbs) + dbs * 24 * (1 << 20)) / (1 << 20)
    floor = fsimage.minimum_size_mib(fs_kind) if fs_kind else 256
    return int(max(256, floor, math.ceil(need * 1.5 / 64) * 64))
