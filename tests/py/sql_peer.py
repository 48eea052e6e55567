"""A second process holding one waldio connection, driven line by line.

    python3 sql_peer.py DRIVER DB [JSON-URI-OPTIONS]

Each line on stdin is one SQL statement; each answer on stdout is one JSON
line: {"rows": [...]} or {"error": "...", "code": N, "waldio": "..."}. The
connection stays open until stdin closes, so a test can hold a database
open in another process while it acts in its own.
"""
from __future__ import annotations

import atexit
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conftest  # noqa: E402  (puts the waldio package on sys.path)
from waldio import drivers  # noqa: E402

atexit.register(shutil.rmtree, conftest._EXT_COPIES, True)


def main() -> None:
    driver_name, db = sys.argv[1:3]
    uri = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    sq = conftest.Sqlite(conftest.load_waldio(drivers.driver_by_name(driver_name)),
                         driver_name)
    conn = sq.waldio(db, **uri)
    conn.execute("PRAGMA busy_timeout=30000")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        sql = line.strip()
        if not sql:
            continue
        try:
            answer = {"rows": [list(r) for r in conn.execute(sql)]}
        except drivers.SQLiteError as e:
            answer = {"error": str(e), "code": e.code,
                      "waldio": conn.execute("SELECT waldio_last_error()")[0][0]}
        print(json.dumps(answer), flush=True)
    conn.close()


if __name__ == "__main__":
    main()
