"""Usage errors of the option parser as one line, like every other bad input; an option
given twice; --version.

An option that takes one value, given twice with two values (``--cp 16 --cp 8``), is
refused in every command: click would keep the last one without a word, and a script
that appends a flag to a command line already holding it runs with the one it did not
mean. A flag given both ways (``--overlap-grad-reduce --no-overlap-grad-reduce``) is
refused too. What says one thing twice (``--output json --output json``, ``--json
--json``) leaves nothing to choose and keeps working, as do options meant to repeat
(``--env``, ``calibrate --run``: click's ``multiple``). The check parses the command
line with the command's own parser and counts what it found, as ``calibrate``'s
``InOrder`` reads its flags' order; the values are read off the command line as the
parser reads them (``_spellings``), and a count they do not match is refused.

A reader that goes away (``pptune check-config x | head -1``) ends the run with exit 141,
silently: 128 + SIGPIPE (13), what a shell reports for a process SIGPIPE killed. Python
ignores SIGPIPE, so the closed pipe arrives as ``BrokenPipeError`` from a write; click
would turn it into exit 1, which check-config uses for findings. ``PipeClosed`` carries it
past click from the root command's parsing (the help) and running (``OneLineErrors``),
``pipe_closed`` exits; ``app.main`` does the same for the interpreter's last flush. The
default SIGPIPE action is not restored: tune and validate talk to workers over pipes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 carries its own copy of click
    from typer._click.exceptions import ClickException, UsageError
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - older typer with click installed
    from click.exceptions import (  # type: ignore[no-redef,import-not-found]
        ClickException,
        UsageError,
    )
    from click.globals import get_current_context  # type: ignore[no-redef,import-not-found]

PIPE_CLOSED = 141  # 128 + signal.SIGPIPE (13): a shell's status for a process SIGPIPE killed
JSON = "--json"
CHECK = "check-config"  # its error document also names the file (check.echo_error)


class PipeClosed(Exception):
    """stdout's reader went away; not an OSError, so click's EPIPE branch (exit 1) passes
    it by (module doc)."""


def pipe_closed() -> NoReturn:
    """Exit 141 without a word: stdout is pointed at /dev/null first, so what is still
    buffered goes nowhere and the interpreter's last flush raises nothing."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
        pass
    sys.exit(PIPE_CLOSED)


class OneLineErrors(TyperGroup):
    """Usage errors from the option parser as one line ``pptune: error: ...`` (exit 2),
    like every other bad input, instead of click's four-line usage block."""

    def command_named(self, words: list[str]) -> str:
        """``pptune recommend`` where the parser's error carries no context (an option's
        missing value): the subcommand the words name, else ``pptune``."""
        commands = getattr(self, "commands", {})
        name = next((w for w in words if not w.startswith("-")), "")
        return f"pptune {name}" if name in commands else "pptune"

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        run: Any = super().main  # click's main takes standalone_mode by keyword
        if not standalone_mode:
            return run(*args, standalone_mode=False, **kwargs)
        argv = args[0] if args else kwargs.get("args")
        words = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
        empty = self.empty_value(words)
        if empty is not None:  # "" would become Path("."): the working folder, unasked
            self.echo_check_error(words, f"{empty} is empty; give a value", 2)
            typer.echo(f"pptune: error: {empty} is empty; give a value", err=True)
            sys.exit(2)
        try:
            code = run(*args, standalone_mode=False, **kwargs)
        except ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `pptune`: the help itself
                typer.echo(exc.format_message())
                sys.exit(exc.exit_code)
            msg = " ".join(exc.format_message().split())
            ctx = getattr(exc, "ctx", None)  # its root named pptune however it was run
            command = ("pptune" + ctx.command_path[len(ctx.find_root().info_name or ""):]
                       if ctx is not None else self.command_named(words))
            self.echo_check_error(words, f"{msg} (see {command} --help)", exc.exit_code)
            typer.echo(f"pptune: error: {msg} (see {command} --help)", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("pptune: error: aborted", err=True)
            sys.exit(130)
        except PipeClosed:
            pipe_closed()
        sys.exit(code if isinstance(code, int) else 0)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        """The root's parsing, which prints ``pptune --help``; a closed pipe as
        ``PipeClosed`` (module doc)."""
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            raise PipeClosed from None

    def invoke(self, ctx: Any) -> Any:
        """The subcommand's parsing (its --help) and run; a closed pipe as ``PipeClosed``
        (module doc)."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise PipeClosed from None


    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """The command to run, its options checked for one given twice (module doc)."""
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            sub = cmd.context_class(cmd, info_name=name, parent=ctx)
            found = given_twice(cmd, sub, rest)
            if found:
                raise UsageError(found, ctx=sub)
        return name, cmd, rest

    def echo_check_error(self, argv: list[str], message: str, code: int) -> None:
        """check-config's CI job gets its error document or annotation on stdout even
        when the parser refused the command line; another command given --json its
        error document (``echo_json_error``); nothing otherwise."""
        asked = self.check_output(argv)
        if asked is not None:
            from pptune.cli.check import echo_error

            echo_error(*asked, message, code)
        elif argv and argv[0] != CHECK and argv[0] in self.commands and JSON in (
                argv[:argv.index("--")] if "--" in argv else argv) and any(
                JSON in getattr(p, "opts", ()) for p in self.commands[argv[0]].params):
            echo_json_error(message, code)

    def takes_value(self, command: str) -> set[str]:
        """The option names of ``command`` that take a value (not flags)."""
        return {name for p in self.commands[command].params
                if getattr(p, "param_type_name", "") == "option" and not getattr(
                    p, "is_flag", False) and not getattr(p, "count", False)
                for name in (*p.opts, *p.secondary_opts)}

    def check_output(self, argv: list[str]) -> tuple[str, Path | None] | None:
        """check-config's output (json or github) and CONFIG as ``argv`` asks for them,
        read without the parser that just refused it; None for other commands and text."""
        if not argv or argv[0] != "check-config" or argv[0] not in self.commands:
            return None
        takes_value = self.takes_value(argv[0])
        output, as_json, config = "text", False, None
        i = 1
        while i < len(argv):
            name, eq, value = argv[i].partition("=")
            if argv[i] == "--":
                config = config or (argv[i + 1] if i + 1 < len(argv) else None)
                break
            if name == "--json":
                as_json = True
            elif name == "--output":
                output = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
                i += 0 if eq else 1
            elif name in takes_value and not eq:
                i += 1  # its value
            elif not argv[i].startswith("-") and config is None:
                config = argv[i]
            i += 1
        kind = "json" if as_json else output
        return (kind, Path(config) if config else None) if kind in ("json", "github") \
            else None

    def empty_value(self, argv: list[str]) -> str | None:
        """The first option of the command given an empty value (``-o ""``,
        ``--profile=``), None when there is none: a value option's empty string
        becomes ``Path("")``, the working folder, which no one means."""
        if not argv or argv[0] not in self.commands:
            return None
        takes_value = self.takes_value(argv[0])
        for i, arg in enumerate(argv[1:], 1):
            if arg == "--":
                break
            name, eq, value = arg.partition("=")
            if name in takes_value and ((eq and not value.strip()) or (
                    not eq and i + 1 < len(argv) and not argv[i + 1].strip())):
                return name
        return None


def given_twice(cmd: Any, ctx: Any, args: list[str]) -> str | None:
    """The error for the first single-valued option ``args`` give two values (or two
    ways), None when none does (module doc). A command line the parser refuses is left
    to it."""
    try:
        _, _, order = cmd.make_parser(ctx).parse_args(args=list(args))
    except UsageError:
        return None
    for param in dict.fromkeys(order):
        if getattr(param, "param_type_name", "") != "option" or param.multiple or param.count:
            continue
        spelled = _spellings(param, args)
        if param.is_flag:
            no = [s for s in spelled if s in param.secondary_opts]
            yes = [s for s in spelled if s not in param.secondary_opts]
            if no and yes:
                return (f"{yes[0]} and {no[0]} are both given; give one (pptune does not "
                        "take the last)")
            continue
        n = order.count(param)
        values = [v for _, v in spelled]
        if n > 1 and (len(values) != n or len(set(values)) > 1):
            flag = "/".join(dict.fromkeys(name for name, _ in spelled)) or param.opts[0]
            times = "twice" if n == 2 else f"{n} times"
            said = f": {', '.join(values[:-1])} and {values[-1]}" if len(values) == n else ""
            return (f"{flag} is given {times}{said}; give it once (pptune does not take "
                    "the last)")
    return None


def _spellings(param: Any, args: list[str]) -> list[Any]:
    """How ``args`` give ``param``: its flag names for a flag, else (name, value) pairs;
    for the message only (the parser counted)."""
    names = {*param.opts, *param.secondary_opts}
    out: list[Any] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if param.is_flag:
            out += [arg] if arg in names else []
        elif arg in names and i + 1 < len(args):
            out.append((arg, args[i + 1]))
            i += 1
        elif eq and name.startswith("--") and name in names:
            out.append((name, value))
        elif not arg.startswith("--") and arg[:2] in names and len(arg) > 2:
            out.append((arg[:2], arg[2:]))  # -m8
        i += 1
    return out


def print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"pptune {version('pptune')}")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree
            typer.echo("pptune (version unknown: not installed)")
        raise typer.Exit(0)


def json_asked() -> bool:
    """Whether the running command (not check-config, whose document names the file) was
    given --json."""
    ctx = get_current_context(silent=True)
    if ctx is None or ctx.command.name == CHECK:
        return False
    return any(JSON in getattr(p, "opts", ()) and ctx.params.get(p.name)
               for p in ctx.command.params)


def echo_json_error(message: str, code: int) -> None:
    """A command asked for --json that refuses its input (exit 2, before any result is
    printed) prints ``{"exit_code": 2, "error": "..."}`` on stdout, so a script reading
    it never sees nothing (the one line on stderr too). A command that ran and found
    nothing (exit 1: no feasible plan) prints its own result document instead."""
    from pptune.files import dumps_json

    typer.echo(dumps_json({"exit_code": code, "error": " ".join(message.split())}, indent=2))
