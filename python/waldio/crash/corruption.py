"""Corruption of the physical log: bit flips, zeroed blocks, stale frames, truncation.

Each case damages a waldio log (or its stock translation) and checks that
recovery keeps a prefix of the committed transactions and never returns a
damaged page.
"""
from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import waldio
from waldio.logformat import FRAME_HDR, WAL_HDR, log_geometry, log_to_standard

from .database import Runner, configure, create_base, open_db, state_dir_base
from .modes import LOG_PREALLOC, MODES, Mode
from .oracle import check_files
from .recorder import child_env
from .workload import DB_NAME, make_steps, reference_digests

CORRUPTIONS = ("none", "bitflip", "zero_sector", "zero_block", "stale_same_slot",
               "stale_other_slot", "truncate")


def run_corruptions(cases: int, seed: int, *, layouts: Sequence[str] = ("embed", "pad4k"),
                    workdir: Optional[Path] = None, timeout: float = 900) -> Dict[str, Any]:
    """Corrupt real waldio logs `cases` times (per layout) and check that
    waldio recovers exactly what stock SQLite recovers from the same
    corruption of the equivalent standard WAL, or fails cleanly."""
    args = {"cases": cases, "seed": seed, "layouts": list(layouts),
            "workdir": str(workdir or tempfile.mkdtemp(prefix="waldio-corrupt-", dir=state_dir_base()))}
    proc = subprocess.run([sys.executable, "-m", "waldio.crash", "_corrupt", json.dumps(args)],
                          capture_output=True, text=True, timeout=timeout, env=child_env())
    results = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    summary: Dict[str, Any] = {"cases": 0, "passed": 0, "clean_errors": 0, "by_kind": {},
                               "failures": [], "exit": proc.returncode, "damaged": 0}
    started = [l for l in proc.stdout.splitlines() if l.startswith("case ")]
    if proc.returncode != 0:
        summary["failures"].append({"reason": "checker process died (exit %d) during %s: %s"
                                    % (proc.returncode, started[-1] if started else "setup",
                                       proc.stderr[-3000:])})
    for r in results:
        summary["cases"] += 1
        k = summary["by_kind"].setdefault(r["kind"], [0, 0])
        k[0] += 1
        if r["passed"]:
            summary["passed"] += 1
            k[1] += 1
        else:
            summary["failures"].append(r)
        if r.get("waldio_error"):
            summary["clean_errors"] += 1
        if r.get("waldio_error") or (r.get("waldio_k") is not None and r["waldio_k"] < r["full"]):
            summary["damaged"] += 1
    if proc.returncode == 0 and not summary["failures"]:
        shutil.rmtree(args["workdir"], ignore_errors=True)
    return summary


def role_corrupt(args: Dict[str, Any]) -> None:
    waldio.load()
    rng = random.Random("corrupt:%d" % args["seed"])
    work = Path(args["workdir"])
    stock = MODES["wal-full"]
    txns = 40
    digests = reference_digests("mixed", args["seed"], txns)
    for layout in args["layouts"]:
        lmode = Mode("waldio-" + layout, True, "FULL",
                     uri=(("prealloc", LOG_PREALLOC), ("layout", layout)))
        src = work / ("src-" + layout)
        if src.exists():
            shutil.rmtree(src)
        src.mkdir(parents=True)
        create_base(lmode, src / DB_NAME)
        # Generation 1 (snapshot kept), a RESTART checkpoint, generation 2;
        # the writer dies without closing, so the log holds both.
        steps = make_steps("mixed", args["seed"], txns)
        steps = [s for s in steps if s.kind in ("txn", "rollback")]
        conn = open_db(lmode, src / DB_NAME)
        configure(conn, lmode)
        conn.execute("PRAGMA wal_autocheckpoint=0")
        r = Runner.__new__(Runner)          # a Runner on the connection made above
        r.mode, r.path, r.vfs, r.conn, r.reader = lmode, src / DB_NAME, None, conn, None
        r.conn2 = None
        r.on_ack, r.retry_failed, r.errors = (lambda n: None), False, []
        first = [s for s in steps if s.kind != "txn" or s.n <= 25]
        r.run(first)
        stale = (src / (DB_NAME + "-wal")).read_bytes()
        conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        db_after_ckpt = (src / DB_NAME).read_bytes()
        r.run([s for s in steps if s.kind == "txn" and s.n > 25])
        log = (src / (DB_NAME + "-wal")).read_bytes()
        db = db_after_ckpt
        # Do not close: copy the files as a crash would leave them.
        g = log_geometry(log)
        assert g is not None and g["flags"] & 1, "the log holds no generation"
        slot, area = g["slot"], g["area"]
        nslots = (len(log) - area) // slot
        used = max(i for i in range(nslots) if any(log[area + i * slot: area + (i + 1) * slot])) + 1
        used_stale = max(i for i in range(nslots) if any(stale[area + i * slot: area + (i + 1) * slot])) + 1
        end = area + used * slot
        nvalid = _valid_frames(log)
        vend = area + max(1, nvalid) * slot           # the current generation
        print("layout %s: %d slots used, %d frames in the current generation, %d in the stale one"
              % (layout, used, nvalid, used_stale), flush=True)

        def where(lo: int = 0) -> int:
            # Mostly inside the frames recovery will read; sometimes anywhere.
            return rng.randrange(lo, vend) if rng.random() < 0.8 else rng.randrange(lo, end)
        for c in range(args["cases"]):
            kind = CORRUPTIONS[c % len(CORRUPTIONS)]
            bad = bytearray(log)
            desc = ""
            if kind == "none":
                desc = "intact"
            elif kind == "bitflip":
                off = where() if rng.random() < 0.9 else rng.randrange(0, 512)
                bit = rng.randrange(8)
                bad[off] ^= 1 << bit
                desc = "bit %d of byte %d" % (bit, off)
            elif kind == "zero_sector":
                s = where() // 512
                bad[s * 512:(s + 1) * 512] = bytes(512)
                desc = "sector %d" % s
            elif kind == "zero_block":
                b = where(4096) // 4096
                bad[b * 4096:(b + 1) * 4096] = bytes(4096)
                desc = "block %d" % b
            elif kind == "stale_same_slot":
                i = rng.randrange(0, max(1, min(nvalid + 1, used_stale)))
                bad[area + i * slot: area + (i + 1) * slot] = stale[area + i * slot: area + (i + 1) * slot]
                desc = "slot %d from generation 1" % (i + 1)
            elif kind == "stale_other_slot":
                i = rng.randrange(0, used_stale)
                j = rng.randrange(0, nvalid + 2) if rng.random() < 0.8 else rng.randrange(0, used + 2)
                bad[area + j * slot: area + (j + 1) * slot] = stale[area + i * slot: area + (i + 1) * slot]
                desc = "generation-1 slot %d into slot %d" % (i + 1, j + 1)
            else:
                cut = where() if rng.random() < 0.9 else rng.randrange(0, 4096)
                del bad[cut:]
                desc = "truncated to %d bytes" % cut
            print("case %s %d %s %s" % (layout, c, kind, desc), flush=True)
            res = _corruption_case(lmode, stock, work / "case", db, bytes(bad), digests)
            res.update({"layout": layout, "case": c, "kind": kind, "desc": desc, "full": txns})
            if kind == "none" and (res["waldio_k"] != txns or res["stock_k"] != txns):
                res["passed"] = False
                res["reason"] = "the intact log does not give all %d transactions" % txns
            print(json.dumps(res), flush=True)
        conn.close()


def _valid_frames(log: bytes) -> int:
    """Frames of the log's current generation (salts match its header),
    counted from the first slot."""
    std = log_to_standard(log)
    if std is None:
        return 0
    page = struct.unpack_from(">I", std, 8)[0]
    salts = std[16:24]
    n, pos = 0, WAL_HDR
    while pos + FRAME_HDR + page <= len(std) and std[pos + 8:pos + 16] == salts:
        n += 1
        pos += FRAME_HDR + page
    return n


def _corruption_case(lmode: Mode, stock: Mode, cdir: Path, db: bytes, bad: bytes,
                     digests: Sequence[str]) -> Dict[str, Any]:
    if cdir.exists():
        shutil.rmtree(cdir)
    wdir, sdir = cdir / "waldio", cdir / "stock"
    wdir.mkdir(parents=True)
    sdir.mkdir(parents=True)
    (wdir / DB_NAME).write_bytes(db)
    (wdir / (DB_NAME + "-wal")).write_bytes(bad)
    w = check_files(lmode, wdir, digests)
    res: Dict[str, Any] = {"waldio_k": w.k, "waldio_error": w.error, "integrity": w.integrity}
    block0_ok = bad[:512] == b"" or (log_geometry(bad) is not None)
    std = log_to_standard(bad) if block0_ok else None
    (sdir / DB_NAME).write_bytes(db)
    if std is not None:
        (sdir / (DB_NAME + "-wal")).write_bytes(std)
    s = check_files(stock, sdir, digests)
    res["stock_k"] = s.k
    if not w.ok:
        # A clean refusal is acceptable only when block 0 itself is damaged.
        res["passed"] = log_geometry(bad) is None or _superblock_damaged(bad)
        res["reason"] = "clean error" if res["passed"] else "refused a log whose block 0 is intact"
    elif w.integrity != "ok" or w.k is None:
        res["passed"] = False
        res["reason"] = "integrity %r, prefix %s" % (w.integrity, w.k)
    elif std is not None and s.ok and s.k is not None and s.k != w.k:
        res["passed"] = False
        res["reason"] = "waldio recovered %d transactions, stock SQLite %d" % (w.k, s.k)
    else:
        res["passed"] = True
        res["reason"] = "ok"
    return res


def _superblock_damaged(log: bytes) -> bool:
    from waldio.logformat import describe_superblock
    sb = describe_superblock(bytes(log[:512]))
    return (not sb.get("present")) or not sb.get("checksum_ok", False)
