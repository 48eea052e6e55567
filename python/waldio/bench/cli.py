"""``waldio bench`` and ``waldio report``: argparse registration and printing.

Argument types and the settings built from them live in :mod:`.options`.

The engine is :mod:`waldio.bench` (:mod:`.runner` and the modules it uses) (no printing there); tables and plots are
built by :mod:`.report` and :mod:`.plots`, which this module reuses so that a saved JSON
file prints exactly like the run that made it.  docs/bench.md documents every
option.

Exit status of ``waldio bench``: 0 when every repetition of every mode passed
its correctness checks, 1 when any failed (the failing checks are printed),
2 for a usage error (argparse names the option and the accepted values),
3 when the run could not start (e.g. O_DIRECT unsupported in --dir).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from waldio import bench as B

from .options import (
    SETTING_ARGS,
    count_list_arg,
    float_above_zero,
    float_at_least_zero,
    int_any,
    int_at_least,
    mix_arg,
    mode_list,
    mode_list_arg,
    mode_name_arg,
    settings_from_args,
    timed_arg,
    workload_arg,
)
from . import results
from .plots import plot_all
from .plots_processes import plot_processes
from .printer import Printer, progress_reporter
from .process_workloads import parse_workloads as parse_process_workloads
from .processes import DEFAULT_MODES as DEFAULT_PROCESS_MODES
from .runner import process_env
from . import webapp as W

EXAMPLES = """\
examples:
  waldio bench
      the quick default: mobibench-2015 preset (1,000 autocommit 100-byte inserts per
      repetition) in wal-full, wal-normal, waldio-full, waldio-normal, waldio-persistent
      and raw-dio, 5 repetitions after 1 warm-up, on a fresh loop-mounted ext4 (as root)
  waldio bench --repetitions 3 --json quick.json
  waldio bench --preset apsys17 --modes wal-full,waldio-full --repetitions 1
  waldio bench --modes all-stock,all-waldio --transactions 200 --dir /var/tmp
  waldio bench --modes wal-full,waldio-full:pad4k,waldio-full:pad8k,waldio-full:embed
      the WALDIO paper's Fig. 13 (log layouts) in one run
  waldio bench --modes wal-full,wal-full@system,waldio-full@system
      the same modes on apsw's SQLite and on the system libsqlite3
  waldio bench --workload mixed --mix insert=50,update=30,delete=10,select=10 \\
      --ops-per-txn 4 --prepopulate 100000 --key-order random --seed 7
  waldio bench --regime reused --timed none --fs ext4-fastcommit
  waldio bench --threads 4 --db-per-thread --think-ms 2
  waldio bench --modes wal-full,waldio-full,waldio-full-async,waldio-persistent-async,\
waldio-normal-async --threads 4
      the WALDIO paper's Table 2 rows with and without Group Synch
  waldio report quick.json --out plots/

modes: NAME[:LAYOUT][@BUILD], comma separated; shortcuts quick, all-stock, all-waldio,
all-raw, all.  Stock NAMEs are <journal>-<sync> with journal in delete, truncate,
persist, wal, memory, off and sync in off, normal, full.  waldio NAMEs are waldio-full,
waldio-persistent, waldio-normal, each also with -async or -durable (group commit).
"""


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from waldio import fs as fsimage
    p = subparsers.add_parser(
        "bench", help="run SQLite journal modes and waldio modes side by side",
        description="Run a Mobibench-style SQLite workload in every chosen mode (stock journal "
                    "modes, waldio modes, raw system-call ceilings), interleaved, with "
                    "repetitions, and print every parameter read back from SQLite and the "
                    "system with the results.  docs/bench.md explains every option and column.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)

    g = p.add_argument_group("what to compare")
    g.add_argument("--modes", type=mode_list_arg, metavar="LIST",
                   help="modes to run, in this order, each round (default: the preset's own "
                        "mode, if any, then " + ",".join(B.QUICK_MODES) + ")")
    g.add_argument("--baseline", type=mode_name_arg, metavar="MODE",
                   help="ratios are computed against this mode, round by round "
                        "(default: wal-full if run, else the first mode)")
    g.add_argument("--ceiling", type=mode_name_arg, metavar="MODE", default="raw-dio",
                   help="'%% of ceiling' column against this mode when it runs (default raw-dio)")
    g.add_argument("--sqlite", choices=B.SQLITE_BUILDS, default="apsw",
                   help="SQLite build for modes without @BUILD: apsw's bundled SQLite or the "
                        "system libsqlite3 via ctypes (default apsw)")
    g.add_argument("--layout", choices=B.LAYOUTS, default="embed",
                   help="waldio log layout for modes without :LAYOUT (default embed)")

    g = p.add_argument_group("workload")
    g.add_argument("--preset", choices=list(B.PRESETS), default="mobibench-2015",
                   help="starting point for every workload option (default mobibench-2015); "
                        + "; ".join(f"{k}: {v.summary}" for k, v in B.PRESETS.items()))
    g.add_argument("--workload", type=workload_arg, metavar="OPS", dest="phases",
                   help="insert, update, delete, select or mixed; a comma list runs phases one "
                        "after the other (apsys17 = insert,update,delete)")
    g.add_argument("--mix", type=mix_arg, metavar="OP=W,...",
                   help="weights of the mixed workload (default insert=50,update=30,delete=10,"
                        "select=10)")
    g.add_argument("--transactions", type=int_at_least(1), metavar="N",
                   help="transactions per phase, all threads together")
    g.add_argument("--ops-per-txn", type=int_at_least(1), metavar="N",
                   help="operations per transaction (each touches every table)")
    g.add_argument("--record-size", type=int_at_least(0), metavar="BYTES",
                   help="bytes of the Value column (Mobibench's repeating a..j pattern)")
    g.add_argument("--prepopulate", type=int_at_least(0), metavar="ROWS",
                   help="rows per table before the run (default: the preset's rule)")
    g.add_argument("--tables", type=int_at_least(1), metavar="N", help="tables per database")
    g.add_argument("--schema", choices=B.SCHEMAS,
                   help="id INTEGER PRIMARY KEY AUTOINCREMENT or plain rowid key")
    g.add_argument("--insert-ids", choices=B.INSERT_IDS,
                   help="auto: INSERT without id (SQLite picks it); explicit: the harness does")
    g.add_argument("--txn", choices=B.TXN_STYLES,
                   help="autocommit (one statement), begin (BEGIN..COMMIT), begin-immediate; "
                        "auto = autocommit for one statement, else begin")
    g.add_argument("--key-order", choices=B.KEY_ORDERS,
                   help="keys for update/delete/select (and insert ids): seq or random")
    g.add_argument("--seed", type=int_any, metavar="N", help="seed of every random choice (default 1)")
    g.add_argument("--threads", type=int_at_least(1), metavar="N",
                   help="threads, one connection each (default 1)")
    sh = g.add_mutually_exclusive_group()
    sh.add_argument("--shared-db", dest="shared_db", action="store_true", default=None,
                    help="all threads use one database (default)")
    sh.add_argument("--db-per-thread", dest="shared_db", action="store_false",
                    help="each thread has its own database, as Mobibench -t does")
    g.add_argument("--think-ms", type=float_at_least_zero, metavar="MS",
                   help="sleep between transactions (inside the wall time, outside latencies)")
    g.add_argument("--drop-caches", action="store_true", default=None,
                   help="before every timed region, after os.sync(), drop the page cache "
                        "(echo 3 > /proc/sys/vm/drop_caches), as Mobibench does; needs root")
    g.add_argument("--busy-timeout", type=int_at_least(0), metavar="MS", dest="busy_timeout_ms",
                   help="sqlite3_busy_timeout of every connection: how long SQLite retries "
                        "SQLITE_BUSY before it returns it (default 10000)")
    g.add_argument("--reader-scans", type=int_at_least(0), metavar="N",
                   help="after the timed region, while the writer's connections stay open, "
                        "another process opens the database in the same mode and scans every "
                        "table N times; ms per scan are reported (default 0: no reader)")

    g = p.add_argument_group("many processes on one database (--processes; issue 18, "
                             "docs/bench.md)")
    g.add_argument("--processes", type=count_list_arg, metavar="LIST",
                   help="run N processes on one database for each N of the comma list (e.g. "
                        "1,2,4,8,16), every mode side by side with stock WAL FULL and NORMAL; "
                        "--workload then takes insert, update, web (default all three), "
                        "--transactions counts per process instead of --duration, "
                        "--ops-per-txn is update's updates per transaction (default 5), "
                        "--prepopulate its rows; default modes "
                        + ",".join(DEFAULT_PROCESS_MODES))
    g.add_argument("--duration", type=float_above_zero, metavar="SECONDS",
                   help="with --processes: how long every process runs per cell (default 2; "
                        "--workload webapp: wrk's timed run, whole seconds, default 5)")
    g.add_argument("--connections", type=int, metavar="N",
                   help="with --workload webapp (a Flask app under gunicorn with --processes "
                        "workers, driven by wrk; examples/webapp): wrk connections per "
                        "worker process (default 4)")

    g = p.add_argument_group("speedtest1 (--workload speedtest1: SQLite's own benchmark, stock and "
                             "waldio side by side)")
    g.add_argument("--size", metavar="LIST",
                   help="speedtest1 --size values, comma list (default 25,100)")
    g.add_argument("--speedtest1-binary", metavar="PATH",
                   help="a speedtest1 built by bench/speedtest1/build.sh (default: build it, "
                        "or find it up to date, in /var/tmp/waldio-speedtest1)")
    g.add_argument("--speedtest1-lib", metavar="PATH",
                   help="libwaldio.a to link into speedtest1 (default: build/libwaldio.a of "
                        "this checkout)")

    g = p.add_argument_group("log regime and timed region")
    g.add_argument("--regime", choices=B.REGIMES,
                   help="growing: fresh WAL; reused: WAL pre-sized and checkpoint-restarted "
                        "before timing; open-close: open, commit, close per transaction "
                        "(default growing)")
    g.add_argument("--timed", type=timed_arg, metavar="PARTS",
                   help="what besides the transactions is timed: comma list of open, "
                        "checkpoint, close, or none (mobibench presets: checkpoint, as "
                        "Mobibench; apsys17: none)")
    g.add_argument("--checkpoint-mode", choices=B.CHECKPOINT_MODES,
                   help="checkpoint run when 'checkpoint' is timed (default passive, as "
                        "sqlite3_wal_checkpoint)")

    g = p.add_argument_group("SQLite settings (read back and printed in any case)")
    g.add_argument("--page-size", type=int, choices=B.PAGE_SIZES, metavar="BYTES",
                   help="page size of the new database (presets: 4096)")
    g.add_argument("--cache-size", type=int_any, metavar="N", help="PRAGMA cache_size")
    g.add_argument("--mmap-size", type=int_at_least(0), metavar="BYTES", help="PRAGMA mmap_size")
    g.add_argument("--locking-mode", choices=B.LOCKING_MODES, help="PRAGMA locking_mode")
    g.add_argument("--wal-autocheckpoint", type=int_any, metavar="PAGES",
                   help="PRAGMA wal_autocheckpoint")
    g.add_argument("--journal-size-limit", type=int_any, metavar="BYTES",
                   help="PRAGMA journal_size_limit")
    g.add_argument("--stock-reserve", type=int_at_least(0), metavar="BYTES",
                   help="reserved bytes per page for stock modes' databases (default 0; 24 "
                        "makes their B-trees identical to waldio's)")
    g.add_argument("--flush-ms", type=int_at_least(1), metavar="MS",
                   help="waldio_flush_ms of waldio-normal (libwaldio default 100)")
    g.add_argument("--prealloc", metavar="BYTES",
                   help="waldio_prealloc, e.g. 4M (libwaldio default 4 MiB); also raw-dio's ring")
    g.add_argument("--group-ms", type=int_at_least(1), metavar="MS",
                   help="waldio_group_ms of the group modes (libwaldio default 2)")
    g.add_argument("--group-bytes", metavar="BYTES",
                   help="waldio_group_bytes of the group modes, 4K..16M (libwaldio default 16K)")

    g = p.add_argument_group("where")
    g.add_argument("--fs", choices=fsimage.KINDS,
                   help="make a fresh loop file system of this kind (default ext4 when root "
                        "and loop devices are available)")
    g.add_argument("--fs-size", type=int_at_least(16), metavar="MIB",
                   help="size of the loop image (sparse; default from the workload, >= 256)")
    g.add_argument("--dir", metavar="DIR",
                   help="run in a private sub-directory of DIR instead of a loop file system")
    g.add_argument("--device", metavar="PROFILE",
                   help="make the loop file system over an emulated device whose requests cost "
                        "what PROFILE says: emmc-2014, ufs-3, sdcard-a1, nvme, or a profile "
                        "file (waldio device list; docs/device.md); root and FUSE")

    g = p.add_argument_group("harness (docs/bench.md, 'The timed loop')")
    g.add_argument("--loop", choices=("native", "python"), default="native",
                   help="native: the planned transactions run in a C loop with two timestamps "
                        "per transaction (default); python: the Python loop (the open-close "
                        "regime always uses it)")
    g.add_argument("--statements", choices=("prepared", "exec"), default="prepared",
                   help="prepared: each SQL text prepared once, bound per execution (default); "
                        "exec: one SQL text per transaction with literal values through "
                        "sqlite3_exec(), parsed every time, as Mobibench does (--loop native)")
    g.add_argument("--no-calibration", dest="calibration", action="store_false",
                   help="skip the calibration round that measures the harness overhead per "
                        "transaction and SQLite build (in-memory, synchronous=OFF)")

    g = p.add_argument_group("Mobibench side by side (issue 13; docs/bench.md)")
    g.add_argument("--compare-mobibench", action="store_true",
                   help="build Mobibench 1ad7644 and f56ea5e from their public source against "
                        "the system SQLite and run them interleaved with waldio bench --sqlite "
                        "system (presets mobibench-2015 / mobibench), DELETE, TRUNCATE, PERSIST "
                        "and WAL, on --dir's file system (default /var/tmp) and a fresh loop "
                        "ext4; takes --repetitions, --transactions, --statements, --json; more "
                        "options: python3 -m waldio.bench.compare_mobibench --help")
    g.add_argument("--mobibench-source", metavar="PATH|URL",
                   help="a git clone of ESOS-Lab/Mobibench or a URL to clone (default: "
                        "$WALDIO_MOBIBENCH_SRC, a local mirror, else GitHub)")

    g = p.add_argument_group("statistics")
    g.add_argument("--repetitions", type=int_at_least(1), metavar="N",
                   help="measured rounds (default 5)")
    g.add_argument("--warmup", type=int_at_least(0), metavar="N",
                   help="warm-up rounds, run and stored but excluded (default 1)")
    g.add_argument("--max-latency-samples", type=int_at_least(1), metavar="N",
                   help="per repetition, keep at most N latencies (reservoir; percentiles "
                        "use all of them); default 100000")

    g = p.add_argument_group("output (the full record always goes to a JSON and a text file)")
    g.add_argument("--json", metavar="FILE",
                   help="the JSON result goes to FILE and the parameter checklist to FILE with "
                        "the suffix .txt (default results/waldio-bench-<UTC start>.json and "
                        ".txt; schemas: waldio/schemas/)")
    g.add_argument("--verbose", action="store_true",
                   help="also print the full parameter checklist and every table (what the "
                        ".txt file holds)")
    g.add_argument("--plot", metavar="DIR",
                   help="draw this run's plots into DIR (PNG and SVG; needs matplotlib)")
    g.add_argument("--plain", action="store_true", help="plain-text tables, no progress bar")
    g.add_argument("--quiet", action="store_true",
                   help="print only the results table and failures")
    p.set_defaults(func=run_bench, _parser=p)

    r = subparsers.add_parser(
        "report", help="tables and plots from waldio bench JSON files",
        description="Print the tables of one or more `waldio bench --json` files and draw "
                    "plots (PNG and SVG): ops/s per mode with min-max whiskers, device bytes "
                    "per transaction (stacked), latency CDF per mode.",
        epilog="example:\n  waldio report a.json b.json --out plots/",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("files", nargs="+", metavar="FILE.json")
    r.add_argument("--out", metavar="DIR", help="write plots here (default: no plots)")
    r.add_argument("--format", default="png,svg", metavar="LIST",
                   help="plot formats, comma list of png, svg, pdf (default png,svg)")
    r.add_argument("--plain", action="store_true", help="plain-text tables")
    r.add_argument("--params", action="store_true", help="also print the full parameter header")
    r.set_defaults(func=run_report, _parser=r)


def run_bench(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args._parser
    if args.dir is not None and args.fs is not None:
        parser.error("--dir and --fs exclude each other: --dir runs in an existing directory, "
                     "--fs makes a fresh loop file system")
    other = "--compare-mobibench" if args.compare_mobibench else "--workload speedtest1" \
        if args.phases and "speedtest1" in args.phases else None
    if other:
        given = [o for o, v in (("--processes", args.processes), ("--duration", args.duration),
                                ("--plot", args.plot), ("--verbose", args.verbose or None))
                 if v is not None]
        if given:
            parser.error(f"{other}: {', '.join(given)} do not apply")
    if args.compare_mobibench:
        if args.device is not None:
            parser.error("--compare-mobibench: --device does not apply")
        return run_compare_mobibench(args)
    if args.mobibench_source is not None:
        parser.error("--mobibench-source applies to --compare-mobibench only")
    if args.phases and "speedtest1" in args.phases:
        return run_speedtest1(args)
    for opt in ("size", "speedtest1_binary", "speedtest1_lib"):
        if getattr(args, opt) is not None:
            parser.error(f"--{opt.replace('_', '-')} applies to --workload speedtest1 only")
    if args.plot is not None and not _have_matplotlib():
        parser.error("--plot: plots need matplotlib (pip install 'waldio[plot]')")
    if args.processes is not None:
        return run_processes(args)
    if args.duration is not None:
        parser.error("--duration applies to --processes only")
    try:
        settings = settings_from_args(args)
        modes = mode_list(args)
    except ValueError as e:
        parser.error(str(e))
    labels = [m.label for m in modes]
    if args.baseline is not None:
        base = B.parse_modes(args.baseline, args.layout, args.sqlite)[0].label
        if base not in labels:
            parser.error(f"--baseline {args.baseline}: not among the modes run "
                         f"({', '.join(labels)}); add it to --modes")
        settings.baseline = base
    elif "wal-full" not in labels:
        settings.notes.append(f"baseline is {labels[0]} (wal-full is not among the modes)")
    try:
        runner = B.Bench(settings, modes, loop=args.loop, statements=args.statements,
                         calibrate=args.calibration)
    except B.BenchError as e:
        parser.error(str(e))

    from waldio.bench import report as R
    out, err = _printers(args)
    t0 = time.perf_counter()
    rounds = settings.warmup + settings.repetitions
    if not args.quiet:
        pre = B.PRESETS.get(settings.preset or "")
        out.wrapped(f"waldio bench: preset {settings.preset or '(none)'}"
                    + (f" ({pre.summary})" if pre else ""))
        out.wrapped(f"modes, in this order every round: {', '.join(labels)}; "
                    f"{settings.warmup} warm-up + {settings.repetitions} measured rounds")
    doc = _run(args, out, err, runner, args.fs_size or B.default_fs_size_mib(settings, args.fs),
               rounds * len(modes), t0)
    if doc is None:
        return 3
    return _finish(args, out, doc, summary=R.print_summary, failures=R.print_failures,
                   checklist=R.print_checklist, plot=_plot_bench)


def run_processes(args: argparse.Namespace) -> int:
    """``waldio bench --processes``: :mod:`.processes`, printed by :mod:`.processes_report`."""
    from waldio.bench import processes as P
    from waldio.bench import processes_report as PR
    parser: argparse.ArgumentParser = args._parser
    try:
        mixes = W.parse_mixes(args.phases or [])
    except ValueError as e:
        parser.error(str(e))
    if mixes is not None:
        return run_webapp(args, mixes)
    if args.connections is not None:
        parser.error("--connections applies to --workload webapp only")
    given = [a for a in SETTING_ARGS if a not in PROCESS_ARGS and getattr(args, a) is not None]
    given += [a for a, v in (("baseline", args.baseline), ("reader_scans", args.reader_scans),
                             ("loop", args.loop if args.loop != "native" else None),
                             ("no_calibration", None if args.calibration else True),
                             ("ceiling", args.ceiling if args.ceiling != "raw-dio" else None))
              if v is not None and a not in given]
    if given:
        parser.error(f"--processes: {', '.join('--' + g.replace('_', '-') for g in given)} "
                     f"do not apply (docs/bench.md, 'Many processes')")
    if args.duration is not None and args.transactions is not None:
        parser.error("--processes: --duration and --transactions exclude each other (a fixed "
                     "time, or a fixed count of transactions per process)")
    try:
        workloads = parse_process_workloads(args.phases)
        overrides = {k: getattr(args, k) for k in PROCESS_ARGS
                     if k not in ("phases", "transactions", "ops_per_txn", "prepopulate")}
        if overrides.get("repetitions") is None:
            overrides["repetitions"] = P.DEFAULT_REPETITIONS
        overrides.update(layout=args.layout, sqlite=args.sqlite)
        base = B.resolve_settings(args.preset, overrides)
        ps = P.ProcessSettings(
            base=base, processes=args.processes, workloads=workloads,
            duration_s=None if args.transactions is not None else
            (args.duration or P.DEFAULT_DURATION_S),
            transactions=args.transactions, rows=args.prepopulate,
            ops_per_txn=args.ops_per_txn or P.DEFAULT_UPDATES_PER_TXN,
            statements=args.statements)
        for w in workloads:
            ps.shape(w)
        modes = B.parse_modes(args.modes or ",".join(P.DEFAULT_MODES), args.layout, args.sqlite)
        bench = P.ProcessBench(ps, modes, process_env())
    except (ValueError, B.BenchError) as e:
        parser.error(str(e))
    out, err = _printers(args)
    t0 = time.perf_counter()
    if not args.quiet:
        how = f"{ps.duration_s:g} s per cell" if ps.duration_s else \
            f"{ps.transactions} transactions per process"
        out.wrapped(f"waldio bench --processes {','.join(map(str, ps.processes))}: workloads "
                    f"{', '.join(workloads)}; {how}; modes {', '.join(bench.labels)}; "
                    f"{base.warmup} warm-up + {base.repetitions} measured rounds, interleaved")
    cells = len(workloads) * len(ps.processes) * len(modes)
    return _run_to_finish(args, out, err, bench, args.fs_size or ps.fs_size_mib(),
                          (base.warmup + base.repetitions) * cells, t0, PR, _plot_processes)


def run_webapp(args: argparse.Namespace, mixes: List[str]) -> int:
    """``waldio bench --workload webapp --processes``: :mod:`.webapp`, printed by
    :mod:`.webapp_report`."""
    from waldio.bench import webapp_report as WR
    parser: argparse.ArgumentParser = args._parser
    given = [a for a in SETTING_ARGS if a not in WEBAPP_ARGS and getattr(args, a) is not None]
    if args.baseline is not None:
        given.append("baseline")
    if given:
        parser.error(f"--workload webapp: {', '.join('--' + g.replace('_', '-') for g in given)} "
                     f"do not apply (docs/bench.md, 'A web app')")
    try:
        overrides = {k: getattr(args, k) for k in WEBAPP_ARGS
                     if k not in ("phases", "prepopulate")}
        overrides.update(layout=args.layout, sqlite=args.sqlite)
        if overrides.get("repetitions") is None:
            overrides["repetitions"] = 3
        if overrides.get("busy_timeout_ms") is None:
            overrides["busy_timeout_ms"] = W.DEFAULT_BUSY_TIMEOUT_MS
        base = B.resolve_settings(None, overrides)
        ws = W.WebappSettings(
            base=base, processes=args.processes, mixes=mixes,
            duration_s=args.duration or W.DEFAULT_DURATION_S,
            users=args.prepopulate or W.DEFAULT_USERS,
            connections_per_worker=args.connections or W.CONNECTIONS_PER_WORKER)
        modes = B.parse_modes(args.modes or ",".join(W.DEFAULT_MODES), args.layout, args.sqlite)
        bench = W.WebappBench(ws, modes, process_env())
    except (ValueError, B.BenchError) as e:
        parser.error(str(e))
    out, err = _printers(args)
    t0 = time.perf_counter()
    if not args.quiet:
        out.wrapped(f"waldio bench --workload webapp --processes "
                    f"{','.join(map(str, ws.processes))}: mixes {', '.join(mixes)}; "
                    f"{ws.duration_s} s of wrk per cell; modes {', '.join(bench.labels)}; "
                    f"{base.warmup} warm-up + {base.repetitions} measured rounds, interleaved")
    cells = len(mixes) * len(ws.processes) * len(modes)
    return _run_to_finish(args, out, err, bench, args.fs_size or ws.fs_size_mib(),
                          (base.warmup + base.repetitions) * cells, t0, WR,
                          lambda d, j, o: [])


# options of the SQL workload that --workload webapp uses (the others are refused)
WEBAPP_ARGS = ("phases", "record_size", "prepopulate", "seed", "repetitions", "warmup",
               "page_size", "stock_reserve", "flush_ms", "prealloc", "group_ms", "group_bytes",
               "busy_timeout_ms")


# options of the SQL workload that --processes uses (the others are refused)
PROCESS_ARGS = ("phases", "transactions", "ops_per_txn", "record_size", "prepopulate", "schema",
                "seed", "repetitions", "warmup", "page_size", "cache_size", "mmap_size",
                "locking_mode", "wal_autocheckpoint", "journal_size_limit", "stock_reserve",
                "flush_ms", "prealloc", "group_ms", "group_bytes", "busy_timeout_ms")


def _printers(args: argparse.Namespace) -> Tuple[Printer, Printer]:
    return (Printer(plain=args.plain or not sys.stdout.isatty()),
            Printer(plain=args.plain or not sys.stderr.isatty(), stream=sys.stderr))


def _run(args: argparse.Namespace, out: Printer, err: Printer, engine: Any, size_mib: int,
         steps: int, t0: float) -> Optional[Dict[str, Any]]:
    """Run a Bench or a ProcessBench on the target with a progress bar; its document, or
    None after an error that stopped it (printed)."""
    try:
        with B.open_target(args.fs, args.dir, size_mib, engine.need_odirect(),
                           args.device) as target:
            if not args.quiet:
                out.wrapped(f"target: {target.brief}")
                out.line("")
            with progress_reporter(err, enabled=not args.quiet, total=steps) as progress:
                engine.progress = progress
                doc: Dict[str, Any] = engine.run(target)
            if target.device is not None:
                doc["params"]["target"]["device"]["accounting"] = target.device.stats()
    except B.BenchError as e:
        print(f"waldio bench: error: {e}", file=sys.stderr)
        return None
    doc["tool"]["wall_s"] = round(time.perf_counter() - t0, 3)
    return doc


def _run_to_finish(args: argparse.Namespace, out: Printer, err: Printer, engine: Any,
                   size_mib: int, steps: int, t0: float, report: Any,
                   plot: Callable[[Dict[str, Any], str, str], List[str]]) -> int:
    """_run, then _finish with a report module's print_results, print_failures and
    print_checklist; 3 if the run could not start."""
    doc = _run(args, out, err, engine, size_mib, steps, t0)
    if doc is None:
        return 3
    return _finish(args, out, doc, summary=report.print_results,
                   failures=report.print_failures, checklist=report.print_checklist,
                   plot=plot)


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


Show = Callable[..., None]           # (Printer, doc, **options)


def _finish(args: argparse.Namespace, out: Printer, doc: Dict[str, Any], *, summary: Show,
            failures: Show, checklist: Show,
            plot: Callable[[Dict[str, Any], str, str], List[str]]) -> int:
    """After a run: the record files, the headline and table, failures, where the record
    went, plots; the exit status."""
    from waldio.bench import checklist as C
    from waldio.bench import results
    problems = results.validate(doc)
    text = C.checklist_text(doc, checklist)
    rec = C.save(doc, C.paths_for(args.json, doc["tool"]["started_utc"]), text)
    summary(out, doc, headline=not args.quiet)
    failures(out, doc)
    for p in problems:
        print(f"waldio bench: internal error: result does not match its schema: {p}",
              file=sys.stderr)
    if args.verbose or not rec.complete:
        out.line(text)
    plots = plot(doc, rec.json_path, args.plot) if args.plot else None
    if not args.quiet:
        C.footer(out, rec, plots)
        out.line(f"total wall time: {doc['tool']['wall_s']:.1f} s")
    if problems:
        return 3
    return 0 if doc["ok"] else 1


def _plot_bench(doc: Dict[str, Any], json_path: str, out_dir: str) -> List[str]:
    return plot_all([(json_path, doc)], out_dir, ("png", "svg"))


def _plot_processes(doc: Dict[str, Any], json_path: str, out_dir: str) -> List[str]:
    return plot_processes(doc, os.path.splitext(os.path.basename(json_path))[0], out_dir,
                          ("png", "svg"))


def compare_mobibench_argv(args: argparse.Namespace) -> List[str]:
    """The command line of :mod:`.compare_mobibench` that ``waldio bench`` passes on."""
    argv: List[str] = []
    for opt in ("repetitions", "transactions", "json", "mobibench_source"):
        v = getattr(args, opt)
        if v is not None:
            argv += [f"--{opt.replace('_', '-')}", str(v)]
    if args.statements != "prepared":     # waldio bench's default; the comparison's is exec
        argv += ["--statements", args.statements]
    if args.dir is not None:
        argv += ["--root-dir", args.dir]
    return argv


def run_compare_mobibench(args: argparse.Namespace) -> int:
    from waldio.bench import compare_mobibench as C
    parser: argparse.ArgumentParser = args._parser
    passed = ("repetitions", "transactions", "json", "mobibench_source", "dir", "statements",
              "compare_mobibench", "plain", "quiet")
    given = [a for a in SETTING_ARGS if a not in passed and getattr(args, a, None) is not None]
    if args.modes is not None:
        given.append("modes")
    if given:
        parser.error(f"--compare-mobibench: {', '.join('--' + g.replace('_', '-') for g in given)}"
                     f" do not apply (the cells are fixed by Mobibench's settings; see "
                     f"python3 -m waldio.bench.compare_mobibench --help)")
    return C.main(compare_mobibench_argv(args))


# options of the SQL workload that speedtest1 does not have (it has its own workload)
_NOT_FOR_SPEEDTEST1 = tuple(a for a in SETTING_ARGS if a not in ("phases", "repetitions",
                                                                  "warmup", "stock_reserve"))


def run_speedtest1(args: argparse.Namespace) -> int:
    """``waldio bench --workload speedtest1``: SQLite's speedtest1, stock and waldio."""
    from waldio.bench import speedtest1 as S
    from waldio.bench import speedtest1_report as SR
    parser: argparse.ArgumentParser = args._parser
    if args.phases != ["speedtest1"]:
        parser.error("--workload speedtest1 runs alone (it is SQLite's own program, not a "
                     "phase of the SQL workload)")
    given = [a for a in _NOT_FOR_SPEEDTEST1 if getattr(args, a, None) is not None]
    if args.baseline is not None:
        given.append("baseline")
    if args.layout != "embed":
        given.append("layout")
    if args.sqlite != "apsw":
        given.append("sqlite")
    if given:
        names = ", ".join("--" + g.replace("_", "-") for g in given)
        parser.error(f"--workload speedtest1: {names} "
                     f"do not apply (speedtest1 has its own workload; it takes --size, --modes, "
                     f"--repetitions, --warmup, --stock-reserve, --dir/--fs, --json)")
    try:
        st = S.Speedtest1Settings(
            sizes=S.parse_sizes(args.size), modes=S.parse_modes(args.modes),
            repetitions=args.repetitions if args.repetitions is not None else 5,
            warmup=args.warmup if args.warmup is not None else 1,
            stock_reserve=args.stock_reserve or 0, binary=args.speedtest1_binary,
            lib=args.speedtest1_lib)
    except ValueError as e:
        parser.error(str(e))
    out, err = _printers(args)
    t0 = time.perf_counter()
    rounds = st.warmup + st.repetitions
    runner = S.Speedtest1(st, log=(lambda line: None) if args.quiet else err.line)
    try:
        binary = runner.prepare()
    except B.BenchError as e:
        print(f"waldio bench: error: {e}", file=sys.stderr)
        return 3
    if not args.quiet:
        out.line(f"waldio bench --workload speedtest1: {binary}")
        out.line(f"sizes {', '.join(map(str, st.sizes))}; modes {', '.join(st.modes)}; "
                 f"{st.warmup} warm-up + {st.repetitions} measured rounds")
    size = args.fs_size or S.default_fs_size_mib(st)
    try:
        with B.open_target(args.fs, args.dir, size, True, args.device) as target:
            if not args.quiet:
                out.line(target.note)
                out.line("")
            with progress_reporter(err, enabled=not args.quiet,
                                   total=rounds * len(st.sizes) * len(st.modes)) as progress:
                runner.progress = lambda ev: progress(dict(
                    ev, result=f"TOTAL {ev['total_ms']:,} ms" if ev.get("total_ms") is not None
                    else None))
                doc = runner.run(target)
    except B.BenchError as e:
        print(f"waldio bench: error: {e}", file=sys.stderr)
        return 3
    doc["tool"]["wall_s"] = round(time.perf_counter() - t0, 3)
    problems = results.validate(doc)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    SR.print_results(out, doc, detail=not args.quiet)
    SR.print_failures(out, doc)
    for p in problems:
        print(f"waldio bench: internal error: result does not match its schema: {p}",
              file=sys.stderr)
    if not args.quiet:
        out.line(f"total wall time: {doc['tool']['wall_s']:.1f} s"
                 + (f"; JSON: {args.json}" if args.json else ""))
    if problems:
        return 3
    return 0 if doc["ok"] else 1


def run_report(args: argparse.Namespace) -> int:
    from waldio.bench import processes_report as PR
    from waldio.bench import report as R
    from waldio.bench import speedtest1_report as SR
    from waldio.bench import webapp_report as WR
    parser: argparse.ArgumentParser = args._parser
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in ("png", "svg", "pdf")]
    if bad or not formats:
        parser.error(f"--format: unknown format {', '.join(bad) or args.format!r} "
                     f"(accepted: png, svg, pdf)")
    docs = []
    for path in args.files:
        try:
            docs.append((path, results.load(path)))
        except (OSError, ValueError) as e:
            parser.error(f"{path}: {e}")
    if args.out and not _have_matplotlib():
        print("waldio report: error: plots need matplotlib (pip install 'waldio[plot]')",
              file=sys.stderr)
        return 3
    out = Printer(plain=args.plain or not sys.stdout.isatty())
    status = 0
    for path, doc in docs:
        out.line(f"== {path} ==")
        kind = results.kind_of(doc)
        if kind == "speedtest1":
            SR.print_results(out, doc)
            SR.print_failures(out, doc)
        elif kind == "processes":
            if args.params:
                PR.print_checklist(out, doc)
            PR.print_results(out, doc)
            PR.print_failures(out, doc)
        elif kind == "webapp":
            if args.params:
                WR.print_checklist(out, doc)
            WR.print_results(out, doc)
            WR.print_failures(out, doc)
        else:
            if args.params:
                R.print_header(out, doc)
            else:
                R.print_brief_header(out, doc)
            R.print_headline(out, doc)
            R.print_results(out, doc, notes=True)
            R.print_failures(out, doc)
        if not doc.get("ok", False):
            status = 1
        out.line("")
    if args.out:
        bench_docs = [(p, d) for p, d in docs if results.kind_of(d) == "bench"]
        written = plot_all(bench_docs, args.out, formats) if bench_docs else []
        for p, d in docs:
            if results.kind_of(d) == "processes":
                written += plot_processes(d, os.path.splitext(os.path.basename(p))[0], args.out,
                                          formats)
        for w in written:
            out.line(f"wrote {w}")
    return status
