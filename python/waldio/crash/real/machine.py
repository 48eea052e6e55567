"""The system pieces of a real-kernel crash test: disk images, the FUSE block
recorder, loop devices, mounts, e2fsck.

Every resource is a context manager that removes what it created in
``finally`` (a FUSE mount, a loop device, a mount), also when the body
raises, so a failed recording or check leaves nothing behind. External
commands run through :func:`waldio.fs.commands.run_command` (CommandError
names the command and its output); the recorder process failing raises
:class:`MachineError`. Loop devices are allocated with ``losetup -f``, never
by number.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

from waldio import library
from waldio.fs.commands import CommandError, run_command

# The ext4 under test: 4 KiB blocks, the journal and inode tables written by
# mkfs (so the kernel's lazy-init thread never writes behind the workload's
# back), no discard at mkfs. Mount options: the distribution defaults
# (data=ordered, barriers on, delalloc).
MKFS_OPTIONS = ("-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard")
MOUNT_OPTIONS = "defaults"
TOOLS = ("mkfs.ext4", "e2fsck", "losetup", "mount", "umount", "fusermount3")


class MachineError(RuntimeError):
    """An external command failed, or a resource could not be set up."""


def recorder_binary() -> Optional[Path]:
    """build/crash/block_recorder ($WALDIO_BLOCK_RECORDER), or None."""
    return library.build_program("crash/block_recorder", "WALDIO_BLOCK_RECORDER")


def unavailable_reason() -> Optional[str]:
    """Why real-kernel crash states cannot be made here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    if not os.path.exists("/dev/loop-control"):
        return "/dev/loop-control is missing (no loop devices)"
    if os.geteuid() != 0:
        return "needs root (losetup, mount)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return "missing commands: %s (Debian: e2fsprogs, mount, fuse3)" % ", ".join(missing)
    if recorder_binary() is None:
        return ("build/crash/block_recorder is not built (libfuse3 not found by CMake: "
                "Debian libfuse3-dev)")
    return None


# What a failed setup raises: a command that failed (waldio.fs.commands, the
# one place the tools run external programs), or the recorder that did.
FAILURES = (MachineError, CommandError)


def _retry(cmd: Sequence[str], tries: int = 200, pause: float = 0.05) -> None:
    """Unmount: retry while busy (a process that has not let go of the mount
    yet, the loop device over a FUSE file not yet released), up to 10 s."""
    for attempt in range(tries):
        proc = run_command(cmd, check=False)
        if proc.returncode == 0:
            return
        if attempt == tries - 1:
            raise CommandError(cmd, proc.returncode, proc.stdout, proc.stderr)
        time.sleep(pause)


def mkfs(image: Path, size: int) -> None:
    """A fresh, sparse ext4 image of size bytes."""
    with open(image, "wb") as f:
        f.truncate(size)
    run_command(["mkfs.ext4", "-q", "-F", *MKFS_OPTIONS, str(image)])


@contextmanager
def block_recorder(image: Path, log: Path, mountpoint: Path,
                   timeout: float = 10) -> Iterator[Path]:
    """Mount the FUSE block recorder over image (logging to log); yields the
    control file. At exit: unmount, and wait until the recorder has written
    its log and exited."""
    binary = recorder_binary()
    if binary is None:
        raise MachineError(unavailable_reason() or "block recorder missing")
    mountpoint.mkdir(parents=True, exist_ok=True)
    errlog = log.with_suffix(".stderr")
    with open(errlog, "w") as err:
        proc = subprocess.Popen([str(binary), str(image), str(log), str(mountpoint)],
                                stdout=err, stderr=subprocess.STDOUT)
    ctl = mountpoint / "ctl"
    mounted = False
    try:
        deadline = time.monotonic() + timeout
        while not ctl.exists():
            if proc.poll() is not None:
                raise MachineError("block_recorder exited %s: %s"
                                   % (proc.returncode, errlog.read_text()[-800:]))
            if time.monotonic() > deadline:
                raise MachineError("block_recorder did not mount %s within %g s"
                                   % (mountpoint, timeout))
            time.sleep(0.01)
        mounted = True
        yield ctl
    finally:
        try:
            if mounted or os.path.ismount(mountpoint):
                _retry(["fusermount3", "-u", str(mountpoint)])
        finally:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        raise MachineError("block_recorder exited %d: %s"
                           % (proc.returncode, errlog.read_text()[-800:]))


@contextmanager
def loop_device(backing: Path, direct_io: bool = False) -> Iterator[str]:
    """A loop device over backing (losetup -f); detached at exit. If losetup
    itself was interrupted (SIGTERM), the devices it may have attached to
    this file are detached all the same."""
    args = ["losetup", "-f", "--show"]
    if direct_io:
        args.append("--direct-io=on")
    dev = ""
    try:
        dev = run_command(args + [str(backing)]).stdout.strip()
        if not dev.startswith("/dev/loop"):
            raise MachineError("losetup gave %r" % dev)
        yield dev
    finally:
        # Only our own device: a detach the kernel defers (udev still has it
        # open) frees it later, and by then it may be someone else's.
        for d in [dev] if dev.startswith("/dev/loop") else loop_devices_of(backing):
            _detach(d)


def _detach(dev: str) -> None:
    """losetup -d, once: the kernel defers the detach while the device is
    still open (udev probing it), so it does not fail for being busy; and a
    retry could detach the device after someone else attached it again."""
    proc = run_command(["losetup", "-d", dev], check=False)
    if proc.returncode != 0 and "No such device" not in proc.stderr:
        raise CommandError(["losetup", "-d", dev], proc.returncode, proc.stdout, proc.stderr)


def loop_devices_of(backing: Path) -> List[str]:
    """The loop devices bound to this file (as it is now, not a deleted one)."""
    want = os.path.realpath(backing)
    out = []
    for name in sorted(os.listdir("/sys/block")):
        try:
            with open("/sys/block/%s/loop/backing_file" % name) as f:
                got = f.read().strip()
        except OSError:
            continue
        if got == want:
            out.append("/dev/" + name)
    return out


@contextmanager
def mounted(dev: str, mountpoint: Path, options: str = MOUNT_OPTIONS) -> Iterator[Path]:
    """ext4 on dev at mountpoint; unmounted at exit."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    run_command(["mount", "-t", "ext4", "-o", options, dev, str(mountpoint)])
    try:
        yield mountpoint
    finally:
        _retry(["umount", str(mountpoint)])


def fsck_check(image: Path) -> List[str]:
    """e2fsck -fn: [] if the file system is clean, else its complaints."""
    p = run_command(["e2fsck", "-fn", str(image)], check=False)
    if p.returncode == 0:
        return []
    lines = [l for l in (p.stdout + p.stderr).splitlines()
             if l.strip() and not l.startswith(("e2fsck ", "Pass ")) and "files (" not in l]
    return ["exit %d" % p.returncode] + lines[:12]


def kernel() -> str:
    return os.uname().release
