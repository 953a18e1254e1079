"""Lines of text at a console width, a number never parted from its unit.

rich wraps a printed line, and a table's title within the table's width, at any
space, so ``measured 2.057 s per step`` can end a line with ``2.057`` and start the
next with ``s``, and a title breaks mid-phrase. ``wrap_words`` wraps at spaces too,
but a number and the unit after it (``fmt.UNITS``) stay on one line;
``wrap_phrases``, for titles, breaks between phrases (after ``,`` ``;`` ``:``,
before ``(``, at a run of spaces) and inside a phrase only when the phrase alone
is wider than the line. Both return strings; the CLI prints them.
"""

from __future__ import annotations

import re

from pptune.report.fmt import UNITS

# where a title may break: after , ; or :, before (, and at two spaces or more
_PHRASE_BREAK = re.compile(r"(?<=[,;:]) +| {2,}| +(?=\()")
_UNIT_HEAD = re.compile(r"[A-Za-z%/]+")


def _with_unit(word: str, following: str) -> bool:
    """Whether ``word`` is a number and ``following`` its unit (``2.057`` ``s``,
    ``318.4`` ``ms..355.9``, ``12`` ``GiB),``)."""
    if not word or not word[-1].isdigit():
        return False
    head = _UNIT_HEAD.match(following)
    return head is not None and head.group() in UNITS


def tokens(text: str) -> list[str]:
    """``text``'s words, each number joined to its unit by the space between them."""
    out: list[str] = []
    for word in text.split(" "):
        if out and _with_unit(out[-1].rpartition(" ")[2], word):
            out[-1] += " " + word
        else:
            out.append(word)
    return out


def wrap_words(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken at spaces (the space
    dropped, as rich drops it) and never between a number and its unit; a word wider
    than the line is cut at the width, as rich folds it. Leading spaces stay on the
    first line."""
    width = max(width, 1)
    body = text.lstrip(" ")
    lines: list[str] = []
    cur = text[: len(text) - len(body)]
    for tok in tokens(body):
        if cur.strip() and len(cur) + 1 + len(tok) > width:
            lines.append(cur)
            cur = ""
        elif cur.strip():
            cur += " "
        cur += tok
        while len(cur) > width and " " not in cur.strip():
            lines.append(cur[:width])
            cur = cur[width:]
    return [*lines, cur]


def _pack(row: str, width: int, outer: bool) -> list[str]:
    """``row`` in lines of phrases; ``outer``: break only outside parentheses, so a
    parenthesised remark stays whole where it fits on a line of its own."""
    depth, depths = 0, []
    for ch in row:
        depth += (ch == "(") - (ch == ")")
        depths.append(depth)
    cuts = [m for m in _PHRASE_BREAK.finditer(row) if not outer or depths[m.start()] <= 0]
    lines = [row[: cuts[0].start()] if cuts else row]
    for n, cut in enumerate(cuts):
        piece = row[cut.end() : cuts[n + 1].start() if n + 1 < len(cuts) else len(row)]
        if len(lines[-1]) + len(cut.group()) + len(piece) <= width:
            lines[-1] += cut.group() + piece
        else:
            lines.append(piece)
    return lines


def wrap_phrases(text: str, width: int) -> list[str]:
    """``text`` (a title; its own line breaks kept) in lines of at most ``width``,
    broken between phrases, outside parentheses first; a phrase wider than the line
    by ``wrap_words``."""
    lines: list[str] = []
    for row in text.split("\n"):
        for line in _pack(row, width, outer=True):
            inner = _pack(line, width, outer=False) if len(line) > width else [line]
            lines += [x for piece in inner for x in (
                wrap_words(piece, width) if len(piece) > width else [piece])]
    return lines


def hanging(text: str, width: int, extra: int = 2) -> list[str]:
    """``text``'s lines at ``width`` (``wrap_words``), each one's continuation lines
    indented ``extra`` columns past its own indent, so a wrapped item reads as one."""
    out: list[str] = []
    for line in text.split("\n"):
        first, *rest = wrap_words(line, width)
        out.append(first)
        if rest:
            indent = " " * (len(line) - len(line.lstrip(" ")) + extra)
            out += [indent + piece for piece in
                    wrap_words(" ".join(rest), max(width - len(indent), 20))]
    return out

