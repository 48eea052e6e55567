"""Emulated phone storage (issue 28): a device model under a loop file system.

    from waldio import device, fs
    dev = device.EmulatedDevice(device.load("emmc-2014"))
    with fs.loop_filesystem("ext4", 1024, image_device=dev) as lfs:
        run_workload(lfs.mountpoint)
        print(dev.stats())          # the model's own accounting

devmodel/device_model.c is the model (a FUSE file whose requests cost what a
profile says); ext4 sits on a loop device over it. One concern per module:

* :mod:`.profile`    profiles (profiles/*.json): parameters, their basis and
                     sources, the figures they must reproduce; loading and checking
* :mod:`.stack`      the model process, the loop device's settings, the
                     measurement of this machine's own overhead, the accounting
* :mod:`.calibrate`  the microbenchmarks that check a profile against its sources
* :mod:`.cli`        ``waldio device list | show | calibrate``

docs/device.md has the method, the profiles and the calibration results.
"""
from __future__ import annotations

from .profile import PARAMETERS, Profile, ProfileError, Target, load, names
from .stack import DeviceError, EmulatedDevice, unavailable_reason

__all__ = ["PARAMETERS", "Profile", "ProfileError", "Target", "load", "names", "DeviceError",
           "EmulatedDevice", "unavailable_reason"]
