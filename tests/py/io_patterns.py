"""Known I/O patterns for the block-trace tests: aligned buffers for O_DIRECT
and zero-filled, fdatasync'ed files (not fallocated: unwritten extents would
make the first overwrite journal)."""
from __future__ import annotations

import mmap
import os

BLOCK = 4096


def aligned_block(fill: bytes) -> mmap.mmap:
    """A page-aligned 4 KiB buffer (mmap memory is page aligned) for O_DIRECT."""
    buf = mmap.mmap(-1, BLOCK)
    buf.write(fill * (BLOCK // len(fill)))
    return buf


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def preallocate_zeroed(path: str, blocks: int) -> None:
    """A file of `blocks` written zero blocks, fdatasync'ed, directory synced."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, bytes(blocks * BLOCK))
        os.fdatasync(fd)
    finally:
        os.close(fd)
    fsync_dir(os.path.dirname(path))
