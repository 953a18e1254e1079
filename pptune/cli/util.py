"""Small helpers shared by the command modules (parsing flags, stdout, stderr)."""

from __future__ import annotations

import os
import sys

import typer
from rich.console import Console

from pptune.errors import BadInput
from pptune.limits import MAX_LAYERS

# a --split may list one value per stage: at most one per layer
MAX_LIST_ITEMS = MAX_LAYERS + 2


def parse_ints(text: str | None, flag: str) -> list[int] | None:
    """``"1,2,4"`` -> [1, 2, 4]; BadInput naming the flag for anything else
    (an empty item such as ``1,,2`` included)."""
    if text is None:
        return None
    items = text.replace(" ", "").split(",")
    if len(items) > MAX_LIST_ITEMS:
        raise BadInput(f"{flag} lists {len(items):,} values; pptune takes up to {MAX_LIST_ITEMS:,}")
    if any(not x.removeprefix("-").isdigit() for x in items):
        raise BadInput(f"{flag} takes comma-separated integers, e.g. 1,2,4 (got {text!r})")
    values = [int(x) for x in items]
    if any(x < 1 for x in values):
        raise BadInput(f"{flag} needs positive integers (got {text!r})")
    return values


def say(line: str) -> None:
    """Talk goes to stderr; stdout is data."""
    typer.echo(f"pptune: {line}", err=True)


def out_console() -> Console:
    """stdout console; colour off under NO_COLOR; 160 columns when not a terminal."""
    width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else None
    if width is None and not sys.stdout.isatty():
        width = 160
    return Console(no_color="NO_COLOR" in os.environ, width=width, soft_wrap=False)


def show(out: Console, renderable: object) -> None:
    """Print a table whole: stacked when it is wider than the console (``report.fit``)."""
    from pptune.report.fit import fit

    out.print(fit(renderable, out.width), highlight=False)  # type: ignore[arg-type]
