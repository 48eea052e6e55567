"""The emulated device (issue 28): profiles, the model's accounting, bench --device.

* every shipped profile loads, cites a basis for each parameter and a source for
  each figure; a profile with a bad value is refused with a message naming the
  field, the value and what is accepted (the Python loader and devmodel/device_model);
* the model's own accounting (the ``ctl`` file), not wall-clock time: a latency is
  charged as the profile's formula says; a flush covers the writes before it and
  not those after; the cache caps what a flush pays for; a reliable write replaces
  the flush after a single write; costs off charges nothing;
* ``waldio bench --device`` runs on ext4 over the model and records the profile, the
  overhead probe and the model's accounting, and leaves no mount behind.

The model tests mount devmodel/device_model over a small image and write to its
``disk`` file directly (FOPEN_DIRECT_IO: each pwrite is one request of the model).
Skipped, with the reason, only where FUSE or root is missing.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from waldio import device as D
from waldio.device import profile as P
from waldio.device.stack import EmulatedDevice, model_binary

ROOT = Path(__file__).resolve().parents[2]


def _doc(name: str = "emmc-2014") -> Dict[str, Any]:
    return json.loads((P.PROFILE_DIR / f"{name}.json").read_text())


# ------------------------------------------------------------------ profiles

@pytest.mark.parametrize("name", P.names())
def test_shipped_profile_loads(name: str) -> None:
    pr = D.load(name)
    assert pr.name == name
    assert set(pr.device) == set(P.PARAMETERS)
    assert all(pr.basis[k].strip() for k in P.PARAMETERS)
    assert all(t.source in pr.sources for t in pr.targets)
    assert pr.models and pr.does_not_model
    args = pr.model_args()
    assert len(args) == len(P.MODEL_PARAMETERS) and all("=" in a for a in args)


def test_the_four_profiles_of_issue_28_ship() -> None:
    assert {"emmc-2014", "ufs-3", "sdcard-a1", "nvme"} <= set(P.names())


@pytest.mark.parametrize("change,message", [
    (lambda d: d["device"].update(flush_us=-1), "device.flush_us = -1 is out of range"),
    (lambda d: d["device"].update(write_mbps=0), "device.write_mbps = 0 is out of range"),
    (lambda d: d["device"].update(queue_depth=1.5), "device.queue_depth = 1.5 must be a whole"),
    (lambda d: d["device"].update(unit_bytes=1000), "must be a multiple of 512"),
    (lambda d: d["device"].update(flush_us="fast"), "device.flush_us must be a number"),
    (lambda d: d["device"].update(warp_speed=9), "unknown parameter(s) warp_speed"),
    (lambda d: d["device"].pop("rmw_us"), "missing parameter(s) rmw_us"),
    (lambda d: d["basis"].pop("rmw_us"), "missing for rmw_us"),
    (lambda d: d["targets"][0].update(source="nowhere"), "source 'nowhere' is not among"),
    (lambda d: d["targets"][0].update(workload="fio"), "workload 'fio': accepted"),
    (lambda d: d.update(colour="red"), "unknown field(s) colour"),
])
def test_profile_rejects_bad_values(change: Any, message: str) -> None:
    doc = copy.deepcopy(_doc())
    change(doc)
    with pytest.raises(P.ProfileError) as e:
        P.parse(doc, "bad.json")
    assert message in str(e.value) and str(e.value).startswith("bad.json")


def test_unknown_profile_names_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(P.ProfileError, match="shipped profiles are .*emmc-2014"):
        D.load("emmc-1999")
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    with pytest.raises(P.ProfileError, match="broken.json: not JSON"):
        D.load(str(bad))


def test_bench_refuses_an_unknown_device(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "waldio", "bench", "--device", "floppy",
                        "--transactions", "1", "--quiet"], capture_output=True, text=True,
                       cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
    assert p.returncode == 3 and "no device profile 'floppy'" in p.stderr


# ------------------------------------------------------------- the model

def _model_reason() -> str:
    if model_binary() is None:
        return "build/devmodel/device_model is not built"
    return ""


def test_model_refuses_a_bad_parameter(tmp_path: Path) -> None:
    """devmodel/device_model checks its parameters too, before it mounts anything."""
    if _model_reason():
        pytest.skip(_model_reason())
    image = tmp_path / "img"
    image.write_bytes(b"\0" * 4096)
    args = D.load("emmc-2014").model_args()
    bad = [a if not a.startswith("flush_us=") else "flush_us=-5" for a in args]
    p = subprocess.run([str(model_binary()), str(image), str(tmp_path / "m"), *bad],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "flush_us=-5: must be a number from 0" in p.stderr
    p = subprocess.run([str(model_binary()), str(image), str(tmp_path / "m"), *args[1:]],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "parameter queue_depth is missing" in p.stderr


# The profile of the accounting tests: round numbers, so that the charges are exact.
TEST_DEVICE = dict(queue_depth=1, read_us=10, read_mbps=100, write_us=20, write_mbps=40.96,
                   unit_bytes=4096, rmw_us=300, flush_us=500, flush_us_per_kib=10,
                   flush_empty_us=30, cache_kib=1024, discard_us=7, reliable_write_us=0,
                   max_request_kib=512)


class Mounted:
    """The model over a 1 MiB image, its disk file open for direct writes."""

    def __init__(self, dev: EmulatedDevice) -> None:
        self.dev = dev
        self.fd = os.open(os.path.join(dev.mountpoint, "disk"), os.O_RDWR)

    def write(self, off: int, n: int) -> None:
        assert os.pwrite(self.fd, b"w" * n, off) == n

    def flush(self) -> None:
        os.fsync(self.fd)

    def stats(self) -> Dict[str, Any]:
        return self.dev.stats()


@pytest.fixture
def model(tmp_path: Path, request: Any) -> Iterator[Mounted]:
    reason = D.unavailable_reason()
    if reason:
        if not os.path.exists("/dev/fuse"):
            pytest.skip(reason)
        pytest.fail(reason)
    overrides = getattr(request, "param", {})
    doc = _doc()
    doc["device"] = dict(TEST_DEVICE, **overrides)
    pr = P.parse(doc, "test")
    image = tmp_path / "image"
    image.write_bytes(b"\0" * (1 << 20))
    dev = EmulatedDevice(pr, probe=False)
    release: List[Any] = []
    try:
        dev.start(str(image), str(tmp_path), lambda what, step: release.append(step))
        dev.command("costs on")
        dev.command("reset")
        m = Mounted(dev)
        try:
            yield m
        finally:
            os.close(m.fd)
    finally:
        for step in reversed(release):
            step()
    assert not os.path.ismount(dev.mountpoint)


def _us(n_bytes: int, mbps: float) -> float:
    return n_bytes / mbps           # bytes / (10^6 B/s) in microseconds


def test_a_latency_is_charged(model: Mounted) -> None:
    """Whole units cost write_us + the transfer; a partial unit adds the read-modify-write."""
    model.write(0, 4096)
    st = model.stats()
    assert st["requests"]["write"] == 1 and st["rmw"] == 0
    assert st["charged_us"] == pytest.approx(20 + _us(4096, 40.96), abs=0.01)
    model.write(8192, 512)
    st = model.stats()
    assert st["rmw"] == 1
    assert st["charged_us"] == pytest.approx(2 * 20 + _us(4608, 40.96) + 300, abs=0.01)
    assert st["slept_us"] > 0           # the worker waited for the modelled completion


def test_a_flush_covers_earlier_writes(model: Mounted) -> None:
    for i in range(3):
        model.write(i * 4096, 4096)
    assert model.stats()["dirty_bytes"] == 3 * 4096
    model.flush()
    st = model.stats()
    assert st["requests"]["flush"] == 1 and st["flush_covered_bytes"] == 3 * 4096
    assert st["dirty_bytes"] == 0
    writes = 3 * (20 + _us(4096, 40.96))
    assert st["charged_us"] == pytest.approx(writes + 500 + 10 * 12, abs=0.01)
    model.flush()                        # nothing written since: the empty flush
    st = model.stats()
    assert st["flush_covered_bytes"] == 3 * 4096 and st["flushes_dirty"] == 1
    assert st["charged_us"] == pytest.approx(writes + 500 + 120 + 30, abs=0.01)
    model.write(0, 4096)                 # a write after the flush is not covered by it
    assert model.stats()["dirty_bytes"] == 4096


@pytest.mark.parametrize("model", [{"cache_kib": 8}], indirect=True)
def test_a_flush_pays_for_at_most_the_cache(model: Mounted) -> None:
    for i in range(4):
        model.write(i * 4096, 4096)
    model.flush()
    st = model.stats()
    assert st["flush_covered_bytes"] == 16384
    assert st["charged_us"] == pytest.approx(4 * (20 + _us(4096, 40.96)) + 500 + 10 * 8,
                                             abs=0.01)


@pytest.mark.parametrize("model", [{"reliable_write_us": 90}], indirect=True)
def test_a_flush_after_one_write_is_a_reliable_write(model: Mounted) -> None:
    model.write(0, 4096)
    model.flush()                        # write + flush: what a FUA write becomes on loop
    st = model.stats()
    assert st["reliable_writes"] == 1
    assert st["charged_us"] == pytest.approx(20 + _us(4096, 40.96) + 90, abs=0.01)
    model.write(0, 4096)
    model.write(4096, 4096)
    model.flush()                        # two writes: a real flush
    st = model.stats()
    assert st["reliable_writes"] == 1 and st["flushes_dirty"] == 2


def test_costs_off_charges_nothing_and_ctl_checks_its_commands(model: Mounted) -> None:
    model.dev.command("costs off")
    model.write(0, 512)
    model.flush()
    st = model.stats()
    assert st["costs"] == "off" and st["charged_us"] == 0 and st["requests"]["write"] == 1
    model.dev.command("overhead_us 12.5 0.25")
    st = model.stats()
    assert st["overhead_us"] == 12.5 and st["overhead_us_per_kib"] == 0.25
    for bad in ("overhead_us -3", "overhead_us 1 -1", "overhead_us 1 2 3", "costs sideways"):
        with pytest.raises(D.DeviceError, match="refused"):
            model.dev.command(bad)


# ---------------------------------------------------------- bench --device

def test_bench_on_the_emulated_device(tmp_path: Path) -> None:
    """A short bench on ext4 over emmc-2014: the record names the device, its
    parameters, the overhead probe and the model's accounting; nothing stays mounted."""
    reason = D.unavailable_reason()
    if reason:
        if not os.path.exists("/dev/fuse") or not os.path.exists("/dev/loop-control"):
            pytest.skip(reason)
        pytest.fail(reason)
    out = tmp_path / "b.json"
    p = subprocess.run([sys.executable, "-m", "waldio", "bench", "--device", "emmc-2014",
                        "--modes", "wal-full,waldio-full", "--transactions", "40",
                        "--repetitions", "1", "--warmup", "0", "--no-calibration",
                        "--json", str(out), "--quiet", "--plain"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
    assert p.returncode == 0, p.stderr + p.stdout
    doc = json.loads(out.read_text())
    dev = doc["params"]["target"]["device"]
    assert dev["profile"]["name"] == "emmc-2014"
    assert dev["profile"]["parameters"]["flush_us"] == D.load("emmc-2014").device["flush_us"]
    assert dev["overhead_probe"]["overhead_us"] >= 0 and dev["back_dating_us"] >= 0
    acct = dev["accounting"]
    assert acct["costs"] == "on"
    assert acct["requests"]["write"] > 0 and acct["requests"]["flush"] >= 80  # 2 x 40 commits
    assert acct["charged_us"] > 0
    assert "over an emulated emmc-2014 device" in doc["params"]["target"]["note"]
    with open("/proc/self/mountinfo") as f:
        assert str(tmp_path) not in f.read()


def test_calibrate_measures_each_target_with_costs_on_and_off() -> None:
    """One short round of one figure: the record has the emulated and costs-off rates, the
    model's accounting of the run with costs on, the probe and a verdict."""
    reason = D.unavailable_reason()
    if reason:
        if not os.path.exists("/dev/fuse") or not os.path.exists("/dev/loop-control"):
            pytest.skip(reason)
        pytest.fail(reason)
    import dataclasses
    from waldio.device import calibrate as C
    pr = D.load("emmc-2014")
    target = next(t for t in pr.targets if t.workload == "dio-seq-write" and t.size == 16384)
    doc = C.run(dataclasses.replace(pr, targets=(target,)), C.Options(rounds=1, seconds=0.2))
    t = doc["targets"][0]
    assert t["figure"] == target.figure and t["value"] == 70
    assert t["emulated"]["median"] > 0 and t["costs_off"]["median"] > 0
    assert isinstance(t["within_tolerance"], bool) and doc["ok"] == t["within_tolerance"]
    acct = t["model_accounting"][0]
    assert acct["requests"]["write"] > 0 and acct["bytes"]["write"] >= 16384
    assert acct["charged_us"] > 0 and acct["rmw"] == 0      # whole 4 KiB units
    assert doc["device"]["overhead_probe"]["overhead_us"] >= 0
    assert doc["tool"]["name"] == "waldio device calibrate"
