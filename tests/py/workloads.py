"""Deterministic SQL workloads shared by the tests and their worker processes.

Every workload is a function of a connection (the drivers.Connection
interface) and a seed, so it can be run once through waldio and once
through stock SQLite and the two results compared row by row.
"""
from __future__ import annotations

import json
import random
from typing import Any, Callable, Dict, List, Tuple

SCHEMA = """
CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, k INTEGER, v BLOB);
CREATE INDEX IF NOT EXISTS t_k ON t(k);
CREATE TABLE IF NOT EXISTS acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL);
"""
ACCOUNTS = 50
TOTAL = ACCOUNTS * 1000


def setup(conn: Any, *, page_size: int | None = None, sync: str = "FULL") -> None:
    if page_size:
        conn.execute("PRAGMA page_size=%d" % page_size)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=%s" % sync)
    conn.executescript(SCHEMA)
    if conn.execute("SELECT count(*) FROM acct")[0][0] == 0:
        conn.execute("BEGIN")
        for i in range(ACCOUNTS):
            conn.execute("INSERT INTO acct VALUES(?, 1000)", (i,))
        conn.execute("COMMIT")


def _blob(rng: random.Random, n: int) -> bytes:
    return rng.randbytes(n)


def inserts(conn: Any, seed: int, n: int = 1000, size: int = 100) -> None:
    """n autocommit inserts of size-byte records: one commit each."""
    rng = random.Random(seed)
    for _ in range(n):
        conn.execute("INSERT INTO t(k, v) VALUES(?, ?)", (rng.randrange(1000), _blob(rng, size)))


def crud(conn: Any, seed: int, n: int = 300) -> None:
    """Autocommit and small transactions of inserts, updates, deletes."""
    rng = random.Random(seed)
    for i in range(n):
        op = rng.random()
        if op < 0.5:
            conn.execute("INSERT INTO t(k, v) VALUES(?, ?)",
                         (rng.randrange(1000), _blob(rng, rng.randrange(10, 300))))
        elif op < 0.75:
            conn.execute("UPDATE t SET v=?, k=k+1 WHERE id=?",
                         (_blob(rng, rng.randrange(10, 900)), rng.randrange(1, i + 2)))
        elif op < 0.9:
            conn.execute("DELETE FROM t WHERE id=?", (rng.randrange(1, i + 2),))
        else:
            conn.execute("BEGIN")
            for _ in range(rng.randrange(2, 20)):
                conn.execute("INSERT INTO t(k, v) VALUES(?, ?)",
                             (rng.randrange(1000), _blob(rng, 100)))
            conn.execute("COMMIT")


def big_transaction(conn: Any, seed: int) -> None:
    """A transaction larger than the page cache: spills, then rewrites
    spilled pages in place before committing (walRewriteChecksums)."""
    rng = random.Random(seed)
    conn.execute("PRAGMA cache_size=5")
    conn.execute("BEGIN")
    for _ in range(400):
        conn.execute("INSERT INTO t(k, v) VALUES(?, ?)",
                     (rng.randrange(1000), _blob(rng, 1200)))
    conn.execute("UPDATE t SET v = CAST(substr(v, 1, 600) || ? AS BLOB) WHERE id % 3 = 0",
                 (_blob(rng, 50),))
    conn.execute("DELETE FROM t WHERE id % 7 = 0")
    conn.execute("COMMIT")
    conn.execute("PRAGMA cache_size=-2000")


def rollbacks(conn: Any, seed: int) -> None:
    """Rolled-back transactions (some spilled) and savepoints: later frames
    overwrite the rolled-back ones in the log."""
    rng = random.Random(seed)
    conn.execute("PRAGMA cache_size=5")
    for round_ in range(6):
        conn.execute("BEGIN")
        for _ in range(rng.randrange(20, 200)):
            conn.execute("INSERT INTO t(k, v) VALUES(?, ?)",
                         (rng.randrange(1000), _blob(rng, 700)))
        conn.execute("SAVEPOINT s1")
        conn.execute("UPDATE t SET k = k + 1000 WHERE id % 2 = 0")
        conn.execute("ROLLBACK TO s1")
        conn.execute("SAVEPOINT s2")
        conn.execute("DELETE FROM t WHERE id % 5 = 1")
        conn.execute("RELEASE s2")
        conn.execute("ROLLBACK" if round_ % 2 else "COMMIT")
    conn.execute("PRAGMA cache_size=-2000")


def checkpoints(conn: Any, seed: int) -> List[Tuple[Any, ...]]:
    """Writes interleaved with every checkpoint mode; returns their results."""
    rng = random.Random(seed)
    results = []
    for mode in ["PASSIVE", "FULL", "RESTART", "TRUNCATE", "PASSIVE", "TRUNCATE"]:
        for _ in range(rng.randrange(20, 120)):
            conn.execute("INSERT INTO t(k, v) VALUES(?, ?)",
                         (rng.randrange(1000), _blob(rng, 500)))
        results.append(tuple(conn.execute("PRAGMA wal_checkpoint(%s)" % mode)[0]))
    return results


def transfers(conn: Any, seed: int, n: int) -> None:
    """Money moves between accounts; the total never changes."""
    rng = random.Random(seed)
    for _ in range(n):
        a, b = rng.randrange(ACCOUNTS), rng.randrange(ACCOUNTS)
        amount = rng.randrange(1, 50)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE acct SET bal = bal - ? WHERE id = ?", (amount, a))
        conn.execute("UPDATE acct SET bal = bal + ? WHERE id = ?", (amount, b))
        conn.execute("INSERT INTO t(k, v) VALUES(?, ?)", (a * 1000 + b, _blob(rng, 64)))
        conn.execute("COMMIT")


def snapshot_ok(conn: Any) -> Tuple[bool, int]:
    """One read transaction: (total is intact, number of transfers seen)."""
    conn.execute("BEGIN")
    try:
        total = conn.execute("SELECT sum(bal) FROM acct")[0][0]
        count = conn.execute("SELECT count(*) FROM t")[0][0]
    finally:
        conn.execute("COMMIT")
    return total == TOTAL, count


def dump(conn: Any) -> Dict[str, List[Tuple[Any, ...]]]:
    return {name: conn.execute("SELECT * FROM %s ORDER BY id" % name)
            for name in ("t", "acct")}


def integrity(conn: Any) -> str:
    return ";".join(r[0] for r in conn.execute("PRAGMA integrity_check"))


WORKLOADS: Dict[str, Callable[..., Any]] = {
    "crud": crud,
    "big_transaction": big_transaction,
    "rollbacks": rollbacks,
    "checkpoints": checkpoints,
}


def stats(conn: Any) -> Dict[str, int]:
    return json.loads(conn.execute("PRAGMA waldio_stats")[0][0])


def status(conn: Any) -> Dict[str, Any]:
    return json.loads(conn.execute("PRAGMA waldio")[0][0])
