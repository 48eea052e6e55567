"""A small Flask app on SQLite, as a web developer writes one: the web-app benchmark of
``waldio bench --workload webapp`` (issue 27), and an example of waldio under gunicorn.

Python's own ``sqlite3`` module, nothing waldio-specific: waldio comes from the
environment (``eval "$(waldio env --group durable)"`` before starting gunicorn), or
not at all (stock SQLite).  Each worker process opens one connection, the first time
it needs it (never in the gunicorn master: a connection must not cross ``fork()``),
and keeps it; the interpreter closes it when the worker exits.

Endpoints (JSON replies):

``GET  /users/<id>``        read-only: the user by primary key, the user's 10 latest
                            posts through the index ``posts(user_id, created)``, and
                            the count of the user's posts, in one read transaction
``POST /posts``             one autocommit single-row INSERT (form ``user_id``,
                            ``body``); replies ``{"post_id": N}``
``POST /users/<id>/visit``  ``BEGIN IMMEDIATE``; add 1 to the user's visits; read it
                            back; ``COMMIT``; replies ``{"user_id": U, "visits": V}``
``GET  /health``            this worker's pid and its connection's settings read back
                            (``PRAGMA journal_mode``, ``synchronous``, ``waldio``)

A reply is sent only after ``COMMIT`` returned: a write the client saw acknowledged
must be in the database afterwards (the benchmark checks every acknowledged post id
and visit count).

Environment: ``WEBAPP_DB`` (the database, required), ``WEBAPP_SYNCHRONOUS`` (FULL or
NORMAL, default FULL), ``WEBAPP_BUSY_MS`` (busy timeout, default 5000).

Run it (after ``python app.py init app.db``)::

    eval "$(waldio env --group durable)"
    WEBAPP_DB=app.db gunicorn -c gunicorn.conf.py -w 8 -b 127.0.0.1:8000 app:app
    wrk -t2 -c32 -d10s -s mix.lua http://127.0.0.1:8000 -- 80 10 1000 acked.json
"""
from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from typing import Any, Dict, Optional

from flask import Flask, abort, request

POSTS_PER_USER = 10

app = Flask(__name__)
_conn: Optional[sqlite3.Connection] = None


def db() -> sqlite3.Connection:
    """This process's connection, opened on first use (autocommit; explicit BEGINs)."""
    global _conn
    if _conn is None:
        busy_ms = int(os.environ.get("WEBAPP_BUSY_MS", "5000"))
        conn = sqlite3.connect(os.environ["WEBAPP_DB"], timeout=busy_ms / 1000,
                               isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=" + os.environ.get("WEBAPP_SYNCHRONOUS", "FULL"))
        _conn = conn
    return _conn


def settings() -> Dict[str, Any]:
    """The connection's settings as SQLite reports them (waldio's status, if loaded)."""
    c = db()
    out: Dict[str, Any] = {"pid": os.getpid(), "sqlite": sqlite3.sqlite_version,
                           "journal_mode": c.execute("PRAGMA journal_mode").fetchone()[0],
                           "synchronous": c.execute("PRAGMA synchronous").fetchone()[0]}
    row = c.execute("PRAGMA waldio").fetchone()    # an unknown PRAGMA returns nothing
    out["waldio"] = json.loads(row[0]) if row else None
    return out


def waldio_stats() -> Optional[Dict[str, Any]]:
    """``PRAGMA waldio_stats`` of this process's connection (None without waldio, or
    before the connection was opened)."""
    if _conn is None:
        return None
    row = _conn.execute("PRAGMA waldio_stats").fetchone()
    return json.loads(row[0]) if row else None


@app.get("/users/<int:user_id>")
def user(user_id: int) -> Dict[str, Any]:
    c = db()
    c.execute("BEGIN")
    try:
        u = c.execute("SELECT id, name, visits FROM users WHERE id = ?", (user_id,)).fetchone()
        posts = c.execute("SELECT id, created, body FROM posts WHERE user_id = ? "
                          "ORDER BY created DESC LIMIT 10", (user_id,)).fetchall()
        count = c.execute("SELECT count(*) FROM posts WHERE user_id = ?",
                          (user_id,)).fetchone()[0]
    finally:
        c.execute("COMMIT")
    if u is None:
        abort(404)
    return {"user": {"id": u[0], "name": u[1], "visits": u[2]}, "post_count": count,
            "posts": [{"id": p[0], "created": p[1], "body": p[2]} for p in posts]}


@app.post("/posts")
def new_post() -> Dict[str, Any]:
    cur = db().execute("INSERT INTO posts(user_id, created, body) VALUES (?, ?, ?)",
                       (int(request.form["user_id"]), time.time_ns() // 1000,
                        request.form["body"]))
    return {"post_id": cur.lastrowid}


@app.post("/users/<int:user_id>/visit")
def visit(user_id: int) -> Dict[str, Any]:
    c = db()
    c.execute("BEGIN IMMEDIATE")
    try:
        c.execute("UPDATE users SET visits = visits + 1 WHERE id = ?", (user_id,))
        row = c.execute("SELECT visits FROM users WHERE id = ?", (user_id,)).fetchone()
        c.execute("COMMIT")
    except BaseException:
        c.execute("ROLLBACK")
        raise
    if row is None:
        abort(404)
    return {"user_id": user_id, "visits": row[0]}


@app.get("/health")
def health() -> Dict[str, Any]:
    return settings()


SCHEMA = (
    "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT NOT NULL, visits INTEGER NOT NULL)",
    "CREATE TABLE posts(id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, "
    "created INTEGER NOT NULL, body TEXT NOT NULL)",
    "CREATE INDEX posts_user ON posts(user_id, created)",
)


def init_db(conn: Any, users: int = 1000, body: str = "x" * 100) -> None:
    """The schema and ``users`` users with 10 posts each (any DB-API connection, in a
    transaction the caller commits)."""
    for sql in SCHEMA:
        conn.execute(sql)
    conn.executemany("INSERT INTO users(id, name, visits) VALUES (?, ?, 0)",
                     [(u, f"user{u}") for u in range(1, users + 1)])
    conn.executemany("INSERT INTO posts(user_id, created, body) VALUES (?, ?, ?)",
                     [(u, k, body) for u in range(1, users + 1) for k in range(POSTS_PER_USER)])


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "init":
        sys.exit("usage: python app.py init DATABASE")
    with sqlite3.connect(sys.argv[2]) as new:
        new.execute("PRAGMA journal_mode=WAL")
        init_db(new)
