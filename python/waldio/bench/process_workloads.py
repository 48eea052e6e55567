"""The workloads of ``waldio bench --processes``: what each process runs, what the
database must show afterwards.

Three workloads (issue 18).  Each is a schema with pre-populated rows, one plan per
process generated before timing from a seeded RNG (the C loop repeats the plan
cyclically until the deadline), the kinds of its transactions (each kind gets its
own latency histogram), and the checks that tie what the processes counted to what
the database holds:

``insert``  autocommit single-row inserts of a ``record_size``-byte value (100 by
            default, Mobibench's pattern) into the mobibench-2015 table
            ``tblMyList``: one commit per transaction.  Check: rows = pre-populated
            + transactions done.
``update``  ``BEGIN IMMEDIATE``; ``ops_per_txn`` (default 5) updates of random rows
            of ``rows`` pre-populated ones (default 10,000), each setting the value
            and adding 1 to the row's ``updates``; ``COMMIT``.  Check: sum(updates) =
            ops_per_txn x transactions done.
``web``     a web request against ``users`` (``rows``, default 1,000) and ``posts``
            (10 per user, index ``posts(user_id, created)``): 80% read-only
            (``BEGIN``; the user by primary key; the user's 10 latest posts through
            the index; the count of the user's posts; ``COMMIT``: 12 rows), 20%
            writes (``BEGIN IMMEDIATE``; insert a ``record_size``-byte post; add 1 to
            the user's visits; ``COMMIT``).  Checks: posts = 10 x users + writes,
            sum(visits) = writes, rows returned = 12 x reads.

Writers start with ``BEGIN IMMEDIATE`` or are autocommit, as an application that
shares a database between processes must: a deferred transaction that upgrades to
a write can get SQLITE_BUSY without the busy handler being called.  Nothing here
opens a connection or times anything (:mod:`.process_worker` and :mod:`.processes`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .plan import Stmt, record_value
from .settings import Settings, create_table_sql

PLAN_LENGTH = 4096        # transactions per process plan (repeated until the deadline)
WEB_WRITE_SHARE = 0.2
WEB_POSTS_PER_USER = 10
WEB_READ_ROWS = 1 + WEB_POSTS_PER_USER + 1     # user, latest posts, count


@dataclass
class ProcessPlan:
    """One process's transactions as (kind, statements); kind indexes ``kinds``."""

    txns: List[Tuple[int, Tuple[Stmt, ...]]]
    kinds: Tuple[str, ...]


@dataclass(frozen=True)
class Shape:
    """What a workload needs from the settings: record size, rows, updates per txn."""

    record_size: int
    rows: int
    ops_per_txn: int
    schema: str            # the insert table's key: autoincrement or rowid


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    kinds: Tuple[str, ...]
    default_rows: int
    setup: Callable[[Shape], List[Tuple[str, Optional[Sequence[Sequence[Any]]]]]]  # SQL, rows
    plan: Callable[[Shape, random.Random], List[Tuple[int, Tuple[Stmt, ...]]]]
    checks: Callable[[Shape, Dict[str, int]], List[Tuple[str, str, int]]]  # name, SQL, value


# ------------------------------------------------------------------- insert

def _insert_setup(sh: Shape) -> List[Tuple[str, Optional[Sequence[Sequence[Any]]]]]:
    value = record_value(sh.record_size)
    return [(create_table_sql(Settings(schema=sh.schema), "tblMyList"), None),
            ("INSERT INTO tblMyList(id, Value) VALUES(?, ?)",
             [(i, value) for i in range(1, sh.rows + 1)])]


def _insert_plan(sh: Shape, rng: random.Random) -> List[Tuple[int, Tuple[Stmt, ...]]]:
    stmt: Stmt = ("INSERT INTO tblMyList(Value) VALUES(?)", (record_value(sh.record_size),),
                  False)
    return [(0, (stmt,))] * PLAN_LENGTH


def _insert_checks(sh: Shape, kinds: Dict[str, int]) -> List[Tuple[str, str, int]]:
    return [("rows in tblMyList = pre-populated + inserts", "SELECT count(*) FROM tblMyList",
             sh.rows + kinds["commit"])]


# ------------------------------------------------------------------- update

def _update_setup(sh: Shape) -> List[Tuple[str, Optional[Sequence[Sequence[Any]]]]]:
    value = record_value(sh.record_size)
    return [("CREATE TABLE tblMyList(id INTEGER PRIMARY KEY, Value TEXT not null, "
             "updates INTEGER not null)", None),
            ("INSERT INTO tblMyList(id, Value, updates) VALUES(?, ?, 0)",
             [(i, value) for i in range(1, sh.rows + 1)])]


def _update_plan(sh: Shape, rng: random.Random) -> List[Tuple[int, Tuple[Stmt, ...]]]:
    value = record_value(sh.record_size, update=True)
    sql = "UPDATE tblMyList SET Value = ?, updates = updates + 1 WHERE id = ?"
    begin: Stmt = ("BEGIN IMMEDIATE", (), False)
    commit: Stmt = ("COMMIT", (), False)
    out = []
    for _ in range(PLAN_LENGTH):
        ups = tuple((sql, (value, rng.randint(1, sh.rows)), False)
                    for _ in range(sh.ops_per_txn))
        out.append((0, (begin,) + ups + (commit,)))
    return out


def _update_checks(sh: Shape, kinds: Dict[str, int]) -> List[Tuple[str, str, int]]:
    return [("sum(updates) = updates per transaction x transactions",
             "SELECT coalesce(sum(updates), 0) FROM tblMyList", sh.ops_per_txn * kinds["commit"]),
            ("rows in tblMyList (unchanged)", "SELECT count(*) FROM tblMyList", sh.rows)]


# ---------------------------------------------------------------------- web

def _web_setup(sh: Shape) -> List[Tuple[str, Optional[Sequence[Sequence[Any]]]]]:
    body = record_value(sh.record_size)
    posts = [(u, k, body) for u in range(1, sh.rows + 1) for k in range(WEB_POSTS_PER_USER)]
    return [("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT not null, "
             "visits INTEGER not null)", None),
            ("CREATE TABLE posts(id INTEGER PRIMARY KEY, user_id INTEGER not null, "
             "created INTEGER not null, body TEXT not null)", None),
            ("CREATE INDEX posts_user ON posts(user_id, created)", None),
            ("INSERT INTO users(id, name, visits) VALUES(?, ?, 0)",
             [(u, f"user{u}") for u in range(1, sh.rows + 1)]),
            ("INSERT INTO posts(user_id, created, body) VALUES(?, ?, ?)", posts)]


def _web_plan(sh: Shape, rng: random.Random) -> List[Tuple[int, Tuple[Stmt, ...]]]:
    body = record_value(sh.record_size, update=True)
    out = []
    for n in range(PLAN_LENGTH):
        user = rng.randint(1, sh.rows)
        if rng.random() < WEB_WRITE_SHARE:
            out.append((1, (("BEGIN IMMEDIATE", (), False),
                            ("INSERT INTO posts(user_id, created, body) VALUES(?, ?, ?)",
                             (user, WEB_POSTS_PER_USER + n, body), False),
                            ("UPDATE users SET visits = visits + 1 WHERE id = ?", (user,), False),
                            ("COMMIT", (), False))))
        else:
            out.append((0, (("BEGIN", (), False),
                            ("SELECT id, name, visits FROM users WHERE id = ?", (user,), True),
                            ("SELECT id, created, body FROM posts WHERE user_id = ? "
                             "ORDER BY created DESC LIMIT 10", (user,), True),
                            ("SELECT count(*) FROM posts WHERE user_id = ?", (user,), True),
                            ("COMMIT", (), False))))
    return out


def _web_checks(sh: Shape, kinds: Dict[str, int]) -> List[Tuple[str, str, int]]:
    return [("posts = pre-populated + write requests", "SELECT count(*) FROM posts",
             WEB_POSTS_PER_USER * sh.rows + kinds["write"]),
            ("sum(users.visits) = write requests", "SELECT coalesce(sum(visits), 0) FROM users",
             kinds["write"])]


WORKLOADS: Dict[str, Workload] = {
    "insert": Workload("insert", "autocommit single-row inserts (one commit each)", ("commit",),
                       0, _insert_setup, _insert_plan, _insert_checks),
    "update": Workload("update", "BEGIN IMMEDIATE transactions of N updates of random rows",
                       ("commit",), 10_000, _update_setup, _update_plan, _update_checks),
    "web": Workload("web", "web requests: 80% read-only (3 indexed SELECTs), 20% small writes",
                    ("read", "write"), 1_000, _web_setup, _web_plan, _web_checks),
}
DEFAULT_WORKLOADS = ("insert", "update", "web")


def parse_workloads(words: Optional[Sequence[str]]) -> List[str]:
    """``--workload`` with ``--processes``: a list of insert, update, web (default all)."""
    if not words:
        return list(DEFAULT_WORKLOADS)
    bad = [w for w in words if w not in WORKLOADS]
    if bad:
        raise ValueError(f"--workload: {', '.join(map(repr, bad))} is not a workload of "
                         f"--processes (accepted: {', '.join(WORKLOADS)}, comma separated; "
                         f"each runs on its own)")
    return list(dict.fromkeys(words))


def process_plan(workload: str, sh: Shape, seed: int, process: int) -> ProcessPlan:
    """Process ``process``'s plan: the same for every mode and round of one run."""
    w = WORKLOADS[workload]
    rng = random.Random(f"waldio-bench-processes:{workload}:{seed}:{process}")
    return ProcessPlan(txns=w.plan(sh, rng), kinds=w.kinds)


def expected_select_rows(workload: str, kinds: Dict[str, int]) -> int:
    return WEB_READ_ROWS * kinds["read"] if workload == "web" else 0
