"""Where the compiled pieces of waldio are: one lookup for every tool.

CMake builds four shared objects (CMakeLists.txt):

    waldio.so              the SQLite loadable extension (what ``load`` loads)
    libwaldio.so           the C library, for C programs and ctypes
    libwaldio_preload.so   the LD_PRELOAD library of ``waldio run``
    recorder.so            the crash recorder of ``waldio crash``
    lsmvbt.so              the LS-MVBT virtual table (lsmvbt/, bench and crash modes)

They are looked for, in this order:

1. an environment variable naming the file (``WALDIO_EXTENSION``,
   ``WALDIO_LIBRARY``, ``WALDIO_PRELOAD``, ``WALDIO_RECORDER``, ``WALDIO_LSMVBT``);
2. ``_lib/`` in every directory of the package: an installed wheel has them
   there, an editable install (``pip install -e .``) in site-packages, and
   ``make build`` copies them into ``python/waldio/_lib`` of the checkout;
3. the CMake build directory of the checkout the package sits in (``build/``).

Of several copies found in 2 and 3 the most recently built one wins, so a
``make build`` after an editable install is what runs.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional

__all__ = ["EXTENSION", "LIBRARY", "PRELOAD", "RECORDER", "LSMVBT", "find", "checkout_root",
           "build_program",
           "candidates"]

EXTENSION = "waldio.so"
LIBRARY = "libwaldio.so"
PRELOAD = "libwaldio_preload.so"
RECORDER = "recorder.so"
LSMVBT = "lsmvbt.so"

_ENV: Dict[str, str] = {
    EXTENSION: "WALDIO_EXTENSION",
    LIBRARY: "WALDIO_LIBRARY",
    PRELOAD: "WALDIO_PRELOAD",
    RECORDER: "WALDIO_RECORDER",
    LSMVBT: "WALDIO_LSMVBT",
}
# Where each file lands in a CMake build directory.
_IN_BUILD: Dict[str, str] = {RECORDER: "crash/recorder.so", LSMVBT: "lsmvbt/lsmvbt.so"}

_PACKAGE_DIR = Path(__file__).resolve().parent


def checkout_root() -> Optional[Path]:
    """The source checkout this package is imported from, or None (installed)."""
    root = _PACKAGE_DIR.parent.parent
    if (root / "CMakeLists.txt").is_file() and (root / "python" / "waldio").is_dir():
        return root
    return None


def _package_dirs() -> List[Path]:
    import waldio
    dirs = [Path(p) for p in getattr(waldio, "__path__", [])] or [_PACKAGE_DIR]
    return dirs


def candidates(name: str) -> List[Path]:
    """Every place name may be, in the order of the module docstring."""
    env = os.environ.get(_ENV.get(name, ""), "")
    out = [Path(env)] if env else []
    out += [d / "_lib" / name for d in _package_dirs()]
    root = checkout_root()
    if root is not None:
        out.append(root / "build" / _IN_BUILD.get(name, name))
    return out


def build_program(relpath: str, env: str) -> Optional[Path]:
    """A program that only a checkout's CMake build makes (build/<relpath>: the FUSE
    programs crash/block_recorder and devmodel/device_model), or the file $env names;
    None where it is missing or not executable."""
    given = os.environ.get(env)
    root = checkout_root()
    p = Path(given) if given else (root / "build" / relpath if root else None)
    return p if p is not None and p.is_file() and os.access(p, os.X_OK) else None


def find(name: str) -> Path:
    """The file name (one of the constants above); FileNotFoundError names
    every place looked at and how to build it."""
    cands = candidates(name)
    env = os.environ.get(_ENV.get(name, ""), "")
    if env:
        if cands[0].is_file():
            return cands[0]
        raise FileNotFoundError(f"{_ENV[name]}={env}: no such file")
    found = [c for c in cands if c.is_file()]
    if found:
        return max(found, key=lambda p: p.stat().st_mtime)
    raise FileNotFoundError(
        f"{name} not found (looked in: {', '.join(map(str, cands))}); install waldio "
        f"with pip (the wheel builds it), run `make build` in a checkout, or set "
        f"{_ENV.get(name, 'its path')}")
