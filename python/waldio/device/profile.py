"""Device profiles: what an emulated device's requests cost, and where each figure comes from.

Owns: reading a profile (a JSON file in ``profiles/``, or any path), checking
every value, and turning it into the command line of the device model
(devmodel/device_model.c). A profile file holds:

* ``name``, ``summary``; ``models`` and ``does_not_model`` (lists of sentences);
* ``device``: the model's parameters (:data:`PARAMETERS`: name -> unit, range);
* ``basis``: for every parameter, where its value comes from (a source figure and
  the arithmetic, or "no source: assumed ..." with the reason);
* ``sources``: the documents cited, by key;
* ``targets``: the source's own device figures that ``waldio device calibrate``
  must reproduce on the emulated stack (:class:`Target`; a target without a value
  is a point no source gives a figure for: measured and shown, not checked), and
  ``unchecked``: figures a source gives that the emulated stack cannot check, each
  with the reason.

Invariants: a loaded :class:`Profile` has every parameter, each a finite number in
its range (queue_depth and unit_bytes whole, unit_bytes a multiple of 512), a basis
for each, and targets whose source key is among its sources; anything else raises
:class:`ProfileError` naming the file, the field, the value and what is accepted.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"

# name -> (unit and meaning, lowest, highest); the order is the model's.
PARAMETERS: Dict[str, Tuple[str, float, float]] = {
    "queue_depth": ("requests the device serves at once (1: eMMC and SD serialise)", 1, 256),
    "read_us": ("us of command latency per read", 0, 1e6),
    "read_mbps": ("MB/s (10^6 B) the medium reads at", 0.001, 1e6),
    "write_us": ("us of command latency per write", 0, 1e6),
    "write_mbps": ("MB/s the medium writes at, into the device's cache", 0.001, 1e6),
    "unit_bytes": ("the device's write unit: a write not made of whole units pays rmw_us", 512,
                   1 << 20),
    "rmw_us": ("us of read-modify-write for a write that is not whole units (the small-request "
               "penalty)", 0, 1e6),
    "flush_us": ("us per cache flush that has something to write", 0, 1e7),
    "flush_us_per_kib": ("us per KiB written since the last flush, added to flush_us", 0, 1e6),
    "flush_empty_us": ("us per cache flush with nothing written since the last", 0, 1e7),
    "cache_kib": ("KiB of the device's write cache: a flush pays flush_us_per_kib for at most "
                  "this much", 0, 1 << 24),
    "discard_us": ("us per discard request", 0, 1e7),
    "reliable_write_us": ("us of a flush right after exactly one write (what the loop device "
                          "makes of a FUA write), instead of the flush formula; 0: off", 0, 1e7),
    "max_request_kib": ("largest request the device takes (the loop device's max_sectors_kb)", 4,
                        4096),
}
WHOLE = ("queue_depth", "unit_bytes", "max_request_kib")
# Parameters the FUSE model takes; max_request_kib is set on the loop device.
MODEL_PARAMETERS = tuple(p for p in PARAMETERS if p != "max_request_kib")

# What a calibration target runs (python/waldio/device/calibrate.py).
WORKLOADS = ("dio-seq-write", "dio-rand-write", "dio-rand-read", "write-fsync")
UNITS = ("MB/s", "IOPS")


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file, field and value."""


@dataclass(frozen=True)
class Target:
    """A source's device figure the emulated stack must reproduce within the tolerance."""

    figure: str          # e.g. "003 Table 1, 1 thread"
    source: str          # a key of the profile's sources
    workload: str        # one of WORKLOADS
    size: int            # bytes per request
    threads: int
    value: Optional[float]   # the source's figure; None: no source gives one (shown, not checked)
    unit: str                # one of UNITS
    note: str = ""

    def to_json(self) -> Dict[str, Any]:
        return {"figure": self.figure, "source": self.source, "workload": self.workload,
                "size": self.size, "threads": self.threads, "value": self.value,
                "unit": self.unit, "note": self.note}


@dataclass(frozen=True)
class Profile:
    name: str
    path: str
    summary: str
    models: Tuple[str, ...]
    does_not_model: Tuple[str, ...]
    device: Dict[str, float]
    basis: Dict[str, str]
    sources: Dict[str, str]
    targets: Tuple[Target, ...]
    unchecked: Tuple[str, ...]

    def model_args(self) -> List[str]:
        """NAME=VALUE arguments of devmodel/device_model."""
        return [f"{k}={self.device[k]!r}" for k in MODEL_PARAMETERS]

    def to_json(self) -> Dict[str, Any]:
        """Everything a result records about the device it ran on."""
        return {"name": self.name, "path": self.path, "summary": self.summary,
                "models": list(self.models), "does_not_model": list(self.does_not_model),
                "parameters": dict(self.device), "basis": dict(self.basis),
                "sources": dict(self.sources), "targets": [t.to_json() for t in self.targets],
                "unchecked": list(self.unchecked)}


def names() -> List[str]:
    """The profiles shipped with waldio (profiles/*.json), sorted."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def _where(name_or_path: str) -> Path:
    if os.sep in name_or_path or name_or_path.endswith(".json"):
        return Path(name_or_path)
    p = PROFILE_DIR / f"{name_or_path}.json"
    if not p.is_file():
        raise ProfileError(f"no device profile {name_or_path!r}: shipped profiles are "
                           f"{', '.join(names())} (or give the path of a .json file)")
    return p


def load(name_or_path: str) -> Profile:
    """A shipped profile by name (``emmc-2014``) or a profile file by path."""
    path = _where(name_or_path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ProfileError(f"{path}: cannot read it: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise ProfileError(f"{path}: not JSON: {e}") from e
    return parse(doc, str(path))


def _text(doc: Dict[str, Any], key: str, where: str) -> str:
    v = doc.get(key)
    if not isinstance(v, str) or not v.strip():
        raise ProfileError(f"{where}: {key!r} must be a non-empty string, got {v!r}")
    return v


def _texts(doc: Dict[str, Any], key: str, where: str) -> Tuple[str, ...]:
    v = doc.get(key)
    if not isinstance(v, list) or not v or not all(isinstance(s, str) and s.strip() for s in v):
        raise ProfileError(f"{where}: {key!r} must be a non-empty list of sentences, got {v!r}")
    return tuple(v)


def _number(v: Any, field: str, lo: float, hi: float, whole: bool, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ProfileError(f"{where}: {field} must be a number, got {v!r}")
    if not lo <= v <= hi:
        raise ProfileError(f"{where}: {field} = {v!r} is out of range: accepted {lo:g} to {hi:g}")
    if whole and v != int(v):
        raise ProfileError(f"{where}: {field} = {v!r} must be a whole number")
    return float(v)


def parse(doc: Any, where: str = "<profile>") -> Profile:
    """Check a profile document; :class:`ProfileError` says what is wrong and where."""
    if not isinstance(doc, dict):
        raise ProfileError(f"{where}: a profile is a JSON object, got {type(doc).__name__}")
    known = {"name", "summary", "models", "does_not_model", "device", "basis", "sources",
             "targets", "unchecked"}
    extra = sorted(set(doc) - known)
    if extra:
        raise ProfileError(f"{where}: unknown field(s) {', '.join(extra)} (accepted: "
                           f"{', '.join(sorted(known))})")
    name = _text(doc, "name", where)
    dev = doc.get("device")
    if not isinstance(dev, dict):
        raise ProfileError(f"{where}: 'device' must be an object of parameters")
    unknown = sorted(set(dev) - set(PARAMETERS))
    if unknown:
        raise ProfileError(f"{where}: device: unknown parameter(s) {', '.join(unknown)} "
                           f"(accepted: {', '.join(PARAMETERS)})")
    missing = [k for k in PARAMETERS if k not in dev]
    if missing:
        raise ProfileError(f"{where}: device: missing parameter(s) {', '.join(missing)}")
    device = {k: _number(dev[k], f"device.{k}", lo, hi, k in WHOLE, where)
              for k, (_, lo, hi) in PARAMETERS.items()}
    if device["unit_bytes"] % 512:
        raise ProfileError(f"{where}: device.unit_bytes = {device['unit_bytes']:g} must be a "
                           f"multiple of 512")
    basis = doc.get("basis")
    if not isinstance(basis, dict) or any(not isinstance(basis.get(k), str) or not basis[k].strip()
                                          for k in PARAMETERS):
        lacking = [k for k in PARAMETERS if not isinstance(basis, dict)
                   or not isinstance(basis.get(k), str) or not basis[k].strip()]
        raise ProfileError(f"{where}: basis: every parameter needs a sentence saying where its "
                           f"value comes from; missing for {', '.join(lacking)}")
    sources = doc.get("sources")
    if not isinstance(sources, dict) or not sources or not all(
            isinstance(v, str) and v.strip() for v in sources.values()):
        raise ProfileError(f"{where}: 'sources' must map keys to the documents cited")
    targets = tuple(_target(t, i, sources, where) for i, t in enumerate(doc.get("targets") or []))
    unchecked = doc.get("unchecked") or []
    if not isinstance(unchecked, list) or not all(isinstance(s, str) for s in unchecked):
        raise ProfileError(f"{where}: 'unchecked' must be a list of sentences")
    return Profile(name=name, path=where, summary=_text(doc, "summary", where),
                   models=_texts(doc, "models", where),
                   does_not_model=_texts(doc, "does_not_model", where),
                   device=device, basis={k: basis[k] for k in PARAMETERS}, sources=dict(sources),
                   targets=targets, unchecked=tuple(unchecked))


def _target(t: Any, i: int, sources: Dict[str, str], where: str) -> Target:
    at = f"{where}: targets[{i}]"
    if not isinstance(t, dict):
        raise ProfileError(f"{at}: must be an object")
    if t.get("source") not in sources:
        raise ProfileError(f"{at}: source {t.get('source')!r} is not among the profile's sources "
                           f"({', '.join(sources)})")
    if t.get("workload") not in WORKLOADS:
        raise ProfileError(f"{at}: workload {t.get('workload')!r}: accepted {', '.join(WORKLOADS)}")
    if t.get("unit") not in UNITS:
        raise ProfileError(f"{at}: unit {t.get('unit')!r}: accepted {', '.join(UNITS)}")
    size = _number(t.get("size"), "size", 512, 1 << 24, True, at)
    if size % 512:
        raise ProfileError(f"{at}: size {size:g} must be a multiple of 512")
    return Target(figure=_text(t, "figure", at), source=t["source"], workload=t["workload"],
                  size=int(size), threads=int(_number(t.get("threads"), "threads", 1, 64, True, at)),
                  value=None if t.get("value") is None else
                  _number(t.get("value"), "value", 1e-9, 1e12, False, at), unit=t["unit"],
                  note=str(t.get("note", "")))
