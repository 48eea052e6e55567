"""lsmvbt.so loaded into apsw's SQLite (3.54.x): waldio bench's statements,
with bound parameters, on an lsmvbt table and an ordinary table side by
side; transactions through apsw; reconnecting; the stats function.

Usage: python3 test_apsw.py path/to/lsmvbt.so   (exit 77: apsw not installed)
"""
import json
import os
import random
import sys
import tempfile

try:
    import apsw
except ImportError:
    print("apsw is not installed: skipped")
    sys.exit(77)

SCHEMA = "id INTEGER PRIMARY KEY, Value TEXT not null, creation_date long"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED:", what, file=sys.stderr)


def connect(path, ext):
    conn = apsw.Connection(path)
    conn.enable_load_extension(True)
    conn.load_extension(ext)
    return conn


def rows(conn, table):
    return list(conn.execute(f"SELECT id, Value, creation_date FROM {table} ORDER BY id"))


def run_ops(conn, table, seed, n):
    rng = random.Random(seed)
    for i in range(n):
        op = rng.randrange(6)
        key = rng.randrange(1, 200)
        value = "v%d-" % i + "x" * rng.randrange(0, 100)
        try:
            if op == 0:
                conn.execute(f"INSERT INTO {table}(Value) VALUES(?)", (value,))
            elif op == 1:
                conn.execute(f"INSERT INTO {table}(id, Value) VALUES(?, ?)", (key, value))
            elif op == 2:
                conn.execute(f"UPDATE {table} SET Value = ? WHERE id = ?", (value, key))
            elif op == 3:
                conn.execute(f"DELETE FROM {table} WHERE id = ?", (key,))
            elif op == 4:
                list(conn.execute(f"SELECT id, Value FROM {table} WHERE id = ?", (key,)))
            else:
                conn.execute(f"INSERT OR REPLACE INTO {table}(id, Value, creation_date) VALUES(?, ?, ?)",
                             (key, value, i))
        except apsw.ConstraintError:
            pass


def main():
    ext = os.path.abspath(sys.argv[1])
    print("apsw", apsw.apsw_version(), "SQLite", apsw.sqlite_lib_version())
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.db")
        conn = connect(path, ext)
        conn.execute(f"CREATE VIRTUAL TABLE tblMyList USING lsmvbt({SCHEMA})")
        conn.execute(f"CREATE TABLE ref({SCHEMA})")
        check(os.path.exists(path + "-tblMyList.lsmvbt"), "the file next to the database")
        for rnd in range(12):
            explicit = rnd % 3 != 0
            for table in ("tblMyList", "ref"):
                if explicit:
                    conn.execute("BEGIN")
                run_ops(conn, table, rnd, 40)
                if explicit:
                    conn.execute("ROLLBACK" if rnd % 5 == 4 else "COMMIT")
            check(rows(conn, "tblMyList") == rows(conn, "ref"), f"round {rnd}: same rows")
        # executemany inside apsw's transaction context manager.
        with conn:
            conn.executemany("INSERT INTO tblMyList(Value) VALUES(?)", [("m%d" % i,) for i in range(300)])
            conn.executemany("INSERT INTO ref(Value) VALUES(?)", [("m%d" % i,) for i in range(300)])
        check(rows(conn, "tblMyList") == rows(conn, "ref"), "executemany")
        try:
            with conn:
                conn.execute("INSERT INTO tblMyList(Value) VALUES('rolled back')")
                raise KeyError("abort the transaction")
        except KeyError:
            pass
        check(rows(conn, "tblMyList") == rows(conn, "ref"), "rolled back by the context manager")
        check(list(conn.execute("SELECT count(*), coalesce(sum(id), 0) FROM tblMyList"))
              == list(conn.execute("SELECT count(*), coalesce(sum(id), 0) FROM ref")), "count and sum")
        plan = " ".join(str(r) for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT id, Value FROM tblMyList WHERE id = ?", (5,)))
        check("VIRTUAL TABLE INDEX 1:" in plan, "lookup by key: " + plan)
        stats = json.loads(conn.execute("SELECT lsmvbt_stats('tblMyList')").fetchall()[0][0])
        check(stats["commits"] > 0 and stats["commit_pages"][0] > 0, "stats: " + str(stats))
        check(conn.execute("SELECT lsmvbt_check('tblMyList')").fetchall()[0][0] == "ok", "check")
        before = rows(conn, "ref")
        conn.close()
        conn = connect(path, ext)
        check(rows(conn, "tblMyList") == before, "after reconnecting")
        conn.execute("DROP TABLE tblMyList")
        check(not os.path.exists(path + "-tblMyList.lsmvbt"), "DROP deletes the file")
        conn.close()
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
