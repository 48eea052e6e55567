"""Checking one real-kernel crash state, as a reboot would meet it.

For each state (states.py) the image is written to a scratch file, attached
to a loop device and mounted: the kernel replays the ext4 journal and
processes the orphan list, exactly as after a power loss. The database's
directory is copied out, the file system unmounted and checked with
``e2fsck -fn`` (it must be clean), and the database opened from the copy
through waldio (waldio modes) or stock SQLite (stock modes; then also
through waldio, whose conversion of the standard WAL must recover the same
transactions), with the model's oracle (:func:`..oracle.check_files`): it
must pass ``PRAGMA integrity_check``, hold exactly the first k acknowledged
transactions, and k must cover what the contract requires at the crash
point (recording.py). The copy keeps every file the directory held at the
crash, the ``-shm`` files included (stale, as after a reboot).

Identical images (same recipe) are checked once; identical database files
are opened once. Each checker process has its own scratch image, loop device
and mount point, all removed in ``finally``.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..modes import CONVERT_MODE
from ..oracle import Outcome, check_files, verdict
from . import blocklog, machine
from .model import ModelCheck
from .record import DB_DIR
from .recording import RealRecording
from .states import ImageBuilder, RealKey, Recipe, StateSpace


@dataclass
class RealResult:
    """The verdict on one state."""
    key: str
    passed: bool
    reason: str
    k: Optional[int]
    required: int
    acked: int
    lost: int = 0                    # acknowledged transactions missing
    loss_age_ms: Optional[float] = None
    fsck: List[str] = field(default_factory=list)
    fs_torn: bool = False            # a torn write damaged ext4 itself (not a failure)
    judged: bool = True              # False: the database could not be reached (fs_torn)
    recipe: str = ""
    image: str = ""                  # recipe hash: states with equal images
    outside_model: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class ImageOutcome:
    """What one image gave: mount, e2fsck, the database."""
    mount_error: str = ""
    fsck: List[str] = field(default_factory=list)
    files: Dict[str, bytes] = field(default_factory=dict)
    db: Optional[Outcome] = None


class StateChecker:
    """Checks states of one recording in this process (its own scratch image,
    loop device and mount point under workdir)."""

    def __init__(self, rec: RealRecording, workdir: Path, cross_check: bool = True) -> None:
        self.rec = rec
        self.space = StateSpace(rec)
        self.workdir = Path(workdir) / ("checker-%d" % os.getpid())
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.image_path = self.workdir / "state.img"
        self.mnt = self.workdir / "mnt"
        self.files_dir = self.workdir / "files"
        self.model = ModelCheck(rec) if cross_check else None
        self._images: Dict[Tuple[Any, ...], ImageOutcome] = {}
        self._dbs: Dict[str, Outcome] = {}

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def check(self, keys: List[RealKey]) -> List[RealResult]:
        builder = ImageBuilder(self.space)
        out = []
        for key, recipe, image in builder.images(keys):
            out.append(self._judge(key, recipe, self._image_outcome(recipe, image)))
        return out

    # ---- one image
    def _image_outcome(self, recipe: Recipe, image: bytearray) -> ImageOutcome:
        ident = recipe.ident()
        got = self._images.get(ident)
        if got is not None:
            return got
        got = ImageOutcome()
        blocklog.write_image(self.image_path, image)
        try:
            with machine.loop_device(self.image_path) as dev:
                with machine.mounted(dev, self.mnt):
                    got.files = read_dir(self.mnt / DB_DIR)
        except machine.FAILURES as e:
            got.mount_error = str(e)
        if not got.mount_error:
            got.fsck = machine.fsck_check(self.image_path)
            got.db = self._open_db(got.files)
        if len(self._images) > 256:
            self._images.clear()
        self._images[ident] = got
        return got

    def _open_db(self, files: Dict[str, bytes]) -> Outcome:
        h = files_hash(files)
        out = self._dbs.get(h)
        if out is not None:
            return out
        write_dir(self.files_dir, files)
        out = check_files(self.rec.mode, self.files_dir, self.rec.digests)
        if not self.rec.mode.waldio and self.rec.mode.journal == "WAL":
            write_dir(self.files_dir, files)
            out.converted = check_files(CONVERT_MODE, self.files_dir, self.rec.digests)
        if len(self._dbs) > 256:
            self._dbs.clear()
        self._dbs[h] = out
        return out

    # ---- the verdict
    def _judge(self, key: RealKey, recipe: Recipe, img: ImageOutcome) -> RealResult:
        p = key.position
        required = self.rec.required(p, key.model)
        acked = self.rec.acked(p)
        res = RealResult(key.text(), False, "", None, required, acked,
                         recipe=recipe.describe(len(self.space.volatile(p))),
                         image=hashlib.blake2b(repr(recipe.ident()).encode(),
                                               digest_size=8).hexdigest())
        res.fsck = img.fsck
        if (img.mount_error or img.fsck) and recipe.torn:
            # A 512-byte tear inside a block of ext4's own metadata (its
            # superblock is 1 KiB: two sectors, with one checksum): the file
            # system's assumption, not the database's. Reported apart; the
            # database is still checked when the file system mounts.
            res.fs_torn = True
            if img.mount_error:
                res.judged = False
                res.reason = "file system damaged by the torn write: " + \
                    img.mount_error.splitlines()[0][-160:]
                return res
        elif img.mount_error:
            res.reason = "the file system does not mount: " + img.mount_error
            return res
        assert img.db is not None
        out = img.db
        res.k = out.k
        ok, reason = verdict(out, required, self.rec.upper(p))
        if ok and out.converted is not None:
            c = out.converted
            if not (c.ok and c.integrity == "ok" and c.k == out.k):
                ok = False
                reason = ("waldio's conversion of the standard WAL differs: stock SQLite "
                          "recovered k=%s, waldio %s" % (out.k, ("k=%s" % c.k) if c.ok else c.error))
        if ok and img.fsck and not res.fs_torn:
            ok, reason = False, "e2fsck -fn: " + "; ".join(img.fsck)
        if out.k is not None and out.k < acked:
            res.lost = acked - out.k
            res.loss_age_ms = self.rec.loss_age_ms(p, out.k)
        if self.model is not None:
            res.outside_model = self.model.explain(p, img.files)
        res.passed, res.reason = ok, reason
        return res


def read_dir(d: Path) -> Dict[str, bytes]:
    """Every regular file of a directory (a missing directory: none)."""
    if not d.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def write_dir(d: Path, files: Dict[str, bytes]) -> None:
    """Make d hold exactly these files."""
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for name, data in files.items():
        (d / name).write_bytes(data)


def files_hash(files: Dict[str, bytes]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name, data in sorted(files.items()):
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()
