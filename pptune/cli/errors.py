"""Usage errors of the option parser as one line, like every other bad input; --version."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 carries its own copy of click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older typer with click installed
    from click.exceptions import ClickException  # type: ignore[no-redef,import-not-found]


class OneLineErrors(TyperGroup):
    """Usage errors from the option parser as one line ``pptune: error: ...`` (exit 2),
    like every other bad input, instead of click's four-line usage block."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        run: Any = super().main  # click's main takes standalone_mode by keyword
        if not standalone_mode:
            return run(*args, standalone_mode=False, **kwargs)
        try:
            code = run(*args, standalone_mode=False, **kwargs)
        except ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `pptune`: the help itself
                typer.echo(exc.format_message())
                sys.exit(exc.exit_code)
            msg = " ".join(exc.format_message().split())
            command = getattr(getattr(exc, "ctx", None), "command_path", "") or "pptune"
            typer.echo(f"pptune: error: {msg} (see {command} --help)", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("pptune: error: aborted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


def print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"pptune {version('pptune')}")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree
            typer.echo("pptune (version unknown: not installed)")
        raise typer.Exit(0)
