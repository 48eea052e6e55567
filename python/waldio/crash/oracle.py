"""The oracle: is a crash state correct for its mode?

A state is opened (through waldio for waldio modes, through stock SQLite's unix
VFS for stock modes; LS-MVBT modes: unix with lsmvbt.so, which recovers the
table) and must pass ``PRAGMA integrity_check`` (and ``lsmvbt_check``), equal the
database after exactly the first k acknowledged transactions (a prefix, no
holes), and k must cover every transaction the mode's contract makes durable
at that point (:func:`verdict`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import waldio

from . import lsmvbt
from .database import open_db
from .modes import Mode
from .workload import DB_NAME, apsw_module, digest


@dataclass
class Outcome:
    """What opening one materialized state gave."""
    ok: bool                      # opened and read without error
    integrity: str = ""
    k: Optional[int] = None       # prefix length whose digest matches
    meta_txn: Optional[int] = None
    error: str = ""
    digest: str = ""
    converted: Any = None         # stock states: the same files through waldio


def check_files(mode: Mode, directory: Path, digests: Sequence[str],
                vfs: Optional[str] = None) -> Outcome:
    """Open the database in directory as mode says, check integrity and find
    which prefix of the acknowledged transactions it holds."""
    apsw = apsw_module()
    path = directory / DB_NAME
    out = Outcome(ok=False)
    conn = None
    try:
        conn = open_db(mode, path, vfs=vfs)
        # The state is thrown away: no checkpoint and no sync at close.
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.execute("PRAGMA synchronous=OFF")
        out.integrity = ";".join(str(r[0]) for r in conn.execute("PRAGMA integrity_check"))
        if mode.lsmvbt and out.integrity == "ok":
            lc = lsmvbt.check(conn)           # the tree itself (the views hold no rows)
            out.integrity = "ok" if lc == "ok" else "lsmvbt_check: " + lc
        if out.integrity == "ok":
            try:
                out.meta_txn = conn.execute("SELECT txn FROM meta WHERE id = 1").fetchall()[0][0]
            except (apsw.Error, IndexError):
                out.meta_txn = None
            out.digest = digest(conn)
            out.k = _digest_index(digests).get(out.digest)
        out.ok = True
    except apsw.Error as e:
        out.error = "%s: %s" % (type(e).__name__, e)
        if mode.waldio:
            detail = waldio_error_text()
            if detail:
                out.error += " (waldio: %s)" % detail
    finally:
        if conn is not None:
            try:
                conn.close()
            except apsw.Error as e:
                if out.ok and not out.error:
                    out.error = "close: %s" % e
    return out


# digest -> k, per digests list. The list itself is kept with its index:
# keyed by id() alone, a list freed and another allocated at the same address
# would get the old list's index (seen: every SIGKILL round of one run judged
# against another recording's digests).
_index_cache: Dict[int, Tuple[Sequence[str], Dict[str, int]]] = {}


def _digest_index(digests: Sequence[str]) -> Dict[str, int]:
    got = _index_cache.get(id(digests))
    if got is not None and got[0] is digests:
        return got[1]
    idx: Dict[str, int] = {}
    for k, d in enumerate(digests):
        idx.setdefault(d, k)
    if len(_index_cache) > 64:
        _index_cache.clear()
    _index_cache[id(digests)] = (digests, idx)
    return idx


def waldio_error_text() -> str:
    try:
        return waldio.last_error()
    except Exception:
        return ""


def verdict(out: Outcome, required: int, upper: int) -> Tuple[bool, str]:
    """(passed, reason) for one state against its requirement."""
    if not out.ok:
        return False, "unreadable: " + out.error
    if out.integrity != "ok":
        return False, "integrity_check: " + out.integrity[:200]
    if out.k is None:
        return False, ("not a prefix of the acknowledged transactions (a hole or a torn "
                       "transaction; meta.txn=%s)" % out.meta_txn)
    if out.k < required:
        return False, "lost transactions: holds %d, the contract requires %d" % (out.k, required)
    if out.k > upper:
        return False, ("holds %d transactions but only %d had started at the crash point "
                       "(a recorder or model bug)" % (out.k, upper))
    return True, "ok (k=%d, required %d)" % (out.k, required)
