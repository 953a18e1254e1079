"""pptune's command line: parse -> call -> render -> exit code. No arithmetic here."""

from __future__ import annotations

import sys

import typer

from pptune.errors import PptuneError

app = typer.Typer(
    name="pptune",
    help="Pipeline-parallel tuning advisor: probe your cards, simulate schedules, "
    "recommend stage splits and micro-batches, check training configs in CI.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _register() -> None:
    from pptune import cli_probe

    app.command("probe", help=cli_probe.HELP)(cli_probe.probe)


_register()


def fail(exc: PptuneError) -> None:
    """The one place a domain error becomes a line on stderr and an exit code."""
    msg = str(exc).replace("\n", " ")
    print(f"pptune: error: {msg}", file=sys.stderr)
    raise SystemExit(exc.exit_code)


def main() -> None:
    try:
        app(standalone_mode=True)
    except PptuneError as exc:
        fail(exc)
