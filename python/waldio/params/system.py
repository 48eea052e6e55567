"""The system section: kernel, CPU, memory, and the software versions that ran.
"""
from __future__ import annotations

import os
import platform
from typing import Any

from .common import Params, Section, Unknown, raise_unknown, read_int, read_text


def _os_release() -> str:
    for p in ("/etc/os-release", "/usr/lib/os-release"):
        if os.path.exists(p):
            fields = dict(line.split("=", 1) for line in read_text(p).splitlines()
                          if "=" in line)
            if "PRETTY_NAME" in fields:
                return fields["PRETTY_NAME"].strip().strip('"')
    raise Unknown("no PRETTY_NAME in os-release")


def _cpuinfo_field(name: str) -> str:
    for line in read_text("/proc/cpuinfo").splitlines():
        k, _, v = line.partition(":")
        if k.strip() == name:
            return v.strip()
    raise Unknown(f"no '{name}' in /proc/cpuinfo")


def _meminfo_bytes(name: str) -> int:
    for line in read_text("/proc/meminfo").splitlines():
        if line.startswith(name + ":"):
            parts = line.split()
            return int(parts[1]) * (1024 if parts[-1] == "kB" else 1)
    raise Unknown(f"no {name} in /proc/meminfo")


def apsw_module() -> Any:
    import apsw  # noqa: PLC0415 - optional at import time of this module
    return apsw


def system_params() -> Params:
    """Host facts; no host name, user name or home directory."""
    s = Section()
    u = os.uname()
    s.set("kernel", f"{u.sysname} {u.release}")
    s.set("kernel_build", u.version)
    s.set("machine", u.machine)
    s.read("os", _os_release)
    s.read("cpu_model", lambda: _cpuinfo_field("model name"))
    s.read("cpu_count", lambda: os.cpu_count() or raise_unknown("os.cpu_count() is None"))
    s.read("cpus_usable", lambda: len(os.sched_getaffinity(0)))
    s.read("cpu_governor", lambda: read_text(
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
        if os.path.exists("/sys/devices/system/cpu/cpu0/cpufreq") else
        raise_unknown("no cpufreq in sysfs (virtual machine or fixed clock)"))
    s.read("cpu_hypervisor_flag", lambda: "hypervisor" in _cpuinfo_field("flags").split())
    s.read("memory_bytes", lambda: _meminfo_bytes("MemTotal"))
    for key in ("dirty_ratio", "dirty_background_ratio", "dirty_bytes",
                "dirty_background_bytes", "dirty_expire_centisecs",
                "dirty_writeback_centisecs"):
        s.read(f"vm.{key}", lambda k=key: read_int(f"/proc/sys/vm/{k}"))
    s.set("python", f"{platform.python_implementation()} {platform.python_version()}")
    s.read("apsw_version", lambda: apsw_module().apsw_version())
    s.read("apsw_sqlite_lib_version", lambda: apsw_module().sqlite_lib_version())
    return s.done()
