"""The state of a bash script read by ``shell.interpret``, and its expansions.

``Script`` holds the variables and arrays set so far; ``Expander`` replaces
``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${ARR[@]}`` and integer
``$(( ... ))`` in one statement, decodes ANSI-C ``$'...'`` (shell_ansi.py) and reads
``$"..."`` as ``"..."``, keeping what it cannot know (environment
variables, positional parameters, ``$(command)`` and ```command```) as written,
beginning with ``$`` or a backtick (``unresolved``). Bounds: see ``shell``'s docstring; past them ``ShellLimit`` is raised.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field

from pptune.frameworks.common.shell_ansi import ansi_c, ansi_c_end

MAX_VALUE_CHARS = 100_000
MAX_ARRAY_ITEMS = 100_000
MAX_STATEMENT_CHARS = 1_000_000
MAX_ARITH_CHARS = 200
MAX_ARITH_VALUE = 2**63
MAX_NESTING = 16

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ShellLimit(Exception):
    """The script expands past the bounds above; the message says where."""


@dataclass
class Command:
    line: int  # first line of the statement, 1-based
    words: list[str]


@dataclass
class Script:
    commands: list[Command] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    array_chars: dict[str, int] = field(default_factory=dict)  # each array's characters
    defaults_used: dict[str, str] = field(default_factory=dict)


_EXPAND_RUNS = {"": re.compile(r"[^\\'\"$`]+"), "'": re.compile(r"[^']+"),
                '"': re.compile(r'[^\\"$`]+')}


def unresolved(word: str) -> bool:
    """A word standing for what only running the script would tell (``$X``, ``$(...)``,
    a backtick substitution), kept as written."""
    return word.startswith(("$", "`"))


def holds_unresolved(value: str) -> bool:
    return "$" in value or "`" in value


def words(text: str) -> tuple[list[str], bool]:
    """Split like bash (quotes removed); (words, True) when quotes were unbalanced."""
    try:
        return shlex.split(text, comments=False, posix=True), False
    except ValueError:
        return text.split(), True


def set_scalar(script: Script, name: str, value: str) -> None:
    if len(value) > MAX_VALUE_CHARS:
        raise ShellLimit(f"shell variable {name} grows past {MAX_VALUE_CHARS} characters")
    script.arrays.pop(name, None)
    script.scalars[name] = value


def set_array(script: Script, name: str, items: list[str], append: bool = False) -> None:
    """``name=(items)``, or ``name+=(items)`` with ``append``: the array extended in place
    and its length and characters counted as they grow (a script of 40,000 appends had
    copied and summed the whole array each time: minutes)."""
    held = script.arrays.get(name) if append else None
    count = len(items) + (len(held) if held is not None else 0)
    chars = sum(len(x) for x in items) + (script.array_chars.get(name, 0) if held is not None else 0)
    if count > MAX_ARRAY_ITEMS or chars > MAX_STATEMENT_CHARS:
        raise ShellLimit(f"shell array {name} grows past {MAX_ARRAY_ITEMS} items")
    script.scalars.pop(name, None)
    if held is not None:
        held.extend(items)
    else:
        script.arrays[name] = list(items)
    script.array_chars[name] = chars


# --- expansion --------------------------------------------------------------


def _escape(value: str, in_double: bool) -> str:
    """Make ``value`` survive shlex unchanged; outside quotes, spaces still split words."""
    special = '\\"' if in_double else "\\\"'"
    return "".join("\\" + c if c in special else c for c in value)


def _keep(raw: str, in_double: bool) -> str:
    """Keep an unresolvable ``$...`` as one literal word."""
    if in_double:
        return _escape(raw, True)
    return "".join("\\" + c if c in "\\\"' \t\r\n" else c for c in raw)


class Expander:
    """Expands one statement. ``assignment``: the statement assigns a scalar
    (``CMD="torchrun ${ARGS[@]} ..."``), where bash joins a quoted array's elements with
    spaces into the one value instead of making a word of each."""

    def __init__(self, script: Script, line: int, assignment: bool = False) -> None:
        self.script = script
        self.line = line
        self.depth = 0
        self.assignment = assignment

    def expand(self, text: str, in_double: bool = False) -> str:
        """``text`` ready for ``words``; ``in_double``: it will stand inside double
        quotes (a default in ``"${X:-...}"``)."""
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise ShellLimit(
                    f"the statement at line {self.line} nests ${{...}} or $((...)) more than "
                    f"{MAX_NESTING} deep"
                )
            return self._expand(text, in_double)
        finally:
            self.depth -= 1

    def _expand(self, text: str, in_double: bool) -> str:
        out: list[str] = []
        size = 0  # characters produced by expansions so far
        quote = ""
        i, n = 0, len(text)
        while i < n:
            run = _EXPAND_RUNS[quote].match(text, i)
            if run:
                out.append(run.group())
                i = run.end()
                continue
            ch = text[i]
            if quote == "'":
                out.append(ch)
                quote = "" if ch == "'" else quote
                i += 1
            elif ch == "\\" and i + 1 < n:
                # inside "...", bash drops the backslash before $ and `; shlex would keep it
                escaped = quote == '"' and text[i + 1] in "$`"
                out.append(text[i + 1] if escaped else text[i : i + 2])
                i += 2
            elif ch == "$" and not quote and text.startswith(("$'", '$"'), i):
                if text[i + 1] == '"':  # $"...": a translation of "...", read as "..."
                    i += 1
                    continue
                end = ansi_c_end(text, i + 2)  # $'...': ANSI-C quoting, one literal
                end = len(text) + 1 if end < 0 else end
                out.append(_keep(ansi_c(text[i + 2 : end - 1]), in_double))
                i = end
            elif ch == "'" and not quote:
                quote = "'"
                out.append(ch)
                i += 1
            elif ch == '"':
                quote = "" if quote == '"' else '"'
                out.append(ch)
                i += 1
            elif ch == "`":  # command substitution, like $(...): kept whole, unresolved
                end = _closing_backtick(text, i + 1)
                out.append(_keep(text[i:end], quote == '"'))
                i = end
            elif ch == "$":
                piece, i = self._dollar(text, i, quote == '"')
                out.append(piece)
                size += len(piece)
                if size > MAX_STATEMENT_CHARS:
                    raise ShellLimit(
                        f"the statement at line {self.line} expands to more than "
                        f"{MAX_STATEMENT_CHARS} characters"
                    )
            else:
                out.append(ch)
                i += 1
        return "".join(out)

    def _dollar(self, text: str, i: int, in_double: bool) -> tuple[str, int]:
        """Expansion of the ``$`` at ``text[i]``: (replacement, index after it)."""
        rest = text[i + 1 : i + 3]
        if rest == "((":
            end = _matching(text, i + 1, "(", ")")
            if end < 0:
                return _keep(text[i:], in_double), len(text)
            raw = text[i : end + 1]
            value = self._arith(text[i + 3 : end - 1]) if text[end - 1] == ")" else None
            return (str(value) if value is not None else _keep(raw, in_double)), end + 1
        if rest[:1] == "(":
            end = _matching(text, i + 1, "(", ")")
            end = len(text) - 1 if end < 0 else end
            return _keep(text[i : end + 1], in_double), end + 1
        if rest[:1] == "{":
            end = _matching(text, i + 1, "{", "}")
            if end < 0:
                return _keep(text[i:], in_double), len(text)
            return self._braced(text[i + 2 : end], text[i : end + 1], in_double), end + 1
        match = _NAME.match(text, i + 1)
        if match:
            return self._scalar(match.group(), text[i : match.end()], in_double), match.end()
        return "$", i + 1

    def _scalar(self, name: str, raw: str, in_double: bool) -> str:
        if name in self.script.scalars:
            return _escape(self.script.scalars[name], in_double)
        if name in self.script.arrays:  # $ARR is its first element
            items = self.script.arrays[name]
            return _escape(items[0], in_double) if items else ""
        return _keep(raw, in_double)

    def _braced(self, inner: str, raw: str, in_double: bool) -> str:
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*])\]", inner)
        if match:
            name, kind = match.groups()
            if name not in self.script.arrays and name not in self.script.scalars:
                return _keep(raw, in_double)
            items = self.script.arrays.get(name) or [self.script.scalars.get(name, "")]
            escaped = [_escape(x, in_double) for x in items]
            apart = in_double and kind == "@" and not self.assignment
            return ('" "' if apart else " ").join(escaped)
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([0-9]{1,6})\]", inner)
        if match:
            found = self.script.arrays.get(match.group(1))
            index = int(match.group(2))
            if found is not None and index < len(found):
                return _escape(found[index], in_double)
            return _keep(raw, in_double)
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:?[-=])(.*)", inner, re.DOTALL)
        if match:
            name, op, word = match.groups()
            value = self.script.scalars.get(name)
            if value is not None and (value or ":" not in op):
                return _escape(value, in_double)
            default = self.expand(word, in_double)
            plain, _ = words(default) if not in_double else ([default], False)
            resolved = " ".join(plain)
            self.script.defaults_used.setdefault(name, resolved)
            if "=" in op:
                set_scalar(self.script, name, resolved)
            return default
        if _NAME.fullmatch(inner):
            return self._scalar(inner, raw, in_double)
        return _keep(raw, in_double)

    def _arith(self, inner: str) -> int | None:
        """Integer ``$(( ... ))`` with + - * / % and parentheses; None when unknown."""
        if len(inner) > MAX_ARITH_CHARS:
            return None
        text = self.expand(inner).replace('"', "")  # quote removal: $(( "2" * 2 )) is 4

        def name_value(match: re.Match[str]) -> str:
            value = self.script.scalars.get(match.group())
            return value if value is not None and re.fullmatch(r"-?[0-9]{1,18}", value) else "?"

        text = re.sub(r"[A-Za-z_][A-Za-z0-9_]*", name_value, text)
        if not re.fullmatch(r"[0-9+\-*/%() \t]*", text) or "**" in text or not text.strip():
            return None
        try:
            tree = ast.parse(text.strip(), mode="eval")
            return _eval(tree.body)
        except (SyntaxError, ValueError, RecursionError, ZeroDivisionError, OverflowError):
            return None


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _eval(node.operand)
        value = -operand if isinstance(node.op, ast.USub) else operand
    elif isinstance(node, ast.BinOp):
        a, b = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Add):
            value = a + b
        elif isinstance(node.op, ast.Sub):
            value = a - b
        elif isinstance(node.op, ast.Mult):
            value = a * b
        elif isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod):
            if b == 0:
                raise ZeroDivisionError
            quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # bash truncates
            value = quotient if not isinstance(node.op, ast.Mod) else a - b * quotient
        else:
            raise ValueError("operator")
    else:
        raise ValueError("expression")
    if abs(value) > MAX_ARITH_VALUE:
        raise OverflowError
    return value


def _closing_backtick(text: str, start: int) -> int:
    """Index after the backtick closing a substitution opened before ``start`` (the end
    of ``text`` when none does)."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "`":
            return i + 1
        i += 1
    return len(text)


def _matching(text: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket closing ``text[start]`` (quote-aware), or -1."""
    depth = 0
    quote = ""
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch == "\\":
            i += 2
            continue
        elif text.startswith("$'", i):  # ANSI-C: a backslash escapes the quote
            i = ansi_c_end(text, i + 2)
            if i < 0:
                return -1
            continue
        elif ch in "'\"":
            quote = ch
        elif ch == open_ch:
            depth += 1
        elif ch == close_ch:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1
