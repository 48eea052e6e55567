"""``waldio run -- CMD ARGS``: waldio inside a program that was never changed for it.

    waldio run -- sqlite3 app.db                  the Debian sqlite3 shell
    waldio run --sync persistent -- ./myapp       a C program linked with -lsqlite3
    waldio run -v -- python3 app.py               Python's sqlite3 module

The command runs with ``libwaldio_preload.so`` in ``LD_PRELOAD`` (src/preload.c):
the program's first ``sqlite3_open*`` registers the VFS "waldio" as the
default VFS of the system SQLite it uses, so every database it opens goes
through waldio (journal mode and everything else stay the program's own
choice: waldio's log is used once a database is in WAL mode). Options are
flags here or the environment variables they set (``WALDIO_LAYOUT``...),
which child processes inherit too.

Before starting the command, its executable is examined. A program that
carries its own statically linked SQLite (or is linked statically as a
whole) cannot be reached through ``LD_PRELOAD``; ``waldio run`` then says so
and exits with status 3 instead of running it without waldio.

Exit status: the command's own; 3 when the command cannot use waldio this
way; 126/127 when it cannot be executed / found (as a shell does).
"""
from __future__ import annotations

import argparse
import mmap
import os
import shutil
import struct
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from . import library

__all__ = ["ENV_OPTIONS", "Inspection", "inspect_executable", "environment", "add_option_flags",
           "register"]

# flag (dest) -> environment variable read by the preload library
ENV_OPTIONS: Dict[str, str] = {
    "layout": "WALDIO_LAYOUT",
    "sync": "WALDIO_SYNC",
    "io": "WALDIO_IO",
    "prealloc": "WALDIO_PREALLOC",
    "cache": "WALDIO_CACHE",
    "flush_ms": "WALDIO_FLUSH_MS",
    "group": "WALDIO_GROUP",
    "group_bytes": "WALDIO_GROUP_BYTES",
    "group_ms": "WALDIO_GROUP_MS",
}
# libwaldio prints every refusal or failure with its reason on stderr (src/errors.c),
# the preload library also each registration
VERBOSE_ENV = "WALDIO_VERBOSE"
# Error messages of SQLite's own code (vdbe.c, vacuum.c): present in every
# program with SQLite compiled in, absent from programs (the sqlite3 shell
# included) that call a shared libsqlite3.
SQLITE_LIBRARY_MARKERS = (b"cannot open savepoint - SQL statements in progress",
                          b"cannot VACUUM from within a transaction")
_PT_INTERP = 3


@dataclass
class Inspection:
    """What the executable that would run looks like."""
    path: str
    elf: bool = False
    dynamic: bool = False            # has a program interpreter (ld.so)
    embedded_sqlite: bool = False    # SQLite compiled into the executable

    def problem(self) -> Optional[str]:
        """Why LD_PRELOAD cannot give this program waldio, or None."""
        if self.embedded_sqlite:
            try:
                ext = str(library.find(library.EXTENSION))
            except FileNotFoundError:
                ext = "waldio.so"
            return (f"{self.path} carries its own statically linked SQLite: a preloaded "
                    "library cannot replace its default VFS, so it would run without "
                    f"waldio. Load {ext} into it instead (.load in a shell, "
                    "sqlite3_load_extension() in C), or link it with libwaldio")
        if self.elf and not self.dynamic:
            return (f"{self.path} is statically linked: the dynamic loader never runs, "
                    "so LD_PRELOAD (and waldio run) cannot reach its SQLite")
        return None


def _elf_has_interp(data: Any) -> bool:
    if data[4] != 2:                 # ELFCLASS64 only (this machine kind)
        return True
    endian = "<" if data[5] == 1 else ">"
    phoff, = struct.unpack_from(endian + "Q", data, 0x20)
    phentsize, phnum = struct.unpack_from(endian + "HH", data, 0x36)
    for i in range(phnum):
        p_type, = struct.unpack_from(endian + "I", data, phoff + i * phentsize)
        if p_type == _PT_INTERP:
            return True
    return False


def _script_interpreter(path: str) -> Optional[str]:
    """The program a ``#!`` script runs under (through /usr/bin/env too)."""
    with open(path, "rb") as f:
        line = f.readline(512)
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode(errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        return shutil.which(rest[0]) if rest else None
    return words[0]


def inspect_executable(path: str, _depth: int = 0) -> Inspection:
    """Look into the file that exec would run (following one ``#!`` line)."""
    info = Inspection(path=path)
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            if head != b"\x7fELF":
                interp = _script_interpreter(path) if _depth == 0 else None
                return inspect_executable(interp, 1) if interp else info
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                info.elf = True
                info.dynamic = _elf_has_interp(data)
                info.embedded_sqlite = any(data.find(m) >= 0 for m in SQLITE_LIBRARY_MARKERS)
    except (OSError, ValueError, struct.error):
        pass
    return info


def environment(args: argparse.Namespace, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The command's environment: LD_PRELOAD plus the WALDIO_* options."""
    env = dict(os.environ if base is None else base)
    preload = str(library.find(library.PRELOAD))
    others = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != preload]
    env["LD_PRELOAD"] = " ".join([preload] + others)
    for dest, var in ENV_OPTIONS.items():
        value = getattr(args, dest, None)
        if value is not None:
            env[var] = str(value)
    if getattr(args, "verbose", False):
        env[VERBOSE_ENV] = "1"
    return env


def cmd_run(args: argparse.Namespace) -> int:
    command: List[str] = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        args._parser.error("no command given (waldio run [OPTIONS] -- CMD [ARGS...])")
    path = shutil.which(command[0])
    if path is None:
        print(f"waldio run: {command[0]}: command not found", file=sys.stderr)
        return 127
    problem = inspect_executable(path).problem()
    if problem:
        print(f"waldio run: {problem}", file=sys.stderr)
        return 3
    try:
        env = environment(args)
    except FileNotFoundError as e:
        print(f"waldio run: {e}", file=sys.stderr)
        return 3
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(path, command, env)
    except OSError as e:
        print(f"waldio run: {command[0]}: {e.strerror}", file=sys.stderr)
        return 126
    return 0  # not reached


def _choice(words: Sequence[str]) -> Any:
    def parse(text: str) -> str:
        if text not in words:
            raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join(words)}")
        return text
    parse.__name__ = "value"
    return parse


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run", help="run an unmodified program with waldio as its SQLite's default VFS",
        description="Run CMD with libwaldio_preload.so in LD_PRELOAD: its first "
                    "sqlite3_open* makes waldio the default VFS of the system SQLite it "
                    "uses. Options are also read from the environment variables named "
                    "below. Refuses (exit 3) a program with its own static SQLite.",
        epilog="examples:\n"
               "  waldio run -- sqlite3 app.db 'PRAGMA journal_mode=WAL'\n"
               "  waldio run --sync persistent -- ./myapp\n"
               "  WALDIO_LAYOUT=pad4k waldio run -v -- python3 app.py\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_option_flags(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")
    p.set_defaults(func=cmd_run, _parser=p)


def add_option_flags(p: argparse.ArgumentParser) -> None:
    """The flags that become WALDIO_* variables (``ENV_OPTIONS``), and -v."""
    o = p.add_argument_group("waldio options (default: libwaldio's own)")
    o.add_argument("--layout", type=_choice(("auto", "standard", "embed", "pad4k", "pad8k")),
                   help="log layout; auto: an existing log keeps its layout, a new log is standard "
                        "[WALDIO_LAYOUT]")
    o.add_argument("--sync", type=_choice(("auto", "persistent", "ns")),
                   help="auto follows PRAGMA synchronous; persistent writes with "
                        "RWF_DSYNC; ns: NORMAL commits as direct writes (the paper's NS) "
                        "[WALDIO_SYNC]")
    o.add_argument("--io", type=_choice(("direct", "auto", "buffered")),
                   help="direct I/O policy [WALDIO_IO]")
    o.add_argument("--prealloc", metavar="SIZE", help="initial log size, e.g. 4M [WALDIO_PREALLOC]")
    o.add_argument("--cache", metavar="SIZE", help="recent-frame cache [WALDIO_CACHE]")
    o.add_argument("--flush-ms", metavar="MS", help="normal-mode flush bound [WALDIO_FLUSH_MS]")
    o.add_argument("--group", type=_choice(("auto", "off", "async", "durable", "strict")),
                   help="group commit; auto: strict for synchronous=FULL commits in the "
                        "standard layout, off otherwise [WALDIO_GROUP]")
    o.add_argument("--group-bytes", metavar="SIZE", help="group buffer [WALDIO_GROUP_BYTES]")
    o.add_argument("--group-ms", metavar="MS", help="async group interval [WALDIO_GROUP_MS]")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="each process reports on stderr when waldio becomes its default "
                        "VFS, and why waldio refuses or fails whenever it does "
                        "[WALDIO_VERBOSE=1]")
