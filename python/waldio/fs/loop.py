"""Fresh file systems on loop devices, created and always released.

Owns: the whole lifecycle of a throw-away file system used by ``waldio trace``
and the tests: a sparse backing image in a private temporary directory, a loop
device attached to it (two for an external ext4 journal), ``mkfs``, ``mount``,
and the release of all of it.  External programs run through
:func:`waldio.fs.commands.run_command`.

Invariants:

* Every resource this module creates carries the name prefix
  :data:`RESOURCE_PREFIX` followed by the creating process id
  (``waldio-fs-<pid>-...``): the temporary directory, the image files inside
  it (so ``losetup`` shows them as backing files) and the mount point.
  :func:`leftover_resources` finds them by that prefix alone, so it never
  reports (and :func:`release_leftovers` never touches) anybody else's loop
  devices or mounts.
* :func:`loop_filesystem` releases everything it created, in reverse order,
  on normal exit, on any exception, on ``KeyboardInterrupt`` and on SIGTERM
  (converted to ``SystemExit`` while the context is active in the main
  thread).  SIGINT/SIGTERM arriving *during* the release are deferred until
  the release has finished, then re-delivered.
* Unmount is retried (the device may be briefly busy); if it still fails the
  mount is detached lazily and the loop device is set to auto-clear, and a
  :class:`CleanupError` is raised (never masking an exception already in
  flight).
* Images are sparse: only what the file system writes occupies disk space.
* ``mount_options`` is what the kernel reports in ``/proc/self/mountinfo``
  after mounting, not what was asked for (that is ``requested_mount_options``).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Protocol, Sequence

from .commands import CommandError, run_command

RESOURCE_PREFIX = "waldio-fs-"


KINDS: tuple[str, ...] = (
    "ext4",
    "ext4-writeback",
    "ext4-journal",
    "ext4-nojournal",
    "ext4-fastcommit",
    "ext4-extjournal",
    "xfs",
    "btrfs",
)


# Smallest image each kind accepts (mkfs.xfs >= 5.19 refuses < 300 MiB).
_MIN_SIZE_MIB = {"xfs": 320, "btrfs": 128}


_DEFAULT_SIZE_MIB = 256


_EXT4_BLOCK_SIZE = 4096


_EXTERNAL_JOURNAL_DEFAULT_MIB = 64


class CleanupError(RuntimeError):
    """Some resource could not be released cleanly (the message lists which)."""


class ImageDevice(Protocol):
    """Something between the image file and the loop device (waldio.device.EmulatedDevice)."""

    def start(self, image: str, workdir: str, release: Callable[[str, Callable[[], None]], None]
              ) -> str:
        """Start serving ``image``; the file the loop device is attached to (what it starts
        is stopped through ``release``)."""

    def loop_args(self) -> Sequence[str]:
        """Extra ``losetup`` arguments."""

    def attached(self, device: str) -> None:
        """The loop device is attached (before mkfs)."""

    def mounted(self) -> None:
        """The file system is made and mounted."""


@dataclass(frozen=True)
class KindSupport:
    """Whether one file-system kind can be created on this machine, and why not."""

    kind: str
    available: bool
    reason: str = ""


def _fs_type(kind: str) -> str:
    return kind.split("-", 1)[0]


def _mkfs_program(kind: str) -> str:
    return {"ext4": "mkfs.ext4", "xfs": "mkfs.xfs", "btrfs": "mkfs.btrfs"}[_fs_type(kind)]


def _kernel_has_fs(fstype: str) -> bool:
    try:
        with open("/proc/filesystems", encoding="ascii") as fh:
            if any(line.split()[-1] == fstype for line in fh if line.strip()):
                return True
    except OSError:
        return False
    release = os.uname().release
    return os.path.isdir(f"/lib/modules/{release}/kernel/fs/{fstype}")


def _common_missing() -> str:
    """Reason shared by all kinds (root, loop devices, tools), or ''."""
    if os.geteuid() != 0:
        return "needs root (loop devices and mount)"
    if not os.path.exists("/dev/loop-control") and not os.path.exists("/dev/loop0"):
        return "no loop device support (/dev/loop-control missing)"
    for tool in ("losetup", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (util-linux)"
    return ""


def _kind_missing(kind: str) -> str:
    fstype = _fs_type(kind)
    if not _kernel_has_fs(fstype):
        return f"kernel has no {fstype} support (/proc/filesystems)"
    program = _mkfs_program(kind)
    if shutil.which(program) is None:
        package = {"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs"}[fstype]
        return f"{program} not installed (Debian package {package})"
    return ""


def available_kinds() -> dict[str, KindSupport]:
    """Every kind in :data:`KINDS` with whether it can be created here and why not."""
    common = _common_missing()
    result: dict[str, KindSupport] = {}
    for kind in KINDS:
        reason = common or _kind_missing(kind)
        result[kind] = KindSupport(kind, not reason, reason)
    return result


def unavailable_reason(kind: str) -> Optional[str]:
    """None if ``kind`` can be created here, else the reason (for pytest.skip)."""
    if kind not in KINDS:
        raise ValueError(f"unknown file-system kind {kind!r}; known: {', '.join(KINDS)}")
    support = available_kinds()[kind]
    return None if support.available else support.reason


@dataclass
class LoopFilesystem:
    """A mounted file system on a loop device (valid only inside the context)."""

    kind: str
    device: str
    mountpoint: str
    image_path: str
    workdir: str
    size_mib: int
    mkfs_command: list[str]
    requested_mount_options: list[str]
    mount_options: str = ""
    journal_device: Optional[str] = None
    journal_image_path: Optional[str] = None
    journal_mkfs_command: Optional[list[str]] = None

    @property
    def fstype(self) -> str:
        """Kernel file-system type ("ext4", "xfs", "btrfs")."""
        return _fs_type(self.kind)

    @property
    def devices(self) -> list[str]:
        """The devices whose block I/O belongs to this file system."""
        return [d for d in (self.device, self.journal_device) if d]

    def path(self, *parts: str) -> str:
        """A path inside the mounted file system."""
        return os.path.join(self.mountpoint, *parts)

    def sync(self) -> None:
        """syncfs(2) on this file system only (falls back to sync(2))."""
        fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _libc_syncfs(fd) != 0:
                os.sync()
        finally:
            os.close(fd)

    def describe(self) -> dict[str, object]:
        """JSON-serializable manifest of how this file system was made."""
        return {
            "kind": self.kind,
            "device": self.device,
            "size_mib": self.size_mib,
            "mkfs_command": self.mkfs_command,
            "journal_mkfs_command": self.journal_mkfs_command,
            "requested_mount_options": self.requested_mount_options,
            "mount_options": self.mount_options,
            "journal_device": self.journal_device,
            "image_path": self.image_path,
        }


def _libc_syncfs(fd: int) -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syncfs(fd))
    except (OSError, AttributeError):
        return -1


def _kind_mkfs_options(kind: str) -> list[str]:
    # No lazy init: ext4lazyinit would otherwise write inode tables in the
    # background while a trace is running.
    ext4_base = ["-F", "-q", "-b", str(_EXT4_BLOCK_SIZE), "-E", "lazy_itable_init=0,lazy_journal_init=0"]
    return {
        "ext4": ext4_base,
        "ext4-writeback": ext4_base,
        "ext4-journal": ext4_base,
        "ext4-nojournal": ext4_base + ["-O", "^has_journal"],
        "ext4-fastcommit": ext4_base + ["-O", "fast_commit"],
        "ext4-extjournal": ext4_base,
        "xfs": ["-f", "-q"],
        "btrfs": ["-f", "-q"],
    }[kind]


def _kind_mount_options(kind: str) -> list[str]:
    return {
        "ext4-writeback": ["data=writeback"],
        "ext4-journal": ["data=journal"],
    }.get(kind, [])


def _mkfs_argv(kind: str, device: str, extra: Sequence[str], journal_device: Optional[str]) -> list[str]:
    argv = [_mkfs_program(kind), *_kind_mkfs_options(kind)]
    if journal_device:
        argv += ["-J", f"device={journal_device}"]
    return argv + list(extra) + [device]


def _journal_mkfs_argv(journal_device: str) -> list[str]:
    return ["mkfs.ext4", "-F", "-q", "-O", "journal_dev", "-b", str(_EXT4_BLOCK_SIZE), journal_device]


def minimum_size_mib(kind: str) -> int:
    """The smallest image mkfs accepts for this kind (xfs: 320 MiB)."""
    return _MIN_SIZE_MIB.get(_fs_type(kind), 16)


def _effective_size(kind: str, size_mib: Optional[int]) -> int:
    minimum = minimum_size_mib(kind)
    if size_mib is None:
        return max(_DEFAULT_SIZE_MIB, minimum)
    if size_mib < minimum:
        raise ValueError(f"{kind} needs at least {minimum} MiB, asked for {size_mib}")
    return size_mib


class _ReleaseStack:
    """Release callbacks run in reverse order; failures are collected, not raised early."""

    def __init__(self) -> None:
        self._steps: list[tuple[str, Callable[[], None]]] = []

    def push(self, what: str, step: Callable[[], None]) -> None:
        self._steps.append((what, step))

    def release_all(self) -> list[str]:
        failures: list[str] = []
        with _signals_deferred():
            while self._steps:
                what, step = self._steps.pop()
                try:
                    step()
                except Exception as exc:  # noqa: BLE001 - keep releasing the rest
                    failures.append(f"{what}: {exc}")
        return failures


_DEFERRABLE = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while releasing; re-deliver them afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in _DEFERRABLE}
    for sig in _DEFERRABLE:
        signal.signal(sig, lambda signum, _frame: pending.append(signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for pending_signum in pending:
            os.kill(os.getpid(), pending_signum)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """While active (main thread, default SIGTERM), SIGTERM raises SystemExit."""
    usable = threading.current_thread() is threading.main_thread()
    if not usable or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def on_term(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _create_sparse_image(path: str, size_mib: int) -> None:
    with open(path, "xb") as fh:
        fh.truncate(size_mib * 1024 * 1024)


def _attach_loop(image: str, extra: Sequence[str] = ()) -> str:
    return run_command(["losetup", "--find", "--show", *extra, image]).stdout.strip()


def _detach_loop(device: str, image: str) -> None:
    """Detach ``device`` if it is still backed by ``image`` (never someone else's)."""
    backing = _loop_backing_file(device)
    if backing is None or backing.removesuffix(" (deleted)") != os.path.realpath(image):
        return
    for attempt in range(20):
        try:
            run_command(["losetup", "-d", device])
            return
        except CommandError:
            if attempt == 19:
                raise
            time.sleep(0.05 * (attempt + 1))


def _detach_image(image: str) -> None:
    """Detach every loop device backed by ``image``."""
    wanted = os.path.realpath(image)
    for name in sorted(os.listdir("/sys/block")):
        backing = _loop_backing_file(name) if name.startswith("loop") else None
        if backing is not None and backing.removesuffix(" (deleted)") == wanted:
            _detach_loop(f"/dev/{name}", image)


def _loop_backing_file(device: str) -> Optional[str]:
    name = os.path.basename(device)
    try:
        with open(f"/sys/block/{name}/loop/backing_file", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _mountinfo() -> list[tuple[str, str, str, str]]:
    """(mountpoint, source, per-mount options, super options) for every mount."""
    rows = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            lf, rf = left.split(), right.split()
            if len(lf) < 6 or len(rf) < 3:
                continue
            rows.append((_unescape(lf[4]), rf[1], lf[5], rf[2]))
    return rows


def _unescape(field_text: str) -> str:
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field_text = field_text.replace(code, char)
    return field_text


def _mounted_options(mountpoint: str) -> str:
    """Options the kernel reports for ``mountpoint`` (per-mount + superblock, deduplicated)."""
    for target, _source, mnt_opts, super_opts in reversed(_mountinfo()):
        if target == mountpoint:
            merged: list[str] = []
            for opt in mnt_opts.split(",") + super_opts.split(","):
                if opt and opt not in merged:
                    merged.append(opt)
            return ",".join(merged)
    raise RuntimeError(f"{mountpoint} is not in /proc/self/mountinfo after mount")


def _is_mounted(mountpoint: str) -> bool:
    return any(target == mountpoint for target, *_ in _mountinfo())


def _mount(device: str, mountpoint: str, fstype: str, options: Sequence[str]) -> None:
    argv = ["mount", "-t", fstype]
    if options:
        argv += ["-o", ",".join(options)]
    run_command(argv + [device, mountpoint])


def unmount(mountpoint: str, attempts: int = 25) -> None:
    """Unmount (any file system, FUSE too), retrying while busy; as a last resort detach
    lazily and raise."""
    last = ""
    for attempt in range(attempts):
        if not _is_mounted(mountpoint):
            return
        proc = run_command(["umount", mountpoint], check=False)
        if proc.returncode == 0:
            return
        last = proc.stderr.strip()
        time.sleep(min(0.05 * (attempt + 1), 0.5))
    run_command(["umount", "-l", mountpoint], check=False)
    raise CleanupError(f"{mountpoint} stayed busy ({last}); detached lazily")


def _remove_workdir(base: str) -> None:
    """Remove our temporary directory, unless something is still mounted inside it."""
    busy = [t for t in _mountinfo_targets() if t.startswith(base + "/")]
    if busy:
        raise CleanupError(f"not removing {base}: still mounted: {', '.join(busy)}")
    shutil.rmtree(base, ignore_errors=True)


def _remove_file(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _default_workdir() -> str:
    return "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()


def _name(suffix: str) -> str:
    return f"{RESOURCE_PREFIX}{os.getpid()}-{suffix}"


def _setup(
    stack: _ReleaseStack,
    kind: str,
    size_mib: int,
    mkfs_options: Sequence[str],
    mount_options: Sequence[str],
    workdir: Optional[str],
    external_journal_mib: Optional[int],
    image_device: Optional[ImageDevice] = None,
) -> LoopFilesystem:
    base = tempfile.mkdtemp(prefix=_name(""), dir=workdir or _default_workdir())
    stack.push(f"remove {base}", lambda: _remove_workdir(base))
    journal_device = journal_image = None
    journal_mkfs: Optional[list[str]] = None
    if kind == "ext4-extjournal":
        journal_image = os.path.join(base, _name("journal.img"))
        _create_sparse_image(journal_image, external_journal_mib or _EXTERNAL_JOURNAL_DEFAULT_MIB)
        stack.push(f"remove {journal_image}", lambda: _remove_file(journal_image or ""))
        stack.push(f"detach loop of {journal_image}", lambda: _detach_image(journal_image or ""))
        journal_device = _attach_loop(journal_image)
        journal_mkfs = _journal_mkfs_argv(journal_device)
        run_command(journal_mkfs)
    image = os.path.join(base, _name(f"{kind}.img"))
    _create_sparse_image(image, size_mib)
    stack.push(f"remove {image}", lambda: _remove_file(image))
    backing = image_device.start(image, base, stack.push) if image_device else image
    stack.push(f"detach loop of {backing}", lambda: _detach_image(backing))
    device = _attach_loop(backing, image_device.loop_args() if image_device else ())
    if image_device:
        image_device.attached(device)
    mkfs = _mkfs_argv(kind, device, mkfs_options, journal_device)
    run_command(mkfs, timeout=300)
    mountpoint = os.path.join(base, _name("mnt"))
    os.mkdir(mountpoint)
    options = _kind_mount_options(kind) + list(mount_options)
    if journal_device:
        options.append(f"journal_path={journal_device}")
    # Release steps are registered before the action, so an interrupt that
    # lands between the action and the registration cannot leak it.
    stack.push(f"unmount {mountpoint}", lambda: unmount(mountpoint))
    _mount(device, mountpoint, _fs_type(kind), options)
    if image_device:
        image_device.mounted()
    return LoopFilesystem(
        kind=kind,
        device=device,
        mountpoint=mountpoint,
        image_path=image,
        workdir=base,
        size_mib=size_mib,
        mkfs_command=mkfs,
        requested_mount_options=options,
        mount_options=_mounted_options(mountpoint),
        journal_device=journal_device,
        journal_image_path=journal_image,
        journal_mkfs_command=journal_mkfs,
    )


@contextlib.contextmanager
def loop_filesystem(
    kind: str = "ext4",
    size_mib: Optional[int] = None,
    mkfs_options: Sequence[str] = (),
    mount_options: Sequence[str] = (),
    workdir: Optional[str] = None,
    external_journal_mib: Optional[int] = None,
    image_device: Optional[ImageDevice] = None,
) -> Iterator[LoopFilesystem]:
    """Create, mount and yield a fresh ``kind`` file system; release it all on exit.

    ``mkfs_options`` are appended to the kind's own mkfs options (before the
    device); ``mount_options`` to the kind's mount options.  ``workdir`` is the
    directory that receives the private temporary directory (default
    ``/var/tmp``, i.e. the root file system).  ``external_journal_mib`` sizes
    the journal device of "ext4-extjournal" (default 64 MiB).  ``image_device``
    (an emulated device, :class:`waldio.device.EmulatedDevice`) stands between the
    image and the loop device.
    """
    reason = unavailable_reason(kind)
    if reason:
        raise RuntimeError(f"cannot create a {kind} file system here: {reason}")
    if external_journal_mib is not None and kind != "ext4-extjournal":
        raise ValueError("external_journal_mib only applies to kind='ext4-extjournal'")
    size = _effective_size(kind, size_mib)
    stack = _ReleaseStack()
    with _sigterm_as_exit():
        try:
            yield _setup(stack, kind, size, mkfs_options, mount_options, workdir, external_journal_mib,
                         image_device)
        except BaseException as exc:
            failures = stack.release_all()
            if failures and hasattr(exc, "add_note"):
                exc.add_note("waldio.fsimage could not release: " + "; ".join(failures))
            raise
        failures = stack.release_all()
    if failures:
        raise CleanupError("could not release: " + "; ".join(failures))


@dataclass
class Leftovers:
    """Resources named with :data:`RESOURCE_PREFIX` that still exist."""

    loop_devices: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.loop_devices or self.mounts or self.directories)

    def to_dict(self) -> dict[str, list[str]]:
        return {"loop_devices": self.loop_devices, "mounts": self.mounts, "directories": self.directories}


def _ours(path: str, pid: Optional[int]) -> bool:
    prefix = RESOURCE_PREFIX if pid is None else f"{RESOURCE_PREFIX}{pid}-"
    return any(part.startswith(prefix) for part in path.split("/"))


def _our_loop_devices(pid: Optional[int]) -> list[str]:
    found = []
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir("/sys/block")):
            backing = _loop_backing_file(name) if name.startswith("loop") else None
            if backing and _ours(backing, pid):
                found.append(f"/dev/{name}")
    return found


def leftover_resources(pid: Optional[int] = None, workdir: Optional[str] = None) -> Leftovers:
    """Loop devices, mounts and temp directories created by this module that still exist.

    With ``pid`` only those of that process; otherwise those of any process.
    """
    mounts = [target for target, *_ in _mountinfo() if _ours(target, pid)]
    base = workdir or _default_workdir()
    dirs: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        dirs = sorted(os.path.join(base, n) for n in os.listdir(base) if _ours(n, pid))
    return Leftovers(_our_loop_devices(pid), mounts, dirs)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_pid(path: str) -> Optional[int]:
    for part in path.split("/"):
        if part.startswith(RESOURCE_PREFIX):
            digits = part[len(RESOURCE_PREFIX):].split("-", 1)[0]
            if digits.isdigit():
                return int(digits)
    return None


def release_leftovers(include_live: bool = False, workdir: Optional[str] = None) -> Leftovers:
    """Release resources of processes that died without cleaning up.

    Resources of live processes are left alone unless ``include_live``.
    Returns what was released.
    """
    found = leftover_resources(workdir=workdir)

    def dead(path: str) -> bool:
        owner = _owner_pid(path)
        return include_live or owner is None or not _pid_alive(owner)

    done = Leftovers()
    for mnt in sorted(filter(dead, found.mounts), key=len, reverse=True):
        with contextlib.suppress(CleanupError, CommandError):
            unmount(mnt)
            done.mounts.append(mnt)
    for dev in found.loop_devices:
        backing = (_loop_backing_file(dev) or "").removesuffix(" (deleted)")
        if dead(backing):
            with contextlib.suppress(CommandError):
                _detach_loop(dev, backing)
                done.loop_devices.append(dev)
    for directory in filter(dead, found.directories):
        with contextlib.suppress(CleanupError):
            _remove_workdir(directory)
            done.directories.append(directory)
    return done


def _mountinfo_targets() -> list[str]:
    return [target for target, *_ in _mountinfo()]


__all__ = [
    "KINDS",
    "RESOURCE_PREFIX",
    "CleanupError",
    "CommandError",
    "KindSupport",
    "Leftovers",
    "LoopFilesystem",
    "available_kinds",
    "leftover_resources",
    "loop_filesystem",
    "release_leftovers",
    "run_command",
    "unmount",
    "unavailable_reason",
]
