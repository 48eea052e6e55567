"""The device section: the block-device stack under a file.

Walks from the file system's device down (loop device -> backing file -> the
disk holding it) and reads each layer's queue from sysfs: write cache,
FUA, logical/physical block size, rotational, scheduler, driver and model.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, List, Tuple

from .common import (
    UNKNOWN,
    WHY,
    Params,
    Section,
    Unknown,
    existing_path,
    is_known,
    majmin_of,
    read_int,
    read_text,
)
from .filesystem import block_source, btrfs_uuid, kernel_name, mount_of

_QUEUE_INT = ("rotational", "fua", "logical_block_size", "physical_block_size",
              "nr_requests", "write_zeroes_max_bytes", "discard_max_bytes")


def _scheduler(text: str) -> str:
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip()


def _describe_block(sysdir: str, via: str) -> Tuple[Params, List[Tuple[str, str]]]:
    """One device in the chain, and the (major:minor, via) devices below it."""
    s = Section()
    name = os.path.basename(sysdir)
    s.set("name", name)
    below: List[Tuple[str, str]] = []
    if os.path.isdir(f"{sysdir}/loop"):
        kind = "loop"
    elif os.path.isdir(f"{sysdir}/dm"):
        kind = "dm"
    elif os.path.isdir(f"{sysdir}/md"):
        kind = "md"
    elif os.path.exists(f"{sysdir}/partition"):
        kind = "partition"
    else:
        kind = "disk"
    s.set("kind", kind)
    s.set("via", via)
    s.read("major_minor", lambda: read_text(f"{sysdir}/dev"))
    s.read("size_bytes", lambda: read_int(f"{sysdir}/size") * 512)
    disk = os.path.dirname(sysdir) if kind == "partition" else sysdir
    if kind == "partition":
        s.set("disk", os.path.basename(disk))
        s.read("start_sector", lambda: read_int(f"{sysdir}/start"))
    if kind in ("disk", "partition"):
        s.read("driver", lambda: _driver(disk))
        for key, files in (("model", ("model",)), ("vendor", ("vendor",)),
                           ("firmware", ("firmware_rev", "rev"))):
            s.read(key, lambda fs=files: _first_file(f"{disk}/device", fs))
    s.read("write_cache", lambda: read_text(f"{disk}/queue/write_cache"))
    for key in _QUEUE_INT:
        s.read(key, lambda k=key: read_int(f"{disk}/queue/{k}"))
    s.read("scheduler", lambda: _scheduler(read_text(f"{disk}/queue/scheduler")))
    if os.path.isdir(f"{disk}/loop"):  # a loop device or a partition of one
        backing = s.read("backing_file", lambda: read_text(f"{disk}/loop/backing_file"))
        for key in ("dio", "offset", "sizelimit"):
            s.read(key, lambda k=key: read_int(f"{disk}/loop/{k}"))
        if is_known(backing):
            try:
                st = os.stat(backing)
                below.append((majmin_of(st.st_dev), f"holds {name}'s backing file"))
                bm = mount_of(backing)
                s.set("backing_fstype", bm["fstype"])
                s.set("backing_mount_point", bm["mount_point"])
                if os.major(st.st_dev) == 0 and block_source(bm):
                    below[-1] = (block_source(bm), below[-1][1])
            except Exception as e:  # noqa: BLE001
                s.unknown("backing_fstype", f"backing file not reachable here: {e}")
    if kind in ("dm", "md"):
        if kind == "dm":
            s.read("dm_name", lambda: read_text(f"{sysdir}/dm/name"))
        slaves = sorted(os.listdir(f"{sysdir}/slaves")) if \
            os.path.isdir(f"{sysdir}/slaves") else []
        s.set("slaves", slaves)
        for sl in slaves:
            try:
                below.append((read_text(f"{sysdir}/slaves/{sl}/dev"), f"under {name}"))
            except OSError:
                pass
    return s.done(), below


def _driver(disk: str) -> str:
    link = f"{disk}/device/driver"
    if not os.path.exists(link):
        raise Unknown(f"no {link} in sysfs")
    return os.path.basename(os.path.realpath(link))


def _first_file(directory: str, names: Iterable[str]) -> str:
    for n in names:
        p = f"{directory}/{n}"
        if os.path.exists(p):
            value = read_text(p)
            if value:
                return value
    where = "/".join(directory.split("/")[-2:])
    raise Unknown(f"sysfs has no {where}/{'|'.join(names)}")


def device_params(path: "os.PathLike[str] | str") -> Params:
    """Block-device chain under `path`: loop -> backing file's device -> disk."""
    s = Section()
    try:
        m = mount_of(path)
        st = os.stat(existing_path(path))
    except Exception as e:  # noqa: BLE001
        s.unknown("chain", str(e))
        return s.done()
    start: List[Tuple[str, str]] = []
    if os.major(st.st_dev) != 0 and os.path.exists(f"/sys/dev/block/{majmin_of(st.st_dev)}"):
        start.append((majmin_of(st.st_dev), "holds the path"))
    else:
        src = block_source(m)
        if m["fstype"] == "btrfs" and src:
            try:
                uuid = btrfs_uuid(kernel_name(src))
                for dev in sorted(os.listdir(f"/sys/fs/btrfs/{uuid}/devices")):
                    start.append((read_text(f"/sys/fs/btrfs/{uuid}/devices/{dev}/dev"),
                                  "btrfs member device"))
            except Exception:  # noqa: BLE001
                start = [(src, "mount source")]
        elif src:
            start.append((src, "mount source"))
    if not start:
        s.set("stack", f"no block device under {m['fstype']} ({m['source']})")
        s.set("chain", [])
        return s.done()
    chain: List[Params] = []
    seen = set()
    todo = list(start)
    while todo and len(chain) < 16:
        majmin, via = todo.pop(0)
        if majmin in seen:
            continue
        seen.add(majmin)
        link = f"/sys/dev/block/{majmin}"
        if not os.path.exists(link):
            chain.append({"name": UNKNOWN, "major_minor": majmin, "via": via,
                          WHY: {"name": f"{link} does not exist"}})
            continue
        node, below = _describe_block(os.path.realpath(link), via)
        chain.append(node)
        todo.extend(below)
    s.set("stack", " -> ".join(str(n["name"]) for n in chain))
    s.set("chain", chain)
    return s.done()
