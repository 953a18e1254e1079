"""simulate --gpus N: the job's GPUs price the one pipeline's compute pace; bad counts are
refused in one line, exit 2, in recommend's words for --gpus."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from typer.testing import Result

Cli = Callable[..., Result]  # the ``cli`` fixture of tests/conftest.py
ErrorLine = Callable[[Result], str]
EXAMPLE = ("simulate", "--model", "llama3-8b", "--pp", "2", "--schedule", "zbv",
           "--microbatches", "128", "--split", "8,9,8,7")


def test_gpus_sets_the_pace_and_the_json_says_so(cli: Cli) -> None:
    job = cli(*EXAMPLE, "--gpus", "8", "--json")
    alone = cli(*EXAMPLE, "--json")
    assert job.exit_code == 0 and alone.exit_code == 0, job.stderr + alone.stderr
    assert "compute at the slowest of 8 GPUs' pace (-2.4%)" in job.stderr
    assert "one pipeline's schedule on 2 of the job's 8 GPUs" in job.stderr
    doc, one = json.loads(job.stdout), json.loads(alone.stdout)
    assert (doc["gpus"], one["gpus"]) == (8, 2)  # the GPUs whose slowest sets the pace
    assert doc["step_time_s"] > one["step_time_s"]


def test_textbook_times_take_no_gpu_count(cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("simulate", "--fwd-ms", "1", "--bwd-ms", "2", "--gpus", "8"))
    assert "drop --gpus" in line
    doc = json.loads(cli("simulate", "--fwd-ms", "1", "--bwd-ms", "2", "--json").stdout)
    assert doc["gpus"] is None


@pytest.mark.parametrize(("args", "said"), [
    (("--gpus", "1"), "--gpus must be >= 2 (got 1): one pipeline is --pp 2 x --tp 1 x "
                      "--cp 1 = 2 GPUs"),
    (("--gpus", "9"), "one pipeline's --pp 2 x --tp 1 x --cp 1 = 2 GPUs must divide --gpus 9 "
                      "(the job runs whole pipelines): e.g. --gpus 8 or 10"),
    (("--gpus", "12", "--tp", "4"), "one pipeline's --pp 2 x --tp 4 x --cp 1 = 8 GPUs must "
                                    "divide --gpus 12 (the job runs whole pipelines): e.g. "
                                    "--gpus 8 or 16"),
    (("--gpus", "0"), "--gpus must be >= 1 (got 0)"),
    (("--gpus", "200000"), "--gpus must be <= 131,072 (got 200000): pptune's cap, "
                           "see docs/limits.md"),
])
def test_bad_gpu_counts_are_one_line(cli: Cli, error_line: ErrorLine, args: tuple[str, ...],
                                     said: str) -> None:
    line = error_line(cli(*EXAMPLE, *args))
    assert line == f"pptune: error: {said}"


def test_expert_groups_must_fit_the_jobs_stage_ranks(cli: Cli, error_line: ErrorLine) -> None:
    """ep 8 at tp 1 on pp 2: a stage has dp ranks, 4 of --gpus 8 (refused, as recommend's
    layouts refuse it), 8 of --gpus 16."""
    moe = ("simulate", "--model", "mixtral-8x7b", "--pp", "2", "-m", "8", "--ep", "8")
    line = error_line(cli(*moe, "--gpus", "8"))
    assert line == ("pptune: error: --gpus 8: ep x etp = 8 x 1 must divide tp x cp x dp = "
                    "1 x 1 x 4 (the ranks of one pipeline stage)")
    r = cli(*moe, "--gpus", "16", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["gpus"] == 16
