"""A MoE model's analytic profile carries its expert parameters and all-to-all times
into the planner's table and through the profile file; a dense one's file is unchanged."""

from __future__ import annotations

import json

import pytest

from pptune.costmodel import presets
from pptune.costmodel.moe import ExpertParallel
from pptune.costs.profiles import analytic_profile, cost_table
from pptune.errors import BadInput
from pptune.schemas import Profile

MIXTRAL = presets.MODELS["mixtral-8x7b"]


def test_moe_profile_round_trips_its_expert_fields() -> None:
    prof = analytic_profile(MIXTRAL, "h100-sxm", [1], tp=2, sequence_parallel=True,
                            experts=ExpertParallel(ep=8))
    block = prof.layers[1]
    # 8 / 8 experts a rank, 3 matrices of 4096 x 14336, bf16
    assert block.expert_param_bytes == 3 * 4096 * 14336 * 2
    assert block.cost(1).fwd_a2a_s > 0 and block.cost(1).bwd_a2a_s > 0
    again = Profile.model_validate(json.loads(prof.model_dump_json()))
    assert again == prof
    table = cost_table(again, tp=2, tp_in_costs=2)
    assert table.expert_param_bytes[1] == block.expert_param_bytes
    assert table.by_mb[1].fwd_a2a_s[1] == block.cost(1).fwd_a2a_s
    assert any("ep=8, etp=1" in n for n in prof.notes)


def test_dense_profile_files_gain_no_keys() -> None:
    doc = json.loads(analytic_profile("gpt-small", "h100-sxm", [1]).model_dump_json())
    assert set(doc["layers"][1]) == {"name", "param_bytes", "per_micro_batch"}
    assert "fwd_a2a_s" not in doc["layers"][1]["per_micro_batch"]["1"]
    table = cost_table(Profile.model_validate(doc))
    assert table.expert_param_bytes == () and table.by_mb[1].fwd_a2a_s == ()


def test_expert_bytes_beyond_a_layers_parameters_are_refused() -> None:
    doc = json.loads(analytic_profile("gpt-small", "h100-sxm", [1]).model_dump_json())
    doc["layers"][1]["expert_param_bytes"] = doc["layers"][1]["param_bytes"] * 2
    with pytest.raises(ValueError, match=r"expert_param_bytes .* exceeds param_bytes"):
        Profile.model_validate(doc)


def test_experts_that_do_not_fit_the_model_name_the_flag() -> None:
    with pytest.raises(BadInput, match="--etp 3 does not divide the expert FFN width 14336"):
        analytic_profile(MIXTRAL, "h100-sxm", [1], experts=ExpertParallel(etp=3))
