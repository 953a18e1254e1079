"""Small helpers shared by the command modules (parsing flags, stdout, stderr)."""

from __future__ import annotations

import io
import os
import shutil
import sys
import textwrap
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO, cast

import typer
from rich.console import Console

from pptune import limits
from pptune.errors import BadInput
from pptune.options.kinds import parse_ints

if TYPE_CHECKING:
    from pptune.files import Written

__all__ = ["check_width", "out_console", "parse_ints", "say", "show", "show_lines", "wrote"]


def check_width(width: int) -> None:
    """--width of a text timeline: refused outside what a terminal line can hold."""
    found = limits.problem("--width", width, 20, limits.MAX_TIMELINE_WIDTH)
    if found:
        raise BadInput(found)


def say(line: str) -> None:
    """Talk goes to stderr; stdout is data. On a terminal a long line wraps under its own
    text (a hanging indent); piped or redirected, it stays one line for grep and logs."""
    text = f"pptune: {line}"
    if sys.stderr.isatty():
        width = shutil.get_terminal_size().columns
        if len(text) > width >= 40:
            text = "\n".join(textwrap.wrap(text, width=width, subsequent_indent=" " * 8,
                                            break_long_words=False, break_on_hyphens=False))
    typer.echo(text, err=True)


def wrote(written: Written, what: str = "wrote", extra: str = "") -> None:
    """The line for a file written: "wrote PATH", "(replaced the previous one)" when a
    file was there before (``pptune.files.Written``), then ``extra``."""
    said = "; ".join(part for part in (written.note(), extra) if part)
    say(f"{what} {written.path}" + (f" ({said})" if said else ""))


class _Trimmed(io.TextIOBase):
    """stdout without the blanks rich pads each table row and caption line to the
    table's width with: every complete line is written right-stripped."""

    def __init__(self, out: TextIO) -> None:
        self._out, self._tail = out, ""

    def write(self, text: str) -> int:
        *lines, self._tail = (self._tail + text).split("\n")
        for line in lines:
            self._out.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        if self._tail:
            self._out.write(self._tail.rstrip(" "))
            self._tail = ""
        self._out.flush()

    def isatty(self) -> bool:
        return self._out.isatty()


# the narrowest console pptune writes to: a COLUMNS of 0 (some CI runners export it)
# or a handful would leave no room for a word, so the text would vanish
MIN_WIDTH = 40


class _OutConsole(Console):
    """rich's console, but a closed stdout pipe is raised, not exit 1 (rich's
    ``on_broken_pipe``): cli/errors.py turns it into exit 141, as for every write."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def out_console() -> Console:
    """stdout console; colour off under NO_COLOR; 160 columns when not a terminal;
    COLUMNS as given, at least MIN_WIDTH."""
    width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else None
    if width is None and not sys.stdout.isatty():
        width = 160
    if width is not None:
        width = max(width, MIN_WIDTH)
    trimmed = cast(TextIO, _Trimmed(sys.stdout))
    return _OutConsole(file=trimmed, no_color="NO_COLOR" in os.environ, width=width,
                   soft_wrap=False)


def show(out: Console, renderable: object) -> None:
    """Print a table whole: stacked when it is wider than the console (``report.fit``)."""
    from pptune.report.fit import fit

    out.print(fit(renderable, out.width), highlight=False)  # type: ignore[arg-type]


def show_lines(out: Console, lines: Iterable[str]) -> None:
    """Print lines of text wrapped at the console's width between words, a number never
    apart from its unit (``report.wrap``; rich's own wrapping would part them)."""
    from pptune.report.wrap import wrap_words

    for line in lines:
        for piece in wrap_words(line, out.width):
            out.print(piece, highlight=False, markup=False, no_wrap=True, overflow="ignore")
