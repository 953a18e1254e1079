"""pptune's command line: parse -> call -> render -> exit code. No arithmetic here.

stdout carries data (tables, --json); stderr carries talk (notes, warnings,
errors). Domain errors (``PptuneError``) become one line on stderr and their
exit code in one place, ``_guard``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from pptune.cli.errors import (
    OneLineErrors,
    echo_json_error,
    json_asked,
    pipe_closed,
    print_version,
)
from pptune.cli.util import out_console as _out
from pptune.cli.util import show as _show
from pptune.errors import BadInput, PptuneError
from pptune.files import dumps_json

F = TypeVar("F", bound=Callable[..., Any])


app = typer.Typer(
    cls=OneLineErrors,
    name="pptune",
    help="Pipeline-parallel tuning advisor: probe your cards, simulate schedules, "
    "recommend stage splits and micro-batches, check training configs in CI.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=print_version, is_eager=True,
                                 help="print pptune's version and exit"),
) -> None:
    """Pipeline-parallel tuning advisor."""


def _guard(fn: F) -> F:
    """Map PptuneError to one stderr line and its exit code (under --json a refusal's
    error document on stdout besides: errors.echo_json_error); nothing else.

    The class carries the code: BadInput / MissingDependency 2, NoFeasiblePlan
    and RunFailed (a rank failed, died or hung at run time) 1.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PptuneError as exc:
            msg = " ".join(str(exc).split())
            if exc.exit_code == 2 and json_asked():  # refused before any result was printed
                echo_json_error(msg, exc.exit_code)
            typer.echo(f"pptune: error: {msg}", err=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


# --------------------------------------------------------------------------- presets / schema

PRESETS_HELP = "List the built-in model and GPU presets with their numbers.\n\n  pptune presets --json"


def presets_cmd(as_json: bool = typer.Option(False, "--json", help="machine-readable")) -> None:
    from pptune.report.presets import presets_json, presets_tables

    if as_json:
        typer.echo(dumps_json(presets_json(), indent=2))
        return
    out = _out()
    for table in presets_tables():
        _show(out, table)


SCHEMA_HELP = """Print the JSON Schema of a file pptune reads or writes.

\b
  pptune schema profile     (what pptune probe writes and --profile reads)
  pptune schema plan        (what pptune recommend --json / -o writes)
  pptune schema config      (pptune's own training config for check-config)
"""


def schema_cmd(kind: str = typer.Argument(..., help="profile, plan or config")) -> None:
    from pptune import schemas

    models: dict[str, Any] = {
        "profile": schemas.Profile, "plan": schemas.PlanFile, "config": schemas.TrainingConfig,
    }
    if kind not in models:
        raise BadInput(f"unknown schema {kind!r}; choose one of: {', '.join(models)}")
    typer.echo(dumps_json(models[kind].model_json_schema(), indent=2))


def _register_modules() -> None:
    """Every command, in the order ``--help`` lists them (most live in their own modules,
    each importing its heavy parts lazily)."""
    from pptune.cli import calibrate as cli_calibrate
    from pptune.cli import check as cli_check
    from pptune.cli import observe as cli_observe
    from pptune.cli import probe as cli_probe
    from pptune.cli import recommend as cli_recommend
    from pptune.cli import simulate as cli_simulate
    from pptune.cli import tune as cli_tune
    from pptune.cli import validate as cli_validate

    app.command("simulate", help=cli_simulate.SIMULATE_HELP)(_guard(cli_simulate.simulate_cmd))
    app.command("recommend", help=cli_recommend.RECOMMEND_HELP)(
        _guard(cli_recommend.recommend_cmd))
    app.command("presets", help=PRESETS_HELP)(_guard(presets_cmd))
    app.command("schema", help=SCHEMA_HELP)(_guard(schema_cmd))
    app.command("check-config", help=cli_check.CHECK_HELP)(_guard(cli_check.check_config))
    app.command("probe", help=cli_probe.HELP)(_guard(cli_probe.probe))
    app.command("validate", help=cli_validate.HELP)(_guard(cli_validate.validate))
    app.command("trace-report", help=cli_observe.TRACE_REPORT_HELP)(_guard(cli_observe.trace_report))
    app.command("monitor", help=cli_observe.MONITOR_HELP)(_guard(cli_observe.monitor))
    app.command("tune", help=cli_tune.HELP)(_guard(cli_tune.tune))
    app.command("calibrate", help=cli_calibrate.HELP, cls=cli_calibrate.InOrder)(
        _guard(cli_calibrate.calibrate))


_register_modules()


def main() -> None:
    """The console script. A reader that closed stdout before the last flush exits 141
    without a word, as a write into it does (errors.py, module doc)."""
    try:
        try:
            app()
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        pipe_closed()
    except PptuneError as exc:  # raised outside a guarded command
        print(f"pptune: error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
