"""What an 80-column test asserts of a command's rendered output: no line wider
than the console, and no number parted from its unit (``2.057`` ending one line,
``s`` starting the next, or a cell folded between them)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import pairwise

from pptune.report.fmt import UNITS

_EDGE = "\\s│┃|"  # table borders and padding around a cell
_UNIT_FIRST = re.compile(
    rf"[{_EDGE}]*(?:{'|'.join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))})"
    r"(?![A-Za-z])")
_NUMBER_LAST = re.compile(rf"\d[{_EDGE}]*$")


def parted(text: str) -> list[tuple[str, str]]:
    """Each pair of lines where the first ends in a number and the next starts with a
    unit."""
    lines = text.splitlines()
    return [(a, b) for a, b in pairwise(lines)
            if _NUMBER_LAST.search(a) and _UNIT_FIRST.match(b)]


def check_columns(text: str, width: int, whole: Iterable[str] = ()) -> None:
    """``text`` fits ``width``, parts no number from its unit, and has each of ``whole``
    (a formatted value, a title's phrase) within one line."""
    lines = text.splitlines()
    assert max(map(len, lines)) <= width, text
    assert not parted(text), f"{parted(text)}\n{text}"
    for value in whole:
        assert any(value in line for line in lines), f"{value!r} is not on one line:\n{text}"
