"""The workloads whose crash states are checked, and their reference results.

A workload is a seeded list of :class:`Step` transactions over three small
tables (key-value rows, bank accounts whose total never changes, a meta row);
:func:`reference_digests` computes, on a plain in-memory database, the digest
of the database after each prefix of transactions, which is what a crash
state must equal.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

DB_NAME = "c.db"


ACCOUNTS = 20


SCHEMA = """
CREATE TABLE kv(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v BLOB);
CREATE INDEX kv_k ON kv(k);
CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL);
CREATE TABLE meta(id INTEGER PRIMARY KEY, txn INTEGER NOT NULL);
"""


TABLES = ("kv", "acct", "meta")


@dataclass
class Step:
    """One step of a workload. kind: txn (acknowledged, numbered), rollback,
    checkpoint, reader_begin, reader_end, reopen."""
    kind: str
    n: int = 0                                   # transaction number (txn)
    sql: List[Tuple[str, Tuple[Any, ...]]] = field(default_factory=list)
    arg: str = ""
    spill: bool = False                          # run with a tiny page cache
    who: int = 0                                 # which writer connection


def setup_sql() -> List[Tuple[str, Tuple[Any, ...]]]:
    rng = random.Random(12345)
    out: List[Tuple[str, Tuple[Any, ...]]] = []
    for i in range(ACCOUNTS):
        out.append(("INSERT INTO acct VALUES(?, 1000)", (i,)))
    for i in range(1, 41):
        out.append(("INSERT INTO kv VALUES(?, ?, ?)", (i, rng.randrange(1000),
                                                        rng.randbytes(rng.choice([30, 300, 1500])))))
    out.append(("INSERT INTO meta VALUES(1, 0)", ()))
    return out


def make_steps(workload: str, seed: int, txns: int) -> List[Step]:
    """The deterministic steps of a workload.

    workloads:
      mixed  inserts, updates, deletes and money transfers of many sizes;
             transactions bigger than the page cache (spilled frames,
             checksum rewrites); rolled-back transactions; checkpoints of
             every kind; readers that pin the log (it must grow); closing
             and reopening the writer (log reset / WAL deletion at close)
      bank   only transfers between accounts (one small transaction each)
      two-writers  mixed, with transactions and rollbacks spread over two
             writer connections of the process (taking turns)
    """
    if workload not in WORKLOADS:
        raise ValueError("unknown workload %r (expected one of %s)"
                         % (workload, ", ".join(WORKLOADS)))
    rng = random.Random("%s:%d" % ("mixed" if workload == "two-writers" else workload, seed))
    live = list(range(1, 41))
    next_id = [41]
    steps: List[Step] = []
    reader_open = False

    def new_id() -> int:
        next_id[0] += 1
        live.append(next_id[0] - 1)
        return next_id[0] - 1

    def blob() -> bytes:
        return rng.randbytes(rng.choice([16, 64, 200, 700, 1800, 3500, 5000]))

    def transfer(sql: List[Tuple[str, Tuple[Any, ...]]]) -> None:
        a, b = rng.randrange(ACCOUNTS), rng.randrange(ACCOUNTS)
        amt = rng.randrange(1, 50)
        sql.append(("UPDATE acct SET bal = bal - ? WHERE id = ?", (amt, a)))
        sql.append(("UPDATE acct SET bal = bal + ? WHERE id = ?", (amt, b)))

    def body(kind: str) -> Tuple[List[Tuple[str, Tuple[Any, ...]]], bool]:
        sql: List[Tuple[str, Tuple[Any, ...]]] = []
        spill = False
        if kind == "bank":
            transfer(sql)
            sql.append(("INSERT INTO kv VALUES(?, ?, ?)", (new_id(), rng.randrange(1000),
                                                           rng.randbytes(48))))
        elif kind == "insert":
            for _ in range(rng.randrange(1, 5)):
                sql.append(("INSERT INTO kv VALUES(?, ?, ?)", (new_id(), rng.randrange(1000), blob())))
        elif kind == "update":
            for _ in range(rng.randrange(1, 4)):
                sql.append(("UPDATE kv SET k = k + 1, v = ? WHERE id = ?",
                            (blob(), rng.choice(live))))
        elif kind == "delete":
            for _ in range(rng.randrange(1, 3)):
                if len(live) > 10:
                    victim = live.pop(rng.randrange(len(live)))
                    sql.append(("DELETE FROM kv WHERE id = ?", (victim,)))
        elif kind == "big":
            spill = True
            for _ in range(rng.randrange(25, 50)):
                sql.append(("INSERT INTO kv VALUES(?, ?, ?)",
                            (new_id(), rng.randrange(1000), rng.randbytes(700))))
            sql.append(("UPDATE kv SET k = k + 7 WHERE id % 5 = ?", (rng.randrange(5),)))
        else:  # multi
            for _ in range(rng.randrange(2, 6)):
                sub = rng.choice(["bank", "insert", "update", "delete"])
                s, _sp = body(sub)
                sql.extend(s)
        return sql, spill

    for i in range(1, txns + 1):
        if workload in ("mixed", "two-writers"):
            r = rng.random()
            if r < (0.04 if workload == "mixed" else 0.12):
                # A rolled-back transaction, sometimes bigger than the cache:
                # its frames reach the log and must never be recovered.
                sql = [("INSERT INTO kv VALUES(?, ?, ?)",
                        (10_000_000 + j, 1, rng.randbytes(900))) for j in range(rng.randrange(5, 40))]
                if workload == "mixed":
                    sql.append(("UPDATE acct SET bal = bal + 1000000", ()))
                steps.append(Step("rollback", sql=sql, spill=True))
            elif r < 0.08:
                steps.append(Step("checkpoint", arg=rng.choice(
                    ["PASSIVE", "FULL", "RESTART", "TRUNCATE"])))
            elif reader_open and r < 0.30:
                steps.append(Step("reader_end"))      # readers stay a few transactions
                reader_open = False
            elif r < 0.10 and not reader_open:
                steps.append(Step("reader_begin"))
                reader_open = True
            elif r < 0.115 and not reader_open:
                steps.append(Step("reopen"))
            kind = rng.choices(["bank", "insert", "update", "delete", "big", "multi"],
                               [30, 25, 15, 10, 4, 16])[0]
        else:
            kind = "bank"
        sql, spill = body(kind)
        sql.append(("UPDATE meta SET txn = ? WHERE id = 1", (i,)))
        steps.append(Step("txn", n=i, sql=sql, spill=spill))
    if reader_open:
        steps.append(Step("reader_end"))
    if workload == "two-writers":
        # Rolled-back (spilled) transactions on the second writer, commits on
        # either: the other writer's next commit reuses the rolled-back
        # transaction's frame slots.
        for st in steps:
            if st.kind == "rollback":
                st.who = 1
            elif st.kind == "txn":
                st.who = rng.randrange(2)
    return steps


WORKLOADS = ("mixed", "bank", "two-writers")


def digest(conn: Any) -> str:
    """A hash of every row of every table, in primary-key order."""
    h = hashlib.sha256()
    for t in TABLES:
        parts: List[bytes] = []
        add = parts.append
        for row in conn.execute("SELECT * FROM %s ORDER BY id" % t):
            for v in row:
                if isinstance(v, bytes):
                    add(b"b%d:" % len(v))
                    add(v)
                else:
                    add(b"v%r;" % (v,))
            add(b"\n")
        add(b"|")
        h.update(b"".join(parts))
    return h.hexdigest()


def apsw_module() -> Any:
    import apsw
    return apsw


def reference_digests(workload: str, seed: int, txns: int) -> List[str]:
    """digests[k]: the database after exactly the first k transactions,
    computed on a plain in-memory database (no waldio, no recording)."""
    apsw = apsw_module()
    conn = apsw.Connection(":memory:")
    conn.execute(SCHEMA)
    with conn:
        for sql, params in setup_sql():
            conn.execute(sql, params)
    out = [digest(conn)]
    for step in make_steps(workload, seed, txns):
        if step.kind != "txn":
            continue
        with conn:
            for sql, params in step.sql:
                conn.execute(sql, params)
        out.append(digest(conn))
    conn.close()
    return out


def reference_rows(workload: str, seed: int, txns: int, k: int) -> Dict[str, List[Tuple[Any, ...]]]:
    """The rows of every table after the first k transactions."""
    apsw = apsw_module()
    conn = apsw.Connection(":memory:")
    conn.execute(SCHEMA)
    with conn:
        for sql, params in setup_sql():
            conn.execute(sql, params)
    for step in make_steps(workload, seed, txns):
        if step.kind == "txn" and step.n <= k:
            with conn:
                for sql, params in step.sql:
                    conn.execute(sql, params)
    rows = {t: list(conn.execute("SELECT * FROM %s ORDER BY id" % t)) for t in TABLES}
    conn.close()
    return rows
