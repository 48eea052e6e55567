"""The fenced code blocks of README.md and docs/README.md, for the tests that run them.

    blocks("Use it from Python")  ->  [("python", "...")]
    fenced(DOCS_README)           ->  [Block(section="", lang="sh", marks=("runnable",), ...)]
    shell(tmp_path)               ->  an environment whose `waldio` is this checkout's

A section runs from its ``## `` heading to the next heading of the same or a
higher level. A block's info string is its language and then its marks:
```` ```sh runnable ```` is a shell block quick and safe enough for
tests/py/test_readme_commands.py to run as written.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

from waldio.run import ENV_OPTIONS, VERBOSE_ENV

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS_README = ROOT / "docs" / "README.md"
FENCE = re.compile(r"^```(\w*)[ \t]*([^\n]*)\n(.*?)^```", re.M | re.S)


@dataclass
class Block:
    section: str              # the ## heading it is under ("" before the first)
    lang: str
    marks: Tuple[str, ...]
    code: str


def section(title: str, path: Path = README) -> str:
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^## " + re.escape(title) + r"\s*$", text, re.M)
    if m is None:
        raise LookupError(f"{path.name} has no section '## {title}'")
    end = re.search(r"^#{1,2} ", text[m.end():], re.M)
    return text[m.end():m.end() + end.start()] if end else text[m.end():]


def blocks(title: str, path: Path = README) -> List[Tuple[str, str]]:
    """(language, code) of every fenced block in the section, in order."""
    return [(lang, code) for lang, _, code in FENCE.findall(section(title, path))]


def fenced(path: Path) -> List[Block]:
    """Every fenced block of the file, with the section it is in."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        heads = re.findall(r"^## (.*?)\s*$", text[:m.start()], re.M)
        out.append(Block(heads[-1] if heads else "", m.group(1), tuple(m.group(2).split()),
                         m.group(3)))
    return out


def shell(bindir: Path) -> Dict[str, str]:
    """The environment of a user's shell on a built checkout: `waldio` on PATH
    runs this checkout's package (a script in bindir), and nothing of waldio
    is preloaded or configured yet."""
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / "waldio").write_text(f'#!/bin/sh\nexec {sys.executable} -m waldio "$@"\n')
    (bindir / "waldio").chmod(0o755)
    unset = {"LD_PRELOAD", VERBOSE_ENV, "WALDIO_PRELOAD_VERBOSE", *ENV_OPTIONS.values()}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python")] + (
        [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return env
