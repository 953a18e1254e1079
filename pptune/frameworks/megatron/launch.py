"""The command of a Megatron-LM launch script that runs training, and its arguments.

The last ``pretrain_*.py`` launch (through ``torchrun``, ``python -m
torch.distributed.launch`` or ``deepspeed``; a test, echo or copy that names the
file is no launch); else an argument file's lines of flags; else the command with
the most Megatron-LM flags; else, for a file of settings a launcher sources, the
arguments it keeps in its variables.
"""

from __future__ import annotations

import re

from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.common.shell import Command, Script, words
from pptune.frameworks.megatron.flags import BOOL_FLAGS, VALUE_FLAGS

_ENTRY = re.compile(r"(?:.*/)?pretrain_\w*\.py")

# commands that name a pretrain_*.py without running it
NOT_LAUNCHES = frozenset({"[", "[[", "test", "echo", "printf", "ls", "cp", "wget", "curl",
                          "cat", "cd", "mkdir", "rm"})


def _held_arguments(script: Script, known: set[str]) -> list[str]:
    """A script with no launch that keeps Megatron-LM arguments in variables (a model's
    settings, sourced by a launcher): their words, in the order the variables were set."""
    held: list[str] = []
    for value in [*script.scalars.values(), *script.arrays.values()]:
        ws = words(value)[0] if isinstance(value, str) else value
        if any(w.partition("=")[0] in known for w in ws):
            held += ws
    return held


def sourced_settings(script: Script) -> bool:
    """Whether the script has neither a pretrain_*.py launch nor lines of arguments, so
    that ``launch_words`` reads the arguments it keeps in variables: a model's settings
    for a launcher to source, which adds the rest of the command line."""
    return not any(_ENTRY.fullmatch(word) and cmd.words[0] not in NOT_LAUNCHES
                   for cmd in script.commands for word in cmd.words) and not any(
        cmd.words[0].startswith("-") for cmd in script.commands)


def _launches(script: Script) -> list[tuple[Command, int]]:
    """Each pretrain_*.py launch: the command and where its entry script is."""
    launches = []
    for cmd in script.commands:
        if cmd.words[0] in NOT_LAUNCHES:  # [ -f pretrain_gpt.py ], echo "pretrain_gpt.py ..."
            continue
        entry = next((j for j, word in enumerate(cmd.words) if _ENTRY.fullmatch(word)), None)
        if entry is not None:
            launches.append((cmd, entry))
    return launches


def entry_script(script: Script) -> str | None:
    """The file name of the pretrain_*.py the script launches (the last launch's)."""
    launches = _launches(script)
    if not launches:
        return None
    cmd, k = launches[-1]
    return cmd.words[k].rpartition("/")[2]


def launch_words(script: Script, ctx: Ctx) -> tuple[list[str], list[str]]:
    """(launcher words, Megatron argument words) of the command that runs training."""
    launches = _launches(script)
    if launches:
        cmd, k = launches[-1]
        if len(launches) > 1:
            ctx.note(f"{len(launches)} pretrain_*.py launches; read the last one (line {cmd.line})")
        return cmd.words[:k], cmd.words[k + 1 :]
    arg_lines = [w for cmd in script.commands if cmd.words[0].startswith("-") for w in cmd.words]
    if arg_lines:
        return arg_lines, arg_lines
    known = set(VALUE_FLAGS) | set(BOOL_FLAGS)
    scored = [(sum(w.partition("=")[0] in known for w in c.words), c) for c in script.commands]
    best = max(scored, key=lambda pair: pair[0], default=(0, None))
    if best[1] is None or best[0] == 0:
        held = _held_arguments(script, known)
        if held:
            ctx.note("no pretrain_*.py launch: read the Megatron-LM arguments the script keeps "
                     "in its variables (a model's settings for a launcher to source)")
            return held, held
        raise ctx.bad(
            "found no Megatron-LM arguments (--num-layers, --micro-batch-size, "
            "--pipeline-model-parallel-size, ...); expected a pretrain_*.py launch script "
            "or a file of arguments; pass --format-in to read it as another format"
        )
    return best[1].words, best[1].words




_FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9][-A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")


def flag_lines(text: str, names: set[str]) -> dict[str, int]:
    """The line (1-based) of the last occurrence of each of ``names`` outside comment
    lines: a ``--flag``, or a variable's assignment (``NAME=``, ``export NAME=``)."""
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        assigned = _ASSIGN.match(line)
        found = _FLAG.findall(line) + ([assigned.group(1)] if assigned else [])
        lines.update((name, number) for name in found if name in names)
    return lines


def launch_line(script: Script) -> int | None:
    """The line (1-based) where the last pretrain_*.py launch starts (None: no launch)."""
    launches = _launches(script)
    return launches[-1][0].line if launches else None


def _continued(line: str) -> bool:
    """Whether the line ends in a backslash that joins the next line (an odd run)."""
    body = line.rstrip("\r")
    return (len(body) - len(body.rstrip("\\"))) % 2 == 1


def comment_cut(text: str, start: int | None) -> str:
    """Where a comment line ends the backslash-continued command starting at line
    ``start``, and flags follow it: a hint for a required flag found missing, else "".

    In bash a backslash joins the next line, and a ``#`` that starts a word begins a
    comment running to the end of that line, a trailing backslash included; so a
    commented-out flag inside a continued command ends the command there, and the lines
    after it run as a command of their own (as shell.py reads them). The hint names the
    comment's line, since the error is about the flags after it."""
    if start is None:
        return ""
    lines = text.splitlines()
    number = start
    while number <= len(lines) and _continued(lines[number - 1]):
        number += 1
        line = lines[number - 1] if number <= len(lines) else ""
        if line.lstrip().startswith("#"):
            after = lines[number].lstrip() if number < len(lines) else ""
            if after.startswith(("-", "$", '"$')):
                shown = line.strip().rstrip("\\").strip()[:50]
                return (f"; line {number}, a comment inside the backslash-continued command "
                        f"('{shown}'), ends that command as bash does: the "
                        f"lines after it are not its arguments (delete the comment line, "
                        f"or move it above the command)")
            return ""
    return ""
