"""I/O accounting without root: block-device and process counters.

* Block device: ``/sys/class/block/<dev>/stat`` of the device holding the
  database (for a loop file system: the loop device, which sees the file
  system's journal and data and nothing else); sectors written and flush
  requests; also the disk holding a loop device's backing file.
* Process: ``/proc/self/io`` (``write_bytes``, ``syscw``, ``wchar``).
* CPU: the first line of ``/proc/stat`` (every CPU of the machine, every process),
  to say how busy the machine was while a run was timed.
* An emulated device (``--device``; waldio.device): the model under the loop
  device reports its own counters in its ``ctl`` file, among them the device time
  it charged (``device_ms``) and the answers later than modelled (``late``).
The counters include every other writer of the device.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from waldio import params as _params

_STAT_FIELDS = ("read_ios", "read_merges", "read_sectors", "read_ticks", "write_ios",
                "write_merges", "write_sectors", "write_ticks", "in_flight", "io_ticks",
                "time_in_queue", "discard_ios", "discard_merges", "discard_sectors",
                "discard_ticks", "flush_ios", "flush_ticks")


@dataclass
class Device:
    name: str
    role: str               # "holds the database" / "holds the loop device's backing file"
    stat_path: str
    kind: str               # disk / partition / loop / ...


def _sysfs_name(majmin: str) -> Optional[str]:
    link = f"/sys/dev/block/{majmin}"
    return os.path.basename(os.path.realpath(link)) if os.path.exists(link) else None


def _kind_of(name: str) -> str:
    base = f"/sys/class/block/{name}"
    if os.path.isdir(f"{base}/loop"):
        return "loop"
    if os.path.isdir(f"{base}/dm"):
        return "dm"
    if os.path.exists(f"{base}/partition"):
        return "partition"
    return "disk"


def _device_of_path(path: str) -> Optional[str]:
    st = os.stat(path)
    majmin = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    name = _sysfs_name(majmin) if os.major(st.st_dev) != 0 else None
    if name:
        return name
    try:  # btrfs and other anonymous st_dev: the mount's source device
        src = _params.mount_of(path)["source"]
        if src.startswith("/dev/"):
            rdev = os.stat(src).st_rdev
            if rdev:
                return _sysfs_name(f"{os.major(rdev)}:{os.minor(rdev)}")
    except Exception:  # noqa: BLE001
        return None
    return None


def devices_for(path: str) -> List[Device]:
    """The block device holding ``path`` and, for a loop device, the one below it."""
    out: List[Device] = []
    name = _device_of_path(path)
    if not name:
        return out
    kind = _kind_of(name)
    out.append(Device(name, "holds the database", f"/sys/class/block/{name}/stat", kind))
    if kind == "loop":
        try:
            backing = _params.read_text(f"/sys/class/block/{name}/loop/backing_file")
            ctl = os.path.join(os.path.dirname(backing), "ctl")
            below = _device_of_path(backing.removesuffix(" (deleted)"))
            if os.path.basename(backing) == "disk" and os.path.exists(ctl):
                out.append(Device("model", f"the emulated device under {name}", ctl, "model"))
            elif below and below != name:
                out.append(Device(below, f"holds {name}'s backing file",
                                  f"/sys/class/block/{below}/stat", _kind_of(below)))
        except Exception:  # noqa: BLE001
            pass
    return out


def read_device(dev: Device) -> Dict[str, int]:
    if dev.kind == "model":
        return _read_model(dev.stat_path)
    with open(dev.stat_path) as f:
        vals = [int(x) for x in f.read().split()]
    return {k: v for k, v in zip(_STAT_FIELDS, vals)}


def _read_model(ctl: str) -> Dict[str, int]:
    """The emulated device's counters (devmodel/device_model.c) in /sys stat's names,
    with the device time it charged (us) and its late answers."""
    with open(ctl, encoding="ascii") as f:
        st = json.loads(f.read())
    req, by = st["requests"], st["bytes"]
    return {"read_ios": req["read"], "read_sectors": by["read"] // 512,
            "write_ios": req["write"] + req["zero"],
            "write_sectors": (by["write"] + by["zero"]) // 512,
            "flush_ios": req["flush"], "discard_sectors": by["discard"] // 512,
            "charged_us": int(st["charged_us"]), "late": st["late"]}


def read_proc_io() -> Dict[str, int]:
    out: Dict[str, int] = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k.strip()] = int(v)
    except OSError:
        pass
    return out


def device_delta(a: Dict[str, int], b: Dict[str, int]) -> Dict[str, Any]:
    d = {k: b[k] - a[k] for k in a if k in b}
    return {"write_bytes": d.get("write_sectors", 0) * 512,
            "write_ios": d.get("write_ios", 0),
            "read_bytes": d.get("read_sectors", 0) * 512,
            "read_ios": d.get("read_ios", 0),
            "flushes": d["flush_ios"] if "flush_ios" in d else None,
            "discard_bytes": d.get("discard_sectors", 0) * 512,
            **({"device_ms": d["charged_us"] / 1000, "late": d["late"]}
               if "charged_us" in d else {})}


def proc_delta(a: Dict[str, int], b: Dict[str, int]) -> Dict[str, Any]:
    return {k: (b[k] - a[k]) if k in a and k in b else None
            for k in ("write_bytes", "wchar", "syscw", "read_bytes", "rchar", "syscr",
                      "cancelled_write_bytes")}


def read_cpu_ticks() -> Dict[str, int]:
    """Machine-wide CPU time in clock ticks: busy (user, nice, system, irq, softirq,
    steal) and idle (idle, iowait); and ctxt, the context switches since boot; empty
    when /proc/stat cannot be read."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    first = lines[0].split() if lines else []
    if not first or first[0] != "cpu":
        return {}
    v = [int(x) for x in first[1:9]] + [0] * max(0, 8 - len(first[1:9]))
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    out = {"busy": user + nice + system + irq + softirq + steal, "idle": idle + iowait}
    for line in lines:
        if line.startswith("ctxt "):
            out["ctxt"] = int(line.split()[1])
    return out


def cpu_busy_share(a: Dict[str, int], b: Dict[str, int]) -> Optional[float]:
    """The share of all CPUs' time that was busy between two readings (0..1)."""
    if not a or not b:
        return None
    busy, idle = b["busy"] - a["busy"], b["idle"] - a["idle"]
    return busy / (busy + idle) if busy + idle > 0 else None


class Snapshot:
    def __init__(self, devices: List[Device]) -> None:
        self.dev = [read_device(d) for d in devices]
        self.proc = read_proc_io()
        self.cpu = read_cpu_ticks()


def device_windows(devices: List[Device], s0: Snapshot, s1: Snapshot, s2: Snapshot
                   ) -> List[Dict[str, Any]]:
    """Per device, what it did in the timed window (s0..s1) and the total one (s0..s2)."""
    return [{"name": dv.name, "role": dv.role, "kind": dv.kind,
             "timed": device_delta(s0.dev[i], s1.dev[i]),
             "total": device_delta(s0.dev[i], s2.dev[i])} for i, dv in enumerate(devices)]


DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_page_cache() -> None:
    """``echo 3 > /proc/sys/vm/drop_caches``, as Mobibench does before timing: clean
    page-cache pages, dentries and inodes are dropped (dirty ones stay)."""
    with open(DROP_CACHES, "w") as f:
        f.write("3\n")


def settle(path: str, drop_caches: bool) -> None:
    """Before a timed region: earlier writes on the disk, the directory synced, and
    with ``drop_caches`` the page cache dropped."""
    os.sync()
    sync_dir(path)
    if drop_caches:
        drop_page_cache()


def sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
