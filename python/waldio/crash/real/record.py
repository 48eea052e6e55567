"""Recording a workload on the real kernel: ext4 on a loop device over the
FUSE block recorder's image file.

    mkfs.ext4 base.img ──copy──> image.img <── block_recorder (logs blocks.bin)
                                     │ FUSE file "disk"
                                 losetup -f ──> /dev/loopN ──mount──> mnt/
                                                                  │
    the workload (python -m waldio.crash _record) runs with the database in
    mnt/db, the crash recorder below SQLite and waldio (file/: the event log
    of the model, file/events.bin) and every mark also written to the block
    recorder's ctl file (blocks.bin)

The workload is the model's own (:func:`..recorder.record`): the same
transactions, checkpoints, readers and processes, the same acknowledgement
marks. Its base database is made durable (syncfs) and marked ("base") before
the run; crash states are cut after that mark. At the end the file system is
unmounted, the loop device detached and the recorder unmounted (in
``finally``, also when the workload fails), and the whole block log replayed
onto base.img must give the recorder's image byte for byte, or the recording
is refused.

A recording directory:

    base.img      the ext4 image before the run (sparse)
    blocks.bin    the block log (blocklog.py)
    file/         the model's recording of the same run (events.bin, meta.json, base/)
    real.json     parameters: mode, workload, seed, image, mkfs and mount options,
                  loop device mode, kernel, the replay check
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Dict

from ..database import BLOCK_CTL_ENV
from ..recorder import RecordingError, record
from ..states import write_sparse
from . import blocklog, machine
from .plan import RealRun

BASE_IMAGE = "base.img"
BLOCK_LOG = "blocks.bin"
FILE_REC = "file"
META = "real.json"
DB_DIR = "db"                  # the database's directory inside the file system


def copy_sparse(src: Path, dst: Path) -> None:
    """Copy an image, keeping its holes (SEEK_DATA/SEEK_HOLE)."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        size = os.fstat(fi.fileno()).st_size
        fo.truncate(size)
        pos = 0
        while pos < size:
            try:
                data = os.lseek(fi.fileno(), pos, os.SEEK_DATA)
            except OSError:
                break                                  # only a hole is left
            hole = os.lseek(fi.fileno(), data, os.SEEK_HOLE)
            n = hole - data
            while n > 0:
                k = os.copy_file_range(fi.fileno(), fo.fileno(), n, data, data)
                if k <= 0:
                    raise OSError("copy_file_range %s: %d" % (src, k))
                data += k
                n -= k
            pos = hole


def record_real(run: RealRun, seed: int, txns: int, out_dir: Path, *,
                loop_direct_io: bool = False, keep_image: bool = False,
                log: Callable[[str], None] = lambda s: None) -> Path:
    """Record one run into out_dir. RecordingError if the workload failed;
    one of machine.FAILURES if the machinery did."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    t0 = time.monotonic()
    load_before = os.getloadavg()
    size = run.image_mb << 20
    base = out_dir / BASE_IMAGE
    image = out_dir / "image.img"
    machine.mkfs(image, size)
    write_sparse(base, image.read_bytes())     # mkfs writes zeros: keep them as holes
    copy_sparse(base, image)
    fuse_dir, mnt = out_dir / "fuse", out_dir / "mnt"
    log("recording %s on ext4 over the block recorder (%d transactions, seed %d) ..."
        % (run.name, txns, seed))
    try:
        with machine.block_recorder(image, out_dir / BLOCK_LOG, fuse_dir) as ctl:
            with machine.loop_device(fuse_dir / "disk", direct_io=loop_direct_io) as dev:
                with machine.mounted(dev, mnt):
                    record(run.mode, run.workload, seed, txns, out_dir / FILE_REC,
                           live=mnt / DB_DIR, env={BLOCK_CTL_ENV: str(ctl)},
                           pace_ms=run.pace_ms)
    finally:
        for d in (mnt, fuse_dir):
            if d.is_dir() and not os.path.ismount(d):
                d.rmdir()
    blocks = blocklog.parse(out_dir / BLOCK_LOG)
    replayed = blocklog.read_image(base)
    for rec in blocks.records:
        blocklog.apply(replayed, rec)
    if bytes(replayed) != image.read_bytes():
        raise RecordingError("%s: the block log replayed onto base.img does not give the "
                             "recorded image" % run.name, out_dir / BLOCK_LOG)
    if not keep_image:
        image.unlink()
    meta: Dict[str, Any] = {
        "mode": run.mode, "workload": run.workload, "control": run.control, "seed": seed,
        "pace_ms": run.pace_ms,
        "txns": txns, "image_bytes": size, "mkfs": " ".join(machine.MKFS_OPTIONS),
        "mount": machine.MOUNT_OPTIONS, "loop_direct_io": loop_direct_io,
        "kernel": machine.kernel(), "records": len(blocks),
        "replays_to_image": True, "seconds": round(time.monotonic() - t0, 1),
        "loadavg_1min": [round(load_before[0], 2), round(os.getloadavg()[0], 2)]}
    (out_dir / META).write_text(json.dumps(meta, indent=1))
    return out_dir


def file_recording_dir(rec_dir: Path) -> Path:
    return Path(rec_dir) / FILE_REC
