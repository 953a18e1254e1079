"""A bash script's statements, found as bash's reader finds them, without running it.

``split_statements(text)`` gives (first line, statement) pairs: comments and
here-document bodies dropped, backslash continuations joined, ``;`` ``&&`` ``||``
``|`` ``&`` and newlines separating statements outside every bracket and quote, a
newline inside ``( )``, ``$( )``, ``$(( ))`` or ``${ }`` read as a space (so
``ARGS=( ... )`` over many lines is one statement); linear in ``len(text)``.

Quotes nest as bash nests them (the bash manual, "Quoting", "Command
Substitution"; checked with ``bash -n``): ``'...'`` ends at the next ``'``;
``$'...'`` (ANSI-C) and ``"..."`` / ``$"..."`` at the next unescaped quote; a
``$( )``, ``${ }``, ``$(( ))`` or backtick opens a context of its own, inside
double quotes too, whose quotes pair up inside it (``"$(dirname "$0")"``,
``"${X:-'a b'}"``); a backtick substitution ends at the next unescaped backtick
whatever quotes lie between (in ``echo `echo "a`"`` the ``"`` after it is open).
A ``${ }`` ends at its first ``}`` outside quotes and nested substitutions, as
bash's does (``${A:-{a}`` is ``{a``). Inside ``( )`` and ``$( )`` a ``case`` is
followed to its ``esac``: the ``)`` ending a pattern (``a)``, ``(b|c)``) closes
nothing. At the top level every compound command is followed (shell_compound.py):
a case pattern's ``(`` ``|`` ``)`` are the pattern's, and a ``)`` that ends no
pattern is refused, as bash refuses it.

A quote, substitution, ``${ }``, ``$(( ))``, ``(( ))``, subshell or array still open
at the end of the text is what bash refuses: ``Unclosed`` names the innermost and
the line it opened on, in bash -n's words, "unexpected EOF while looking for
matching `)'" (a subshell outside any substitution: "syntax error: unexpected end
of file"). bash names the line of the end of the file for ``$(``, ``<(`` and a
subshell, the opening line for the rest. A compound command (``{ }``, ``if``,
``case``, a loop) still open at the end, or a word that ends one where none is
open (``fi`` after a ``{``), is refused too (shell_compound.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pptune.frameworks.common.shell_compound import Compounds
from pptune.frameworks.common.shell_syntax import ShellSyntax, Unclosed, Unexpected

__all__ = ["ShellSyntax", "Unclosed", "Unexpected", "split_statements"]

# a quote context's kind -> the character that closes it
_QUOTES = {"'": "'", "$'": "'", '"': '"', "`": "`"}
# contexts whose words are read as a command's: comments and here-documents count here
_COMMANDS = frozenset({"", "(", "$("})

# Runs of characters that need no attention, by context ("": the script's top level,
# where a newline, ; | & end a statement; "((" and "$((": arithmetic).
_IN_PARENS = re.compile(r"[^\\'\"`#()<$\n]+")
_ARITH = re.compile(r"[^\\'\"`()$\n]+")
_RUNS = {
    "": re.compile(r"[^\\'\"`#()\n;|&<$]+"),
    "(": _IN_PARENS,
    "$(": _IN_PARENS,
    "((": _ARITH,
    "$((": _ARITH,
    "${": re.compile(r"[^\\'\"`}$\n]+"),
    '"': re.compile(r'[^\\"$`]+'),
    "'": re.compile(r"[^']+"),
    "$'": re.compile(r"[^\\']+"),
    "`": re.compile(r"[^\\`]+"),
}
_HEREDOC_OP = re.compile(r"<<(-?)[ \t]*")
# the words and operators of a run in ( ) or $( ), for following a case to its esac
_TOKENS = re.compile(r";;&|;;|;&|&&|\|\||[;&|]|[^\s;&|]+")
_LEADERS = frozenset({"then", "do", "else", "elif", "if", "while", "until", "{", "!", "time"})
_ARRAY_OPEN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=$")
# what a ( opens, as messages name it
_SUBSHELL, _PROCESS, _ARRAY = " of a subshell", " of a process substitution", " of the array "
_WORD_END = frozenset(" \t\n;&|<>()")
_GAPS = " \t\n;&|()"  # what a word cannot go on after: the next character begins one
_GOES_ON = "\\'\"`$#"  # what a word goes on with after a run of ordinary characters
_OPERATORS = (";;&", ";;", ";&", "&&", "||", "|&")  # the rest are one character


@dataclass
class _Open:
    kind: str  # a key of _RUNS
    line: int  # where it opened
    inner: int = 0  # ( nested in $(( ))
    what: str = ""  # a ( context's, for messages: " of a subshell", " of the array X", ...
    command: bool = True  # the next word in ( ) or $( ) stands in a command's place
    cases: list[str] = field(default_factory=list)  # its open cases' parts, innermost last

    @property
    def follows_cases(self) -> bool:
        return self.kind in ("(", "$(") and not self.what.startswith(_ARRAY)

    def pattern_paren(self) -> bool:
        """Whether a ( or ) here is part of a case pattern (``(a|b)``), no bracket."""
        return self.follows_cases and bool(self.cases) and self.cases[-1] == "pattern"

    def follow(self, piece: str, glued: bool) -> None:
        """Follow ``case WORD in PATTERN) ...;; esac`` through a run of ordinary
        characters (``glued``: it goes on with a word begun before it)."""
        cases = self.cases
        for token in _TOKENS.finditer(piece):
            word = token.group()
            if glued and token.start() == 0 and word[0] not in ";&|":
                self.command = False
            elif word in (";;", ";&", ";;&"):
                if cases and cases[-1] == "body":
                    cases[-1] = "pattern"
                self.command = True
            elif word[0] in ";&|":
                self.command = True
            elif cases and cases[-1] == "subject":
                cases[-1] = "pattern" if word == "in" else "subject"
            elif word == "esac" and cases and (cases[-1] == "pattern" or self.command):
                cases.pop()
                self.command = False
            elif word == "case" and self.command:
                cases.append("subject")
                self.command = False
            else:
                self.command = self.command and word in _LEADERS


def _unclosed(stack: list[_Open]) -> Unclosed:
    """The refusal of the innermost context still open at the end of the text."""
    top = stack[-1]
    if top.kind in _QUOTES:
        close = _QUOTES[top.kind]
        return Unclosed(top.line, top.kind, "",
                        f"unexpected EOF while looking for matching `{close}'",
                        f"close it, or escape it as \\{close} if it is meant literally")
    close = {"${": "}", "$((": "))", "((": "))"}.get(top.kind, ")")
    says = f"unexpected EOF while looking for matching `{close[0]}'"
    substituted = any(o.kind == "$(" or o.what == _PROCESS for o in stack)
    if top.what == _SUBSHELL and not substituted:
        says = "syntax error: unexpected end of file"  # a subshell, as bash words it
    return Unclosed(top.line, top.kind, top.what, says,
                    f"add the {close} that closes it, or quote the {top.kind} if it is "
                    "meant literally")


_Doc = tuple[str, bool, bool]  # a here-document's delimiter, tabs stripped, quoted


def _heredoc(text: str, i: int) -> tuple[_Doc, int] | None:
    """((delimiter, tabs stripped, quoted), index after it) of the here-document
    operator at ``text[i]`` (<<WORD, <<-WORD, <<'WORD', << "WO"RD, <<\\WORD), or None.
    The delimiter is the word with its quotes removed, as bash compares it."""
    op = _HEREDOC_OP.match(text, i)
    if not op:
        return None
    word: list[str] = []
    j = op.end()
    while j < len(text) and text[j] not in _WORD_END:
        ch = text[j]
        if ch == "`" or text.startswith(("$(", "${", "$'", '$"'), j):
            return None  # a substitution in the word: read as the script's own text
        if ch == "\\" and j + 1 < len(text):
            word.append(text[j + 1])
            j += 2
        elif ch in "'\"":
            end = text.find(ch, j + 1)
            if end < 0:
                return None  # the quote is open: bash reads no delimiter either
            word.append(text[j + 1 : end])
            j = end + 1
        else:
            word.append(ch)
            j += 1
    if j == op.end():
        return None
    quoted = any(c in "'\"\\" for c in text[op.end() : j])
    return ("".join(word), op.group(1) == "-", quoted), j


def _after_heredocs(text: str, i: int, pending: list[_Doc]) -> tuple[int, int]:
    """(where the script goes on, lines skipped): the bodies of the here-documents
    ``pending`` read from ``i``, the start of the line after their command's, each up
    to the line that is its delimiter, or to the end. In the body of an unquoted
    delimiter a line ending in an odd number of backslashes goes on to the next, as
    bash reads it (``a\\`` then ``EOF`` is the line ``aEOF``)."""
    lines = 0
    for delimiter, tabs, quoted in pending:
        parts: list[str] = []  # the physical lines of one logical line
        while i < len(text):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            piece = text[i:end]
            lines += 1
            i = end + 1
            if not quoted and (len(piece) - len(piece.rstrip("\\"))) % 2 and i < len(text):
                parts.append(piece[:-1])
                continue
            row = "".join([*parts, piece])
            parts.clear()
            if (row.lstrip("\t") if tabs else row) == delimiter:
                break
    return min(i, len(text)), lines


def _word_start(buf: list[str]) -> bool:
    """Whether a ``#`` put next begins a word (and so a comment)."""
    if not buf:
        return True
    last = buf[-1]
    escaped = len(last) == 2 and last[0] == "\\"  # "a\ #b": the space is part of a word
    return last[-1] in " \t;&|(" and not escaped


def _paren_role(buf: list[str]) -> str:
    """What a ( opens, by what comes before it: ``X=(`` an array, ``<(`` a process
    substitution, else a subshell (or a function's parentheses, closed at once)."""
    last = buf[-1] if buf else ""
    array = _ARRAY_OPEN.search(last)
    if array:
        return _ARRAY + array.group(1)
    return _PROCESS if last.endswith(("<", ">")) else _SUBSHELL


def split_statements(text: str, strict: bool = True) -> list[tuple[int, str]]:
    """(first line, statement) pairs, comments and here-document bodies removed.
    ``strict``: raise ``Unclosed`` for a quote, substitution, parenthesis or compound
    command never closed, ``Unexpected`` for a word that ends a compound command where
    none is open, as bash refuses the script; else (an ``eval``'s text, which bash
    checks only when it runs) the rest of the text is the last statement."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    line = 1
    start = 0  # line of the statement's first non-blank character; 0 while blank
    stack: list[_Open] = []  # the contexts open here, innermost last
    heredocs: list[_Doc] = []  # here-documents whose bodies start next line
    root = Compounds(strict)  # the compound commands open at the top level
    mark = 0  # where in buf the ( open at the top level began
    i, n = 0, len(text)

    def put(piece: str) -> None:
        nonlocal start
        if not start and not piece.isspace():
            start = line
        buf.append(piece)

    def flush() -> None:
        nonlocal start
        stmt = "".join(buf).strip()
        if stmt:
            out.append((start or line, stmt))
        buf.clear()
        start = 0

    def push(kind: str, opener: str, what: str = "") -> None:
        stack.append(_Open(kind, line, what=what))
        put(opener)

    def pop() -> None:
        closing = stack.pop()
        if stack:
            stack[-1].command = False  # "(a) b": b is an argument
        elif closing.kind in ("(", "(("):
            root.closed(not "".join(buf[mark:]).strip())

    while i < n:
        top = stack[-1] if stack else None
        kind = top.kind if top else ""
        run = _RUNS[kind].match(text, i)  # ordinary characters: take them in one go
        if run:
            glued = i > 0 and text[i - 1] not in _GAPS
            if top and top.follows_cases:
                top.follow(run.group(), glued)
            elif not top:
                end = run.end()
                root.run(run.group(), line, glued, end < n and text[end] in _GOES_ON
                         and not text.startswith("\\\n", end))
            put(run.group())
            line += run.group().count("\n")
            i = run.end()
            continue
        ch = text[i]
        if not top and ch not in "\n()#;|&" and not text.startswith("\\\n", i):
            root.part(ch, line, i > 0 and text[i - 1] not in _GAPS)  # a quote, $, \\, <
        if ch == "\\" and kind != "'":
            if text.startswith("\\\n", i) and kind != "$'":  # continuation: drop both
                line += 1
            else:
                put(text[i : i + 2])
                line += text.startswith("\\\n", i)
            i += 2
            continue
        i += 1
        if top and _QUOTES.get(kind) == ch:  # the quote closes
            pop()
            put(ch)
        elif ch == "$":
            nxt = text[i : i + 2]
            if nxt == "((":
                push("$((", "$((")
                i += 2
            elif nxt[:1] == "$":  # $$, the shell's process id
                put("$$")
                i += 1
            elif nxt[:1] in ("(", "{"):
                push("$" + nxt[0], "$" + nxt[0])
                i += 1
            elif nxt[:1] in ("'", '"') and kind != '"':  # "$'" in "..." is two characters
                push("$'" if nxt[0] == "'" else '"', "$" + nxt[0])
                i += 1
            else:
                put("$")
        elif ch == "`":
            push("`", ch)
        elif ch in "'\"":
            push(ch, ch)
        elif ch == "\n":
            if not top:
                root.separator("\n", line)
            line += 1
            if top:
                top.command = True
                put(" ")
            else:
                flush()
            if heredocs and kind in _COMMANDS:
                i, skipped = _after_heredocs(text, i, heredocs)
                line += skipped
                heredocs.clear()
        elif kind == "${":  # a } (no { counts: bash's ${ } ends at its first })
            pop()
            put(ch)
        elif kind in ("((", "$((") and top:
            if ch == ")" and not top.inner and text.startswith(")", i):
                pop()
                ch = "))"
                i += 1
            elif ch == ")" and not top.inner:
                # "$((a) b)" is no arithmetic: bash reads it again as $( (a) b), a
                # command substitution (or "((a) b)" as a subshell) that goes on
                top.kind = top.kind[:-1]
                top.what = _SUBSHELL if top.kind == "(" else ""
            else:
                top.inner += {"(": 1, ")": -1}.get(ch, 0)
            put(ch)
        elif ch == "#" and _word_start(buf):
            end = text.find("\n", i)
            i = n if end < 0 else end  # the newline itself is handled next round
        elif ch in "()" and top and top.pattern_paren():  # case x in (a|b) ...
            if ch == ")":
                top.cases[-1] = "body"
                top.command = True
            put(ch)
        elif ch in "()|" and not top and root.in_pattern():  # the same at the top level
            root.pattern_mark(ch)
            put(ch)
        elif ch == "(":
            if not top:
                root.opened()
            if text.startswith("(", i):  # (( ... )): arithmetic
                push("((", "((")
                i += 1
            else:
                push("(", ch, _paren_role(buf))
            mark = len(buf) if len(stack) == 1 else mark
        elif ch == ")":  # at the top level (not a case pattern's), bash refuses it
            if kind:
                pop()
            else:
                root.stray_paren(line)
            put(ch)
        elif ch == "<" and text.startswith("<<", i):  # a here-string: its word is on this line
            put("<<<")
            i += 2
        elif ch == "<" and (doc := _heredoc(text, i - 1)):
            heredocs.append(doc[0])
            put(text[i - 1 : doc[1]])
            i = doc[1]
        elif not kind and ch in ";|&" and not (ch == "&" and buf and buf[-1][-1] in "<>"):
            op = next((o for o in _OPERATORS if text.startswith(o, i - 1)), ch)
            i += len(op) - 1
            root.separator(op, line)
            flush()
        else:
            put(ch)
    if stack and strict:
        raise _unclosed(stack)
    if not stack:
        root.end()
    flush()
    return out
