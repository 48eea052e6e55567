"""What every parameter section shares: the "unknown" convention and small readers.

A section is a :class:`Section` (a dict with a ``_why`` map from every unknown
key to the reason); a reader raises :class:`Unknown` to say why a value could
not be read.  The readers here read sysfs/procfs files and run programs, and
never change anything.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Callable, Dict, List

SCHEMA_VERSION = 1


UNKNOWN = "unknown"


WHY = "_why"


Params = Dict[str, Any]


# Largest WAL file scanned (with checksums) for a newer copy of page 1.
WAL_SCAN_LIMIT = 64 << 20


class Unknown(Exception):
    """Raised by a reader to say "this value is unknown, for this reason"."""


class Section:
    """Collects one section: values plus a reason for every unknown one."""

    def __init__(self) -> None:
        self.values: Params = {}
        self.why: Dict[str, str] = {}

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value
        self.why.pop(key, None)

    def unknown(self, key: str, why: str) -> None:
        self.values[key] = UNKNOWN
        self.why[key] = why

    def read(self, key: str, reader: Callable[[], Any]) -> Any:
        """Store reader()'s value, or "unknown" with the exception as reason."""
        try:
            value = reader()
        except Unknown as e:
            self.unknown(key, str(e))
            return UNKNOWN
        except Exception as e:  # noqa: BLE001 - any failure means "unknown"
            self.unknown(key, f"{type(e).__name__}: {e}")
            return UNKNOWN
        self.set(key, value)
        return value

    def done(self) -> Params:
        out = dict(self.values)
        out[WHY] = dict(self.why)
        return out


def is_known(value: Any) -> bool:
    return not (isinstance(value, str) and value == UNKNOWN)


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().strip()


def read_int(path: str) -> int:
    return int(read_text(path))


def run_text(argv: List[str], timeout: float = 20.0) -> str:
    """stdout of a command; Unknown (with stderr) if missing or failing."""
    if shutil.which(argv[0]) is None:
        raise Unknown(f"{argv[0]} not found")
    env = dict(os.environ, LC_ALL="C", LANG="C")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       env=env, check=False)
    if p.returncode != 0:
        lines = [ln.strip() for ln in p.stderr.splitlines() if ln.strip()]
        err = (lines[-1] if lines else "no message")[-300:]
        raise Unknown(f"{' '.join(argv)} exited {p.returncode}: {err}")
    return p.stdout


def existing_path(path: "os.PathLike[str] | str") -> str:
    """The path itself, or its nearest existing ancestor (db not yet created)."""
    p = os.path.abspath(os.fspath(path))
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def majmin_of(dev: int) -> str:
    return f"{os.major(dev)}:{os.minor(dev)}"


def raise_unknown(why: str) -> Any:
    raise Unknown(why)
