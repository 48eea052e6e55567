"""Command-line values of ``waldio bench``, shared with ``waldio trace``.

The argparse types that check a value as it is typed (integers with a lower
bound, mode lists, workloads, mixes, timed parts) and the two functions that
turn parsed arguments into a :class:`~waldio.bench.settings.Settings` and a
mode list.  ``waldio trace`` runs bench's workload, so it uses these same
functions: one option, one meaning, in both commands.
"""
from __future__ import annotations

import argparse
from typing import Callable, Dict, List

from waldio import bench as B

from .process_workloads import WORKLOADS as PROCESS_WORKLOADS
from .webapp import WORKLOADS as WEBAPP_WORKLOADS


def int_at_least(lo: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lo}, got {text!r}")
        if v < lo:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lo}, got {v}")
        return v
    parse.__name__ = f"integer >= {lo}"
    return parse


def int_any(text: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")


def float_at_least_zero(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    if v < 0 or v != v:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return v


def float_above_zero(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return v


def count_list_arg(text: str) -> List[int]:
    """A comma list of integers >= 1 (``--processes 1,2,4``), duplicates dropped."""
    out: List[int] = []
    for word in text.split(","):
        try:
            n = int(word.strip().replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma list of integers >= 1, got "
                                             f"{word.strip()!r} in {text!r}")
        if n < 1:
            raise argparse.ArgumentTypeError(f"expected integers >= 1, got {n} in {text!r}")
        if n not in out:
            out.append(n)
    return out


def mode_list_arg(text: str) -> str:
    try:
        B.parse_modes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))
    return text


def mode_name_arg(text: str) -> str:
    try:
        specs = B.parse_modes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))
    if len(specs) != 1:
        raise argparse.ArgumentTypeError(f"expected one mode, got {text!r}")
    return text


def workload_arg(text: str) -> List[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in B.WORKLOADS and w != "speedtest1"
           and w not in PROCESS_WORKLOADS and w not in WEBAPP_WORKLOADS]
    if not words or bad:
        raise argparse.ArgumentTypeError(
            f"unknown workload {', '.join(map(repr, bad)) or repr(text)} (accepted: "
            f"{', '.join(B.WORKLOADS)}, or a comma list of them, run one after the other; "
            f"or speedtest1 alone: SQLite's own benchmark; with --processes: "
            f"{', '.join(PROCESS_WORKLOADS)}, or {', '.join(WEBAPP_WORKLOADS)} alone)")
    if "speedtest1" in words and len(words) > 1:
        raise argparse.ArgumentTypeError("speedtest1 runs alone (SQLite's own benchmark "
                                         "program), not as a phase of a list")
    return words


def mix_arg(text: str) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for part in text.split(","):
        k, eq, v = part.strip().partition("=")
        if not eq or k not in B.OPERATIONS:
            raise argparse.ArgumentTypeError(
                f"expected OP=WEIGHT pairs with OP in {', '.join(B.OPERATIONS)}, got {part!r}")
        try:
            w = float(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"weight of {k} is not a number: {v!r}")
        if w < 0:
            raise argparse.ArgumentTypeError(f"weight of {k} is negative")
        out[k] = w
    if sum(out.values()) <= 0:
        raise argparse.ArgumentTypeError("at least one weight must be positive")
    return out


def timed_arg(text: str) -> List[str]:
    if text.strip().lower() in ("none", ""):
        return []
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in B.TIMED_PARTS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown part {', '.join(map(repr, bad))} (accepted: a comma list of "
            f"{', '.join(B.TIMED_PARTS)}, or none)")
    return list(dict.fromkeys(words))


SETTING_ARGS = ("phases", "mix", "transactions", "ops_per_txn", "record_size", "prepopulate",
                 "tables", "schema", "insert_ids", "txn", "key_order", "seed", "threads",
                 "shared_db", "think_ms", "regime", "timed", "checkpoint_mode", "repetitions",
                 "warmup", "page_size", "cache_size", "mmap_size", "locking_mode",
                 "wal_autocheckpoint", "journal_size_limit", "stock_reserve", "flush_ms",
                 "prealloc", "group_ms", "group_bytes", "max_latency_samples", "reader_scans",
                 "drop_caches", "busy_timeout_ms")


def settings_from_args(args: argparse.Namespace) -> B.Settings:
    overrides = {k: getattr(args, k, None) for k in SETTING_ARGS}   # waldio trace: a subset
    overrides["layout"] = args.layout
    overrides["sqlite"] = args.sqlite
    overrides["ceiling"] = args.ceiling
    if args.prealloc is not None:
        try:
            B.parse_size(args.prealloc)
        except ValueError:
            raise ValueError(f"--prealloc: expected bytes with an optional K/M/G suffix, "
                             f"got {args.prealloc!r}")
    return B.resolve_settings(args.preset, overrides)


def mode_list(args: argparse.Namespace) -> List[B.ModeSpec]:
    if args.modes:
        return B.parse_modes(args.modes, args.layout, args.sqlite)
    names = list(B.PRESETS[args.preset].native_modes) if args.preset else []
    names += [m for m in B.QUICK_MODES if m not in names]
    return B.parse_modes(",".join(names), args.layout, args.sqlite)
