"""Where ``waldio bench`` output goes: rich tables on a terminal, plain text elsewhere,
and the progress of a run.

:class:`Printer` prints lines and tables (rich on a terminal, aligned plain text
otherwise, e.g. into a file or a pipe); :func:`progress_reporter` is the progress
callback of a run (a rich bar on a terminal, else one line per finished
repetition).  Every report module prints through these; nothing here knows what a
result document holds.
"""
from __future__ import annotations

import contextlib
import sys
import textwrap
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TextIO

WIDTH = 118          # the default output fits a 120-column terminal (issue 20)


class Printer:
    """rich tables on a terminal, plain aligned text otherwise.

    On a terminal narrower than the output's 120 columns, paragraphs wrap to the
    terminal, and a table too wide for it leaves out the columns its caller marked
    optional, or else is printed whole as plain aligned text (the terminal folds
    its long lines): rich would cut every cell to fit, and a figure cut to ``3…``
    is no figure."""

    def __init__(self, plain: bool, stream: Optional[TextIO] = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.console = None
        self.width = WIDTH
        if not plain:
            try:
                from rich.console import Console
                self.console = Console(file=stream, highlight=False, soft_wrap=True)
                self.width = min(WIDTH, self.console.width - 1)
            except ImportError:
                self.console = None

    def line(self, text: str = "") -> None:
        if self.console is not None:
            self.console.print(text, markup=False)
        else:
            print(text, file=self.stream)
        self.stream.flush()

    def _wrap(self, text: str, indent: str = "  ") -> List[str]:
        return textwrap.wrap(text, width=self.width, subsequent_indent=indent,
                             break_on_hyphens=False)

    def wrapped(self, text: str, indent: str = "  ") -> None:
        """A paragraph wrapped to the output's width, continuation lines indented."""
        for line in self._wrap(text, indent) or [""]:
            self.line(line)

    def table(self, title: str, columns: List[str], rows: List[List[str]],
              align: Optional[List[str]] = None, optional: Sequence[str] = ()) -> None:
        """``optional``: columns that a terminal too narrow for the whole table may
        leave out, in that order; a line after the table names those left out."""
        align = align or ["l"] + ["r"] * (len(columns) - 1)
        if self.console is not None and self._fitted_table(title, columns, rows, align,
                                                           optional):
            return
        widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]

        def fmt(cells: List[str]) -> str:
            return "  ".join(c.rjust(w) if a == "r" else c.ljust(w)
                             for c, w, a in zip(cells, widths, align)).rstrip()
        for line in self._wrap(title):
            print(line, file=self.stream)
        print(fmt(columns), file=self.stream)
        print("  ".join("-" * w for w in widths), file=self.stream)
        for r in rows:
            print(fmt(r), file=self.stream)
        print(file=self.stream)
        self.stream.flush()

    def _fitted_table(self, title: str, columns: List[str], rows: List[List[str]],
                      align: List[str], optional: Sequence[str]) -> bool:
        """The table through rich, without as few optional columns as make it fit."""
        left_out: List[str] = []
        for name in [""] + [c for c in optional if c in columns]:
            if name:
                keep = [i for i, c in enumerate(columns) if c != name]
                columns, align = [columns[i] for i in keep], [align[i] for i in keep]
                rows = [[r[i] for i in keep] for r in rows]
                left_out.append(name)
            if self._rich_table(title, columns, rows, align):
                if left_out:
                    assert self.console is not None
                    self.wrapped(f"Left out to fit {self.console.width} columns: "
                                 f"{', '.join(left_out)} (--verbose and the checklist "
                                 f"have every column).")
                    self.line("")
                return True
        return False

    def _rich_table(self, title: str, columns: List[str], rows: List[List[str]],
                    align: List[str]) -> bool:
        """Print the table with rich if it fits the terminal whole; False if not."""
        from rich import box
        from rich.measure import Measurement
        from rich.table import Table
        assert self.console is not None
        t = Table(title="\n".join(self._wrap(title)), box=box.SIMPLE_HEAD,
                  title_justify="left", show_edge=False, pad_edge=False, collapse_padding=True)
        for c, a in zip(columns, align):
            t.add_column(c, justify="right" if a == "r" else "left", no_wrap=True)
        for r in rows:
            t.add_row(*r)
        unbounded = self.console.options.update_width(1 << 20)
        if Measurement.get(self.console, unbounded, t).maximum > self.console.width:
            return False
        self.console.print(t)
        self.console.print()
        return True


@contextlib.contextmanager
def progress_reporter(printer: Printer, enabled: bool, total: int
                      ) -> Iterator[Callable[[Dict[str, Any]], None]]:
    """A progress callback for Bench: a rich bar on a terminal, else one line per run.

    The bar is refreshed only between repetitions (auto_refresh off), so no
    drawing thread competes with a timed region.
    """
    if not enabled:
        yield lambda ev: None
        return
    if printer.console is not None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )
        prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=printer.console, auto_refresh=False,
                        transient=True)
        task = prog.add_task("starting", total=total)

        def cb(ev: Dict[str, Any]) -> None:
            if ev["event"] not in ("start", "done"):
                return
            what = "warm-up" if ev["warmup"] else f"round {ev['round']}"
            if ev["event"] == "start":
                prog.update(task, description=f"{ev['mode']:<22} {what}")
            else:
                prog.update(task, advance=1)
            prog.refresh()
        with prog:
            yield cb
        return

    def line(ev: Dict[str, Any]) -> None:
        if ev["event"] != "done":
            return
        what = "warm-up" if ev["warmup"] else f"round {ev['round']}"
        res = ev.get("result") or (f"{ev['ops_per_s']:,.0f} ops/s" if ev.get("ops_per_s")
                                   else "no result")
        state = "ok" if ev["ok"] else f"FAILED {ev.get('error') or 'checks'}"
        print(f"[{ev['step']}/{ev['total']}] {ev['mode']} {what}: {res} ({state})",
              file=printer.stream, flush=True)
    yield line
