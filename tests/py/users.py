"""Running files_worker.py as root and as an unprivileged user.

The unprivileged user is `nobody` (uid 65534 on Debian), entered with
util-linux's setpriv, which needs root: as another user the unprivileged
runs skip, saying so. The worker runs on /usr/bin/python3 with a copy of
waldio.so and of itself in a directory every user can read, so that neither
the checkout nor root's Python packages need to be readable by `nobody`.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import waldio

USERS = ["root", "nobody"]
SYSTEM_PYTHON = "/usr/bin/python3"
WORKER = Path(__file__).resolve().parent / "files_worker.py"


@dataclass
class User:
    name: str
    uid: int
    gid: int

    def argv(self, argv: List[str]) -> List[str]:
        """argv run as this user (nothing added for the current one)."""
        if self.uid == os.geteuid():
            return argv
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                "--"] + argv


def user(name: str) -> User:
    """The user `name`, or a skip that says why it cannot be used here."""
    if name != "root" and os.geteuid() != 0:
        pytest.skip(f"running as {name} needs root (setpriv); this test runs as uid {os.geteuid()}")
    if name == "root" and os.geteuid() != 0:
        pytest.skip("needs root")
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        pytest.skip(f"no user {name} on this machine")
    if name != "root" and not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is not installed")
    return User(name, pw.pw_uid, pw.pw_gid)


class Workspace:
    """A directory owned by `who`, beside a readable copy of waldio.so and
    of the worker."""

    def __init__(self, base: Path, who: User) -> None:
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            pytest.skip(f"{SYSTEM_PYTHON} (Debian's python3) is not installed")
        os.chmod(base, 0o755)
        self.so = base / "waldio.so"
        if not self.so.exists():
            shutil.copyfile(waldio.extension_path(), self.so)
            shutil.copyfile(WORKER, base / WORKER.name)
            os.chmod(self.so, 0o755)
            os.chmod(base / WORKER.name, 0o644)
        self.worker = base / WORKER.name
        self.dir = base / who.name
        self.dir.mkdir(exist_ok=True)
        os.chown(self.dir, who.uid, who.gid)

    def run(self, who: User, scenario: str, db: Path, arg: str = "",
            env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """The worker's JSON answer; fails the test with its stderr if it fails."""
        argv = who.argv([SYSTEM_PYTHON, str(self.worker), str(self.so), scenario, str(db)]
                        + ([arg] if arg else []))
        p = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})})
        assert p.returncode == 0, f"{scenario} as {who.name}: {p.stderr}"
        out: Dict[str, Any] = json.loads(p.stdout)
        out["stderr"] = p.stderr
        return out
