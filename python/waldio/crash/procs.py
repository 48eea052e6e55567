"""Recording workloads of several processes into one event log.

The multi-process workloads (:data:`.workload.MULTI_WORKLOADS`) are recorded
like the others (:func:`.recorder.record`): one recording process builds the
base database and creates the event log. Then:

* ``two-procs`` and ``ckpt-proc``: it starts the processes (role ``_proc``),
  each of which loads the recorder and waldio itself, hooks waldio's system
  calls and appends to the same log (``recorder_join``), and waits for them.
  Two writers commit interleaved transactions, or one writer commits while
  the other process checkpoints (PASSIVE, FULL, RESTART, TRUNCATE) and reads.
  ``stock-writer`` and ``stock-ckpt`` run them with the second process stock
  SQLite, recorded below the unix VFS.
* ``fork``: the recording process is the writer and forks; a child inherits
  the recorder's log descriptor and keeps recording (its first event is
  FORK).

One log, one order: every event is a single O_APPEND write (crash/recorder.c,
"the log"), so the file order is a real-time order of every process's system
calls. Acknowledgements are attributed by marks: each transaction counts
itself in a global counter (meta id 1) inside the transaction, so it knows its
position g in the commit order before it commits; a writer logs ``commit W N``
(value g) right before COMMIT and ``ack W N`` (value g) once COMMIT returned
(``ack-async`` when the commit carries no durability promise: the fork
workload's group-async or synchronous=OFF bursts). The recording's commit
order (:func:`.events.commit_order`) then gives the reference database after
every prefix of it, and the oracle requires, at a crash point, the prefix up
to the largest acknowledged position: every transaction the contract
requires, from every writer.
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import random
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import waldio

from .database import (Runner, configure, control_connection, create_base, create_stock_base,
                       load_recorder, open_db)
from .database import mark as log_mark
from .events import mark_name
from .modes import Mode, get_mode
from .workload import ACCOUNTS, STOCK_MIX, Step, apsw_module, process_steps

PAUSE_MAX_S = 0.002        # a writer's random pause after a commit: interleaving


def mark(ctl: Any, kind: str, writer: int, n: int, g: int) -> None:
    log_mark(ctl, mark_name(kind, writer, n), g)


class MarkingRunner(Runner):
    """A writer of a multi-process workload: marks each transaction's commit
    and acknowledgement with its writer, its number and its position g."""

    def __init__(self, mode: Mode, path: Path, ctl: Any, writer: int, *,
                 vfs: Optional[str] = None, pause_seed: Optional[str] = None) -> None:
        super().__init__(mode, path, vfs=vfs, on_ack=self._acked)
        self.ctl, self.writer = ctl, writer
        self.promised = True
        self.g = 0
        self.committed = 0
        self.before_commit = self._before_commit
        self.pause_rng = random.Random(pause_seed) if pause_seed else None

    def set_busy(self, conn: Any) -> None:
        # SQLite's own busy handler sleeps 1, 2, 5, 10 ... ms: the writer
        # holding the lock would commit many times in a row. Retrying every
        # 0.2 ms makes the writers take turns (for up to 10 s).
        deadline = [0.0]

        def busy(n: int) -> bool:
            now = time.monotonic()
            if n == 0:
                deadline[0] = now + 10
            time.sleep(0.0002)
            return now < deadline[0]
        conn.set_busy_handler(busy)

    def _before_commit(self, conn: Any, step: Step) -> None:
        self.g = conn.execute("SELECT txn FROM meta WHERE id = 1").fetchall()[0][0]
        mark(self.ctl, "commit", self.writer, step.n, self.g)

    def _acked(self, n: int) -> None:
        mark(self.ctl, "ack" if self.promised else "ack-async", self.writer, n, self.g)
        self.committed += 1
        if self.pause_rng is not None:
            time.sleep(self.pause_rng.uniform(0, PAUSE_MAX_S))


# ------------------------------------------------------------ the base

def make_base_multi(mode: Mode, db: Path, workload: str, seed: int, txns: int,
                    vfs: Optional[str]) -> Tuple[Dict[int, int], List[Tuple[int, int, int]]]:
    """Create the database a multi-process run starts from. Returns, per
    writer, how many of its transactions the base already holds, and their
    (g, writer, n) (acknowledged and durable before the recording).

    waldio-from-stock: stock SQLite commits writer 0's first transactions
    (a sixth of the run's) and closes without a checkpoint, so the
    processes of the run find a standard WAL, and the first of them to open
    it converts it (format.md §7) while the other one opens it too."""
    if not mode.from_stock:
        create_base(mode, db, vfs=vfs)
        return {}, []
    create_stock_base(db)
    steps = process_steps(workload, seed, txns)[0]
    first = [st for st in steps if st.kind == "txn"][: max(1, txns // 6)]
    stock = Mode("stock", False, "FULL")
    r = Runner(stock, db, vfs="unix")
    r.conn.execute("PRAGMA wal_autocheckpoint=0")
    done: List[Tuple[int, int, int]] = []
    r.on_ack = lambda n: done.append((len(done) + 1, 0, n))
    r.run(first)
    apsw = apsw_module()
    r.conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    r.conn.close()
    return {0: len(first)}, done


def skip_txns(steps: List[Step], k: int) -> List[Step]:
    """steps after the first k transactions (and whatever came before them)."""
    if k <= 0:
        return steps
    seen = 0
    for i, st in enumerate(steps):
        if st.kind == "txn":
            seen += 1
            if seen == k:
                return steps[i + 1:]
    return []


# ---------------------------------------------- two-procs and ckpt-proc

def run_processes(mode: Mode, workload: str, seed: int, txns: int, db: Path, events: Path,
                  skip: Dict[int, int], env_for: Any, timeout: float = 600) -> Dict[str, Any]:
    """Start the processes of the workload, all appending to `events`;
    wait for them. Returns what each reported."""
    stop = db.parent.parent / "stop"
    roles: List[Dict[str, Any]] = []
    if STOCK_MIX.get(workload, workload) == "two-procs":
        roles = [{"role": "writer", "writer": 0}, {"role": "writer", "writer": 1}]
    else:
        roles = [{"role": "writer", "writer": 0}, {"role": "checkpointer", "writer": 1}]
    if workload in STOCK_MIX:
        roles[1]["stock"] = True              # SQLite's own unix VFS, no waldio
    procs = []
    for i, r in enumerate(roles):
        args = dict(r, mode=mode.name, workload=workload, seed=seed, txns=txns, db=str(db),
                    events=str(events), stop=str(stop), skip=skip.get(r["writer"], 0),
                    nproc=len(roles))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "waldio.crash", "_proc", json.dumps(args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env_for(i)))
    reports: Dict[str, Any] = {}
    errors = []
    deadline = time.monotonic() + timeout
    try:
        for i, p in enumerate(procs):
            if roles[i]["role"] == "checkpointer":
                # It runs until the writer is done.
                while procs[0].poll() is None and time.monotonic() < deadline:
                    time.sleep(0.02)
                stop.write_text("stop")
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            name = "%s-%d" % (roles[i]["role"], roles[i]["writer"])
            if p.returncode != 0:
                errors.append("%s exited %d:\n%s%s" % (name, p.returncode, out[-1500:], err[-3000:]))
                stop.write_text("stop")
                continue
            line = [l for l in out.splitlines() if l.startswith("{")]
            reports[name] = json.loads(line[-1]) if line else {}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if errors:
        raise RuntimeError("\n".join(errors))
    return reports


def role_proc(args: Dict[str, Any]) -> None:
    """One process of a two-procs or ckpt-proc run (or their stock-*
    variants): recorder and waldio loaded here, appending to the run's event
    log. A stock process opens the recorder VFS itself (the unix VFS below
    it), and SQLite ignores the mode's waldio_* URI parameters."""
    mode = get_mode(args["mode"])
    load_recorder()
    vfs = "recorder"
    ctl = control_connection()
    if mode.waldio and not args.get("stock"):
        waldio.load()
        hooked = ctl.execute("SELECT recorder_hook_waldio('waldio')").fetchall()[0][0]
        if hooked < 10:
            raise SystemExit("recorder_hook_waldio hooked only %s system calls" % hooked)
        vfs = "waldio"
    ctl.execute("SELECT recorder_join(?)", (args["events"],)).fetchall()
    db = Path(args["db"])
    if args["role"] == "writer":
        w = args["writer"]
        steps = skip_txns(process_steps(args["workload"], args["seed"], args["txns"])[w],
                          args.get("skip", 0))
        runner = MarkingRunner(mode, db, ctl, w, vfs=vfs,
                               pause_seed="pause:%d:%d" % (args["seed"], w))
        barrier(Path(args["stop"]).parent, w, args["nproc"])
        runner.run(steps)
        report: Dict[str, Any] = {"committed": runner.committed}
        if vfs == "waldio":
            # How its commits were flushed (shared, or alone: wal_file.c).
            stats = json.loads(runner.conn.execute("PRAGMA waldio_stats").fetchall()[0][0])
            report["waldio_stats"] = {k: stats[k] for k in
                                      ("group_commits", "alone_flushes", "group_waits")}
        runner.close()
    else:
        report = checkpointer(mode, db, vfs, args["seed"], Path(args["stop"]), args["nproc"])
    report.update(pid=os.getpid(), stock=bool(args.get("stock")))
    log_mark(ctl, "end", 0)
    ctl.execute("SELECT recorder_stop()").fetchall()
    print(json.dumps(report), flush=True)


def barrier(directory: Path, me: int, n: int, timeout: float = 60) -> None:
    """Wait until all n processes have opened the database: they start
    their work together, so their transactions interleave from the first."""
    (directory / ("ready-%d" % me)).write_text("")
    deadline = time.monotonic() + timeout
    while not all((directory / ("ready-%d" % i)).exists() for i in range(n)):
        if time.monotonic() > deadline:
            raise SystemExit("the other processes never became ready")
        time.sleep(0.001)


CHECKPOINTER_MIN_OPS = 20


def checkpointer(mode: Mode, db: Path, vfs: str, seed: int, stop: Path,
                 nproc: int) -> Dict[str, Any]:
    """Checkpoints of every kind and read transactions until `stop` exists.
    Each read checks what a reader of another process must see: the bank's
    total never changes, and the commit counter never goes backwards."""
    rng = random.Random("checkpointer:%d" % seed)
    conn = open_db(mode, db, vfs=vfs)
    configure(conn, mode)
    reader = open_db(mode, db, vfs=vfs)
    barrier(stop.parent, 1, nproc)
    counts: Dict[str, int] = {}
    busy = 0
    last = 0
    ops = 0
    kinds = ["PASSIVE", "TRUNCATE", "FULL", "RESTART", "read"]
    while ops < CHECKPOINTER_MIN_OPS or not stop.exists():
        # Each kind once among the first ops (however short the run), then
        # at random.
        op = kinds[ops] if ops < len(kinds) else rng.choices(kinds, [35, 25, 8, 7, 25])[0]
        if op == "read":
            reader.execute("BEGIN")
            total = reader.execute("SELECT sum(bal) FROM acct").fetchall()[0][0]
            g = reader.execute("SELECT txn FROM meta WHERE id = 1").fetchall()[0][0]
            if total != ACCOUNTS * 1000 or g < last:
                raise SystemExit("reader saw an inconsistent snapshot: sum(bal)=%s, counter %s "
                                 "after %s" % (total, g, last))
            last = g
            time.sleep(rng.uniform(0, 0.004))          # the snapshot pins the log
            reader.execute("COMMIT")
        else:
            conn.setbusytimeout(rng.choice([0, 20]))
            row = conn.execute("PRAGMA wal_checkpoint(%s)" % op).fetchall()[0]
            busy += int(row[0] == 1)
        counts[op] = counts.get(op, 0) + 1
        ops += 1
        time.sleep(rng.uniform(0, 0.003))
    reader.close()
    conn.close()
    return {"ops": counts, "busy": busy, "last_seen": last}


# ------------------------------------------------------------------ fork

CHILD_KINDS = ("exit", "write", "_exit")


def _libc_exit(code: int) -> None:
    """exit(3) without Python's finalization: C atexit handlers run
    (waldio's flush_at_exit among them), no Python object is freed, so the
    child never closes the connections it inherited."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    ctypes.CDLL(None).exit(code)


def _restore_group(mode: Mode) -> str:
    return mode.uri_options().get("group", "auto")


def run_fork(mode: Mode, db: Path, seed: int, txns: int, vfs: str,
             skip: Dict[int, int], log_dir: Path) -> Dict[str, Any]:
    """The fork workload, in this (recording) process: rounds of a burst of
    commits without a durability promise (group async with the commits
    still buffered at the fork; stock modes: ordinary commits), fork, and a child
    that exits at once through exit() or _exit(), or opens its own
    connection and commits; the parent leaves the burst, runs a TRUNCATE
    checkpoint and commits with the mode's promise before and after the
    child exits."""
    steps = process_steps("fork", seed, txns)
    mine = skip_txns(steps[0], skip.get(0, 0))
    theirs = list(steps[1])
    rng = random.Random("fork:%d" % seed)
    ctl = control_connection()
    parent = MarkingRunner(mode, db, ctl, 0, vfs=vfs)
    conn = parent.conn
    stats: Dict[str, Any] = {"rounds": 0, "children": {}, "async": 0, "promised": 0,
                             "child_commits": 0}
    kinds = list(CHILD_KINDS)

    def take(k: int) -> List[Step]:
        nonlocal mine
        got, mine = mine[:k], mine[k:]
        return got

    r = 0
    while mine:
        kind = kinds[r % len(kinds)]
        r += 1
        child_log = log_dir / ("child-%d.log" % r)
        # A burst without a promise: commits still buffered at the fork.
        burst = take(rng.randrange(3, 7))
        if mode.waldio:
            conn.execute("PRAGMA waldio_group_ms=60000").fetchall()
            conn.execute("PRAGMA waldio_group_bytes='16M'").fetchall()
            conn.execute("PRAGMA waldio_group=async").fetchall()
            parent.promised = False
        # Stock SQLite has nothing like it: its burst commits in the mode's
        # own setting, with the mode's promise. (synchronous=OFF would not
        # do: its checkpoints write the database without a sync, and a later
        # FULL commit does not make that durable: an OS crash corrupts.)
        parent.run(burst)
        child_steps = theirs[:rng.randrange(2, 5)] if kind == "write" else []
        theirs = theirs[len(child_steps):]
        release_r, release_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(release_w)
            _child(kind, mode, db, vfs, child_steps, release_r, child_log)
        os.close(release_r)
        # The parent leaves the burst (its group buffer is written), then
        # truncates the log and commits with the mode's promise, while the
        # child lives and after it has exited.
        # (A group mode needs the database to itself: the mode's own group
        # setting comes back once the child has exited.)
        if mode.waldio:
            conn.execute("PRAGMA waldio_group=off").fetchall()
            conn.execute("PRAGMA waldio_group_ms=2").fetchall()
            conn.execute("PRAGMA waldio_group_bytes='16K'").fetchall()
        parent.promised = True
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        before = take(rng.randrange(2, 5))
        parent.run(before)
        os.write(release_w, b"x")               # the child may exit now
        os.close(release_w)
        during = take(1)
        parent.run(during)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            text = child_log.read_text() if child_log.exists() else ""
            raise RuntimeError("fork child (%s) exited with status %#x:\n%s"
                               % (kind, status, text[-3000:]))
        if mode.waldio and _restore_group(mode) != "off":
            conn.execute("PRAGMA waldio_group=%s" % _restore_group(mode)).fetchall()
        after = take(rng.randrange(1, 3))
        parent.run(after)
        stats["rounds"] += 1
        stats["children"][kind] = stats["children"].get(kind, 0) + 1
        stats["async" if mode.waldio else "promised"] += len(burst)
        stats["promised"] += len(before) + len(during) + len(after)
        stats["child_commits"] += len(child_steps)
    parent.close()
    return stats


def _child(kind: str, mode: Mode, db: Path, vfs: str, steps: List[Step], release: int,
           log_path: Path) -> None:
    """A forked child. Never returns."""
    code = 0
    try:
        if kind == "write":
            ctl = control_connection()           # its own; the parent's is not used here
            # Group commit needs the database to itself: the child, a second
            # process, commits in the mode's base setting.
            own = dataclasses.replace(mode, uri=tuple(kv for kv in mode.uri
                                                      if kv[0] not in ("group", "group_ms")))
            runner = None
            deadline = time.monotonic() + 20
            while runner is None:
                try:
                    runner = MarkingRunner(own, db, ctl, 1, vfs=vfs)
                except apsw_module().Error:
                    # The parent is still in group mode (it needs the
                    # database to itself): wait until it leaves it.
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            runner.conn.setbusytimeout(5000)
            runner.run(steps)
            runner.close()
        os.read(release, 1)
    except BaseException:
        code = 1
        try:
            log_path.write_text(traceback.format_exc())
        except Exception:
            pass
    if kind == "_exit":
        os._exit(code)
    _libc_exit(code)
    os._exit(code)                              # not reached
