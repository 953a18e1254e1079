"""recommend --emit torchtitan for an FP8 mixture of experts: the routed experts' grouped
GEMMs run FP8 only under quantize.grouped_mm.float8, on SM90 GPUs, at pp 1 and cp 1
(frameworks/torchtitan/converters.py); the file states what was priced, and check-config
prices it back the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()
GROUPED = "quantize.grouped_mm.float8"


@pytest.mark.parametrize("gpu, fp8_experts", [("h200", True), ("b200", False)])
def test_fp8_moe_plan_states_the_experts_converter_where_it_runs(
        gpu: str, fp8_experts: bool, tmp_path: Path) -> None:
    r = runner.invoke(app, ["recommend", "--model", "qwen3-30b-a3b", "--gpu", gpu, "--gpus",
                            "64", "--precision", "fp8", "--fp8-kernels", "torchao", "--ep", "8",
                            "--pp", "1", "--emit", "torchtitan", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    text = (tmp_path / "torchtitan.toml").read_text()
    assert (f'"{GROUPED}"]' in text) is fp8_experts
    assert (f'[{GROUPED}]\nfqns = ["experts"]' in text) is fp8_experts
    said = "torchtitan runs the routed experts in BF16 here" in r.stderr
    assert said is not fp8_experts
    if not fp8_experts:
        assert "SM90 kernels only" in r.stderr and "# the routed experts run BF16" in text
    predicted = float(text.split("# predicted: step ")[1].split(" s,")[0])
    r = runner.invoke(app, ["check-config", str(tmp_path / "torchtitan.toml"), "--output",
                            "json", "--no-compare"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["findings"]
    assert doc["config"]["expert_precision"] == (None if fp8_experts else "bf16")
    assert round(doc["derived"]["step_time_s"], 3) == predicted
