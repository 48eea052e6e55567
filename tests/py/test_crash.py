"""waldio crash: the crash-consistency checker (python/waldio/crash/,
crash/recorder.c, crash/fuzz_recovery.c; docs/crash.md).

CI-sized: a few hundred crash states per mode, a few process kills per mode,
log corruption, fault injection and a short fuzz run. The full campaign is
`waldio crash --states 10000` (docs/crash.md has its results).

Every check here can fail, and several tests show that it does: a mode
without guarantees (rollback journal, synchronous=OFF) and a recording whose
flushes are removed must both be reported as broken.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

import waldio
from waldio import crash

ROOT = Path(__file__).resolve().parents[2]
STATES = int(os.environ.get("WALDIO_CRASH_STATES", "250"))
KILLS = int(os.environ.get("WALDIO_CRASH_KILLS", "6"))
FUZZ_SECONDS = int(os.environ.get("WALDIO_FUZZ_SECONDS", "45"))


@pytest.fixture(scope="module")
def out_root(apsw_sqlite: Any) -> Path:
    """Recordings and crash states: on a file system with O_DIRECT.
    (apsw_sqlite: waldio is loaded into apsw the way every test module
    loads it, so the checker here and the other tests share one copy.)"""
    import shutil
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="waldio-crash-test-", dir=str(crash.state_dir_base())))
    yield d
    shutil.rmtree(d, ignore_errors=True)


_recordings: Dict[str, Path] = {}


def recording(mode: str, out_root: Path, txns: int = 80, seed: int = 7) -> Path:
    key = "%s-%d-%d" % (mode, txns, seed)
    if key not in _recordings:
        _recordings[key] = crash.record(mode, "mixed", seed, txns, out_root / key)
    return _recordings[key]


def test_recorder_is_built() -> None:
    path = crash.recorder_path()
    assert path.is_file()
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True)
    exported = [l.split()[-1] for l in out.stdout.splitlines() if " T " in l]
    assert exported == ["sqlite3_recorder_init"], exported


# ------------------------------------------------------------ recording

@pytest.mark.parametrize("mode", ["wal-full", "waldio-full", "waldio-persistent"])
def test_recorder_sees_every_kind_of_io(mode: str, out_root: Path) -> None:
    rec = crash.Recording(recording(mode, out_root))
    types = rec.n_by_type
    assert rec.n_acked == 80 and types["mark"] >= 81
    assert types["sync-begin"] == types["sync-end"] > 0
    writes: Dict[tuple, int] = {}
    for it in rec.items:
        if it.op == crash.W:
            k = (rec.ino_name[it.ino], it.cls)
            writes[k] = writes.get(k, 0) + 1
    if mode == "wal-full":
        # Stock SQLite: everything buffered (page cache); the WAL is created
        # during the run (the base closed cleanly and deleted it), so its
        # directory is synced (os_unix.c's openDirectory, seen by the hook).
        assert writes.get(("c.db-wal", crash.PAGE), 0) > 80
        assert writes.get(("c.db", crash.PAGE), 0) > 0
        assert any(it.op == crash.CR and it.name == "c.db-wal" for it in rec.items)
        assert types.get("dirsync", 0) >= 1
        assert crash.DEV not in {c for (_, c) in writes}
    else:
        # waldio: the log only through direct writes (persistent: RWF_DSYNC),
        # the database through the page cache.
        cls = crash.FUA if mode == "waldio-persistent" else crash.DEV
        assert writes.get(("c.db-wal", cls), 0) >= 80
        assert writes.get(("c.db-wal", crash.PAGE), 0) == 0
        assert writes.get(("c.db", crash.PAGE), 0) > 0
        # Every acknowledged transaction's commit frame is found in the
        # recorded log writes, and (full, persistent) it was durable before
        # the acknowledgement.
        assert rec.commit_frames_ok
        assert max(rec.commit_delays_ms()) <= 0


def test_recording_is_deterministic(out_root: Path) -> None:
    """Same seed, same recording (timestamps aside): WAL salts come from the
    recorder's seeded xRandomness. This is what lets --replay re-record."""
    a = crash.Recording(crash.record("waldio-full", "bank", 3, 20, out_root / "det-a"))
    b = crash.Recording(crash.record("waldio-full", "bank", 3, 20, out_root / "det-b"))

    def ops(rec: crash.Recording) -> List[Any]:
        return [(e.type, e.cls, e.a, e.b, bytes(e.payload).replace(bytes(out_root / "det-a"), b"")
                 .replace(bytes(out_root / "det-b"), b"")) for e in rec.events]
    assert ops(a) == ops(b)


# ------------------------------------------------------------ the model

class Log:
    """Builds a synthetic event log, to test the two-cache model exactly."""

    def __init__(self, d: Path, files: Dict[str, bytes]) -> None:
        self.d = d
        self.live = d / "live"
        (d / "base").mkdir(parents=True)
        self.live.mkdir()
        for name, data in files.items():
            (d / "base" / name).write_bytes(data)
        self.files = files
        self.buf = bytearray(crash.REC_MAGIC)
        self.seq = 0
        self.sid = 0

    def ev(self, typ: int, cls: int = 0, fid: int = -1, a: int = 0, b: int = 0,
           payload: bytes = b"") -> int:
        self.buf += crash.HDR.pack(typ, cls, 0, fid, a, b, self.seq * 1000, self.seq, len(payload), 0)
        self.buf += payload
        self.seq += 1
        return self.seq - 1

    def open(self, fid: int, name: str, created: bool = False) -> int:
        return self.ev(crash.REC_OPEN, 0, fid, 0, int(created), str(self.live / name).encode())

    def write(self, fid: int, off: int, data: bytes, cls: int) -> int:
        return self.ev(crash.REC_WRITE, cls, fid, off, len(data), data)

    def sync(self, fid: int) -> int:
        self.sid += 1
        self.ev(crash.REC_SYNC_BEGIN, 0, fid, self.sid, 1)
        return self.ev(crash.REC_SYNC_END, 0, fid, self.sid, 0)

    def dirsync(self) -> int:
        return self.ev(crash.REC_DIRSYNC, payload=str(self.live).encode())

    def ack(self, n: int) -> int:
        return self.ev(crash.REC_MARK, a=n, payload=b"ack")

    def done(self) -> crash.Recording:
        (self.d / "events.bin").write_bytes(bytes(self.buf))
        meta = {"mode": "wal-full", "workload": "synthetic", "seed": 0, "txns": 0,
                "live_dir": str(self.live), "base_files": sorted(self.files), "digests": ["x"]}
        (self.d / "meta.json").write_text(json.dumps(meta))
        return crash.Recording(self.d)


def image(rec: crash.Recording, key: str) -> Dict[str, bytes]:
    (k, img), = list(rec.states([crash.StateKey.parse(key)]))
    return {n: bytes(b) for n, b in img.files().items()}


def test_model_page_cache_and_device_cache(tmp_path: Path) -> None:
    L = Log(tmp_path, {"a": bytes(1024), "b": bytes(1024)})
    L.open(1, "a")
    L.open(2, "b")
    w_buf = L.write(1, 0, b"B" * 512, crash.PAGE)        # page cache of a
    w_dio = L.write(2, 0, b"D" * 512, crash.DEV)         # device cache
    w_fua = L.write(2, 512, b"F" * 512, crash.FUA)       # durable by itself
    s_b = L.sync(2)                                      # fdatasync(b): a device flush
    s_a = L.sync(1)                                      # writes a's page cache back
    rec = L.done()
    t = w_fua
    # Process kill: every completed call survives.
    assert image(rec, "kill:%d:all:0" % t) == {"a": b"B" * 512 + bytes(512),
                                              "b": b"D" * 512 + b"F" * 512}
    # OS crash: the device cache survives, the page cache does not.
    assert image(rec, "os:%d:lose:0" % t) == {"a": bytes(1024), "b": b"D" * 512 + b"F" * 512}
    # Power loss, worst case: only the FUA write.
    assert image(rec, "power:%d:prefix:0" % t) == {"a": bytes(1024), "b": bytes(512) + b"F" * 512}
    # After b's sync the direct write is durable; a's buffered write is not
    # (another file's fsync does not write a's page cache back) ...
    assert image(rec, "power:%d:prefix:0" % s_b) == {"a": bytes(1024), "b": b"D" * 512 + b"F" * 512}
    # ... until a's own sync.
    assert image(rec, "power:%d:prefix:0" % s_a)["a"] == b"B" * 512 + bytes(512)
    assert rec.nvol[t] == 2 and rec.nvol_page[t] == 1 and rec.nvol[s_a] == 0
    del w_buf, w_dio


def test_model_flush_covers_only_writes_completed_before_it_began(tmp_path: Path) -> None:
    L = Log(tmp_path, {"a": bytes(1024)})
    L.open(1, "a")
    L.write(1, 0, b"1" * 512, crash.DEV)
    L.sid += 1
    L.ev(crash.REC_SYNC_BEGIN, 0, 1, L.sid, 1)
    late = L.write(1, 512, b"2" * 512, crash.DEV)        # completed during the flush
    end = L.ev(crash.REC_SYNC_END, 0, 1, L.sid, 0)
    rec = L.done()
    assert image(rec, "power:%d:prefix:0" % end) == {"a": b"1" * 512 + bytes(512)}
    assert image(rec, "power:%d:prefix:0" % (end - 1)) == {"a": bytes(1024)}
    del late


def test_model_reorders_drops_and_tears(tmp_path: Path) -> None:
    L = Log(tmp_path, {"a": bytes(2048)})
    L.open(1, "a")
    L.write(1, 0, b"x" * 512, crash.DEV)
    L.write(1, 512, b"y" * 512, crash.DEV)
    last = L.write(1, 1024, b"z" * 1024, crash.DEV)
    rec = L.done()
    # In-order prefixes, every single dropped write, subsets.
    assert image(rec, "power:%d:prefix:1" % last)["a"] == b"x" * 512 + bytes(1536)
    assert image(rec, "power:%d:drop:1" % last)["a"] == b"x" * 512 + bytes(512) + b"z" * 1024
    seen = {image(rec, "power:%d:rand:%d" % (last, r))["a"] for r in range(40)}
    assert len(seen) >= 5
    # The write in flight, torn at 512-byte sectors: each sector new, old or
    # garbage, never anything in between; the earlier writes were completed.
    torn = set()
    for r in range(60):
        a = image(rec, "power:%d:torn:%d" % (last, r))["a"]
        assert len(a) == 2048
        s2, s3 = a[1024:1536], a[1536:]
        for s in (s2, s3):
            # new, old, or garbage: never a mix of new and old bytes
            assert s in (b"z" * 512, bytes(512)) or (s.count(b"z") < 64 and s.count(0) < 64)
        torn.add((s2 == b"z" * 512, s3 == b"z" * 512))
    assert (True, True) not in torn and len(torn) >= 3
    # An OS crash tears only in flight: new or old sectors, no garbage.
    for r in range(20):
        a = image(rec, "os:%d:torn:%d" % (last, r))["a"]
        assert a[1024:1536] in (b"z" * 512, bytes(512)) and a[1536:] in (b"z" * 512, bytes(512))


def test_model_files_appear_only_after_a_directory_sync(tmp_path: Path) -> None:
    L = Log(tmp_path, {"a": b""})
    L.open(1, "new", created=True)
    w = L.write(1, 0, b"n" * 512, crash.PAGE)
    s = L.sync(1)
    d = L.dirsync()
    rec = L.done()
    assert "new" in image(rec, "kill:%d:all:0" % w)
    assert "new" not in image(rec, "power:%d:prefix:0" % s)       # data durable, name not
    assert image(rec, "power:%d:prefix:0" % d)["new"] == b"n" * 512


def test_contracts_per_mode(tmp_path: Path) -> None:
    """The requirement at a crash point follows the mode's contract."""
    L = Log(tmp_path, {"c.db": bytes(512), "c.db-wal": bytes(512)})
    L.open(1, "c.db-wal")
    L.write(1, 0, b"w" * 512, crash.PAGE)
    a1 = L.ack(1)
    s = L.sync(1)
    L.write(1, 0, b"v" * 512, crash.PAGE)
    a2 = L.ack(2)
    rec = L.done()
    got = {}
    for name in ("wal-full", "wal-normal", "waldio-normal", "waldio-ns"):
        rec.mode = crash.MODES[name]
        got[name] = [rec.required(crash.StateKey(m, a2, "prefix", 0)) for m in crash.MODELS]
    # kill, os, power. Transaction 1 was acknowledged before the WAL's sync
    # began, transaction 2 after it ended.
    assert got["wal-full"] == [2, 2, 2]
    assert got["wal-normal"] == [2, 1, 1]
    assert got["waldio-normal"] == [2, 1, 1]
    assert got["waldio-ns"] == [2, 2, 1]
    del a1, s


# ------------------------------------------------------------ campaigns

@pytest.mark.parametrize("mode", crash.DEFAULT_MODES)
def test_campaign(mode: str, out_root: Path) -> None:
    res = crash.run_campaign(mode, states=STATES, seed=7, txns=80,
                             rec_dir=recording(mode, out_root))
    assert res.total_tried == STATES
    assert set(res.tried) == set(crash.MODELS)
    assert res.distinct >= STATES // 3
    assert not res.failures, "\n".join("%s: %s" % (f["id"], f["reason"]) for f in res.failures[:10])
    # The states really differ in what they hold: some lose transactions
    # the contract allows to lose (power loss, process kill mid-commit).
    assert res.kinds.get("power/torn", 0) > 0 and res.kinds.get("os/lose", 0) > 0


def test_checker_fails_an_unsafe_mode(out_root: Path) -> None:
    """Rollback journal with synchronous=OFF promises nothing: the same
    checker must find corrupt databases, torn transactions and lost
    acknowledged transactions."""
    res = crash.run_campaign("delete-off", states=300, seed=7, txns=60,
                             rec_dir=recording("delete-off", out_root, txns=60))
    reasons = " ".join(f["reason"] for f in res.failures)
    assert res.passed["kill"] == res.tried["kill"]          # a process kill is still safe
    assert res.passed["power"] < res.tried["power"]
    assert "lost transactions" in reasons
    assert "integrity_check" in reasons or "unreadable" in reasons or "not a prefix" in reasons


@pytest.mark.parametrize("mode", ["wal-full", "waldio-full"])
def test_checker_fails_when_flushes_are_removed(mode: str, out_root: Path) -> None:
    """Mutation: the same recording with no sync reaching the device. FULL
    modes then lose acknowledged transactions, and the checker says so."""
    res = crash.run_campaign(mode, states=200, seed=7, txns=80, rec_dir=recording(mode, out_root),
                             drop_syncs=True)
    assert any("lost transactions" in f["reason"] for f in res.failures)
    assert res.passed["kill"] == res.tried["kill"]


def test_replay_reproduces_a_state(out_root: Path) -> None:
    rd = recording("delete-off", out_root, txns=60)
    res = crash.run_campaign("delete-off", states=150, seed=8, txns=60, rec_dir=rd)
    assert res.failures
    fid = sorted(res.failures, key=lambda f: f["id"])[0]["id"]
    ok1, text1 = crash.replay(fid, rec_dir=rd)
    ok2, text2 = crash.replay(fid, rec_dir=rd)
    assert not ok1 and not ok2
    assert text1 == text2                     # deterministic: same files, same verdict
    assert "FAIL" in text1 and "content hash" in text1
    # A passing state replays as passing.
    good = crash.Recording(rd).sample(1, 3, ["kill"])[0]
    ok, text = crash.replay(crash.Recording(rd).state_id(good), rec_dir=rd)
    assert ok, text


def test_replay_rerecords_a_missing_recording(out_root: Path) -> None:
    rec_root = out_root / "rerecord"
    res = crash.run_campaign("waldio-full", workload="bank", states=20, seed=5, txns=15,
                             out_root=rec_root)
    assert not res.failures
    sid = "waldio-full/bank/seed=5/txns=15/power:%d:prefix:0" % (res.summary["events"] // 2)
    ok, text = crash.replay(sid, out_root=rec_root)
    import shutil
    shutil.rmtree(rec_root / "waldio-full-bank-s5-n15")
    ok2, text2 = crash.replay(sid, out_root=rec_root)
    assert "recording again" in text2
    assert ok == ok2 and text.splitlines()[-2:] == text2.splitlines()[-2:]


# ------------------------------------------------------- process kills

@pytest.mark.parametrize("mode", crash.DEFAULT_MODES)
def test_sigkill(mode: str, out_root: Path) -> None:
    res = crash.run_kills(mode, KILLS, 11, txns=50, workdir=out_root / ("kill-" + mode))
    assert res["rounds"] == KILLS
    assert not res["failures"], res["failures"]
    assert res["acked_total"] > 0


# ------------------------------------------------- corruption, faults, fuzz

def test_log_corruption(out_root: Path) -> None:
    """Bit flips, zeroed sectors and blocks, stale frames of an earlier
    generation, truncation: waldio recovers exactly what stock SQLite
    recovers from the same damage to the equivalent standard WAL (the
    "none" cases check that decoding baseline), or refuses a damaged
    superblock with a clean error; never a crash, never wrong data."""
    res = crash.run_corruptions(42, 3, workdir=out_root / "corrupt")
    assert res["exit"] == 0, res["failures"]
    assert res["cases"] == 84
    assert not res["failures"], res["failures"][:5]
    assert set(res["by_kind"]) == set(crash.CORRUPTIONS)
    # The corruptions matter: most cases lose some transactions.
    assert res["damaged"] > res["cases"] // 3


@pytest.mark.parametrize("case", list(crash.FAULT_CASES))
def test_fault_injection(case: str) -> None:
    errors = 0
    for seed in (1, 2):
        r = crash.run_fault(case, seed, crash.fault_skip(case, seed))
        assert r["passed"], r
        assert r["injected"] >= 1
        errors += not r.get("absorbed")
    # These seeds hit writes whose failure the application sees.
    assert case == "eio-db-write" or errors >= 1


def test_fuzz_recovery_parser() -> None:
    if crash.fuzz_binary_path() is None:
        pytest.skip("build/crash/fuzz_recovery not built: clang is missing "
                    "(.ci/apt-packages installs it)")
    corpus = ROOT / "crash" / "corpus"
    assert len(list(corpus.iterdir())) >= 7
    res = crash.run_fuzz(FUZZ_SECONDS)
    assert res["exit"] == 0 and not res["artifacts"], res["tail"]
    assert res["runs"] > 1000


# ---------------------------------------------------------------- CLI

def test_cli(out_root: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    help_ = subprocess.run([sys.executable, "-m", "waldio", "crash", "--help"],
                           capture_output=True, text=True, env=env)
    assert help_.returncode == 0
    for word in ("--states", "--seed", "--replay", "power", "page cache", "waldio-persistent"):
        assert word in help_.stdout
    run = subprocess.run([sys.executable, "-m", "waldio", "crash", "--mode", "waldio-normal",
                          "--states", "60", "--txns", "30", "--kills", "2", "--quiet",
                          "--out", str(out_root / "cli"), "--json", str(out_root / "cli.json")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "waldio-normal" in run.stdout and "SIGKILL" in run.stdout
    report = json.loads((out_root / "cli.json").read_text())
    assert report["campaigns"][0]["total_passed"] == 60
    bad = subprocess.run([sys.executable, "-m", "waldio", "crash", "--mode", "delete-off",
                          "--states", "80", "--txns", "30", "--kills", "0", "--quiet",
                          "--out", str(out_root / "cli")],
                         capture_output=True, text=True, env=env, timeout=300)
    # delete-off is expected to fail, so the campaign "passes" only if it did:
    assert bad.returncode == 0, bad.stdout
    assert "--replay" in bad.stdout


# ---------------------------------------- regression: a bug this tool found

def test_rolled_back_spill_never_overwrites_a_later_commit(apsw_sqlite: Any) -> None:
    """A rolled-back transaction's spilled frames once stayed in the
    connection's batch after the WAL write lock was released and were
    written at its next xShmBarrier, over frames another connection had
    committed in the same slots (fixed: src/wal_file.c, W4)."""
    import shutil
    import tempfile
    import apsw
    d = Path(tempfile.mkdtemp(prefix="waldio-stale-batch-", dir=str(crash.state_dir_base())))
    try:
        db = d / "r.db"

        def conn(path: Path) -> Any:
            c = apsw.Connection(waldio.uri(path), vfs="waldio", flags=apsw.SQLITE_OPEN_READWRITE
                                | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI)
            c.execute("PRAGMA journal_mode=WAL").fetchall()
            c.execute("PRAGMA synchronous=FULL")
            c.execute("PRAGMA wal_autocheckpoint=0")
            return c
        a, b = conn(db), conn(db)
        a.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
        a.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        a.execute("PRAGMA cache_size=5")
        a.execute("BEGIN")
        for i in range(20):                       # bigger than A's cache: frames spill
            a.execute("INSERT INTO t VALUES(?, randomblob(900))", (1000 + i,))
        a.execute("ROLLBACK")
        b.execute("INSERT INTO t VALUES(1, x'0123')")    # B commits: same frame slots
        seen_by_a = a.execute("SELECT count(*) FROM t").fetchall()[0][0]
        (d / "copy").mkdir()
        for f in ("r.db", "r.db-wal"):
            shutil.copyfile(d / f, d / "copy" / f)  # what a crash now would leave
        a.close()
        b.close()
        c = conn(d / "copy" / "r.db")
        after_crash = c.execute("SELECT count(*) FROM t").fetchall()[0][0]
        c.close()
        assert (seen_by_a, after_crash) == (1, 1)  # measured: (4, 0)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("mode", ["wal-full", "waldio-full"])
def test_two_writer_campaign(mode: str, out_root: Path) -> None:
    """Transactions spread over two writer connections, rolled-back spills
    on one of them. Stock SQLite keeps every state consistent."""
    res = crash.run_campaign(mode, workload="two-writers", states=150, seed=1, txns=150,
                             out_root=out_root / "two-writers")
    assert not res.failures, res.failures[:5]
