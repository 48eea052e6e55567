"""The code blocks of a README section, for the tests that run them.

    blocks("Use it from Python")  ->  [("sh", "..."), ("python", "...")]

A section runs from its ``## `` heading to the next heading of the same or a
higher level.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Tuple

README = Path(__file__).resolve().parents[2] / "README.md"


def section(title: str, path: Path = README) -> str:
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^## " + re.escape(title) + r"\s*$", text, re.M)
    if m is None:
        raise LookupError(f"README has no section '## {title}'")
    end = re.search(r"^#{1,2} ", text[m.end():], re.M)
    return text[m.end():m.end() + end.start()] if end else text[m.end():]


def blocks(title: str, path: Path = README) -> List[Tuple[str, str]]:
    """(language, code) of every fenced block in the section, in order."""
    return [(lang, code) for lang, code in
            re.findall(r"^```(\w*)\n(.*?)^```", section(title, path), re.M | re.S)]
