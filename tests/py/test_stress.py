"""Multi-process stress through waldio (issue 9), on both SQLite builds.

test_many_processes: N processes (stress_worker.py) start together on one
database: autocommit writers, BEGIN IMMEDIATE writers, a long-lived reader,
short-lived readers, processes that only open and close, and a process that
switches the journal mode to DELETE and back to WAL. Afterwards: every
writer's rows are exactly what it says it committed (seq 1..n, no gaps, no
duplicates), the tally the trigger keeps agrees, no reader ever saw an
inconsistent snapshot or one older than its previous, integrity_check is ok;
then the database is detached from waldio (PRAGMA journal_mode=DELETE through
waldio) and stock SQLite (vfs "unix") must read the same counts.
test_many_processes_from_a_stock_wal: the same, starting from a standard WAL
that a killed stock process left with 200 uncheckpointed commits, so that
the processes' concurrent first opens must recover it (the default layout,
standard, keeps it as it is; pad4k, asked for, converts it).
Both also run with every process asking for a slotted layout (embed, or pad4k
from the stock WAL: that database has no reserved bytes), on apsw's SQLite
only and for half the time (to save time).

test_walthread2_shape: the four-process shape of SQLite's walthread-2: two
processes loop on open, read sqlite_master, PRAGMA journal_mode=WAL, BEGIN,
INSERT, COMMIT, integrity_check, close; two do the same asking for DELETE.
Any error is a failure, reported with waldio_last_error().

The same runs through stock SQLite (vfs "unix", apsw's build) are the
control: they prove the harness itself asks nothing stock does not do.

Two small deterministic tests pin journal-mode switch bugs the runs found
(STRESS_FINDINGS.md): a refused switch must keep the log; a switch prepared
before the schema is loaded must still delete it.

Scale: WALDIO_STRESS_SECONDS (default 5) per run, WALDIO_STRESS_SCALE
(default 1) multiplies the number of processes of every role of the
many-process runs (the walthread-2 shape stays at four: with more, a process
asking for DELETE is almost never alone, and the modes stop switching). Figures are
printed (pytest -s, or -rP) so that they can be quoted.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import waldio
from waldio import drivers

WORKER = str(Path(__file__).resolve().parent / "stress_worker.py")
SECONDS = float(os.environ.get("WALDIO_STRESS_SECONDS", "5"))
SCALE = int(os.environ.get("WALDIO_STRESS_SCALE", "1"))
BUSY_MS = 60000
GRACE = 300                     # seconds a worker may take past the deadline

ROLE_COUNTS = {"autocommit": 2, "immediate": 2, "long-reader": 1,
               "short-reader": 2, "opener": 1, "switcher": 1}
WRITERS = ("autocommit", "immediate")

SCHEMA = """
CREATE TABLE rows(id INTEGER PRIMARY KEY, writer INTEGER NOT NULL, seq INTEGER NOT NULL,
                  payload BLOB, UNIQUE(writer, seq));
CREATE TABLE tally(writer INTEGER PRIMARY KEY, n INTEGER NOT NULL);
CREATE TRIGGER rows_tally AFTER INSERT ON rows
  BEGIN UPDATE tally SET n = n + 1 WHERE writer = new.writer; END;
"""

@dataclass
class Run:
    """What the workers of one run reported, and how long it took."""
    figures: List[Dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0

    def total(self, key: str, roles: Tuple[str, ...] = ()) -> int:
        return sum(f.get(key, 0) for f in self.figures if not roles or f["role"] in roles)

    def errors(self) -> List[str]:
        return ["%s #%d: %s" % (f["role"], f["id"], json.dumps(e))
                for f in self.figures for e in f.get("errors", [])]

    def committed(self) -> Dict[int, int]:
        """writer id -> rows it committed."""
        return {f["id"]: f["rows"] for f in self.figures if f["role"] in WRITERS and f["rows"]}

    def summary(self, label: str) -> str:
        roles: Dict[str, int] = {}
        for f in self.figures:
            roles[f["role"]] = roles.get(f["role"], 0) + 1
        return ("%s: %d processes (%s), %.1f s: %d commits (%d rows, %d in rollback mode), "
                "%d reads, %d opens, %d journal-mode switches, %d busy retries, "
                "slowest iteration %.0f ms, %d errors" % (
                    label, len(self.figures),
                    ", ".join("%d %s" % (n, r) for r, n in sorted(roles.items())),
                    self.elapsed, self.total("commits"), self.total("rows"),
                    self.total("delete_mode_commits"), self.total("reads"),
                    self.total("opens"), self.total("switches"), self.total("busy"),
                    max([f.get("slowest_ms", 0.0) for f in self.figures] + [0.0]),
                    len(self.errors())))


def connect(driver: Any, path: Path, vfs: str, layout: str = "auto") -> drivers.Connection:
    if vfs == "waldio":
        return driver.connect(waldio.uri(path, layout=layout), vfs="waldio", timeout_ms=BUSY_MS)
    return driver.connect(str(path), vfs="unix", uri=False, timeout_ms=BUSY_MS)


def start_worker(driver_name: str, role: str, db: Path, opts: Dict[str, Any]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, WORKER, driver_name, role, str(db), json.dumps(opts)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def collect(proc: subprocess.Popen, role: str, wid: int) -> Dict[str, Any]:
    """A finished worker's figures, or a record of how it died."""
    try:
        out, err = proc.communicate(timeout=SECONDS + GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return {"role": role, "id": wid, "errors": [{"error": "hung: killed after the"
                                                      " deadline + %d s" % GRACE}]}
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
        return {"role": role, "id": wid, "errors": [{"error": "exit status %d" % proc.returncode,
                                                      "stderr": err[-3000:]}]}
    return json.loads(lines[-1])


def run_workers(driver_name: str, db: Path, plan: List[Tuple[str, Dict[str, Any]]],
                seconds: float = SECONDS) -> Run:
    """Start every worker, let them go at once, wait for all of them."""
    go = db.parent / "go"
    procs = [start_worker(driver_name, role, db, dict(opts, go=str(go), busy_ms=BUSY_MS))
             for role, opts in plan]
    for p in procs:
        p.stdout.readline()                      # "ready" (or EOF if it died)
    t0 = time.time()
    tmp = db.parent / "go.tmp"
    tmp.write_text("%f\n" % (t0 + seconds))
    tmp.rename(go)                               # every worker sees the whole line
    run = Run()
    run.figures = [collect(p, role, opts["id"]) for p, (role, opts) in zip(procs, plan)]
    run.elapsed = time.time() - t0
    return run


def stress_plan(vfs: str, layout: str) -> List[Tuple[str, Dict[str, Any]]]:
    plan = []
    for role, n in ROLE_COUNTS.items():
        for _ in range(n * SCALE):
            plan.append((role, {"id": len(plan) + 1, "vfs": vfs, "seed": 1,
                                "layout": layout}))
    return plan


def create_stress_db(driver: Any, db: Path, vfs: str, ids: List[int], layout: str) -> None:
    conn = connect(driver, db, vfs, layout)
    assert conn.execute("PRAGMA journal_mode=WAL") == [("wal",)]
    conn.executescript(SCHEMA)
    conn.execute("BEGIN")
    for i in ids:
        conn.execute("INSERT INTO tally VALUES(?, 0)", (i,))
    conn.execute("COMMIT")
    conn.close()


def stored_counts(conn: drivers.Connection) -> Dict[int, Tuple[int, int, int, int]]:
    """writer -> (rows, min seq, max seq, tally)."""
    rows = conn.execute("SELECT r.writer, count(*), min(seq), max(seq), t.n FROM rows r"
                        " JOIN tally t USING(writer) GROUP BY r.writer")
    return {r[0]: tuple(r[1:]) for r in rows}


def check_stress_db(conn: drivers.Connection, committed: Dict[int, int]) -> None:
    assert conn.execute("PRAGMA integrity_check") == [("ok",)]
    expected = {w: (n, 1, n, n) for w, n in committed.items()}
    assert stored_counts(conn) == expected
    assert conn.execute("SELECT sum(n) FROM tally")[0][0] == sum(committed.values())


def db_files(db: Path) -> List[str]:
    return sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name))


def detach(driver: Any, db: Path, vfs: str, before: str = "SELECT count(*) FROM sqlite_master",
           layout: str = "auto") -> None:
    """Leave WAL mode through the VFS that wrote the database: the log and its
    wal-index (SQLite's -shm, or a slotted layout's -wal-shm) are checkpointed
    and deleted, the header says rollback mode (1, 1). before:
    the statement the connection runs first ("" for none); the default loads
    the schema, which keeps this clear of STRESS_FINDINGS.md F4."""
    conn = connect(driver, db, vfs, layout)
    if before:
        conn.execute(before)
    assert conn.execute("PRAGMA journal_mode=DELETE") == [("delete",)]
    conn.close()
    left = db_files(db)
    index = "-wal-shm" if vfs == "waldio" and layout not in ("auto", "standard") else "-shm"
    assert not {db.name + "-wal", db.name + index} & set(left), left
    assert tuple(db.read_bytes()[18:20]) == (1, 1)


SEED_ROWS = 200
WAL_MAGIC = (0x377f0682, 0x377f0683)


def seed_stock_wal(driver_name: str, db: Path, ids: List[int]) -> int:
    """A stock process leaves a standard WAL holding SEED_ROWS commits of
    writer 0 (never checkpointed: it dies without closing). Returns them."""
    opts = {"id": 0, "vfs": "unix", "rows": SEED_ROWS, "schema": SCHEMA, "writers": ids}
    proc = subprocess.run([sys.executable, WORKER, driver_name, "stock-seed", str(db),
                           json.dumps(opts)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not figures["errors"], figures["errors"]
    wal = (db.parent / (db.name + "-wal")).read_bytes()
    assert int.from_bytes(wal[:4], "big") in WAL_MAGIC and len(wal) > 32
    return int(figures["rows"])


def stress(sqlite: Any, dbdir: Path, vfs: str, start: str = "clean",
           layout: str = "auto", seconds: float = SECONDS) -> Run:
    """start: "clean" (created and closed through vfs) or "stock-wal" (a
    standard WAL with uncheckpointed frames, which the first opens recover).
    layout: what every waldio connection asks for; seconds: how long."""
    db = dbdir / "stress.db"
    plan = stress_plan(vfs, layout)
    ids = [o["id"] for _, o in plan]
    seeded = {}
    if start == "stock-wal":
        seeded = {0: seed_stock_wal(sqlite.name, db, ids)}
    else:
        create_stress_db(sqlite.driver, db, vfs, ids, layout)
    run = run_workers(sqlite.name, db, plan, seconds)
    print("\n" + run.summary("stress %s %s, start %s" % (sqlite.name, vfs, start)))
    assert not run.errors(), "\n".join(run.errors())
    assert run.total("commits", WRITERS) > 0 and run.total("reads") > 0
    committed = {**run.committed(), **seeded}
    conn = connect(sqlite.driver, db, vfs, layout)
    check_stress_db(conn, committed)
    if vfs == "waldio":                  # every process kept the log's layout
        want = "standard" if layout == "auto" else layout
        assert json.loads(conn.execute("PRAGMA waldio")[0][0])["layout"] == want
    conn.close()
    detach(sqlite.driver, db, vfs, layout=layout)
    stock = sqlite.stock(db)
    check_stress_db(stock, committed)
    assert stock.execute("PRAGMA journal_mode") == [("delete",)]
    stock.close()
    return run


def test_many_processes(sqlite: Any, dbdir: Path) -> None:
    stress(sqlite, dbdir, "waldio")


def test_many_processes_from_a_stock_wal(sqlite: Any, dbdir: Path) -> None:
    """All processes' first opens meet a standard WAL with frames (issue 9
    items 2 and 3: concurrent first opens, conversion)."""
    stress(sqlite, dbdir, "waldio", start="stock-wal")


def test_many_processes_embed(apsw_sqlite: Any, dbdir: Path) -> None:
    stress(apsw_sqlite, dbdir, "waldio", layout="embed", seconds=SECONDS / 2)


def test_many_processes_from_a_stock_wal_padded(apsw_sqlite: Any, dbdir: Path) -> None:
    """The first opens convert the stock WAL (issue 9 item 3, the race)."""
    stress(apsw_sqlite, dbdir, "waldio", start="stock-wal", layout="pad4k",
           seconds=SECONDS / 2)


def test_many_processes_stock_control(apsw_sqlite: Any, dbdir: Path) -> None:
    stress(apsw_sqlite, dbdir, "unix")


def walthread2(sqlite: Any, dbdir: Path, vfs: str) -> Run:
    db = dbdir / "test.db"
    conn = connect(sqlite.driver, db, vfs)
    conn.execute("CREATE TABLE t1(x INTEGER PRIMARY KEY, y UNIQUE)")
    conn.close()
    plan = [("walthread", {"id": i + 1, "vfs": vfs, "mode": mode, "pause_ms": 30})
            for i, mode in enumerate(["DELETE", "WAL"] * 2)]
    run = run_workers(sqlite.name, db, plan)
    print("\n" + run.summary("walthread-2 shape %s %s" % (sqlite.name, vfs)))
    assert not run.errors(), "\n".join(run.errors())
    assert run.total("commits") > 0
    conn = connect(sqlite.driver, db, vfs)
    assert conn.execute("PRAGMA integrity_check") == [("ok",)]
    assert conn.execute("SELECT count(*) FROM t1")[0][0] == run.total("commits")
    conn.close()
    return run


def test_walthread2_shape(sqlite: Any, dbdir: Path) -> None:
    walthread2(sqlite, dbdir, "waldio")


def test_walthread2_shape_stock_control(apsw_sqlite: Any, dbdir: Path) -> None:
    walthread2(apsw_sqlite, dbdir, "unix")


def test_failed_switch_keeps_the_log(sqlite: Any, dbdir: Path) -> None:
    """A PRAGMA journal_mode=DELETE refused with SQLITE_BUSY leaves the
    database in WAL mode, so the last close must keep the preallocated log
    as after any other WAL session (STRESS_FINDINGS.md F2)."""
    db = dbdir / "switch.db"
    first = sqlite.waldio(db)
    assert first.execute("PRAGMA journal_mode=WAL") == [("wal",)]
    first.execute("CREATE TABLE t(x)")
    first.execute("INSERT INTO t VALUES(1)")
    other = sqlite.waldio(db)
    assert other.execute("SELECT count(*) FROM t") == [(1,)]
    with pytest.raises(drivers.SQLiteError) as e:
        first.execute("PRAGMA journal_mode=DELETE")
    assert e.value.code == 5                               # SQLITE_BUSY
    assert first.execute("PRAGMA journal_mode") == [("wal",)]
    other.close()
    first.close()
    assert (dbdir / "switch.db-wal").exists()
    conn = sqlite.waldio(db)
    assert conn.execute("PRAGMA journal_mode") == [("wal",)]
    assert conn.execute("SELECT count(*) FROM t") == [(1,)]
    conn.close()


@pytest.mark.parametrize("before", ["", "PRAGMA schema_version"],
                         ids=["first-statement", "after-schema_version"])
def test_switch_before_the_schema_is_loaded_detaches(sqlite: Any, dbdir: Path,
                                                     before: str) -> None:
    """SQLite sends PRAGMA journal_mode to the VFS while preparing it, before
    it reads the schema (and opens the log) for a connection that has not
    yet: as a fresh connection's first statement, or after PRAGMA
    schema_version, which is what waldio.connect() runs and so `waldio
    detach` does. The switch must still delete the log."""
    db = dbdir / "first.db"
    conn = sqlite.waldio(db)
    assert conn.execute("PRAGMA journal_mode=WAL") == [("wal",)]
    conn.execute("CREATE TABLE t(x)")
    conn.execute("INSERT INTO t VALUES(1)")
    conn.close()
    assert (dbdir / "first.db-wal").exists()
    detach(sqlite.driver, db, "waldio", before=before)
    stock = sqlite.stock(db)
    assert stock.execute("SELECT count(*) FROM t") == [(1,)]
    assert stock.execute("PRAGMA journal_mode") == [("delete",)]
    stock.close()
