"""Interleaving with micro-batches not a multiple of pp: searched in Megatron-LM's
micro-batch groups, written with --microbatch-group-size-per-virtual-pipeline-stage,
checked back as simulated; torch's frameworks run another order, which pptune neither
writes nor prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.costmodel.schedules import Schedule
from pptune.plan.emit import emit
from pptune.plan.recommend import RecommendSpec, recommend
from tests.check_json import check_file

# 8 GPUs, pp 4, dp 2, micro-batch 1: 36 sequences are 18 micro-batches, which groups of
# 4 cannot take (remainder 2 < pp) and groups of 6 can
SPEC = dict(gpus=8, model="llama3-8b", gpu="h100-sxm", pp=[4], cp=[1], tp=[1],
            global_batch=36, schedules="interleaved-1f1b", recompute="full",
            sharding="zero1", top=1)


def _run(**more: object) -> object:
    return recommend(RecommendSpec.of(**{**SPEC, **more}))  # type: ignore[arg-type]


def test_megatron_writes_the_group_it_simulated_and_reads_it_back(tmp_path: Path) -> None:
    run = _run()
    plan = run.result.plans[0]  # type: ignore[attr-defined]
    assert (plan.schedule, plan.pp, plan.num_microbatches) == (Schedule.INTERLEAVED, 4, 18)
    out = emit("megatron", run)  # type: ignore[arg-type]
    script = out.files["pretrain_megatron.sh"]
    assert "--microbatch-group-size-per-virtual-pipeline-stage 6" in script
    code, found, doc = check_file(tmp_path / "run.sh", script)
    assert code == 0 and "schedule-not-modelled" not in found
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    # 18 % 9 == 0: Megatron-LM runs groups of 9 too, in an order pptune does not build
    _, found, _ = check_file(tmp_path / "run9.sh", script.replace(
        "stage 6", "stage 9"), by="message")
    assert ("--microbatch-group-size-per-virtual-pipeline-stage 9; pptune simulates 18 "
            "micro-batches on pp 4 in groups of 6") in found["schedule-not-modelled"]


def test_torchtitan_states_another_plan_and_prices_none_in_torchs_order(
        tmp_path: Path) -> None:
    # tp 2 lets pp 4 take dp 1: 36 micro-batches, a multiple of pp
    run = _run(tp=[1, 2])
    assert run.result.plans[0].num_microbatches == 18  # type: ignore[attr-defined]
    out = emit("torchtitan", run)  # type: ignore[arg-type]
    assert not (out.plan.schedule is Schedule.INTERLEAVED
                and out.plan.num_microbatches % out.plan.pp)
    assert any("in an order of its own" in n for n in out.notes)
    toml = out.files["torchtitan.toml"]
    code, found, _ = check_file(tmp_path / "a.toml", toml)
    assert code == 0 and "schedule-not-modelled" not in found
    # 6 micro-batches on pp 4: torch 2.13 runs them (6 % max(1, 6 // 4) = 0), in its own
    # order, which pptune does not price as Megatron-LM's groups
    assert 'pipeline_parallel_schedule = "Interleaved1F1B"' in toml
    six = toml.replace("local_batch_size = 36", "local_batch_size = 6").replace(
        "global_batch_size = 36", "global_batch_size = 6")
    code, found, _ = check_file(tmp_path / "b.toml", six, by="message")
    assert "in an order of its own" in found["schedule-not-modelled"]
