"""The file-system section: mount, mkfs-time features, journal.

From /proc/self/mountinfo (what is mounted where, with which options) and the
file system's own tools (dumpe2fs, xfs_info, btrfs): the features that change
SQLite results, e.g. whether ext4 journals (and how), its commit interval,
fast_commit, the xfs log, btrfs checksums and copy-on-write.
"""
from __future__ import annotations

import os
import re
from typing import Dict, Iterable, List, Optional, Tuple

from .common import (
    UNKNOWN,
    Params,
    Section,
    Unknown,
    existing_path,
    is_known,
    majmin_of,
    read_int,
    read_text,
    run_text,
)


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts(mountinfo: str = "/proc/self/mountinfo") -> List[Params]:
    """Parsed /proc/self/mountinfo, in file order."""
    out = []
    with open(mountinfo, encoding="utf-8", errors="replace") as f:
        for line in f:
            left, _, right = line.rstrip("\n").partition(" - ")
            a, b = left.split(), right.split()
            if len(a) < 6 or len(b) < 3:
                continue
            out.append({
                "major_minor": a[2],
                "mount_point": _unescape(a[4]),
                "mount_options": a[5].split(","),
                "fstype": b[0],
                "source": _unescape(b[1]),
                "super_options": b[2].split(","),
            })
    return out


def mount_of(path: "os.PathLike[str] | str") -> Params:
    """The mountinfo entry of the mount holding `path` (the topmost one)."""
    real = os.path.realpath(existing_path(path))
    dev = majmin_of(os.stat(real).st_dev)
    best: Optional[Tuple[int, int, int]] = None
    found: Optional[Params] = None
    for i, m in enumerate(mounts()):
        mp = m["mount_point"]
        if not (mp == "/" or real == mp or real.startswith(mp.rstrip("/") + "/")):
            continue
        rank = (len(mp), int(m["major_minor"] == dev), i)
        if best is None or rank > best:
            best, found = rank, m
    if found is None:
        raise Unknown(f"no mount in /proc/self/mountinfo holds {real}")
    return found


def kernel_name(majmin: str) -> str:
    """Kernel block-device name (vda, loop0, dm-0, sda1) of major:minor."""
    link = f"/sys/dev/block/{majmin}"
    if not os.path.exists(link):
        raise Unknown(f"{link} does not exist (not a block device)")
    return os.path.basename(os.path.realpath(link))


def block_source(m: Params) -> Optional[str]:
    """major:minor of the mount's block device, or None (tmpfs, nfs, ...)."""
    if not m["major_minor"].startswith("0:") and \
            os.path.exists(f"/sys/dev/block/{m['major_minor']}"):
        return m["major_minor"]
    src = m["source"]
    if src.startswith("/dev/"):
        try:
            st = os.stat(src)
        except OSError:
            return None
        if st.st_rdev:
            return majmin_of(st.st_rdev)
    return None


def _options_dict(options: Iterable[str]) -> Dict[str, str]:
    out = {}
    for opt in options:
        k, _, v = opt.partition("=")
        out[k] = v
    return out


def _dumpe2fs(device: str) -> Dict[str, str]:
    text = run_text(["dumpe2fs", "-h", device])
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    if "Filesystem features" not in out:
        raise Unknown(f"dumpe2fs -h {device}: no 'Filesystem features' line")
    return out


def _ext4(kname: str, device: str) -> Tuple[Params, str, str]:
    """ext4 details, and (journals, evidence)."""
    s = Section()
    opts = s.read("effective_options",
                  lambda: read_text(f"/proc/fs/ext4/{kname}/options").split())
    task = s.read("journal_task",
                  lambda: read_text(f"/sys/fs/ext4/{kname}/journal_task"))
    try:
        d2 = _dumpe2fs(device)
    except Exception as e:  # noqa: BLE001
        s.unknown("features", str(e) if isinstance(e, Unknown)
                  else f"{type(e).__name__}: {e}")
        for key in ("has_journal", "fast_commit", "block_size",
                    "journal_size", "journal_features", "journal_location",
                    "fast_commit_blocks", "default_mount_options"):
            s.unknown(key, "needs dumpe2fs (see ext4.features)")
    else:
        feats = d2["Filesystem features"].split()
        s.set("features", feats)
        s.set("has_journal", "has_journal" in feats)
        s.set("fast_commit", "fast_commit" in feats)
        s.read("block_size", lambda: int(d2["Block size"]))
        s.set("default_mount_options", d2.get("Default mount options", UNKNOWN))
        if "has_journal" in feats:
            s.read("journal_size", lambda: d2["Total journal size"])
            s.read("journal_features", lambda: d2["Journal features"].split())
            s.set("journal_location",
                  "external" if "Journal device" in d2 or "Journal UUID" in d2
                  else "internal")
            s.read("fast_commit_blocks", lambda: int(d2["Fast commit length"]))
        else:
            for key in ("journal_size", "journal_features", "journal_location",
                        "fast_commit_blocks"):
                s.set(key, "none")
    # journals: the kernel's live view first, the on-disk feature second
    if is_known(task):
        journals = "no" if task == "<none>" else "yes"
        evidence = (f"/sys/fs/ext4/{kname}/journal_task = {task} "
                    f"({'no jbd2 journal loaded' if journals == 'no' else 'jbd2 running'})")
    elif is_known(s.values.get("has_journal", UNKNOWN)):
        hj = s.values["has_journal"]
        noload = is_known(opts) and ("noload" in opts or "norecovery" in opts)
        journals = "yes" if hj and not noload else "no"
        evidence = f"dumpe2fs: has_journal {'present' if hj else 'absent'}" + \
            (" but mounted noload" if hj and noload else "")
    else:
        journals, evidence = UNKNOWN, "neither journal_task nor dumpe2fs readable"
    if is_known(s.values.get("has_journal", UNKNOWN)):
        verb = "include" if s.values["has_journal"] else "lack"
        evidence += f"; dumpe2fs features {verb} has_journal"
    else:
        evidence += f"; dumpe2fs: {s.why.get('features', '')}"
    eff = _options_dict(opts) if is_known(opts) else {}
    if journals == "no":
        s.set("data_mode", "none")
    elif "data" in eff:
        s.set("data_mode", eff["data"])
    else:
        s.unknown("data_mode", "no data= in the effective options")
    for key, opt in (("commit_s", "commit"),):
        if opt in eff:
            s.read(key, lambda o=opt: int(eff[o]))
        else:
            s.unknown(key, f"no {opt}= in the effective options")
    if is_known(opts):
        s.set("barrier", "nobarrier" not in opts)
        s.set("discard", "discard" in opts)
        s.set("dioread_nolock", "dioread_nolock" in opts)
        s.set("journal_checksum", "journal_checksum" in opts)
        s.set("journal_async_commit", "journal_async_commit" in opts)
    else:
        for key in ("barrier", "discard", "dioread_nolock", "journal_checksum",
                    "journal_async_commit"):
            s.unknown(key, "effective options unreadable")
    return s.done(), journals, evidence


def _xfs(mount_point: str) -> Tuple[Params, str, str]:
    s = Section()
    try:
        text = run_text(["xfs_info", mount_point])
    except Exception as e:  # noqa: BLE001
        s.unknown("xfs_info", str(e))
        return s.done(), "yes", f"XFS always logs metadata; xfs_info: {e}"
    info: Dict[str, str] = {}
    section = ""
    for line in text.splitlines():
        head, eq, rest = line.partition("=")
        if not eq:
            continue
        if head.strip():
            section = head.strip()
            m = re.match(r"\s*([^=]*?)\s+(?=\S+=)", rest + " x=")
            location = m.group(1) if m else rest.strip()
            if location and section != "meta-data":
                info[f"{section}.location"] = location
        for k, v in re.findall(r"([\w-]+)=([^\s,]+)", rest):
            info[f"{section}.{k}"] = v
    s.set("xfs_info", info)
    try:
        s.set("log_bytes", int(info["log.bsize"]) * int(info["log.blocks"]))
    except (KeyError, ValueError) as e:
        s.unknown("log_bytes", f"xfs_info has no log bsize/blocks ({e})")
    return s.done(), "yes", (f"XFS always logs metadata; xfs_info log = "
                             f"{info.get('log.location', UNKNOWN)}, "
                             f"{info.get('log.blocks', UNKNOWN)} blocks")


def btrfs_uuid(kname: str) -> str:
    root = "/sys/fs/btrfs"
    for uuid in sorted(os.listdir(root)):
        if os.path.exists(os.path.join(root, uuid, "devices", kname)):
            return uuid
    raise Unknown(f"no /sys/fs/btrfs/*/devices/{kname}")


def _btrfs(kname: str, options: List[str]) -> Tuple[Params, str, str]:
    s = Section()
    uuid = s.read("fsid", lambda: btrfs_uuid(kname))
    base = f"/sys/fs/btrfs/{uuid}"
    for key in ("nodesize", "sectorsize"):
        s.read(key, lambda k=key: read_int(f"{base}/{k}"))
    s.read("checksum", lambda: read_text(f"{base}/checksum"))
    s.read("features", lambda: sorted(os.listdir(f"{base}/features")))
    s.read("devices", lambda: sorted(os.listdir(f"{base}/devices")))
    for kind in ("data", "metadata"):
        s.read(f"{kind}_profile", lambda k=kind: sorted(
            d for d in os.listdir(f"{base}/allocation/{k}")
            if os.path.isdir(f"{base}/allocation/{k}/{d}")))
    tree_log = "notreelog" not in options
    s.set("tree_log", tree_log)
    return s.done(), "no", ("btrfs is copy-on-write (no metadata journal); fsync "
                            + ("writes the log tree" if tree_log
                               else "commits a transaction (notreelog)"))


def filesystem_params(path: "os.PathLike[str] | str") -> Params:
    """File system holding `path`: mount, options, features, journal."""
    s = Section()
    try:
        m = mount_of(path)
    except Exception as e:  # noqa: BLE001
        why = str(e)
        for key in ("mount_point", "source", "fstype", "mount_options",
                    "super_options", "journals", "journal_evidence"):
            s.unknown(key, why)
        return s.done()
    for key in ("mount_point", "source", "fstype", "mount_options", "super_options"):
        s.set(key, m[key])
    mopts, sopts = m["mount_options"], m["super_options"]
    s.set("read_only", "ro" in mopts or "ro" in sopts)
    s.set("atime", next((o for o in ("noatime", "relatime") if o in mopts),
                        "strictatime"))
    s.set("lazytime", "lazytime" in sopts or "lazytime" in mopts)
    s.set("sync", "sync" in sopts or "sync" in mopts)
    try:
        st = os.statvfs(existing_path(path))
    except OSError as e:
        for key in ("block_size", "size_bytes", "free_bytes", "used_percent"):
            s.unknown(key, f"statvfs: {e}")
    else:
        s.set("block_size", st.f_bsize)
        s.set("size_bytes", st.f_blocks * st.f_frsize)
        s.set("free_bytes", st.f_bavail * st.f_frsize)
        used = st.f_blocks - st.f_bfree  # as df computes Use%
        s.set("used_percent", round(100.0 * used / (used + st.f_bavail), 1)
              if used + st.f_bavail else 0.0)
    fstype = m["fstype"]
    majmin = block_source(m)
    kname = None
    if majmin:
        try:
            kname = kernel_name(majmin)
        except Unknown:
            kname = None
    if fstype in ("ext2", "ext3", "ext4"):
        if kname:
            dev = m["source"] if m["source"].startswith("/dev/") else f"/dev/{kname}"
            detail, journals, evidence = _ext4(kname, dev)
            s.set("ext4", detail)
        else:
            journals, evidence = UNKNOWN, f"no block device found for {m['source']}"
    elif fstype == "xfs":
        detail, journals, evidence = _xfs(m["mount_point"])
        s.set("xfs", detail)
    elif fstype == "btrfs" and kname:
        detail, journals, evidence = _btrfs(kname, sopts + mopts)
        s.set("btrfs", detail)
    elif fstype in ("tmpfs", "ramfs"):
        journals, evidence = "no", f"{fstype} lives in memory"
    else:
        journals, evidence = UNKNOWN, f"no journal detection for {fstype}"
    if journals == UNKNOWN:
        s.unknown("journals", evidence)
    else:
        s.set("journals", journals)
    s.set("journal_evidence", evidence)
    return s.done()
