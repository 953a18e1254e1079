"""recommend --framework torchtitan prices a mixture's plans at the expert sizes torchtitan
runs them with: ep 1 and tp > 1 shard the experts by tp (Adapter.as_stated)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pptune.costmodel.keys import CostKey
from pptune.costmodel.presets import MODELS
from pptune.frameworks.torchtitan.adapter import ADAPTER as TORCHTITAN
from pptune.plan.emit import emit
from pptune.plan.framework_search import FrameworkSearch
from pptune.plan.recommend import RecommendSpec, recommend
from tests.check_json import check_file

QWEN = MODELS["qwen3-30b-a3b"]


def test_ep_1_runs_the_experts_at_etp_tp() -> None:
    assert TORCHTITAN.as_stated(CostKey(tp=4), QWEN) == CostKey(tp=4, etp=4)
    assert TORCHTITAN.as_stated(CostKey(tp=4, ep=8), QWEN) == CostKey(tp=4, ep=8)
    assert TORCHTITAN.as_stated(CostKey(tp=1), QWEN) == CostKey(tp=1)
    # a dense model has no experts to shard
    assert TORCHTITAN.as_stated(CostKey(tp=4), MODELS["llama3-8b"]) == CostKey(tp=4)


def test_the_search_keys_are_restated_and_said() -> None:
    within = FrameworkSearch(TORCHTITAN, 4096, "qwen3-30b-a3b", QWEN)
    keys = (CostKey(tp=2), CostKey(tp=2, etp=2), CostKey(tp=2, ep=4))
    assert within.keys(keys) == (CostKey(tp=2, etp=2), CostKey(tp=2, ep=4))
    assert within.dropped(keys) is None
    assert within.restated(keys) == (
        "torchtitan shards a mixture's experts by tp where ep is 1 (its tensor-parallel "
        "plan): priced tp 2 ep 1 at etp 2")


def test_plan_1_is_written_and_checked_at_its_listed_step(tmp_path: Path) -> None:
    run = recommend(replace(RecommendSpec.of(gpus=16, model="qwen3-30b-a3b", tp="2", ep="1",
                                             seq_len=4096, top=1), framework="torchtitan"))
    best = run.result.plans[0]
    assert (best.tp, best.ep, best.etp) == (2, 1, 2)
    out = emit("torchtitan", run)
    assert out.plan.spec == best.spec
    code, found, doc = check_file(tmp_path / "torchtitan.toml", out.files["torchtitan.toml"],
                                  "--gpus", "16")
    assert code == 0 and not [f for f, severity in found.items() if severity == "error"]
    assert doc["derived"]["step_time_s"] == pytest.approx(best.step_time_s, rel=1e-3)


def test_megatrons_fp8_param_gather_is_no_what_if_for_torchtitan() -> None:
    notes = {fw: recommend(replace(RecommendSpec.of(gpus=8, precision="fp8", top=1),
                                   framework=fw)).result.notes
             for fw in ("torchtitan", "megatron")}
    assert not [n for n in notes["torchtitan"] if "--fp8-param-gather" in n]
    assert [n for n in notes["megatron"] if n.startswith("not searched: --fp8-param-gather")]
