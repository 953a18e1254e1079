"""An option that takes one value, given twice with two values, is one error line and
exit 2 in every command (pptune/cli/errors.py: click would keep the last value without a
word); options meant to repeat, and an option or flag that says one thing twice, keep
working."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import typer
from typer.testing import Result

from pptune.cli.errors import given_twice

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]


def commands(app: typer.Typer) -> dict[str, Any]:
    return dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def single_valued(app: typer.Typer) -> list[tuple[str, str]]:
    return [(name, p.opts[-1]) for name, cmd in commands(app).items() for p in cmd.params
            if getattr(p, "param_type_name", "") == "option" and not p.is_flag
            and not p.multiple and not p.count]


def test_every_single_valued_option_of_every_command_is_refused_twice(
        app: typer.Typer, cli: Cli, error_line: ErrorLine) -> None:
    """Refused before the values are read or any work starts: "1" and "2" need not be
    values the option accepts."""
    walked = single_valued(app)
    assert len(walked) > 100 and {n for n, _ in walked} == {
        "simulate", "recommend", "check-config", "probe", "validate", "trace-report",
        "monitor", "tune", "calibrate"}  # presets and schema take no valued option
    for name, flag in walked:
        line = error_line(cli(name, flag, "1", flag, "2"))
        assert line.startswith(f"pptune: error: {flag} is given twice: 1 and 2; give it "
                               "once (pptune does not take the last)"), (name, line)


def test_recommend_cp_twice_is_the_trial_case(cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("recommend", "--gpus", "8", "--cp", "16", "--cp=8"))
    assert line.startswith("pptune: error: --cp is given twice: 16 and 8; give it once")


def test_short_and_long_spellings_count_together(cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("simulate", "-m", "4", "--microbatches", "8", "-m16"))
    assert line.startswith("pptune: error: -m/--microbatches is given 3 times: 4, 8 and 16;")


def test_a_flag_given_both_ways_is_refused(cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("recommend", "--gpus", "8", "--no-overlap-grad-reduce",
                          "--overlap-grad-reduce"))
    assert line.startswith("pptune: error: --overlap-grad-reduce and --no-overlap-grad-reduce "
                           "are both given; give one")


def test_a_flag_given_twice_the_same_way_keeps_working(cli: Cli) -> None:
    r = cli("presets", "--json", "--json")
    assert r.exit_code == 0 and "models" in json.loads(r.stdout)


def test_options_meant_to_repeat_are_not_counted(app: typer.Typer) -> None:
    """calibrate's --run / --step-s / per-run --gpus, check-config's --env: click's
    ``multiple``; calibrate pairs them itself (its own "given twice for --run" check)."""
    cmds = commands(app)
    calibrate = cmds["calibrate"]
    ctx = calibrate.context_class(calibrate, info_name="calibrate")
    assert given_twice(calibrate, ctx, ["--run", "a.sh", "--gpus", "8", "--step-s", "1",
                                        "--run", "b.sh", "--gpus", "16", "--step-s", "2",
                                        "-o", "cal.json"]) is None
    check = cmds["check-config"]
    ctx = check.context_class(check, info_name="check-config")
    assert given_twice(check, ctx, ["c.sh", "--env", "A=1", "--env", "B=2"]) is None
    assert given_twice(check, ctx, ["c.sh", "--env", "A=1", "--gpus", "8", "--gpus=16"]) == (
        "--gpus is given twice: 8 and 16; give it once (pptune does not take the last)")


def test_one_value_given_twice_leaves_nothing_to_choose(app: typer.Typer, cli: Cli) -> None:
    """A wrapper that adds --output json to a command line that holds it already: the
    same value twice (spelled either way) runs; a third, other value does not."""
    check = commands(app)["check-config"]
    ctx = check.context_class(check, info_name="check-config")
    assert given_twice(check, ctx, ["c.sh", "--output", "json", "--output=json"]) is None
    assert given_twice(check, ctx, ["c.sh", "--output", "json", "--output=json",
                                    "--output", "text"]) == (
        "--output is given 3 times: json, json and text; give it once (pptune does not take "
        "the last)")
    r = cli("recommend", "--gpus", "8", "--top", "1", "--top", "1", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["plans"][0]["rank"] == 1


def test_check_config_json_gets_its_error_document(cli: Cli) -> None:
    r = cli("check-config", "job.sh", "--gpus", "8", "--gpus", "16", "--output", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and doc["file"] == "job.sh"
    assert doc["error"].startswith("--gpus is given twice: 8 and 16;")


@pytest.mark.parametrize("args", [["--", "--cp", "x"], ["--profile", "--cp"]])
def test_what_is_not_an_option_is_not_counted(app: typer.Typer, args: list[str]) -> None:
    cmd = commands(app)["recommend"]
    ctx = cmd.context_class(cmd, info_name="recommend")
    assert given_twice(cmd, ctx, ["--cp", "2", *args]) is None
