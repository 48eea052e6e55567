"""python -m waldio.crash ROLE JSON: the child processes of ``waldio crash``.

Recording, the processes of a multi-process recording, killed writers,
corruption cases and fault cases each run in a child process (the recorder must be loaded before waldio; a kill must not
take the checker with it); this is their entry point. Users run
``waldio crash`` (:mod:`.cli`).
"""
from __future__ import annotations

import json
import sys
from typing import List

from .corruption import role_corrupt
from .faults import role_fault
from .kills import role_writer
from .proc_kills import role_proc_writer
from .procs import role_proc
from .recorder import role_record


def main(argv: List[str]) -> None:
    role, args = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    if role == "_record":
        role_record(args)
    elif role == "_proc":
        role_proc(args)
    elif role == "_writer":
        role_writer(args)
    elif role == "_proc_writer":
        role_proc_writer(args)
    elif role == "_corrupt":
        role_corrupt(args)
    elif role == "_fault":
        role_fault(args)
    else:
        raise SystemExit("unknown role %r" % role)


if __name__ == "__main__":
    main(sys.argv[1:])
