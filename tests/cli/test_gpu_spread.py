"""--gpu-spread: the job's slowest GPU sets the analytic compute rates, said on the cost line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from tests.conftest import Cli

ErrorLine = Callable[[Result], str]

CONFIG = "pp: 2\ngpus: 16\nmicro_batch_size: 1\nglobal_batch: 64\nmodel: gpt3-1.3b\ngpu: h100-sxm\n"


def _plan(cli: Cli, *extra: str) -> tuple[dict, str]:
    r = cli("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--pp", "2", "--json", *extra)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["plans"][0], r.stderr


def test_recommend_prices_the_slowest_of_its_gpus(cli: Cli) -> None:
    slow, talk = _plan(cli)
    median, quiet = _plan(cli, "--gpu-spread", "0")
    assert "compute at the slowest of 8 GPUs' pace (-2.4%)" in talk
    assert "slowest" not in quiet
    # the same plan, slower by at most the compute factor 1.025 (memory and links keep theirs)
    assert slow["stage_layers"] == median["stage_layers"]
    assert median["step_time_s"] < slow["step_time_s"] <= 1.025 * median["step_time_s"]
    wider, _ = _plan(cli, "--gpu-spread", "0.1")
    assert wider["step_time_s"] > slow["step_time_s"]


def test_check_config_takes_the_spread_and_its_world(cli: Cli, tmp_path: Path) -> None:
    cfg = tmp_path / "job.yaml"
    cfg.write_text(CONFIG)

    def source(*extra: str) -> tuple[str, float]:
        r = cli("check-config", cfg, "--output", "json", "--no-compare", *extra)
        doc = json.loads(r.stdout)
        return doc["derived"]["cost_source"], doc["derived"]["step_time_s"]

    paced, slow = source()
    plain, median = source("--gpu-spread", "0")
    assert "slowest of 16 GPUs' pace (-3.0%)" in paced  # the config's world: 16 GPUs
    assert "slowest" not in plain and median < slow


def test_bad_spread_is_one_line(cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("recommend", "--gpus", "8", "--gpu-spread", "0.7"))
    assert "--gpu-spread must be in [0, 0.5] (got 0.7)" in line


def test_simulate_paces_the_pipeline_it_simulates(cli: Cli) -> None:
    r = cli("simulate", "--model", "gpt3-1.3b", "--pp", "4", "--tp", "2", "--schedule", "1f1b",
            "--microbatches", "8")
    assert r.exit_code == 0, r.stderr
    assert "slowest of 8 GPUs' pace" in r.stderr  # its pp 4 x tp 2 GPUs
