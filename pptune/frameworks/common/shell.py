"""Just enough of bash to read a Megatron-LM launch script, without running it.

``interpret(text)`` splits the script into statements (shell_split.py: comments
and here-document bodies dropped, backslash continuations joined, ``;`` ``&&``
``||`` ``|`` and newlines as separators, parentheses kept together so ``ARGS=(
... )`` is one statement; a quote, ``$( )``, ``${ }``, backtick, subshell, array
or compound command (``{ }``, ``if``, ``case``, a loop) never closed is refused,
``Unclosed``, as bash refuses it, and so is a word that ends a compound command
where none is open, ``Unexpected``: shell_compound.py), then walks them in order:
simple assignments (``PP=4``,
``export GBS=512``, ``ARGS=( --num-layers 32 )``, ``ARGS+=( ... )``) update
the variables, and every other statement becomes a command: its words after
expansion of ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${ARR[@]}`` and
integer ``$(( ... ))``, ANSI-C ``$'...'`` decoded (shell_ansi.py) and ``$"..."``
read as ``"..."`` (no message catalogue is consulted), split as bash would
(``shlex``).

What it cannot know (environment variables, positional parameters,
``$(command)``, a backtick substitution) stays in the words as written, beginning
with ``$`` or a backtick; the
caller treats such a value as unresolved. Nothing is executed; an ``if`` whose
condition the script's own variables decide runs the branch bash would, else
every branch in order (shell_branches.py); loops run their body once;
``eval`` runs its words as a script and redirections are dropped from commands.

Bounds: a variable may hold 100,000 characters or array elements and a
statement may expand to 1,000,000 characters; past that the script is
refused (``A="$A$A"`` doubling would otherwise eat the machine).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pptune.frameworks.common.shell_branches import Branches, condition
from pptune.frameworks.common.shell_split import ShellSyntax, Unclosed, Unexpected, split_statements
from pptune.frameworks.common.shell_state import (
    MAX_STATEMENT_CHARS,
    Command,
    Expander,
    Script,
    ShellLimit,
    set_array,
    set_scalar,
    words,
)

__all__ = ["Command", "Script", "ShellLimit", "ShellSyntax", "Unclosed", "Unexpected",
           "interpret", "split_statements", "words"]

_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)", re.DOTALL)
# an assignment's optional declarer: export, declare -a, ...
_DECLARED = r"\s*(?:(?:export|declare|typeset|local|readonly)(?:\s+-[A-Za-z]+)*\s+)?"
_ARRAY_ASSIGN = re.compile(_DECLARED + r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=\((.*)\)\s*", re.DOTALL)
_DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly"})
_KEYWORDS = frozenset({"then", "do", "else", "{", "(", "!", "time"})
_CLOSERS = frozenset({"fi", "done", "}", ")", "esac", ";;"})


# a scalar assignment, exported or not (an array's is _ARRAY_ASSIGN)
_SCALAR_ASSIGN = re.compile(_DECLARED + r"[A-Za-z_][A-Za-z0-9_]*\+?=(?!\()")
MAX_EVAL_DEPTH = 4  # eval of eval of ...
# a redirection word: 2>&1, &>log, >>log, <in, 2> (its target the next word)
_REDIRECT = re.compile(r"(\d*|&)(>>?|<)(&\d+|&-)?(.*)", re.DOTALL)


def _without_redirections(ws: list[str]) -> list[str]:
    """The command's words without its redirections (not arguments of the program)."""
    out: list[str] = []
    skip = False
    for w in ws:
        if skip:
            skip = False
            continue
        match = _REDIRECT.fullmatch(w)
        if match:
            skip = not match.group(3) and not match.group(4)  # "> log": the target follows
            continue
        out.append(w)
    return out


def interpret(text: str, env: Mapping[str, str] | None = None) -> Script:
    """The script's variables and commands; ``env``: variables its environment sets
    before it runs (its own assignments still replace them)."""
    script = Script()
    for name, value in (env or {}).items():
        set_scalar(script, name, value)
    _statements(script, text, 0)
    return script


def _statements(script: Script, text: str, depth: int, at: int | None = None) -> None:
    """Run ``text``'s statements (``at``: the line an eval's text came from), the
    branches of an ``if`` as its condition picks them (shell_branches.py)."""
    branches = Branches()
    for line, raw in split_statements(text, strict=depth == 0):
        where = line if at is None else at
        head, _, rest = raw.strip().partition(" ")
        if head in ("if", "elif"):
            ws, _ = words(Expander(script, where).expand(rest))
            cond = condition(ws)
            if cond is None and branches.reaches(head == "elif"):
                script.notes.append(f"line {where}: the condition {rest.strip()[:60]!r} is not "
                                    "known without running the script: every branch is read "
                                    "and the last assignment wins")
            (branches.open if head == "if" else branches.elif_)(cond)
            continue
        if head == "fi":
            branches.close()
            continue
        if head in ("then", "else"):
            if head == "else":
                branches.else_()
            raw = rest
        if not raw.strip() or not branches.active():
            continue
        statement = raw
        assignment = bool(_SCALAR_ASSIGN.match(statement))
        expanded = Expander(script, where, assignment).expand(statement)
        if len(expanded) > MAX_STATEMENT_CHARS:
            raise ShellLimit(
                f"the statement at line {where} expands to more than {MAX_STATEMENT_CHARS} "
                "characters"
            )
        _run(script, where, expanded, depth)


# --- running statements -----------------------------------------------------


def _run(script: Script, line: int, statement: str, depth: int = 0) -> None:
    array = _ARRAY_ASSIGN.fullmatch(statement)
    if array:
        name, append, body = array.groups()
        items, broken = words(body)
        if broken:
            script.notes.append(f"line {line}: unbalanced quotes in array {name}; split on spaces")
        set_array(script, name, items, append=bool(append))
        return
    ws, broken = words(statement)
    if broken:
        script.notes.append(f"line {line}: unbalanced quotes; split on spaces")
    while ws and ws[0] in _KEYWORDS:
        ws = ws[1:]
    if not ws or ws[0] in _CLOSERS:
        return
    declared = ws[0] in _DECLARERS
    if declared:
        ws = [w for w in ws[1:] if not w.startswith("-")]
    if ws and ws[0] == "unset":
        for name in ws[1:]:
            script.scalars.pop(name, None)
            script.arrays.pop(name, None)
        return
    while ws:
        match = _ASSIGN.fullmatch(ws[0])
        if not match:
            break
        name, append, value = match.groups()
        set_scalar(script, name, (script.scalars.get(name, "") if append else "") + value)
        ws = ws[1:]
    if ws and not declared:
        if ws[0] == "eval" and depth < MAX_EVAL_DEPTH:
            # eval joins its arguments and runs them as a script (a second expansion):
            # command="torchrun ... ${ARGS[@]}"; eval ${command}
            _statements(script, " ".join(ws[1:]), depth + 1, at=line)
            return
        if ws[0] in ("source", "."):
            script.notes.append(f"line {line}: {ws[0]} {' '.join(ws[1:2])} not followed")
            return
        ws = _without_redirections(ws)
        if ws:  # a bare redirection runs nothing
            script.commands.append(Command(line, ws))
