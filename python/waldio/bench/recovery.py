"""Recovery time after a crash: stock WAL against LS-MVBT, by uncheckpointed transactions.

``python -m waldio.bench.recovery --txns 10,100,1000,5000 --repetitions 5``
reproduces the LS-MVBT slides' recovery figure (docs/reproductions.md).  For
each n and each repetition, on a fresh loop-mounted journaled ext4:

* **wal**: stock SQLite (``unix`` VFS), ``journal_mode=WAL``,
  ``synchronous=FULL``, ``wal_autocheckpoint=0``: n autocommit single-row
  inserts (Mobibench's 100-byte record), then the connection is closed
  without a checkpoint (``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE``) and the ``-shm``
  deleted: the state a crash and a reboot leave, n transactions in the WAL.
* **lsmvbt**: the same n inserts into an lsmvbt table (``sync=full``).
  Its recovery does not depend on how the run ended: the open reads every
  slot of the file (lsmvbt/DESIGN.md §5.2).

Then the files are fsynced and dropped from the page cache
(``POSIX_FADV_DONTNEED``, as after a reboot; ``--warm`` keeps them) and the
timed region is: open a connection, run ``SELECT Value FROM tblMyList WHERE
id = 1`` (stock SQLite reads the whole WAL to rebuild its index before it;
LS-MVBT connects the table: recovery).  Loading lsmvbt.so into the
connection, between the two, is not timed.  Modes alternate within a
repetition.  Output: median (min-max) ms per n and mode, and the ratio.

Invariant: nothing but the open, the first read and the close is timed, and
every measured state is checked (the read returns row 1, the row count is n).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

from waldio import fs as fsimage

from . import lsmvbt
from .plan import record_value

MODES = ("wal", "lsmvbt")
TABLE = "tblMyList"
COLUMNS = "id INTEGER PRIMARY KEY, Value TEXT not null, creation_date long"


def _connect(path: Path, mode: str) -> Any:
    import apsw
    conn = apsw.Connection(str(path), vfs="unix")
    if mode == "lsmvbt":
        lsmvbt.load(conn)
    return conn


def build(path: Path, mode: str, n: int) -> None:
    """n committed single-row inserts, left as a crash leaves them."""
    import apsw
    conn = _connect(path, mode)
    conn.execute("PRAGMA page_size=4096")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    if mode == "wal":
        conn.execute(f"CREATE TABLE {TABLE}({COLUMNS})")
    else:
        conn.execute(f"CREATE VIRTUAL TABLE {TABLE} USING lsmvbt({COLUMNS}, sync=full)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")      # the schema is checkpointed
    value = record_value(100)
    for _ in range(n):
        conn.execute(f"INSERT INTO {TABLE}(Value) VALUES(?)", (value,))
    conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    conn.close()
    shm = Path(str(path) + "-shm")
    if shm.exists():
        shm.unlink()


def drop_cache(directory: Path) -> None:
    """fsync every file of the directory and drop its pages from the page cache."""
    for p in directory.iterdir():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed_recovery(path: Path, mode: str, n: int) -> Dict[str, Any]:
    """Open, first read, close: ms, plus the checks and the engine's own recovery time."""
    import apsw
    pc = time.perf_counter_ns
    if mode == "lsmvbt":
        conn = apsw.Connection(str(path), vfs="unix")
        lsmvbt.load(conn)                       # untimed: loading the extension
        conn.close()
    wal_bytes = os.path.getsize(str(path) + "-wal") if os.path.exists(str(path) + "-wal") else 0
    file_bytes = lsmvbt.file_bytes(str(path), [TABLE]) if mode == "lsmvbt" else 0
    t0 = pc()
    conn = apsw.Connection(str(path), vfs="unix")
    t1 = pc()
    if mode == "lsmvbt":
        lsmvbt.load(conn)
    t2 = pc()
    row = conn.execute(f"SELECT Value FROM {TABLE} WHERE id = 1").fetchall()
    t3 = pc()
    count = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchall()[0][0]
    engine_us = None
    if mode == "lsmvbt":
        engine_us = json.loads(conn.execute("SELECT lsmvbt_stats(?)", (TABLE,))
                               .fetchall()[0][0])["recovery_usec"]
    conn.close()
    ok = bool(row) and row[0][0] == record_value(100) and count == n
    return {"ms": ((t1 - t0) + (t3 - t2)) / 1e6, "ok": ok,
            "rows": count, "wal_bytes": wal_bytes, "table_file_bytes": file_bytes,
            "engine_recovery_us": engine_us}


def run(txns: Sequence[int], repetitions: int, warm: bool, fs_kind: str) -> Dict[str, Any]:
    results: Dict[str, Any] = {"txns": list(txns), "repetitions": repetitions, "warm": warm,
                               "fs": fs_kind, "runs": []}
    for n in txns:
        for rep in range(repetitions):
            with fsimage.loop_filesystem(fs_kind) as lfs:
                for mode in MODES:
                    d = Path(lfs.path(f"{mode}-{n}-{rep}"))
                    d.mkdir()
                    build(d / "r.db", mode, n)
                    if not warm:
                        drop_cache(d)
                    r = timed_recovery(d / "r.db", mode, n)
                    results["runs"].append(dict(r, mode=mode, n=n, rep=rep))
                    print(f"n={n} rep={rep} {mode}: {r['ms']:.2f} ms"
                          f"{'' if r['ok'] else ' CHECK FAILED'}", file=sys.stderr)
    results["summary"] = summarize(results["runs"], txns)
    return results


def summarize(runs: List[Dict[str, Any]], txns: Sequence[int]) -> List[Dict[str, Any]]:
    out = []
    for n in txns:
        row: Dict[str, Any] = {"n": n}
        for mode in MODES:
            ms = [r["ms"] for r in runs if r["n"] == n and r["mode"] == mode]
            row[mode] = {"median": statistics.median(ms), "min": min(ms), "max": max(ms)}
            row[f"{mode}_bytes"] = statistics.median(
                r["wal_bytes"] if mode == "wal" else r["table_file_bytes"]
                for r in runs if r["n"] == n and r["mode"] == mode)
        row["ratio"] = row["wal"]["median"] / row["lsmvbt"]["median"]
        row["ok"] = all(r["ok"] for r in runs if r["n"] == n)
        out.append(row)
    return out


def table(summary: List[Dict[str, Any]]) -> str:
    lines = ["| uncheckpointed txns | WAL ms | LS-MVBT ms | WAL / LS-MVBT | WAL file KB | "
             ".lsmvbt file KB | checks |", "|---|---|---|---|---|---|---|"]
    for r in summary:
        w, l_ = r["wal"], r["lsmvbt"]
        lines.append(f"| {r['n']:,} | {w['median']:.2f} ({w['min']:.2f}–{w['max']:.2f}) | "
                     f"{l_['median']:.2f} ({l_['min']:.2f}–{l_['max']:.2f}) | {r['ratio']:.2f} | "
                     f"{r['wal_bytes'] / 1024:,.0f} | {r['lsmvbt_bytes'] / 1024:,.0f} | "
                     f"{'ok' if r['ok'] else 'FAILED'} |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m waldio.bench.recovery", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--txns", default="10,100,1000,5000",
                   help="uncheckpointed transactions, comma list (default 10,100,1000,5000)")
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--warm", action="store_true", help="keep the files in the page cache")
    p.add_argument("--fs", default="ext4", help="loop file system kind (default ext4)")
    p.add_argument("--json", type=Path, help="write every run and the summary here")
    a = p.parse_args(argv)
    res = run([int(x) for x in a.txns.split(",")], a.repetitions, a.warm, a.fs)
    print(table(res["summary"]))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0 if all(r["ok"] for r in res["summary"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
