"""The workload, planned before timing: every statement and the results it must leave.

:func:`build_plan` generates, per thread and from a seeded RNG, every statement
and its parameters before anything is timed, together with what the database
must show afterwards (rows changed, rows left, the sum of the keys left).  The
plan is identical for every mode.
"""
from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from .settings import OPERATIONS, STATEMENT_WORKLOADS, BenchError, Settings

_PATTERN = ("aaaaaaaaaabbbbbbbbbbccccccccccddddddddddeeeeeeeeee"
            "ffffffffffgggggggggghhhhhhhhhhiiiiiiiiiijjjjjjjjjj")


def record_value(size: int, update: bool = False) -> str:
    """Mobibench's record: INSERT_STR, or UPDATE_STR (rotated by 50) for updates."""
    p = _PATTERN[50:] + _PATTERN[:50] if update else _PATTERN
    return (p * (size // len(p) + 1))[:size]


class _Keys:
    """Live ids of one database's tables (every table holds the same ids)."""

    def __init__(self, ids: List[int], schema: str, high_water: int) -> None:
        self.ids = ids                  # sorted
        self.schema = schema
        self.high = high_water          # AUTOINCREMENT: largest id ever used
        self.cursor = 0

    def pick(self, rng: random.Random, order: str) -> int:
        if order == "random":
            return self.ids[rng.randrange(len(self.ids))]
        k = self.ids[self.cursor % len(self.ids)]
        self.cursor += 1
        return k

    def take(self, rng: random.Random, order: str) -> int:
        i = rng.randrange(len(self.ids)) if order == "random" else 0
        return self.ids.pop(i)

    def next_auto(self) -> int:
        top = self.ids[-1] if self.ids else 0
        return max(top, self.high) + 1 if self.schema == "autoincrement" else top + 1

    def add(self, k: int) -> None:
        bisect.insort(self.ids, k)
        self.high = max(self.high, k)


Stmt = Tuple[str, Tuple[Any, ...], bool]     # sql, params, returns rows


@dataclass
class Plan:
    """One thread's transactions, and what the database must show afterwards."""

    thread: int
    db_index: int
    txns: List[Tuple[int, Tuple[Stmt, ...]]]    # (phase index, statements)
    ops: Dict[str, int]
    expected_changes: int
    expected_select_rows: int
    final_ids: List[int]                         # this thread's share of the final rows
    final_updated: int                           # of those, rows whose last write was an update
    indexes_created: int = 0                     # create-index: indexes this thread creates

    @property
    def statements(self) -> int:
        return sum(len(t[1]) for t in self.txns)


def _split(n: int, parts: int, i: int) -> int:
    return n // parts + (1 if i < n % parts else 0)


def build_plan(s: Settings, thread: int) -> Plan:
    """Generate thread ``thread``'s statements (seeded; independent of the mode)."""
    T = s.threads
    shared = s.shared_db and T > 1
    rng = random.Random(f"waldio-bench:{s.seed}:{thread}")
    P = s.prepopulate
    if shared:
        own = list(range(1 + thread, P + 1, T))
    else:
        own = list(range(1, P + 1))
    keys = _Keys(own, s.schema, P)
    tables = s.table_names()
    ins_val, upd_val = record_value(s.record_size), record_value(s.record_size, update=True)
    sql_ins_auto = [f"INSERT INTO {t}(Value) VALUES(?)" for t in tables]
    sql_ins = [f"INSERT INTO {t}(id, Value) VALUES(?, ?)" for t in tables]
    sql_upd = [f"UPDATE {t} SET Value = ? WHERE id = ?" for t in tables]
    sql_del = [f"DELETE FROM {t} WHERE id = ?" for t in tables]
    sql_sel = [f"SELECT id, Value FROM {t} WHERE id = ?" for t in tables]

    # fresh ids for explicit inserts: above the pre-populated range, disjoint per thread
    n_ins_max = sum(_split(s.transactions, T, thread) * s.ops_per_txn for _ in s.phases)
    stride = T if shared else 1
    first = P + 1 + (thread if shared else 0)
    fresh = [first + i * stride for i in range(n_ins_max)]
    if s.key_order == "random":
        rng.shuffle(fresh)
    fresh_i = 0
    mix_ops = [o for o in OPERATIONS if s.mix.get(o, 0) > 0]
    mix_w = [s.mix[o] for o in mix_ops]
    ops = {o: 0 for o in OPERATIONS + STATEMENT_WORKLOADS}
    n_index = 0
    changes = select_rows = 0
    updated: set = set()
    txns: List[Tuple[int, Tuple[Stmt, ...]]] = []
    for phase_i, phase in enumerate(s.phases):
        for _ in range(_split(s.transactions, T, thread)):
            stmts: List[Stmt] = []
            if phase == "vacuum":          # one per transaction, outside BEGIN (see runner)
                ops[phase] += 1
                txns.append((phase_i, (("VACUUM", (), False),)))
                continue
            if phase == "create-index":    # a new index over every row, per operation
                for _ in range(s.ops_per_txn):
                    ops[phase] += 1
                    stmts += [(f"CREATE INDEX {t}_bench_idx{thread}_{n_index} ON {t}(Value)",
                               (), False) for t in tables]
                    n_index += 1
                txns.append((phase_i, tuple(stmts)))
                continue
            for _ in range(s.ops_per_txn):
                op = phase if phase != "mixed" else rng.choices(mix_ops, mix_w)[0]
                if op != "insert" and not keys.ids:
                    raise BenchError(
                        f"the workload runs out of rows: a {op} finds no row left in thread "
                        f"{thread}'s share (pre-populated {P} rows per table); "
                        f"raise --prepopulate")
                ops[op] += 1
                if op == "insert":
                    if s.insert_ids == "auto":
                        k = keys.next_auto()
                        stmts += [(q, (ins_val,), False) for q in sql_ins_auto]
                    else:
                        k = fresh[fresh_i]
                        fresh_i += 1
                        stmts += [(q, (k, ins_val), False) for q in sql_ins]
                    keys.add(k)
                    updated.discard(k)
                    changes += len(tables)
                elif op == "update":
                    k = keys.pick(rng, s.key_order)
                    stmts += [(q, (upd_val, k), False) for q in sql_upd]
                    updated.add(k)
                    changes += len(tables)
                elif op == "delete":
                    k = keys.take(rng, s.key_order)
                    stmts += [(q, (k,), False) for q in sql_del]
                    updated.discard(k)
                    changes += len(tables)
                else:
                    k = keys.pick(rng, s.key_order)
                    stmts += [(q, (k,), True) for q in sql_sel]
                    select_rows += len(tables)
            txns.append((phase_i, tuple(stmts)))
    return Plan(thread=thread, db_index=0 if s.shared_db else thread, txns=txns, ops=ops,
                expected_changes=changes, expected_select_rows=select_rows,
                final_ids=list(keys.ids), final_updated=len(updated),
                indexes_created=n_index * len(tables))
