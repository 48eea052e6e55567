"""``waldio env``: waldio for many short programs, with no start-up cost per call.

    eval "$(waldio env)"               this shell, and every program it starts,
                                       gets waldio as its system SQLite's VFS
    eval "$(waldio env --sync persistent -v)"   with options, as ``waldio run``
    eval "$(waldio env --unset)"       back to stock SQLite
    waldio env --measure               what it adds to each call, measured

``waldio run`` starts a Python interpreter for every command (0.2-0.6 s);
``waldio env`` starts one once, prints the ``LD_PRELOAD`` line and the
``WALDIO_*`` option variables of ``waldio run`` (the same flags), and every
later program loads ``libwaldio_preload.so`` directly (src/preload.c). The
lines are POSIX shell; values are quoted.

``--measure`` runs a short program many times, directly and in that
environment, alternating, and prints the median and spread (min-max) of
each and of the per-round difference, with the parameters that matter
(SQLite, file system, kernel, load). Default programs: the sqlite3 shell
reading a WAL database (start-up and open/close only) and writing one row
(``synchronous=FULL``: one commit), each on a database of its own; or the
command after ``--``, in which ``{variant}`` becomes ``direct`` or ``waldio``
(so that each variant writes a database of its own).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from . import library
from .bench.stats import summarize
from .run import ENV_OPTIONS, VERBOSE_ENV, add_option_flags, environment

__all__ = ["shell_lines", "unset_lines", "Measurement", "measure", "register"]


def shell_lines(args: argparse.Namespace, base: Optional[Dict[str, str]] = None) -> List[str]:
    """``export`` lines that give a POSIX shell the environment of ``waldio run``."""
    base = dict(os.environ if base is None else base)
    env = environment(args, base)
    names = ["LD_PRELOAD"] + list(ENV_OPTIONS.values()) + [VERBOSE_ENV]
    return ["export %s=%s" % (n, shlex.quote(env[n])) for n in names
            if n in env and env.get(n) != base.get(n)]


def unset_lines(base: Optional[Dict[str, str]] = None) -> List[str]:
    """Lines that take waldio out of the environment again (other preloads stay)."""
    base = dict(os.environ if base is None else base)
    preload = str(library.find(library.PRELOAD))
    others = [p for p in base.get("LD_PRELOAD", "").replace(":", " ").split() if p != preload]
    lines = ["export LD_PRELOAD=%s" % shlex.quote(" ".join(others))] if others \
        else ["unset LD_PRELOAD"]
    variables = [v for v in list(ENV_OPTIONS.values()) + [VERBOSE_ENV] if v in base]
    if variables:
        lines.append("unset " + " ".join(variables))
    return lines


# ------------------------------------------------------------------ measure

@dataclass
class Measurement:
    """One program, timed directly and under waldio env, round by round."""
    name: str
    argv_direct: List[str]
    argv_waldio: List[str]
    direct_ms: List[float] = field(default_factory=list)
    waldio_ms: List[float] = field(default_factory=list)

    def summary(self) -> Dict[str, Any]:
        added = [w - d for d, w in zip(self.direct_ms, self.waldio_ms)]
        return {"name": self.name, "command_direct": self.argv_direct,
                "command_waldio": self.argv_waldio,
                "direct_ms": summarize(self.direct_ms), "waldio_ms": summarize(self.waldio_ms),
                "added_ms": summarize(added),
                "samples": {"direct_ms": self.direct_ms, "waldio_ms": self.waldio_ms}}


def _timed_run(argv: Sequence[str], env: Dict[str, str]) -> float:
    t0 = time.perf_counter_ns()
    p = subprocess.run(list(argv), env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=120)
    t1 = time.perf_counter_ns()
    if p.returncode != 0:
        raise RuntimeError("%s exited with status %d: %s" % (shlex.join(argv), p.returncode,
                                                           p.stderr.decode(errors="replace").strip()))
    return (t1 - t0) / 1e6


def _default_programs(shell: str, d: str, env_waldio: Dict[str, str],
                      env_direct: Dict[str, str]) -> List[Measurement]:
    """The sqlite3 shell on a WAL database of its own per variant: a read, a write."""
    out = []
    for name, sql in (("read", "SELECT count(*) FROM t;"),
                      ("write", "INSERT INTO t(v) VALUES (randomblob(100));")):
        argvs = {}
        for variant, env in (("direct", env_direct), ("waldio", env_waldio)):
            db = os.path.join(d, f"{name}-{variant}.db")
            subprocess.run([shell, db, "PRAGMA journal_mode=WAL; CREATE TABLE t(v);"
                            " INSERT INTO t(v) VALUES (randomblob(100));"],
                           env=env, check=True, capture_output=True, timeout=60)
            argvs[variant] = [shell, db, sql]
        out.append(Measurement(name, argvs["direct"], argvs["waldio"]))
    return out


def measure(programs: List[Measurement], env_direct: Dict[str, str],
            env_waldio: Dict[str, str], runs: int, warmup: int,
            progress: Optional[Any] = None) -> None:
    """Rounds of every program, direct and under waldio, the order alternating
    from round to round (so that drift of the machine falls on both)."""
    for r in range(warmup + runs):
        for m in programs:
            order = [("direct", m.argv_direct, env_direct), ("waldio", m.argv_waldio, env_waldio)]
            if r % 2:
                order.reverse()
            for variant, argv, env in order:
                ms = _timed_run(argv, env)
                if r >= warmup:
                    (m.direct_ms if variant == "direct" else m.waldio_ms).append(ms)
        if progress:
            progress(r + 1, warmup + runs)


def _parameters(shell: Optional[str], d: str, runs: int, warmup: int) -> Dict[str, Any]:
    from .params.device import device_params  # noqa: PLC0415 - heavy, measure only
    from .params.filesystem import filesystem_params  # noqa: PLC0415
    from .params.system import system_params  # noqa: PLC0415
    p: Dict[str, Any] = {"runs": runs, "warmup_rounds": warmup,
                         "order": "alternating per round (direct first in even rounds)",
                         "timing": "wall time of fork+exec+exit, time.perf_counter_ns",
                         "preload": str(library.find(library.PRELOAD)),
                         "loadavg_before": os.getloadavg(), "directory": d}
    if shell:
        v = subprocess.run([shell, "--version"], capture_output=True, text=True)
        p["sqlite3_shell"] = {"path": shell, "version": v.stdout.strip(),
                              "journal_mode": "wal",
                              "synchronous": "the shell's default (FULL)"}
    p["filesystem"] = filesystem_params(d)
    p["device"] = device_params(d)
    p["system"] = system_params()
    return p


def _fmt(s: Optional[Dict[str, Any]]) -> str:
    return "—" if not s else "%.2f (%.2f–%.2f)" % (s["median"], s["min"], s["max"])


def print_report(report: Dict[str, Any], out: Any = sys.stdout) -> None:
    p = report["parameters"]
    print("Added cost per call of waldio env (LD_PRELOAD, no Python), "
          f"{p['runs']} rounds; ms, median (min–max):", file=out)
    rows = [("program", "direct", "under waldio env", "added (per round)")]
    for m in report["programs"]:
        rows.append((m["name"], _fmt(m["direct_ms"]), _fmt(m["waldio_ms"]), _fmt(m["added_ms"])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)), file=out)
    for m in report["programs"]:
        print(f"  {m['name']}: {shlex.join(m['command_direct'])}", file=out)
    fs = p["filesystem"]
    sysp = p["system"]
    disk = (p["device"].get("chain") or [{}])[-1]
    print(f"parameters: {p.get('sqlite3_shell', {}).get('version', 'command as given')}; "
          f"{fs.get('fstype', '?')} ({','.join(fs.get('mount_options', []) or [])}, "
          f"journal: {fs.get('journals', '?')}) "
          f"at {p['directory']}; device {disk.get('name', '?')}: write cache "
          f"{disk.get('write_cache', '?')}, FUA {disk.get('fua', '?')}; "
          f"{sysp.get('kernel', '?')}, {sysp.get('cpu_count', '?')} CPUs, "
          f"load {p['loadavg_before'][0]:.2f} before; {p['warmup_rounds']} warm-up rounds, "
          f"order alternating", file=out)


def cmd_env(args: argparse.Namespace) -> int:
    try:
        if args.unset:
            print("\n".join(unset_lines()))
            return 0
        if not args.measure:
            print("\n".join(shell_lines(args)))
            return 0
    except FileNotFoundError as e:
        print(f"waldio env: {e}", file=sys.stderr)
        return 3
    return _cmd_measure(args)


def _variant(argv: Sequence[str], variant: str) -> List[str]:
    """``{variant}`` in a given command becomes direct or waldio: each run of a
    command that writes a database can then write its own."""
    return [a.replace("{variant}", variant) for a in argv]


def _cmd_measure(args: argparse.Namespace) -> int:
    base = {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and k not in ENV_OPTIONS.values() and k != VERBOSE_ENV}
    env_waldio = environment(args, base)
    command: List[str] = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    shell = shutil.which("sqlite3") if not command else None
    if not command and not shell:
        print("waldio env --measure: no sqlite3 shell on PATH; give a command after --",
              file=sys.stderr)
        return 3
    d = tempfile.mkdtemp(prefix="waldio-env-", dir=args.dir)
    try:
        programs = ([Measurement("command", _variant(command, "direct"),
                                 _variant(command, "waldio"))] if command
                    else _default_programs(shell or "", d, env_waldio, base))

        def progress(done: int, total: int) -> None:
            if sys.stderr.isatty():
                print(f"\r  round {done}/{total}", end="" if done < total else "\n",
                      file=sys.stderr, flush=True)
        measure(programs, base, env_waldio, args.runs, args.warmup, progress)
        report = {"parameters": _parameters(shell, d, args.runs, args.warmup),
                  "programs": [m.summary() for m in programs]}
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        print(f"waldio env --measure: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=str)
            f.write("\n")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "env", help="print the environment that gives every program started from a shell "
                    "waldio (eval \"$(waldio env)\"), or measure what it costs per call",
        description="Print `export` lines for LD_PRELOAD=libwaldio_preload.so and the "
                    "WALDIO_* options: in that environment every program's system SQLite "
                    "uses waldio, with no Python started per call (waldio run starts one "
                    "each time). --measure times a short program directly and in that "
                    "environment.",
        epilog="examples:\n"
               "  eval \"$(waldio env)\"; sqlite3 app.db 'PRAGMA journal_mode=WAL'\n"
               "  eval \"$(waldio env --sync persistent -v)\"\n"
               "  eval \"$(waldio env --unset)\"\n"
               "  waldio env --measure --runs 50 --json env-cost.json\n"
               "  waldio env --measure -- sqlite-utils insert {variant}.db t rows.json\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_option_flags(p)
    p.add_argument("--unset", action="store_true", help="print the lines that undo it")
    m = p.add_argument_group("measuring the cost per call")
    m.add_argument("--measure", action="store_true",
                   help="run a short program directly and under waldio env, alternating, "
                        "and print median and spread of each and of the difference")
    m.add_argument("--runs", type=int, default=30, metavar="N", help="rounds (default 30)")
    m.add_argument("--warmup", type=int, default=3, metavar="N",
                   help="rounds run first and not counted (default 3)")
    m.add_argument("--dir", default="/var/tmp", metavar="DIR",
                   help="where the databases go (default /var/tmp; needs O_DIRECT)")
    m.add_argument("--json", metavar="FILE", help="write the samples and parameters as JSON")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                   help="with --measure: the program to time instead of the sqlite3 shell")
    p.set_defaults(func=cmd_env)
