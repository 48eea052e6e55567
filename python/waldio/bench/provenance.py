"""Which code produced a result: tool name, version, command line, git commit.
"""
from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

from waldio.library import checkout_root

UNKNOWN = "unknown"


def tool_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {"name": "waldio bench", "command_line": list(sys.argv)}
    try:
        from importlib.metadata import version
        info["waldio_version"] = version("waldio")
    except Exception:  # noqa: BLE001
        info["waldio_version"] = UNKNOWN
    repo = checkout_root() or Path.cwd()
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        # untracked files count: the code that ran may not be committed yet
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
        info["git_commit"] = head
        info["git_dirty"] = bool(dirty)
    except Exception as e:  # noqa: BLE001
        info["git_commit"] = f"{UNKNOWN} (not a git checkout: {type(e).__name__})"
        info["git_dirty"] = None
    return info


def timestamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
