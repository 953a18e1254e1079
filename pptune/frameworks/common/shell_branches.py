"""``if`` / ``elif`` / ``else`` / ``fi`` in a launch script read without running it.

A condition pptune can decide from the script's own variables picks its branch as
bash would: ``[ A = B ]``, ``==``, ``!=``, the integer tests ``-eq -ne -lt -le -gt
-ge``, ``-n`` / ``-z`` and a bare string, in ``[ ]``, ``[[ ]]`` or ``test``, with
``!``. Anything else (an environment variable the script does not set, ``-f``, a
command's status, ``&&`` inside the test) is unknown: every branch of that ``if``
is read in order, so the last assignment wins, and a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from pptune.frameworks.common.shell_state import unresolved

_INTEGER = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__,
            "-gt": int.__gt__, "-ge": int.__ge__}
_BRACKETS = {"[": "]", "[[": "]]"}


def condition(ws: list[str]) -> bool | None:
    """The truth of an ``if`` condition's words (expanded, quotes removed); None when it
    cannot be known without running the script."""
    negate = False
    while ws and ws[0] == "!":
        negate, ws = not negate, ws[1:]
    if not ws:
        return None
    if ws[0] in _BRACKETS and ws[-1] == _BRACKETS[ws[0]]:
        inner = ws[1:-1]
    elif ws[0] == "test":
        inner = ws[1:]
    else:
        return None  # a command's exit status
    found = _test(inner)
    return None if found is None else found != negate


def _unknown(word: str) -> bool:
    return unresolved(word)  # an unresolved expansion, kept as written


def _test(inner: list[str]) -> bool | None:
    if len(inner) == 1:
        return None if _unknown(inner[0]) else inner[0] != ""
    if len(inner) == 2 and inner[0] in ("-n", "-z"):
        if _unknown(inner[1]):
            return None
        return (inner[1] != "") == (inner[0] == "-n")
    if len(inner) != 3 or _unknown(inner[0]) or _unknown(inner[2]):
        return None
    a, op, b = inner
    if op in ("=", "=="):
        return a == b
    if op == "!=":
        return a != b
    if op in _INTEGER:
        try:
            return bool(_INTEGER[op](int(a), int(b)))
        except ValueError:
            return None
    return None


@dataclass
class _Frame:
    outer: bool  # the enclosing branches run
    active: bool  # this branch runs
    taken: bool  # a branch of this if is known to have run


class Branches:
    """The open ``if`` statements, innermost last."""

    def __init__(self) -> None:
        self._frames: list[_Frame] = []

    def active(self) -> bool:
        return all(f.active for f in self._frames)

    def reaches(self, elif_: bool) -> bool:
        """Whether an ``if`` (or the innermost if's ``elif``) here is evaluated at all."""
        if elif_ and self._frames:
            return self._frames[-1].outer and not self._frames[-1].taken
        return self.active()

    def open(self, cond: bool | None) -> None:
        outer = self.active()
        self._frames.append(_Frame(outer, outer and cond is not False, outer and cond is True))

    def elif_(self, cond: bool | None) -> None:
        if not self._frames:
            return
        f = self._frames[-1]
        f.active = f.outer and not f.taken and cond is not False
        f.taken = f.taken or (f.outer and cond is True)

    def else_(self) -> None:
        if self._frames:
            f = self._frames[-1]
            f.active = f.outer and not f.taken

    def close(self) -> None:
        if self._frames:
            self._frames.pop()
