"""The log and its wal-index carry the database file's mode, and its owner
where the process may set it, as SQLite gives its journals -- also after
the database's mode or owner changed, and when another user opens it
(src/log_owner.c O1-O3). Run as root and as an unprivileged user, with the
default layout of a new log (standard: the wal-index is SQLite's <db>-shm)
and with embed (waldio's <db>-wal-shm).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

import workloads as wl
from users import USERS, User, Workspace, user

LAYOUTS = ["standard", "embed"]
# The log and its wal-index, by layout.
FILES = {"standard": ("-wal", "-shm"), "embed": ("-wal", "-wal-shm")}


def env(layout: str) -> Dict[str, str]:
    """files_worker.py's environment: the layout it asks for."""
    return {"WALDIO_TEST_LAYOUT": layout}


def assert_like_database(r: Dict[str, Any], mode: int, uid: int, gid: int,
                         layout: str) -> None:
    for when in ("open", "closed"):
        f = r[when]
        assert f["db"]["mode"] == mode, (when, f)
        for suffix in FILES[layout]:
            assert f[suffix] is not None, (when, suffix, f)
            assert (f[suffix]["mode"], f[suffix]["uid"], f[suffix]["gid"]) == (mode, uid, gid), \
                (when, suffix, f)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("who", USERS)
def test_files_follow_the_database_mode(who: str, dbdir: Path, layout: str) -> None:
    u = user(who)
    ws = Workspace(dbdir, u)
    db = ws.dir / "app.db"
    r = ws.run(u, "write", db, env=env(layout))        # created by this user
    mode = r["closed"]["db"]["mode"]
    assert_like_database(r, mode, u.uid, u.gid, layout)
    for new_mode in (0o600, 0o640, 0o660):             # tightened, then loosened
        if u.uid == 0:
            os.chmod(db, new_mode)
        else:
            subprocess.run(u.argv(["chmod", "%o" % new_mode, str(db)]), check=True)
        r = ws.run(u, "write", db, env=env(layout))
        assert_like_database(r, new_mode, u.uid, u.gid, layout)
    assert r["rows"] == 4


@pytest.mark.parametrize("layout", LAYOUTS)
def test_root_gives_the_files_the_database_owner(dbdir: Path, layout: str) -> None:
    root, nobody = user("root"), user("nobody")
    ws = Workspace(dbdir, root)
    db = ws.dir / "owned.db"
    ws.run(root, "write", db, env=env(layout))
    os.chown(db, nobody.uid, nobody.gid)
    os.chmod(db, 0o640)
    r = ws.run(root, "write", db, env=env(layout))
    assert_like_database(r, 0o640, nobody.uid, nobody.gid, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_another_user_gets_files_of_its_own(dbdir: Path, layout: str) -> None:
    """Root made the files; the database is handed to `nobody` (chown, chmod
    600). nobody may not change root's files: as stock SQLite would create a
    WAL of its own, the empty log and the wal-index are replaced, since no
    other connection has the database open. Nothing is lost."""
    root, nobody = user("root"), user("nobody")
    ws = Workspace(dbdir, nobody)
    db = ws.dir / "handed.db"
    ws.run(root, "write", db, env=env(layout))
    for suffix in FILES[layout]:
        assert os.stat(str(db) + suffix).st_uid == 0
    os.chown(db, nobody.uid, nobody.gid)
    os.chmod(db, 0o600)
    r = ws.run(nobody, "write", db, env=env(layout))
    assert_like_database(r, 0o600, nobody.uid, nobody.gid, layout)
    assert r["rows"] == 2


@pytest.mark.parametrize("layout", LAYOUTS)
def test_files_that_cannot_be_changed_are_reported(sqlite: Any, dbdir: Path,
                                                   layout: str) -> None:
    """While root has the database open, nobody (to whom the database now
    belongs) may neither change root's log nor replace it: the open goes on
    with the files as they are, and the reason is on stderr with
    WALDIO_VERBOSE=1."""
    root, nobody = user("root"), user("nobody")
    ws = Workspace(dbdir, nobody)
    db = ws.dir / "busy.db"
    ws.run(root, "write", db, env=env(layout))
    conn = sqlite.waldio(db)
    try:
        assert conn.execute("SELECT count(*) FROM t")[0][0] == 1
        os.chown(db, nobody.uid, nobody.gid)
        os.chmod(db, 0o666)
        p = subprocess.run(nobody.argv(["/usr/bin/python3", str(ws.worker), str(ws.so),
                                        "write", str(db)]),
                           capture_output=True, text=True, timeout=120,
                           env={"PATH": "/usr/bin:/bin", "WALDIO_VERBOSE": "1",
                                **env(layout)})
        assert "keeps a mode or owner other than its database's" in p.stderr, p.stderr
        assert "another connection has the database open" in p.stderr, p.stderr
    finally:
        conn.close()


def test_a_symbolic_link_at_the_log_path_is_never_followed(sqlite: Any, dbdir: Path) -> None:
    """O1: a link planted at <db>-wal neither gets the database's mode nor
    becomes the log (stock SQLite opens its files with O_NOFOLLOW too)."""
    user("root")
    victim = dbdir / "victim"
    victim.write_bytes(b"precious")
    os.chmod(victim, 0o644)
    db = dbdir / "link.db"
    conn = sqlite.waldio(db)
    conn.execute("CREATE TABLE t(x)")                   # a rollback-mode database
    conn.close()
    os.chmod(db, 0o600)
    os.symlink(victim, str(db) + "-wal")
    conn = sqlite.waldio(db)
    with pytest.raises(Exception):
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("INSERT INTO t VALUES (1)")
    conn.close()
    assert victim.read_bytes() == b"precious"
    assert os.stat(victim).st_mode & 0o777 == 0o644


_PROBE = """
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
probe = struct.pack("hh4xqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 128, 1, 0)
got = fcntl.fcntl(fd, fcntl.F_GETLK, probe)
print(struct.unpack("hh4xqqi4x", got)[0] != fcntl.F_UNLCK)
"""


def _dms_lock_held(shm: Path) -> bool:
    """Does a lock cover the unix VFS's DMS byte of a wal-index (os_unix.c
    UNIX_SHM_DMS, byte 128)? Asked from another process: a probe in this one
    would open and close the file, and so drop the very locks it looks for."""
    out = subprocess.run([sys.executable, "-c", _PROBE, str(shm)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return out.strip() == "True"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_looking_at_the_files_keeps_this_process_locks(sqlite: Any, dbdir: Path,
                                                       layout: str) -> None:
    """O4: a second connection's WAL open looks at (and here, chmods) the
    wal-index while the first connection's unix VFS holds POSIX locks on it.
    Closing an ordinary descriptor of the file would drop them all -- the
    DMS lock among them, after which the next process to open the database
    would take the wal-index for unused and truncate it under this one."""
    user("root")
    db = dbdir / "locks.db"
    shm = Path(str(db) + FILES[layout][1])
    first = sqlite.waldio(db, layout=layout)
    try:
        first.execute("PRAGMA journal_mode=WAL")
        first.execute("CREATE TABLE t(x)")
        first.execute("INSERT INTO t VALUES (1)")
        assert _dms_lock_held(shm)
        os.chmod(db, 0o600)                              # the open must chmod
        second = sqlite.waldio(db)
        try:
            assert second.execute("SELECT count(*) FROM t")[0][0] == 1
            assert os.stat(shm).st_mode & 0o777 == 0o600
            assert _dms_lock_held(shm), "the wal-index lost this process's locks"
        finally:
            second.close()
        assert _dms_lock_held(shm)
        assert first.execute("SELECT count(*) FROM t")[0][0] == 1
    finally:
        first.close()
