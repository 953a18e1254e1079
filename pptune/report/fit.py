"""Any rich table at a console width without cutting a cell.

rich shrinks the columns of a table wider than the console and cuts or
folds their text (``12.3 ms`` becomes ``12.…``). ``fit`` keeps a table that
fits as it is and otherwise prints it stacked: one block per row, its
``header value`` items wrapped between items, never inside a number. A title
is broken between phrases to the table's width (rich would break it at any
space: report.wrap).
"""

from __future__ import annotations

import copy
import io

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from pptune.report.wrap import tokens, wrap_phrases


def natural_width(table: Table) -> int:
    """Columns the table takes when nothing constrains it (padding included)."""
    console = Console(width=100_000, color_system=None, file=io.StringIO(), no_color=True)
    return Measurement.get(console, console.options, table).maximum


def _plain(cell: object) -> str:
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return " ".join(text.split())


def _min_width(table: Table) -> int:
    """Width with every text column (``overflow="fold"``) at its longest word and every
    other column whole: below it some number would be cut."""
    shadow = Table(box=table.box, pad_edge=table.pad_edge, show_edge=table.show_edge,
                   padding=table.padding)
    cols = []
    for c in table.columns:
        shadow.add_column(c.header, no_wrap=True)
        cells = [_plain(cell) for cell in c.cells]
        if c.overflow == "fold":
            cells = [max(cell.split(" ") or [""], key=len) for cell in cells]
        cols.append(cells)
    for row in zip(*cols, strict=True):
        shadow.add_row(*row)
    return natural_width(shadow)


def fit(renderable: RenderableType, width: int | None) -> RenderableType:
    """``renderable`` unchanged when it fits; a table whose text columns (``overflow=
    "fold"``) can wrap to fit keeps its numbers whole; else the table is stacked."""
    if width is None or not isinstance(renderable, Table):
        return renderable
    natural = natural_width(renderable)
    if natural <= width:
        return _titled(renderable, natural)
    table = renderable
    if _min_width(table) <= width:
        for c in table.columns:  # rich then narrows only the text columns
            c.no_wrap = c.overflow != "fold"
        return _titled(table, width)
    headers = [_plain(c.header) for c in table.columns]
    columns = [[_plain(cell) for cell in c.cells] for c in table.columns]
    lines = _title_lines(table.title, width)
    for row in zip(*columns, strict=True):
        items = [f"{h} {v}" if h else v for h, v in zip(headers[1:], row[1:], strict=True)
                 if v]
        # a row that continues the one above (its first cell empty) is indented under it
        head = (" " if not row[0] else f"{headers[0]} {row[0]}:".strip() if headers[0]
                else f"{row[0]}:")
        lines += wrap_items(head, items, width)
    if table.caption:
        lines += ["", *wrap_items("", [_plain(table.caption)], width)]
    return Group(*(Text(line, no_wrap=True, overflow="ignore") for line in lines))


def _title_lines(title: object, width: int) -> list[str]:
    if not title:
        return []
    if isinstance(title, str):
        return wrap_phrases(title, width)
    return [_plain(title)]


def _titled(table: Table, width: int) -> Table:
    """``table`` with its (plain) title broken between phrases to ``width``, the
    width rich gives the title: a copy, the caller's table unchanged."""
    if not isinstance(table.title, str) or all(len(x) <= width for x in table.title.split("\n")):
        return table
    titled = copy.copy(table)
    titled.title = "\n".join(_title_lines(table.title, width))
    return titled


def wrap_items(head: str, items: list[str], width: int, sep: str = ", ") -> list[str]:
    """``head`` then ``items`` joined by ``sep``, broken between items; an item wider
    than a line alone breaks at its spaces (and at commas inside a longer word)."""
    lines: list[str] = []
    cur = head
    for n, item in enumerate(items):
        piece = item + (sep.strip() if n < len(items) - 1 else "")
        if cur and len(cur) + 1 + len(piece) <= width:
            cur += " " + piece
            continue
        if cur:
            lines.append(cur)
        indent = "  " if lines else ""
        words = split_long(piece, width - len(indent))
        lines += [indent + w for w in words[:-1]]
        cur = indent + words[-1]
    return [*lines, cur] if cur else lines


def wrap_commas(text: str, width: int) -> str:
    """Break ``text`` after commas into lines of at most ``width`` (a longer item stays whole)."""
    lines: list[str] = []
    for item in text.split(","):
        if lines and len(lines[-1]) + 1 + len(item) + 1 <= width:  # room for its comma too
            lines[-1] += "," + item
        else:
            if lines:
                lines[-1] += ","
            lines.append(item)
    return "\n".join(lines)


def split_long(item: str, width: int) -> list[str]:
    if len(item) <= width:
        return [item]
    out = [""]
    words = [w for word in tokens(item) for w in wrap_commas(word, width).split("\n")]
    for word in words:
        if out[-1] and len(out[-1]) + 1 + len(word) > width:
            out.append(word)
        else:
            out[-1] = f"{out[-1]} {word}" if out[-1] else word
    return out
