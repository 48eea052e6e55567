"""Where the full record of a ``waldio bench`` run goes (issue 20).

The terminal gets the headline and a compact table; the complete parameter
checklist (every setting read back from SQLite and the system, every table, what
each number means) and the JSON document go to two files, written after every run:

``<stem>.json``  the result document (schemas in ``python/waldio/schemas``);
``<stem>.txt``   the checklist as plain text, exactly what ``--verbose`` prints.

``--json FILE`` names the JSON file, and the text file is FILE with the suffix
``.txt``; otherwise both go to ``results/waldio-bench-<UTC start>`` under the
current directory.  A file that cannot be written is reported with the reason,
and then the checklist is printed in full, so it is never lost.
"""
from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from .printer import Printer

DEFAULT_DIR = "results"


@dataclass
class Record:
    json_path: str
    text_path: str
    problems: List[str]            # files that could not be written, and why

    @property
    def complete(self) -> bool:
        return not self.problems


def paths_for(json_arg: Optional[str], started_utc: str) -> Record:
    if json_arg:
        base, _ = os.path.splitext(json_arg)
        return Record(json_arg, base + ".txt", [])
    stamp = "".join(ch for ch in started_utc[:19] if ch.isdigit())
    stem = os.path.join(DEFAULT_DIR, f"waldio-bench-{stamp[:8]}-{stamp[8:]}")
    return Record(stem + ".json", stem + ".txt", [])


def checklist_text(doc: Dict[str, Any], write: Callable[[Printer, Dict[str, Any]], None]) -> str:
    buf = io.StringIO()
    write(Printer(plain=True, stream=buf), doc)
    return buf.getvalue()


def save(doc: Dict[str, Any], rec: Record, text: str) -> Record:
    """Write the JSON and the text file; the problems say which could not be written."""
    for path, body in ((rec.json_path, json.dumps(doc, indent=1) + "\n"), (rec.text_path, text)):
        try:
            d = os.path.dirname(path)
            if d:
                os.makedirs(d, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(body)
        except OSError as e:
            rec.problems.append(f"{path}: {e.strerror or e}")
    return rec


def footer(out: Printer, rec: Record, plots: Optional[List[str]]) -> None:
    """Where everything went, in a few lines."""
    if rec.complete:
        out.wrapped(f"full parameter checklist: {rec.text_path} (--verbose prints it)")
    else:
        out.wrapped("could not write " + "; ".join(rec.problems) + " (the checklist is above)")
    if plots:
        shown = [p for p in plots if p.endswith(".png")] or plots
        out.wrapped(f"JSON: {rec.json_path}; plots: {', '.join(shown)}")
    else:
        out.wrapped(f"JSON: {rec.json_path}; plots: add --plot DIR, or run waldio report "
                    f"{rec.json_path} --out DIR")
