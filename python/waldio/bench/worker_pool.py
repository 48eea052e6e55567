"""The worker processes of ``waldio bench --processes``, seen from the parent.

:class:`WorkerPool` starts ``python -m waldio.bench.process_worker`` processes
(:mod:`.process_worker` describes the JSON-lines protocol; another command line can
be given, e.g. a worker that fails on purpose in a test) and keeps them for the whole
run.  :meth:`WorkerPool.ask` sends one command to each of several workers and
then collects every reply, so that no reply is ever left unread for the next
command to pick up; a worker that failed, died or did not answer in time is named
in the :class:`WorkerError`, and a dead or stuck one is killed and replaced by the
next :meth:`WorkerPool.take`.  Each worker's stderr goes to a file in the run's
directory, whose tail a failure quotes.  :meth:`WorkerPool.stop` ends every worker
(end of input, then SIGKILL after a grace period); the pool is a context manager.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from .settings import BenchError
from .sqlite_env import child_env

STOP_GRACE_S = 10.0


class WorkerError(BenchError):
    """One or more workers failed a command: which, and why."""


def file_tail(path: str, limit: int = 800) -> str:
    """The last ``limit`` bytes of a log file, as text ('' if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


WORKER_ARGV = [sys.executable, "-m", "waldio.bench.process_worker"]


class _Worker:
    def __init__(self, index: int, log_dir: str, argv: List[str]) -> None:
        self.index = index
        self.stderr_path = os.path.join(log_dir, f"worker-{index}.stderr")
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                env=child_env(), text=True, bufsize=1)
        self.broken = False

    def stderr_tail(self) -> str:
        return file_tail(self.stderr_path)

    def _died(self) -> str:
        # Its output closed: it is usually exiting. Wait a little for its
        # status, which says more than the closed pipe (the reader sees EOF
        # before the kernel reaps the process).
        try:
            rc: Optional[int] = self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            rc = None
        tail = self.stderr_tail()
        return (f"exited with status {rc}" if rc is not None else "closed its output") + \
            (f": {tail}" if tail else "")

    def send(self, msg: Dict[str, Any]) -> Optional[str]:
        """None, or why the command could not be sent."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            return None
        except (BrokenPipeError, OSError):
            self.broken = True
            return self._died()

    def receive(self, deadline: float) -> Dict[str, Any]:
        """The reply, or {"error": ...} when the worker died, answered nonsense or
        did not answer before ``deadline`` (time.monotonic())."""
        assert self.proc.stdout is not None
        left = deadline - time.monotonic()
        ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, left))
        if not ready:
            self.broken = True
            self.proc.kill()
            return {"error": f"no answer within {left:.0f} s (killed)"}
        line = self.proc.stdout.readline()
        if not line:
            self.broken = True
            return {"error": self._died()}
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            self.broken = True
            return {"error": f"answered {line[:200]!r}, not JSON"}
        return reply if isinstance(reply, dict) else {"error": f"answered {reply!r}"}

    def stop(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class WorkerPool:
    """Persistent worker processes; worker i is always process i of a cell."""

    def __init__(self, log_dir: str, argv: Optional[List[str]] = None) -> None:
        self.log_dir = log_dir
        self.argv = list(argv or WORKER_ARGV)
        self.workers: List[_Worker] = []
        self.started = 0

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def take(self, n: int) -> List[_Worker]:
        """Workers 0..n-1, started or replaced as needed."""
        for i in range(n):
            if i < len(self.workers) and self.workers[i].broken:
                self.workers[i].stop()
                self.workers[i] = self._start(i)
            elif i == len(self.workers):
                self.workers.append(self._start(i))
        return self.workers[:n]

    def _start(self, i: int) -> _Worker:
        self.started += 1
        return _Worker(i, self.log_dir, self.argv)

    @staticmethod
    def ask(workers: List[_Worker], message: Callable[[_Worker], Dict[str, Any]],
            timeout_s: float, what: str) -> List[Dict[str, Any]]:
        """Send each worker its message, then read every reply; WorkerError names every
        worker that failed (after all replies are in)."""
        deadline = time.monotonic() + timeout_s
        unsent = {w.index: w.send(message(w)) for w in workers}
        replies = [{"error": unsent[w.index]} if unsent[w.index] else w.receive(deadline)
                   for w in workers]
        failed = [f"process {w.index} (pid {w.proc.pid}): {r['error']}"
                  for w, r in zip(workers, replies) if "error" in r]
        if failed:
            raise WorkerError(f"{what}: " + "; ".join(failed))
        return replies

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []
