"""The one place where waldio's Python tools run an external program.

:func:`run_command` runs a program with no standard input, captures its output
and raises :class:`CommandError` (program, exit status, both outputs) when it
fails or times out; mkfs, mount, losetup, dumpe2fs, xfs_db and btrfs all go
through it, so every tool reports a failed command the same way.
"""
from __future__ import annotations

import subprocess
from typing import Optional, Sequence


class CommandError(RuntimeError):
    """An external command failed; the message names the command and its stderr."""

    def __init__(self, argv: Sequence[str], returncode: Optional[int], stdout: str, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        status = "timed out" if returncode is None else f"exited with status {returncode}"
        detail = stderr.strip() or stdout.strip() or "(no output)"
        super().__init__(f"command {' '.join(self.argv)!r} {status}: {detail}")


def run_command(argv: Sequence[str], *, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one external command; raise :class:`CommandError` if it fails."""
    try:
        proc = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandError(argv, None, _text(exc.stdout), _text(exc.stderr)) from exc
    except FileNotFoundError as exc:
        raise CommandError(argv, 127, "", f"program not found: {argv[0]}") from exc
    if check and proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stdout, proc.stderr)
    return proc


def _text(data: object) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data if isinstance(data, str) else ""
