"""The `waldio` command: one entry point, one module per subcommand group.

Each module listed in SUBCOMMAND_MODULES exposes
    register(subparsers: argparse._SubParsersAction) -> None
which adds its subcommands with `set_defaults(func=...)`; func(args) returns
the process exit status. Every command's --help ends with an example
(tests/py/test_names.py runs each one through the parser).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from waldio import WaldioError


class ExampleFormatter(argparse.HelpFormatter):
    """Wraps prose paragraphs to the terminal, keeps indented lines (examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            "\n".join(indent + line for line in para.splitlines())
            if any(line.startswith(" ") for line in para.splitlines())
            else super(ExampleFormatter, self)._fill_text(para, width, indent)
            for para in text.split("\n\n"))


SUBCOMMAND_MODULES = ["waldio.bench.cli", "waldio.admin", "waldio.run", "waldio.env", "waldio.crash.cli", "waldio.trace.cli",
                      "waldio.device.cli"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="waldio",
        description="SQLite's WAL with direct I/O into a preallocated log: "
                    "benchmark, inspect and manage waldio databases.",
        epilog="example:\n"
               "  waldio run -- sqlite3 app.db 'PRAGMA journal_mode=WAL'   "
               "# a program, unchanged, on waldio\n\n"
               "waldio COMMAND --help shows each command's options and an example.",
        formatter_class=ExampleFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except WaldioError as e:
        print("waldio %s: error: %s" % (args.command, e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
