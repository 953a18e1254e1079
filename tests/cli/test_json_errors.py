"""Under --json a command refused as bad input (exit 2) prints its error document on
stdout, ``{"exit_code": 2, "error": ...}``, in the words of its one stderr line, so a
script parsing stdout never reads nothing: a refusal by pptune's own checks, and by the
option parser. A command that ran and found nothing (exit 1: no feasible plan) prints
its own result document alone, and without --json stdout stays empty."""

from __future__ import annotations

import json
from collections.abc import Callable

from typer.testing import Result

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]


def document(result: Result, error_line: ErrorLine) -> dict[str, object]:
    line = error_line(result)  # exit 2, one stderr line, stdout the document if any
    doc = json.loads(result.stdout)
    assert doc == {"exit_code": 2, "error": line.removeprefix("pptune: error: ")}
    return doc


def test_recommend_refused_by_its_checks_prints_the_error_document(cli: Cli,
                                                                   error_line: ErrorLine) -> None:
    doc = document(cli("recommend", "--json", "--gpus", "0"), error_line)
    assert doc["error"] == "--gpus must be >= 1 (got 0)"


def test_a_value_the_parser_refuses_prints_it_too(cli: Cli, error_line: ErrorLine) -> None:
    doc = document(cli("simulate", "--pp", "x", "--json"), error_line)
    assert str(doc["error"]).startswith("Invalid value for '--pp'")


def test_without_json_stdout_stays_empty(cli: Cli, error_line: ErrorLine) -> None:
    result = cli("recommend", "--gpus", "0")
    error_line(result)
    assert result.stdout == ""


def test_json_after_a_double_dash_is_not_the_flag(cli: Cli, error_line: ErrorLine) -> None:
    result = cli("recommend", "--gpus", "x", "--", "--json")
    error_line(result)
    assert result.stdout == ""


def test_no_feasible_plan_prints_the_plans_document_alone(cli: Cli) -> None:
    result = cli("recommend", "--json", "--gpus", "2", "--model", "llama3.1-405b", "--top", "1")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)  # one document: a second would not parse
    assert doc["plans"] == [] and doc["rejected"]["out_of_memory"] > 0


def test_check_config_of_stdin_says_it_reads_files(cli: Cli, error_line: ErrorLine) -> None:
    """'-' is not stdin to check-config: one line saying so, not "not found: -"."""
    assert error_line(cli("check-config", "-")) == (
        "pptune: error: check-config reads CONFIG from a file, not from stdin ('-'): save it "
        "to a file and give its path")
