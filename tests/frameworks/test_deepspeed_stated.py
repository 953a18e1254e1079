"""What DeepSpeed's files state: FP16 (its "fp16" section) but not FP8, searched, emitted
and read back as FP16; AutoTP only without a pipeline, so none where --pp asks one."""

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


def test_autotp_plans_are_left_out_where_pp_asks_for_a_pipeline() -> None:
    # AutoTP runs without a pipeline: with --pp 4 its tp 2 plans are left out of the
    # search (they had been ranked first at pp 1), kept where no group runs pp 4
    from pptune.costmodel.search import PlanRequest
    from pptune.plan.framework_search import FrameworkSearch

    search = FrameworkSearch(ADAPTER, 8192, "llama3-8b", None)
    keys = (CostKey(tp=1), CostKey(tp=2))
    asked = PlanRequest(gpus=32, global_batch=128, pp=[4], cost_keys=keys)
    assert [(g.tp, g.pp) for g in search.groups(asked)] == [(1, [4])]
    free = PlanRequest(gpus=32, global_batch=128, cost_keys=keys)
    assert [(g.tp, g.pp) for g in search.groups(free)] == [(1, None), (2, (1,))]
    only_tp2 = PlanRequest(gpus=32, global_batch=128, pp=[4], cost_keys=keys[1:], tp=2)
    assert [(g.tp, g.pp) for g in search.groups(only_tp2)] == [(2, (1,))]
