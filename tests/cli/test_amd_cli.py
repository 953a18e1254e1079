"""The AMD Instinct presets through the command line: listed, and planned for."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_presets_list_the_amd_gpus() -> None:
    r = run("presets")
    assert r.exit_code == 0 and "mi300x" in r.stdout and "mi325x" in r.stdout
    gpus = {g["name"]: g for g in json.loads(run("presets", "--json").stdout)["gpus"]}
    assert gpus["mi300x"]["fabric"]["mesh_link_bytes_per_s"] == 46.552e9
    assert gpus["mi300x"]["fabric"]["nvls_busbw_bytes_per_s"] is None
    assert gpus["h100-sxm"]["fabric"]["mesh_link_bytes_per_s"] is None


@pytest.mark.parametrize("args", [
    ("--gpus", "8", "--model", "llama3-8b"),
    ("--gpus", "64", "--model", "llama3-70b", "--precision", "fp8"),
])
def test_recommend_plans_on_mi300x(args: tuple[str, ...]) -> None:
    r = run("recommend", *args, "--gpu", "mi300x", "--top", "1", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["plans"] and doc["plans"][0]["step_time_s"] > 0


def test_mxfp8_on_mi300x_is_one_line() -> None:
    r = run("recommend", "--gpus", "8", "--model", "llama3-8b", "--gpu", "mi300x",
            "--precision", "mxfp8")
    assert r.exit_code == 2
    lines = [x for x in r.stderr.splitlines() if x.startswith("pptune: error:")]
    assert len(lines) == 1 and "mi300x" in lines[0] and "Traceback" not in r.output
