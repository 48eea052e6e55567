"""Mobibench as an external program: where its source is, how it is built, how it is run.

This module owns everything ``waldio bench --compare-mobibench`` needs to know
about Mobibench (ESOS-Lab/Mobibench, ``shell/mobibench.c``).  The project
ships none of Mobibench's code: :func:`source_text` reads ``shell/mobibench.c``
at a given commit from a git repository named by the caller (a local clone or
bare repository, or a URL that is cloned once into a cache directory);
:func:`build` compiles that one file with the project's own recipe
(:func:`build_command`) against the system SQLite, the same library
``waldio bench --sqlite system`` drives; :func:`command` and
:func:`parse_output` are a run's command line and its result.

The two versions compared (issue 13) and their settings:

``1ad7644`` (v1.0.5, the WALDIO paper's): one table ``tblMyList`` with an
AUTOINCREMENT key, one autocommit ``INSERT ... VALUES('<100 chars>')`` per
transaction through ``sqlite3_exec``; ``waldio bench --preset mobibench-2015``.

``f56ea5e`` (HEAD): three tables, ``BEGIN; INSERT x3; COMMIT;`` as one
``sqlite3_exec`` text per transaction, ids = transaction number;
``waldio bench --preset mobibench``.

Both: ``-d 0`` (insert), ``-j`` journal mode (0 DELETE, 1 TRUNCATE, 2 PERSIST,
3 WAL), ``-s`` synchronous (0 OFF, 1 NORMAL, 2 FULL), the final
``sqlite3_wal_checkpoint()`` inside the timed region, ``gettimeofday`` around
all transactions, ``echo 3 > /proc/sys/vm/drop_caches`` before timing.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

DEFAULT_URL = "https://github.com/ESOS-Lab/Mobibench"
#: environment variable naming the Mobibench repository (path or URL)
SOURCE_ENV = "WALDIO_MOBIBENCH_SRC"
#: a read-only mirror some machines keep (a bare repository); used when present
MIRROR_CANDIDATES = ("/work/.mirror/ESOS-Lab+Mobibench/repo",)
CACHE_DIR = "/var/tmp/waldio-mobibench"

#: version -> (waldio bench preset, what it is)
VERSIONS: Dict[str, str] = {"1ad7644": "mobibench-2015", "f56ea5e": "mobibench"}
JOURNAL_CODES: Dict[str, int] = {"delete": 0, "truncate": 1, "persist": 2, "wal": 3}
SYNC_CODES: Dict[str, int] = {"off": 0, "normal": 1, "full": 2}

CFLAGS = ("-O2", "-w")
LIBS = ("-lsqlite3", "-lpthread", "-ldl")


class MobibenchError(Exception):
    """The source cannot be found or built, or a run failed; the message says which."""


def default_source() -> str:
    """``$WALDIO_MOBIBENCH_SRC``, else a local mirror if present, else the GitHub URL."""
    env = os.environ.get(SOURCE_ENV)
    if env:
        return env
    for m in MIRROR_CANDIDATES:
        if os.path.isdir(m):
            return m
    return DEFAULT_URL


def _is_url(source: str) -> bool:
    return "://" in source or source.startswith("git@")


def _git(args: List[str], cwd: Optional[str] = None) -> str:
    try:
        out = subprocess.run(["git"] + args, cwd=cwd, capture_output=True, text=True,
                             timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MobibenchError(f"git {' '.join(args)}: {e}") from e
    if out.returncode != 0:
        raise MobibenchError(f"git {' '.join(args)}: {out.stderr.strip() or out.returncode}")
    return out.stdout


def repository(source: str, cache: str = CACHE_DIR) -> str:
    """A local git directory for ``source``: itself, or a bare clone of a URL in ``cache``."""
    if not _is_url(source):
        if not os.path.exists(source):
            raise MobibenchError(f"Mobibench source {source}: no such directory")
        return source
    dest = os.path.join(cache, "Mobibench.git")
    if not os.path.isdir(dest):
        os.makedirs(cache, exist_ok=True)
        _git(["clone", "--bare", "--quiet", source, dest])
    return dest


def source_text(repo: str, commit: str) -> str:
    """``shell/mobibench.c`` of ``commit`` in the git directory or checkout ``repo``."""
    flag = "--git-dir" if os.path.isfile(os.path.join(repo, "HEAD")) else "-C"
    return _git([flag, repo, "show", f"{commit}:shell/mobibench.c"])


def build_command(c_file: str, binary: str) -> List[str]:
    """The project's recipe: one file, the system SQLite, no bundled sqlite3.c."""
    return ["gcc", *CFLAGS, "-o", binary, c_file, *LIBS]


@dataclass
class Build:
    commit: str
    binary: str
    command: List[str]
    compiler: str


def build(repo: str, commit: str, out_dir: str) -> Build:
    """Compile Mobibench ``commit`` into ``out_dir`` (alone in its directory, so its
    ``#include "sqlite3.h"`` finds the system header, not a bundled one)."""
    os.makedirs(out_dir, exist_ok=True)
    d = os.path.join(out_dir, f"src-{commit}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c_file = os.path.join(d, "mobibench.c")
    Path(c_file).write_text(source_text(repo, commit), encoding="utf-8")
    binary = os.path.join(out_dir, f"mobibench-{commit}")
    cmd = build_command(c_file, binary)
    res = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    if res.returncode != 0:
        raise MobibenchError(f"{' '.join(cmd)}: {res.stderr.strip()[-2000:]}")
    cc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout
    return Build(commit, binary, cmd, cc.splitlines()[0] if cc else "unknown")


def command(binary: str, directory: str, transactions: int, journal: str, sync: str) -> List[str]:
    """Mobibench's command line for one run: insert workload, the version's other defaults."""
    return [binary, "-p", directory, "-d", "0", "-n", str(transactions),
            "-j", str(JOURNAL_CODES[journal]), "-s", str(SYNC_CODES[sync])]


_TIME = re.compile(r"\[TIME\]\s*:\s*(\d+)\s*sec\s*(\d+)us\.\s*([\d.]+)\s*Transactions/sec")
_KV = re.compile(r"^(sqlite_version|page_size|journal_mode|synchronous)=(\S+)", re.M)


@dataclass
class Output:
    seconds: float
    tps: float
    echoed: Dict[str, str]      # sqlite_version, page_size, journal_mode, synchronous


def parse_output(text: str) -> Output:
    """The result line and the settings Mobibench echoes; MobibenchError if absent."""
    m = _TIME.search(text)
    if not m:
        tail = text.strip().splitlines()[-5:]
        raise MobibenchError("no '[TIME] ... Transactions/sec' line in Mobibench's output: "
                             + " | ".join(tail))
    secs = int(m.group(1)) + int(m.group(2)) / 1e6
    return Output(seconds=secs, tps=float(m.group(3)), echoed=dict(_KV.findall(text)))
