"""File systems for waldio's tools and tests: throw-away loop file systems, external commands.

    from waldio import fs
    with fs.loop_filesystem("ext4", size_mib=256) as lfs:   # mkfs + mount, always released
        run_workload(lfs.mountpoint)

:mod:`.loop` owns the lifecycle of a fresh file system on a loop device
(ext4 in every journal mode, with an external journal, xfs, btrfs) and finds
and releases what a killed run left behind; :mod:`.commands` runs every
external program (mkfs, mount, losetup...) and says how it failed.
"""
from __future__ import annotations

from .commands import CommandError, run_command
from .loop import (
    KINDS,
    RESOURCE_PREFIX,
    CleanupError,
    KindSupport,
    Leftovers,
    LoopFilesystem,
    available_kinds,
    leftover_resources,
    loop_filesystem,
    minimum_size_mib,
    release_leftovers,
    unavailable_reason,
    unmount,
)

__all__ = ["CommandError", "run_command", "KINDS", "RESOURCE_PREFIX", "CleanupError", "KindSupport",
           "Leftovers", "LoopFilesystem", "available_kinds", "leftover_resources",
           "loop_filesystem", "minimum_size_mib", "release_leftovers", "unavailable_reason",
           "unmount"]
