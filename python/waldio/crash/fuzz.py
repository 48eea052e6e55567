"""The libFuzzer target of the physical-log recovery path (crash/fuzz_recovery.c), run for a time.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

from waldio import library

from .database import fuzz_binary_path, state_dir_base


def run_fuzz(seconds: int, *, corpus: Optional[Path] = None, workdir: Optional[Path] = None) -> Dict[str, Any]:
    """Run the libFuzzer target for `seconds`; returns runs, exit status and
    the tail of its output. Skips (ran=False) when it was not built."""
    binary = fuzz_binary_path()
    if binary is None:
        return {"ran": False, "reason": "build/crash/fuzz_recovery was not built (needs clang)"}
    root = library.checkout_root()
    seeds = corpus or (root / "crash" / "corpus" if root else None)
    work = Path(workdir or tempfile.mkdtemp(prefix="waldio-fuzz-", dir=state_dir_base()))
    live = work / "corpus"
    live.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([str(binary), "-max_total_time=%d" % seconds, "-max_len=131072",
                           "-timeout=20", "-rss_limit_mb=4096", "-print_final_stats=1",
                           "-artifact_prefix=%s/" % work, str(live), str(seeds)],
                          capture_output=True, text=True, timeout=seconds + 300,
                          env=dict(os.environ, WALDIO_FUZZ_DIR=str(work)))
    text = proc.stderr
    runs = 0
    for line in text.splitlines():
        if line.startswith("stat::number_of_executed_units:"):
            runs = int(line.split(":")[-1])
    crashes = [p.name for p in work.iterdir() if p.name.startswith(("crash-", "leak-", "timeout-", "oom-"))]
    res = {"ran": True, "exit": proc.returncode, "runs": runs, "seconds": seconds,
           "artifacts": crashes, "workdir": str(work), "tail": text[-3000:]}
    if proc.returncode == 0 and not crashes:
        shutil.rmtree(work, ignore_errors=True)
    return res
