"""Recomputation by module as a searched choice (``Recompute.MODULES``).

Megatron-LM's ``--recompute-granularity selective --recompute-modules``: a MoE or
MLA model's searched set is every module megatron-core accepts for it
(``mla_up_proj`` with MLA, ``mlp`` for its dense blocks, ``moe_act`` for grouped
expert GEMMs outside the delayed FP8 recipe). Its costs are the analytic
model's with those modules recomputed (test_block_types.py derives them), kept
beside the plain table; a dense model has none to search.
"""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.evaluate import PlanRequest, PlanSpec, evaluate
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.memory import Recompute, with_recompute
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.recompute_modules import searched_modules
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import search
from pptune.costmodel.sharding import Sharding
from pptune.costs.profiles import analytic_profile, cost_table, preset_tables

DS = dataclasses.replace(presets.MODELS["deepseek-v3"], num_blocks=6, seq_len=1024,
                         experts=16, top_k=4)


def test_the_searched_modules_are_those_megatron_accepts_for_the_model() -> None:
    ds = presets.MODELS["deepseek-v3"]
    assert searched_modules(ds, Precision.BF16) == ("mla_up_proj", "mlp", "moe_act")
    # the delayed FP8 recipe (what pptune emits for fp8) refuses moe_act
    assert searched_modules(ds, Precision.FP8) == ("mla_up_proj", "mlp")
    assert searched_modules(ds, Precision.MXFP8) == ("mla_up_proj", "mlp", "moe_act")
    # every Mixtral block is MoE, no MLA: only the experts' activation
    assert searched_modules(presets.MODELS["mixtral-8x7b"], Precision.BF16) == ("moe_act",)
    # moe_act needs the grouped expert GEMM
    assert searched_modules(presets.MODELS["mixtral-8x7b"], Precision.BF16,
                            grouped_gemm=False) == ()
    assert searched_modules(presets.MODELS["llama3-8b"], Precision.BF16) == ()


def _tables(key: CostKey = CostKey(ep=2)) -> tuple[object, object]:
    source = preset_tables(DS, "h100-sxm", (1,))
    return source(key), source


def test_a_moe_table_carries_its_module_recomputed_twin() -> None:
    table, _ = _tables()
    twin = table.modules_table  # type: ignore[attr-defined]
    assert twin is not None and twin.recompute_modules == ("mla_up_proj", "mlp", "moe_act")
    direct = cost_table(analytic_profile(
        DS, "h100-sxm", (1,), experts=ExpertParallel(ep=2),
        recompute_modules=frozenset(twin.recompute_modules)))
    assert list(twin.by_mb[1].act_bytes) == list(direct.by_mb[1].act_bytes)
    assert list(twin.by_mb[1].bwd_s) == list(direct.by_mb[1].bwd_s)
    # recomputing drops activations and reruns forwards in B; F and W stay
    plain = table.by_mb[1]  # type: ignore[attr-defined]
    blocks = range(1, 1 + DS.num_blocks)
    assert all(twin.by_mb[1].act_bytes[i] < plain.act_bytes[i] for i in blocks)
    assert all(twin.by_mb[1].bwd_s[i] > plain.bwd_s[i] for i in blocks)
    assert list(twin.by_mb[1].fwd_s) == list(plain.fwd_s)
    assert list(twin.by_mb[1].wgrad_s) == list(plain.wgrad_s)
    assert with_recompute(table, Recompute.MODULES) is twin  # type: ignore[arg-type]


def test_a_dense_table_has_no_modules_to_recompute() -> None:
    table = preset_tables("llama3-8b", "h100-sxm", (1,))(CostKey())
    assert table.modules_table is None
    assert with_recompute(table, Recompute.MODULES) is table


def test_a_modules_plan_is_the_plain_plan_of_the_twin_table() -> None:
    table, _ = _tables()
    req = PlanRequest(gpus=8, global_batch=16, reserve_bytes=0.0, cost_keys=(CostKey(ep=2),))
    spec = PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 4, (4, 4), recompute=Recompute.MODULES,
                    key=CostKey(ep=2))
    plan = evaluate(table, req, spec)  # type: ignore[arg-type]
    same = evaluate(table.modules_table, req,  # type: ignore[attr-defined]
                    dataclasses.replace(spec, recompute=Recompute.NONE))
    assert plan.step_time_s == pytest.approx(same.step_time_s)
    assert plan.peak_memory_bytes == pytest.approx(same.peak_memory_bytes)


def _request(recomputes: tuple[Recompute, ...]) -> PlanRequest:
    return PlanRequest(gpus=8, global_batch=16, reserve_bytes=0.0, cost_keys=(CostKey(ep=2),),
                       pp=(2,), schedules=(Schedule.ONE_F_ONE_B,), shardings=(Sharding.NONE,),
                       recomputes=recomputes, stage_recompute=False)


def _limited(limit: float) -> object:
    return preset_tables(DS, dataclasses.replace(presets.GPUS["h100-sxm"], memory_bytes=limit),
                         (1,))


def _leanest(table: object, recompute: Recompute) -> float:
    """The smallest peak over every two-stage split of ``table``'s layers."""
    n = len(table.names)  # type: ignore[attr-defined]
    req = _request((recompute,))
    return min(max(evaluate(table, req, PlanSpec(  # type: ignore[arg-type]
        Schedule.ONE_F_ONE_B, 2, 1, 4, (a, n - a), recompute=recompute, key=CostKey(ep=2),
    )).peak_memory_bytes) for a in range(1, n))


def test_the_search_finds_module_recomputation_where_memory_binds() -> None:
    table, _ = _tables()
    plain, twin = _leanest(table, Recompute.NONE), _leanest(table, Recompute.MODULES)
    assert twin < plain
    # between the two: no split fits without recomputation, some with the modules
    limit = (plain + twin) / 2
    assert not search(_limited(limit), _request((Recompute.NONE,))).plans  # type: ignore[arg-type]
    found = search(_limited(limit), _request((Recompute.NONE, Recompute.MODULES)))  # type: ignore[arg-type]
    assert found.plans and {p.recompute for p in found.plans} == {Recompute.MODULES}


def test_a_dense_search_offers_no_module_plans() -> None:
    req = PlanRequest(gpus=8, global_batch=64, reserve_bytes=0.0,
                      recomputes=(Recompute.NONE, Recompute.MODULES))
    result = search(preset_tables("llama3-8b", "h100-sxm", (1, 2)), req)
    assert result.plans and all(p.recompute is Recompute.NONE for p in result.plans)


def test_modules_are_not_tried_where_the_plan_fits_without_recomputation() -> None:
    # plenty of memory: every plan fits as it is, and recomputing modules would only
    # rerun forwards; the search says so in its rejections instead of listing twins
    _, source = _tables()
    result = search(source, _request((Recompute.NONE, Recompute.MODULES)))  # type: ignore[arg-type]
    assert result.plans and {p.recompute for p in result.plans} == {Recompute.NONE}
    assert result.rejected["modules_fit_without_recomputation"] > 0


def test_no_listed_plan_recomputes_where_its_split_fits_faster_without() -> None:
    """GPT-OSS-120B on 64 B200s, pp 4 v 3 ep 8: the split refined for the plan that
    recomputes modules (4,3x6,4,4,4,3,1) fits without recomputation too and runs it
    faster than the split refined for the plain plan from its own start; the list
    shows it, so no plan that recomputes beats every plain one on its own split."""
    from pptune.plan.recommend import RecommendSpec, recommend

    run = recommend(RecommendSpec.of(
        gpus=64, model="gpt-oss-120b", gpu="b200", global_batch=512,
        schedules=["1f1b", "interleaved-1f1b"], virtual_stages=[3], pp=[4], ep=[8], tp=[1],
        micro_batch_sizes=[2], sharding="zero1", top=5))
    plans = run.result.plans
    plain = {(tuple(p.stage_layers), p.a2a_overlap): p.step_time_s for p in plans
             if p.recompute is Recompute.NONE}
    redone = [p for p in plans if p.recompute is not Recompute.NONE and p.pp > 1]
    assert redone and plans[0].recompute is Recompute.NONE
    for p in redone:
        assert plain[tuple(p.stage_layers), p.a2a_overlap] < p.step_time_s
