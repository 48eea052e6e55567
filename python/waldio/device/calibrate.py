"""``waldio device calibrate``: does the emulated stack reproduce a profile's source figures?

Owns: the two microbenchmarks a profile's targets name, run on ext4 on the loop device
over the model (the stack ``waldio bench --device`` uses), and the comparison with the
source's figure:

* ``dio-seq-write``: one thread, O_DIRECT writes of SIZE bytes one after the other
  through a 16 MiB file written and synced beforehand (000 Fig. 6); MB/s (10^6 B).
  ``dio-rand-write`` and ``dio-rand-read``: the same at random SIZE-aligned places;
  requests per second (the IOPS of a device's data sheet, at queue depth 1).
* ``write-fsync``: THREADS threads, each with its own 10 MB file (written and synced
  beforehand), a buffered 4 KiB write at a random block followed by ``fsync()``
  (003 Table 1); operations per second over all threads.

Every target runs ``rounds`` times with the profile's costs and, interleaved, with the
model's costs off (``costs off``: this machine's own stack, the model's overhead,
shown next to the figure). Each run also records the model's accounting (requests,
flushes, charged device time, answers later than modelled) and how busy the machine's
CPUs were (every process's share, from /proc/stat). A target is within
tolerance when the median of its rounds is within ``tolerance`` of the source's
figure; a target without a source figure is measured and shown, not judged. Beside
each run's rate (work / wall time, the figure judged) the rate at the median request is
recorded: on a machine shared with other programs, the gap between the two is their
time slices, not the model.
"""
from __future__ import annotations

import os
import random
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from waldio import fs as fsimage
from waldio.bench.iostat import cpu_busy_share, read_cpu_ticks
from waldio.bench.provenance import timestamp, tool_info

from .profile import Profile, Target
from .stack import EmulatedDevice

TOLERANCE = 0.15
FILE_BYTES = 10 * 1000 * 1000        # 003: "File size: 10MB"
SEQ_FILE_BYTES = 16 << 20
FS_MIB = 256


@dataclass(frozen=True)
class Rate:
    """A run's rate (work / wall time), and the rate at its median request (work of one
    request / the median request's time; the threads' medians, for several threads): the
    second leaves out requests that waited for another program's time slice."""

    overall: float
    at_median: float


@dataclass
class Options:
    rounds: int = 5
    seconds: float = 1.5              # per run
    tolerance: float = TOLERANCE


def _prepare(path: str, size: int) -> None:
    """A file of size bytes, written (not fallocated: no unwritten extents) and synced."""
    chunk = b"\xa5" * (1 << 20)
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, len(chunk))
            f.write(chunk[:n])
            left -= n
        f.flush()
        os.fsync(f.fileno())


def dio_write_read(path: str, size: int, seconds: float, order: str, seed: int) -> Rate:
    """Back-to-back O_DIRECT requests of size bytes through a SEQ_FILE_BYTES file, one at a
    time: ``seq-write`` one after the other (wrapping at the end), ``rand-write`` and
    ``rand-read`` at random size-aligned places. MB/s, or requests/s for the random ones."""
    import mmap
    buf = mmap.mmap(-1, max(size, 4096))
    mv = memoryview(buf)[:size]
    fd = os.open(path, (os.O_RDONLY if order == "rand-read" else os.O_WRONLY) | os.O_DIRECT)
    rng = random.Random(seed)
    slots = SEQ_FILE_BYTES // size
    times: List[int] = []
    off = 0
    clock = time.perf_counter_ns
    try:
        t0 = clock()
        deadline = t0 + int(seconds * 1e9)
        t = t0
        while t < deadline:
            if order == "seq-write":
                os.pwrite(fd, mv, off)
                off = off + size if off + 2 * size <= SEQ_FILE_BYTES else 0
            elif order == "rand-write":
                os.pwrite(fd, mv, rng.randrange(slots) * size)
            else:
                os.preadv(fd, [mv], rng.randrange(slots) * size)
            t1 = clock()
            times.append(t1 - t)
            t = t1
    finally:
        os.close(fd)
        mv.release()
        buf.close()
    per_s, at_median = len(times) / ((t - t0) / 1e9), 1e9 / statistics.median(times)
    if order == "seq-write":
        return Rate(per_s * size / 1e6, at_median * size / 1e6)
    return Rate(per_s, at_median)


def write_fsync(paths: List[str], size: int, seconds: float, seed: int) -> Rate:
    """len(paths) threads, each a random size-byte write into its own file followed by
    fsync(): operations per second of all threads together."""
    counts = [0] * len(paths)
    times: List[List[int]] = [[] for _ in paths]
    start = threading.Barrier(len(paths) + 1)
    stop = threading.Event()
    errors: List[BaseException] = []
    block = b"\x5a" * size

    def worker(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        fd = os.open(paths[i], os.O_WRONLY)
        try:
            start.wait()
            blocks = FILE_BYTES // size
            clock = time.perf_counter_ns
            while not stop.is_set():
                t = clock()
                os.pwrite(fd, block, rng.randrange(blocks) * size)
                os.fsync(fd)
                times[i].append(clock() - t)
                counts[i] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            os.close(fd)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(paths))]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    every = [x for ts in times for x in ts]
    return Rate(sum(counts) / elapsed, len(paths) / (statistics.median(every) / 1e9))


def _runner(target: Target, root: str, seconds: float) -> Callable[[int], Rate]:
    """Prepare the target's files; a function running one round (its seed) and giving the
    rate in the target's unit."""
    if target.workload.startswith("dio-"):
        path = os.path.join(root, "dio.dat")
        if not os.path.exists(path):
            _prepare(path, SEQ_FILE_BYTES)
        order = target.workload[len("dio-"):]
        return lambda seed: dio_write_read(path, target.size, seconds, order, seed)
    paths = [os.path.join(root, f"fsync-{i}.dat") for i in range(target.threads)]
    for p in paths:
        if not os.path.exists(p):
            _prepare(p, FILE_BYTES)
    return lambda seed: write_fsync(paths, target.size, seconds, seed)


def _spread(values: List[float]) -> Dict[str, Any]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "values": [round(v, 3) for v in values]}


def _accounting(stats: Dict[str, Any]) -> Dict[str, Any]:
    """What the model did in one run (it was reset before)."""
    keys = ("requests", "bytes", "flush_covered_bytes", "rmw", "charged_us", "slept_us", "late",
            "late_us", "overrun_us", "wake_early_us", "max_inflight")
    return {k: stats[k] for k in keys}


def run(profile: Profile, opts: Options, progress: Callable[[str], None] = lambda s: None
        ) -> Dict[str, Any]:
    """Every target of the profile, rounds times, costs on and off interleaved."""
    dev = EmulatedDevice(profile)
    out: Dict[str, Any] = {"tool": dict(tool_info(), name="waldio device calibrate",
                                        started_utc=timestamp()),
                           "system": {"kernel": os.uname().release, "cpus": os.cpu_count()},
                           "profile": profile.to_json(), "rounds": opts.rounds,
                           "seconds_per_run": opts.seconds, "tolerance": opts.tolerance,
                           "file_system": "ext4 (waldio.fs defaults: 4 KiB blocks, data=ordered)",
                           "targets": []}
    with fsimage.loop_filesystem("ext4", FS_MIB, image_device=dev) as lfs:
        out["loop"] = lfs.describe()
        out["device"] = dev.describe()
        for target in profile.targets:
            run_round = _runner(target, lfs.mountpoint, opts.seconds)
            lfs.sync()
            emulated: List[float] = []
            at_median: List[float] = []
            own: List[float] = []
            acct: List[Dict[str, Any]] = []
            for rnd in range(opts.rounds):
                for costs in ("on", "off"):
                    dev.command(f"costs {costs}")
                    dev.command("reset")
                    cpu0 = read_cpu_ticks()
                    rate = run_round(rnd)
                    if costs == "on":
                        emulated.append(rate.overall)
                        at_median.append(rate.at_median)
                        busy = cpu_busy_share(cpu0, read_cpu_ticks())
                        acct.append(dict(_accounting(dev.stats()), machine_busy=None if busy is None
                                         else round(busy, 3)))
                    else:
                        own.append(rate.overall)
                progress(f"{target.figure}: round {rnd + 1}/{opts.rounds}: "
                         f"{emulated[-1]:.2f} {target.unit} (costs off {own[-1]:.2f})")
            dev.command("costs on")
            med = statistics.median(emulated)
            verdict: Optional[bool] = None
            if target.value is not None:
                verdict = abs(med / target.value - 1) <= opts.tolerance
            out["targets"].append({
                **target.to_json(), "emulated": _spread(emulated),
                "emulated_at_median_request": _spread(at_median), "costs_off": _spread(own),
                "ratio": round(med / target.value, 3) if target.value else None,
                "within_tolerance": verdict, "model_accounting": acct})
    out["ok"] = all(t["within_tolerance"] is not False for t in out["targets"])
    return out
