"""python -m waldio.params [DB_FILE]: print every parameter section for a database."""
from __future__ import annotations

import os
import sys

from waldio.params import all_params, format_params
from waldio.params.system import apsw_module

_db = sys.argv[1] if len(sys.argv) > 1 else ":memory:"
_conn = apsw_module().Connection(_db)
_p = all_params(_conn, _db if _db != ":memory:" else os.getcwd())
print(format_params(_p))
