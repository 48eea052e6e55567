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
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

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


def make_steps(workload: str, seed: int, txns: int, writer: Optional[int] = None) -> List[Step]:
    """The deterministic steps of a workload (of one of its writer processes:
    `writer`, for the multi-process workloads, :func:`process_steps`).

    workloads:
      mixed  inserts, updates, deletes and money transfers of many sizes;
             transactions bigger than the page cache (spilled frames,
             checksum rewrites); rolled-back transactions; checkpoints of
             every kind; readers that pin the log (it must grow); closing
             and reopening the writer (log reset / WAL deletion at close)
      bank   only transfers between accounts (one small transaction each)
      two-writers  mixed, with transactions and rollbacks spread over two
             writer connections of the process (taking turns)

    A writer process of a multi-process workload (writer=w) gets mixed steps
    of its own (seeded by w), new rows with ids of its own, and transactions
    that count themselves in a global counter (meta id 1: the transaction's
    position in the commit order, which the run decides) and write their own
    number into meta id 10+w.
    """
    if workload not in WORKLOADS:
        raise ValueError("unknown workload %r (expected one of %s)"
                         % (workload, ", ".join(WORKLOADS)))
    if workload == "growth":
        return growth_steps(seed, txns)
    if writer is not None:
        rng = random.Random("mp:%s:%d:%d" % (workload, seed, writer))
    else:
        rng = random.Random("%s:%d" % ("mixed" if workload == "two-writers" else workload, seed))
    live = list(range(1, 41))
    next_id = [41 if writer is None else 100_000 * (writer + 1)]
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
        if workload in ("mixed", "two-writers") or (writer is not None and workload != "fork"):
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
        elif workload == "fork":
            # Parent and children: transactions only (the parent's
            # structure, group bursts and forks, is procs.py's).
            kind = rng.choices(["bank", "insert", "update", "delete", "multi"],
                               [30, 25, 15, 10, 20])[0]
        else:
            kind = "bank"
        sql, spill = body(kind)
        if writer is None:
            sql.append(("UPDATE meta SET txn = ? WHERE id = 1", (i,)))
        else:
            sql.append(("UPDATE meta SET txn = txn + 1 WHERE id = 1", ()))
            sql.append(("INSERT OR REPLACE INTO meta VALUES(?, ?)", (10 + writer, i)))
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


def growth_steps(seed: int, txns: int) -> List[Step]:
    """The log's growth from a fresh file: a reader opened before the first
    commit pins the log for four fifths of the transactions (no checkpoint
    can restart it), each transaction adding 2-4 rows of 2-6 KB (overflow
    pages: about 6-12 frames), so the log grows again and again (waldio: a
    runway of 256 KiB, then doubling up to the preallocation); then the
    reader ends, a TRUNCATE checkpoint gives back what lies beyond the
    preallocation, and the rest commit into the restarted log with one more
    pinned stretch and a PASSIVE checkpoint."""
    rng = random.Random("growth:%d" % seed)
    steps: List[Step] = [Step("reader_begin")]
    pinned = max(1, txns * 4 // 5)
    unpin = (pinned + txns + 1) // 2
    next_id = 41
    for i in range(1, txns + 1):
        sql: List[Tuple[str, Tuple[Any, ...]]] = []
        for _ in range(rng.randrange(2, 5)):
            sql.append(("INSERT INTO kv VALUES(?, ?, ?)",
                        (next_id, rng.randrange(1000), rng.randbytes(rng.randrange(2000, 6000)))))
            next_id += 1
        sql.append(("UPDATE meta SET txn = ? WHERE id = 1", (i,)))
        steps.append(Step("txn", n=i, sql=sql))
        if i == pinned:
            steps += [Step("reader_end"), Step("checkpoint", arg="TRUNCATE"), Step("reader_begin")]
        if i == unpin:
            steps += [Step("reader_end"), Step("checkpoint", arg="PASSIVE")]
    return steps


SINGLE_WORKLOADS = ("mixed", "bank", "two-writers", "growth")


MULTI_WORKLOADS = ("two-procs", "ckpt-proc", "fork", "stock-writer", "stock-ckpt")
"""Workloads of several processes (procs.py), recorded into one event log:

  two-procs  two writer processes, each running mixed steps of its own
             (checkpoints, readers pinning the log, reopening included),
             committing interleaved transactions
  ckpt-proc  one writer process (mixed steps) and one process that runs
             PASSIVE, FULL, RESTART and TRUNCATE checkpoints and read
             transactions (checking the bank invariant and that snapshots
             never go backwards) until the writer is done
  fork       one process that forks: group-async bursts (commits still
             buffered at the fork; stock modes: ordinary commits), a child
             that exits through exit() (atexit handlers) or _exit(), or
             opens its own connection and commits while the parent does;
             the parent leaves group mode, checkpoints (TRUNCATE) and
             commits in the mode's own synchronous setting
  stock-writer  two-procs whose writer 1 is stock SQLite (the unix VFS, the
             mode's synchronous setting): waldio modes of the standard
             layout, which stock processes share at any time
  stock-ckpt ckpt-proc whose checkpointer is stock SQLite: its PASSIVE,
             FULL, RESTART and TRUNCATE checkpoints and read transactions
             (as Litestream's) against waldio's commits
"""

# A stock-* workload is the one it names run with a stock process (procs.py).
STOCK_MIX = {"stock-writer": "two-procs", "stock-ckpt": "ckpt-proc"}


WORKLOADS = SINGLE_WORKLOADS + MULTI_WORKLOADS


def process_steps(workload: str, seed: int, txns: int) -> Dict[int, List[Step]]:
    """The steps of each writer of a multi-process workload (writer index ->
    steps). two-procs: two writers sharing txns; ckpt-proc: one writer;
    fork: the parent (0) and its children (1), their transactions only."""
    workload = STOCK_MIX.get(workload, workload)
    if workload == "two-procs":
        return {w: make_steps(workload, seed, n, writer=w)
                for w, n in ((0, txns - txns // 2), (1, txns // 2))}
    if workload == "ckpt-proc":
        steps = [st for st in make_steps(workload, seed, txns, writer=0)
                 if st.kind != "checkpoint"]       # the other process checkpoints
        return {0: steps}
    if workload == "fork":
        return {w: [st for st in make_steps(workload, seed, txns, writer=w) if st.kind == "txn"]
                for w in (0, 1)}
    raise ValueError("%r is not a multi-process workload" % workload)


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
    return _digests_after_each(st for st in make_steps(workload, seed, txns)
                               if st.kind == "txn")


def _digests_after_each(steps: Iterable[Step]) -> List[str]:
    """Replay steps on a fresh in-memory database (no waldio, no recording):
    the digest after setup, then after each step."""
    apsw = apsw_module()
    conn = apsw.Connection(":memory:")
    conn.execute(SCHEMA)
    with conn:
        for sql, params in setup_sql():
            conn.execute(sql, params)
    out = [digest(conn)]
    for step in steps:
        with conn:
            for sql, params in step.sql:
                conn.execute(sql, params)
        out.append(digest(conn))
    conn.close()
    return out


def ordered_transactions(workload: str, seed: int, txns: int,
                         order: Sequence[Sequence[int]]) -> List[Step]:
    """A multi-process workload's transactions in the commit order the run
    took: order[g-1] = (g, writer, n), recorded by the writers' marks."""
    by_writer = process_steps(workload, seed, txns)
    index = {(w, st.n): st for w, steps in by_writer.items() for st in steps if st.kind == "txn"}
    out = []
    for i, (g, w, n) in enumerate(order):
        if g != i + 1 or (w, n) not in index:
            raise ValueError("commit order entry %d is %r: not the next position of a "
                             "transaction of the workload" % (i + 1, (g, w, n)))
        out.append(index[(w, n)])
    return out


def _transactions(workload: str, seed: int, txns: int,
                  order: Optional[Sequence[Sequence[int]]]) -> List[Step]:
    if workload in MULTI_WORKLOADS:
        if order is None:
            raise ValueError("a multi-process workload's reference needs the recorded commit order")
        return ordered_transactions(workload, seed, txns, order)
    return [st for st in make_steps(workload, seed, txns) if st.kind == "txn"]


def reference_digests_in_order(workload: str, seed: int, txns: int,
                               order: Sequence[Sequence[int]]) -> List[str]:
    """reference_digests for a multi-process workload: digests[g] is the
    database after the first g transactions of the recorded commit order."""
    return _digests_after_each(_transactions(workload, seed, txns, order))


def reference_rows(workload: str, seed: int, txns: int, k: int,
                   order: Optional[Sequence[Sequence[int]]] = None) -> Dict[str, List[Tuple[Any, ...]]]:
    """The rows of every table after the first k transactions (in the
    recorded commit order, for a multi-process workload)."""
    apsw = apsw_module()
    conn = apsw.Connection(":memory:")
    conn.execute(SCHEMA)
    with conn:
        for sql, params in setup_sql():
            conn.execute(sql, params)
    for step in _transactions(workload, seed, txns, order)[:k]:
        with conn:
            for sql, params in step.sql:
                conn.execute(sql, params)
    rows = {t: list(conn.execute("SELECT * FROM %s ORDER BY id" % t)) for t in TABLES}
    conn.close()
    return rows
