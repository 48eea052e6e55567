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


def footer(out: Printer, rec: Record, verbose: bool, plots: Optional[List[str]],
           plot_hint: str) -> None:
    """Where everything went, in three lines at most."""
    if rec.complete:
        out.line(f"full parameter checklist: {rec.text_path} (text; --verbose prints it here) "
                 f"and {rec.json_path} (JSON)")
    else:
        out.line("could not write " + "; ".join(rec.problems) +
                 ("" if verbose else ": the checklist follows"))
    if plots:
        out.line(f"plots: {', '.join(p for p in plots if p.endswith('.png')) or plots[0]}")
    else:
        out.line(plot_hint)
