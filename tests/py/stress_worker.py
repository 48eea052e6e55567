"""One process of the multi-process stress tests (test_stress.py).

    python3 stress_worker.py DRIVER ROLE DB JSON-OPTIONS

The worker loads waldio, prints "ready", waits until the file opts["go"]
exists, then plays ROLE until the wall-clock time written in that file
(time.time() seconds) and prints one JSON line of figures:
{"role", "id", "commits", "rows", "reads", "opens", "switches", "busy",
"errors": [...]}. It never raises: every error other than SQLITE_BUSY is
recorded in "errors" with the statement, SQLite's message and extended code
and waldio_last_error(), and ends the role.

Roles, on the schema of test_stress.py (rows, and tally kept equal to the
rows' count per writer by a trigger):
  autocommit   single-row INSERTs, each its own transaction
  immediate    BEGIN IMMEDIATE; 1..8 INSERTs; COMMIT
  long-reader  one connection for the whole run; each read is a snapshot
               that must be consistent and never see less than the last
  short-reader open, one consistent snapshot, close; never less than before
  opener       open, read sqlite_master, close
  switcher     open, PRAGMA journal_mode=DELETE, PRAGMA journal_mode=WAL, close
  stock-seed   (not timed) stock SQLite leaves a standard WAL with frames:
               opts["schema"], tally rows for writer 0 and opts["writers"],
               opts["rows"] rows of writer 0; dies without closing
  walthread    the shape of SQLite's walthread-2 (opts["mode"] WAL or DELETE):
               open, read sqlite_master, PRAGMA journal_mode=<mode>, BEGIN,
               INSERT INTO t1, COMMIT, integrity_check, close; "switches"
               counts the pragmas that changed the mode

opts: id (int), vfs ("waldio" or "unix"), layout (waldio's log layout to ask
for; default auto), go (path; without it the role starts at once and has no
deadline), busy_ms, seed, mode, pause_ms (walthread: the longest pause between
two connections).
"""
from __future__ import annotations

import collections
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conftest  # noqa: E402  (puts the waldio package on sys.path)
import waldio  # noqa: E402
from waldio import drivers  # noqa: E402
from waldio.drivers import SQLiteError  # noqa: E402

SQLITE_BUSY = 5


class RoleError(Exception):
    """A failure that ends the role (already recorded in the figures)."""


@dataclass
class Figures:
    role: str
    id: int
    commits: int = 0
    rows: int = 0
    reads: int = 0
    opens: int = 0
    switches: int = 0
    delete_mode_commits: int = 0
    busy: int = 0
    slowest_ms: float = 0.0           # the longest loop iteration (a stall shows here)
    errors: List[Dict[str, Any]] = field(default_factory=list)


class Worker:
    """The connection plumbing shared by every role."""

    def __init__(self, driver: Any, db: str, opts: Dict[str, Any], figures: Figures) -> None:
        self.driver, self.db, self.opts, self.fig = driver, db, opts, figures
        self.rng = random.Random(opts.get("seed", 0) * 7919 + figures.id)
        self.deadline = 0.0
        self.lap_start = 0.0
        self.log: collections.deque = collections.deque(maxlen=20)
        self.state: Dict[str, Any] = {}     # what the role last did, for errors
        if driver.kind == "apsw":      # sqlite3_log messages, for the diagnosis
            import apsw
            apsw.config(apsw.SQLITE_CONFIG_LOG,
                        lambda code, msg: self.log.append("(%d) %s" % (code, msg)))

    def running(self) -> bool:
        """True until the deadline; each call ends one loop iteration."""
        now = time.monotonic()
        if self.lap_start:
            self.fig.slowest_ms = max(self.fig.slowest_ms, (now - self.lap_start) * 1000)
        self.lap_start = now
        return time.time() < self.deadline

    def open(self) -> Any:
        busy_ms = int(self.opts.get("busy_ms", 60000))
        if self.opts.get("vfs", "waldio") == "waldio":
            conn = self.driver.connect(waldio.uri(self.db, layout=self.opts.get("layout", "auto")),
                                       vfs="waldio", timeout_ms=busy_ms)
        else:
            conn = self.driver.connect(self.db, vfs="unix", uri=False, timeout_ms=busy_ms)
        self.fig.opens += 1
        return conn

    def last_error(self, conn: Any) -> str:
        """waldio's own explanation, if it has one (SQL function waldio_last_error())."""
        for c in (conn, None):
            try:
                if c is None:
                    c = self.driver.connect(":memory:", uri=False)
                return str(c.execute("SELECT waldio_last_error()")[0][0])
            except Exception as e:  # noqa: BLE001 - report whatever happened
                last = "waldio_last_error() unavailable: %s" % e
        return last

    def fail(self, conn: Any, sql: str, e: BaseException) -> RoleError:
        record: Dict[str, Any] = {"sql": sql, "error": str(e), "at": time.time()}
        if isinstance(e, SQLiteError):
            record["extended_code"] = e.extended_code
        record["waldio_last_error"] = self.last_error(conn) if conn is not None else ""
        record["state"] = dict(self.state)
        record["sqlite_log"] = list(self.log)
        record["files"] = self.files()
        self.fig.errors.append(record)
        return RoleError(str(e))

    def files(self) -> Dict[str, int]:
        """The database's files and their sizes, when the error was seen."""
        d, base = os.path.split(self.db)
        sizes = {}
        for name in os.listdir(d or "."):
            if name.startswith(base):
                try:
                    sizes[name] = os.stat(os.path.join(d, name)).st_size
                except FileNotFoundError:
                    pass
        return sizes

    def run(self, conn: Any, sql: str, params: tuple = (), busy_ok: bool = False) -> Any:
        """One statement. SQLITE_BUSY returns None when busy_ok (counted),
        any other error ends the role."""
        try:
            return conn.execute(sql, params)
        except SQLiteError as e:
            if e.code == SQLITE_BUSY and busy_ok:
                self.fig.busy += 1
                return None
            raise self.fail(conn, sql, e) from e

    def until_done(self, conn: Any, sql: str, params: tuple = ()) -> Any:
        """A statement retried after SQLITE_BUSY (a BUSY statement changed nothing)."""
        while True:
            rows = self.run(conn, sql, params, busy_ok=True)
            if rows is not None:
                return rows
            time.sleep(0.001)


def insert_row(w: Worker, conn: Any, seq: int) -> None:
    w.run(conn, "INSERT INTO rows(writer, seq, payload) VALUES(?, ?, randomblob(?))",
          (w.fig.id, seq, w.rng.randrange(50, 1500)))


def role_autocommit(w: Worker) -> None:
    conn = w.open()
    w.until_done(conn, "SELECT count(*) FROM sqlite_master")
    while w.running():
        sql = "INSERT INTO rows(writer, seq, payload) VALUES(?, ?, randomblob(?))"
        if w.run(conn, sql, (w.fig.id, w.fig.rows + 1, w.rng.randrange(50, 1500)),
                 busy_ok=True) is None:
            continue
        w.fig.commits += 1
        w.fig.rows += 1
    conn.close()


def role_immediate(w: Worker) -> None:
    conn = w.open()
    while w.running():
        if w.run(conn, "BEGIN IMMEDIATE", busy_ok=True) is None:
            continue
        n = w.rng.randrange(1, 9)
        for i in range(n):
            insert_row(w, conn, w.fig.rows + i + 1)
        w.until_done(conn, "COMMIT")
        w.fig.commits += 1
        w.fig.rows += n
    conn.close()


class SnapshotChecker:
    """A reader's view: each snapshot consistent, none older than the last."""

    def __init__(self, w: Worker) -> None:
        self.w = w
        self.seen: Dict[int, int] = {}

    def read(self, conn: Any) -> None:
        w = self.w
        w.until_done(conn, "BEGIN")
        try:
            counts = dict(w.until_done(conn, "SELECT writer, count(*) FROM rows GROUP BY writer"))
            tally = {k: v for k, v in w.until_done(conn, "SELECT writer, n FROM tally") if v}
        finally:
            w.until_done(conn, "COMMIT")
        w.fig.reads += 1
        if counts != tally:
            raise w.fail(conn, "snapshot", AssertionError(
                "inconsistent snapshot: rows per writer %s, tally %s" % (counts, tally)))
        older = {k: (v, counts.get(k, 0)) for k, v in self.seen.items() if counts.get(k, 0) < v}
        if older:
            raise w.fail(conn, "snapshot", AssertionError(
                "snapshot went backwards (writer: (seen before, now)) %s" % older))
        self.seen = counts


def role_long_reader(w: Worker) -> None:
    conn = w.open()
    check = SnapshotChecker(w)
    while w.running():
        check.read(conn)
        time.sleep(0.002)
    conn.close()


def role_short_reader(w: Worker) -> None:
    check = SnapshotChecker(w)
    while w.running():
        conn = w.open()
        try:
            check.read(conn)
        finally:
            conn.close()


def role_opener(w: Worker) -> None:
    while w.running():
        conn = w.open()
        try:
            w.until_done(conn, "SELECT count(*) FROM sqlite_master")
        finally:
            conn.close()


def role_switcher(w: Worker) -> None:
    while w.running():
        conn = w.open()
        try:
            w.until_done(conn, "SELECT count(*) FROM sqlite_master")
            mode = w.run(conn, "PRAGMA journal_mode=DELETE", busy_ok=True)
            if mode is not None and mode[0][0] == "delete":
                w.fig.switches += 1
            w.until_done(conn, "PRAGMA journal_mode=WAL")
        finally:
            conn.close()
        time.sleep(0.005)


def role_walthread(w: Worker) -> None:
    """walthread-2: commit in the mode this process keeps asking for."""
    mode = w.opts["mode"]
    journal = Path(w.db + "-journal")
    while w.running():
        conn = w.open()
        try:
            w.run(conn, "SELECT * FROM sqlite_master")
            before = w.run(conn, "PRAGMA journal_mode")[0][0]
            got = w.run(conn, "PRAGMA journal_mode=%s" % mode, busy_ok=True)
            w.state = {"asked": mode, "was": before, "journal_mode": got[0][0] if got else "busy"}
            w.fig.switches += bool(got) and got[0][0] != before
            w.run(conn, "BEGIN")
            w.run(conn, "INSERT INTO t1 VALUES(NULL, randomblob(?))", (100 + w.fig.id,))
            in_rollback_mode = journal.exists()
            w.run(conn, "COMMIT")
            w.fig.commits += 1
            w.fig.delete_mode_commits += in_rollback_mode
            check = w.run(conn, "PRAGMA integrity_check")
            if check != [("ok",)]:
                raise w.fail(conn, "PRAGMA integrity_check", AssertionError(str(check)))
        finally:
            conn.close()
        # A pause between connections, so that a process asking for DELETE
        # is sometimes alone and its switch succeeds.
        time.sleep(w.rng.random() * w.opts.get("pause_ms", 10) / 1000)


def role_stock_seed(w: Worker) -> None:
    """Leave a standard WAL holding frames: stock SQLite (vfs "unix") runs
    opts["schema"] in WAL mode, commits opts["rows"] rows for writer 0 (its
    tally included) one by one, and the process dies without closing."""
    conn = w.open()
    w.run(conn, "PRAGMA journal_mode=WAL")
    w.run(conn, "PRAGMA wal_autocheckpoint=0")
    conn.executescript(w.opts["schema"])
    for writer in [0] + list(w.opts["writers"]):
        w.run(conn, "INSERT INTO tally VALUES(?, 0)", (writer,))
    for seq in range(1, int(w.opts["rows"]) + 1):
        insert_row(w, conn, seq)
        w.fig.commits += 1
        w.fig.rows += 1
    print(json.dumps(asdict(w.fig)), flush=True)
    os._exit(0)


ROLES: Dict[str, Callable[[Worker], None]] = {
    "autocommit": role_autocommit,
    "immediate": role_immediate,
    "long-reader": role_long_reader,
    "short-reader": role_short_reader,
    "opener": role_opener,
    "switcher": role_switcher,
    "walthread": role_walthread,
    "stock-seed": role_stock_seed,
}


def wait_for_go(go: Path) -> float:
    """Block until the parent writes the go file; returns the deadline."""
    while True:
        try:
            text = go.read_text()
            if text.endswith("\n"):
                return float(text)
        except FileNotFoundError:
            pass
        time.sleep(0.002)


def main() -> None:
    driver_name, role, db = sys.argv[1:4]
    opts = json.loads(sys.argv[4])
    driver = conftest.load_waldio(drivers.driver_by_name(driver_name))
    fig = Figures(role, int(opts["id"]))
    w = Worker(driver, db, opts, fig)
    print("ready", flush=True)
    w.deadline = wait_for_go(Path(opts["go"])) if "go" in opts else float("inf")
    try:
        ROLES[role](w)
    except RoleError:
        pass
    except Exception as e:  # noqa: BLE001 - every failure goes into the figures
        fig.errors.append({"sql": "", "error": "%s: %s" % (type(e).__name__, e)})
    print(json.dumps(asdict(fig)), flush=True)


if __name__ == "__main__":
    main()
