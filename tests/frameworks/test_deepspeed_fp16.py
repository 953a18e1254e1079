"""DeepSpeed's files state FP16 (its "fp16" section), not FP8: recommend --framework
deepspeed searches and emits FP16 plans, and check-config reads them back as FP16."""

from __future__ import annotations

import json
from pathlib import Path

from pptune.costmodel.keys import CostKey, Precision
from pptune.frameworks.deepspeed.adapter import ADAPTER
from tests.conftest import Cli


def test_its_files_state_fp16_and_not_fp8() -> None:
    assert ADAPTER.cannot_state(CostKey(precision=Precision.FP16)) is None
    assert ADAPTER.cannot_state(CostKey(precision=Precision.FP8)) == (
        "DeepSpeed files here state no precision fp8")


def test_an_fp16_plan_is_emitted_with_the_fp16_section(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    r = cli("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--gpu", "a100-80gb",
            "--precision", "fp16", "--framework", "deepspeed", "--emit", "deepspeed",
            "-o", out)
    assert r.exit_code == 0, r.output
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["fp16"] == {"enabled": True} and "bf16" not in ds
    checked = cli("check-config", out / "ds_config.json", "--json")
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["config"]["precision"] == "fp16"
