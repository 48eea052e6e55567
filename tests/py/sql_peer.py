"""A second process holding one waldio connection, driven line by line.

    python3 sql_peer.py DRIVER DB [JSON-URI-OPTIONS]

(``Peer`` below starts and drives one from a test.)

Each line on stdin is one SQL statement; each answer on stdout is one JSON
line: {"rows": [...]} or {"error": "...", "code": N, "waldio": "..."}. The
connection stays open until stdin closes, so a test can hold a database
open in another process while it acts in its own.
"""
from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conftest  # noqa: E402  (puts the waldio package on sys.path)
from waldio import drivers  # noqa: E402


class Peer:
    """A connection held open in another process (sql_peer.py)."""

    def __init__(self, driver: str, db: Path, **uri: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, driver, str(db), json.dumps(uri)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert json.loads(self._line())["ready"]

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "peer process died"
        return line

    def sql(self, statement: str) -> Dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(statement + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


def main() -> None:
    atexit.register(shutil.rmtree, conftest._EXT_COPIES, True)
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
