"""The emulated device under a file system: the model process, its loop device, its overhead.

Owns: starting devmodel/device_model over an image file (:class:`EmulatedDevice`),
the loop device's settings that belong to the device (``--direct-io=on``, so that
the loop device keeps several requests in flight and a UFS profile's queue is
used; ``max_sectors_kb`` from the profile), measuring this machine's own
overhead on the raw loop device, per request and per KiB (:func:`probe_overhead`:
the back-dating the model then applies, device_model.c), and reading the model's
accounting (the ``ctl`` file).

:class:`EmulatedDevice` is what :func:`waldio.fs.loop_filesystem` takes as
``image_device``: the file system module makes the image, the loop device, mkfs
and the mount as for any loop file system, and calls this class at each step
(:meth:`~EmulatedDevice.start`, :meth:`~EmulatedDevice.attached`,
:meth:`~EmulatedDevice.mounted`). Every resource started here is released through
the release callback it was given, also when a later step fails.

Invariants: the model runs with the profile's parameters from start to end. Its
costs are off until the file system is mounted (mkfs is setup, not the device under
test; the probe sets its own fixed cost), then on, with the back-dating measured and
the accounting reset, so the accounting a run reads covers that run only.
"""
from __future__ import annotations

import json
import mmap
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from waldio import library
from waldio.fs import unmount

from .profile import Profile

Release = Callable[[str, Callable[[], None]], None]

PROBE_REQUESTS = 400       # 4 KiB direct writes per probe round
PROBE_ROUNDS = 5
PROBE_FIXED_US = 250       # what the model charges each of them


class DeviceError(RuntimeError):
    """The model could not be started, probed or read."""


def model_binary() -> Optional[Path]:
    """build/devmodel/device_model ($WALDIO_DEVICE_MODEL), or None."""
    return library.build_program("devmodel/device_model", "WALDIO_DEVICE_MODEL")


def unavailable_reason() -> Optional[str]:
    """Why an emulated device cannot be made here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    if os.geteuid() != 0:
        return "needs root (FUSE mount of the model, losetup, mount)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (Debian package fuse3)"
    if model_binary() is None:
        return ("build/devmodel/device_model is not built (libfuse3 not found by CMake: Debian "
                "libfuse3-dev)")
    return None


class EmulatedDevice:
    """One device model process serving one image (see the module docstring)."""

    def __init__(self, profile: Profile, probe: bool = True) -> None:
        self.profile = profile
        self.probe = probe
        self.mountpoint = ""
        self.loop_device = ""
        self.overhead: Dict[str, Any] = {}
        self._proc: Optional[subprocess.Popen] = None
        self._errlog = ""

    # ---- waldio.fs.loop_filesystem's side
    def start(self, image: str, workdir: str, release: Release) -> str:
        """Mount the model over ``image`` with its costs off; the file to attach the loop
        device to."""
        reason = unavailable_reason()
        if reason:
            raise DeviceError(f"cannot emulate {self.profile.name} here: {reason}")
        self.mountpoint = os.path.join(workdir, "device")
        os.mkdir(self.mountpoint)
        release(f"stop the device model at {self.mountpoint}", self._stop)
        self._start_process(image)
        self.command("costs off")
        return os.path.join(self.mountpoint, "disk")

    def loop_args(self) -> List[str]:
        """Extra losetup arguments: direct I/O, so requests overlap as the queue allows."""
        return ["--direct-io=on"]

    def attached(self, device: str) -> None:
        """The loop device is attached: cap its requests, and measure this machine's stack."""
        self.loop_device = device
        with open(f"/sys/block/{os.path.basename(device)}/queue/max_sectors_kb", "w") as f:
            f.write(f"{int(self.profile.device['max_request_kib'])}\n")
        if self.probe:
            self.overhead = probe_overhead(device, self,
                                           min(512, int(self.profile.device["max_request_kib"])))

    def mounted(self) -> None:
        """The file system is made and mounted (with the costs off: mkfs is setup, not the
        device under test): from here on requests cost what the profile says, arrivals are
        back-dated by the overhead measured, and the accounting starts."""
        if self.overhead:
            self.command(f"overhead_us {self.overhead['overhead_us']:.3f} "
                         f"{self.overhead['overhead_us_per_kib']:.4f}")
        self.command("costs on")
        self.command("reset")

    # ---- the model's control file
    @property
    def ctl_path(self) -> str:
        return os.path.join(self.mountpoint, "ctl")

    def stats(self) -> Dict[str, Any]:
        """The model's parameters and accounting since the last reset."""
        with open(self.ctl_path, encoding="ascii") as f:
            return json.loads(f.read())

    def command(self, text: str) -> None:
        """One control line (device_model.c: reset, costs on|off|fixed US, overhead_us US)."""
        fd = os.open(self.ctl_path, os.O_WRONLY)
        try:
            os.write(fd, text.encode("ascii") + b"\n")
        except OSError as e:
            raise DeviceError(f"device model refused {text!r}: {e.strerror}") from e
        finally:
            os.close(fd)

    def describe(self) -> Dict[str, Any]:
        """What a result records: the profile, the model's parameters, the overhead probe."""
        return {"profile": self.profile.to_json(), "model": str(model_binary()),
                "loop_device": self.loop_device, "loop_direct_io": True,
                "overhead_probe": self.overhead or None,
                "back_dating_us": self.overhead.get("overhead_us", 0.0) if self.overhead else 0.0,
                "back_dating_us_per_kib": (self.overhead.get("overhead_us_per_kib", 0.0)
                                           if self.overhead else 0.0)}

    # ---- the process
    def _start_process(self, image: str) -> None:
        binary = model_binary()
        assert binary is not None
        self._errlog = os.path.join(os.path.dirname(self.mountpoint), "device_model.stderr")
        with open(self._errlog, "a") as err:
            self._proc = subprocess.Popen(
                [str(binary), image, self.mountpoint, *self.profile.model_args()],
                stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.ctl_path):
            if self._proc.poll() is not None:
                raise DeviceError(f"device_model exited {self._proc.returncode}: "
                                  f"{Path(self._errlog).read_text()[-800:]}")
            if time.monotonic() > deadline:
                raise DeviceError(f"device_model did not mount {self.mountpoint} within 10 s")
            time.sleep(0.01)

    def _stop(self) -> None:
        if self._proc is None:
            return
        try:
            if os.path.ismount(self.mountpoint):
                unmount(self.mountpoint)
        finally:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


def probe_overhead(device: str, model: "EmulatedDevice", big_kib: int) -> Dict[str, Any]:
    """This machine's own time around a request: direct writes to the raw loop device,
    one at a time, while the model charges every request exactly PROBE_FIXED_US (``costs
    fixed``): what the application waits beyond that is the stack's (system call, block
    layer, loop device, FUSE, copying the data, the wake-up of a thread that slept).
    Measured for 4 KiB writes and for writes of big_kib (the profile's largest request),
    PROBE_ROUNDS rounds each, a round's figure being its median write; the back-dating is
    the straight line through the two medians: so much per request and so much per KiB.
    The round trip with the costs off (a busy stack that never sleeps) is recorded beside
    it."""
    fd = os.open(device, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, big_kib * 1024)

    def excess(kib: int, n: int) -> float:
        """The median time of n writes of kib KiB, minus the model's charge, in us."""
        mv = memoryview(buf)[:kib * 1024]
        times = []
        for i in range(n):
            t0 = time.perf_counter_ns()
            os.pwrite(fd, mv, i * kib * 1024)
            times.append(time.perf_counter_ns() - t0)
        mv.release()
        return statistics.median(times) / 1e3 - PROBE_FIXED_US

    try:
        small: List[float] = []
        big: List[float] = []
        idle: List[float] = []
        for _ in range(PROBE_ROUNDS):
            model.command(f"costs fixed {PROBE_FIXED_US}")
            small.append(excess(4, PROBE_REQUESTS))
            big.append(excess(big_kib, PROBE_REQUESTS // 4))
            model.command("costs off")
            idle.append(excess(4, PROBE_REQUESTS) + PROBE_FIXED_US)
    finally:
        buf.close()
        os.close(fd)
    per_kib = max(0.0, (statistics.median(big) - statistics.median(small)) / (big_kib - 4))
    per_request = max(0.0, statistics.median(small) - 4 * per_kib)
    return {"overhead_us": round(per_request, 3), "overhead_us_per_kib": round(per_kib, 4),
            "around_fixed_cost_us": _spread(small), f"around_fixed_cost_{big_kib}k_us": _spread(big),
            "costs_off_round_trip_us": _spread(idle), "rounds": PROBE_ROUNDS,
            "requests_per_round": PROBE_REQUESTS, "big_requests_per_round": PROBE_REQUESTS // 4,
            "big_kib": big_kib, "fixed_cost_us": PROBE_FIXED_US,
            "method": f"O_DIRECT pwrite to the raw loop device, one at a time, 4 KiB and "
                      f"{big_kib} KiB; the model charging {PROBE_FIXED_US} us per request: "
                      f"overhead = a round's median write minus {PROBE_FIXED_US} us; back-dating "
                      f"= the line through the median rounds' overheads at 4 and {big_kib} KiB"}


def _spread(values: List[float]) -> Dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}
