"""A user trial: Llama 3 70B in FP8 on 72 GB200s, plan 1 interleaving 128 micro-batches on
pp 9, written for torchtitan and Megatron-LM.

torch's ScheduleInterleaved1F1B refuses 128 on pp 9 (128 // 9 = 14 rounds, 128 % 14 = 2),
so torchtitan's file states another plan; its zero-bubble and DualPipeV schedules cannot
compile the model, so their float8 casts are priced eager and the plan written is one
whose model compiles. Megatron-LM runs the count in micro-batch groups of 13 (megatron-core
0.16: 9 <= 13 <= 128, 128 % 13 = 11 >= 9). Each file passes check-config, priced as its
header says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.costmodel.schedules import SPLIT_BACKWARD, Schedule
from pptune.frameworks.common.torch_schedules import refused_rounds
from pptune.plan.emit import emit
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend
from tests.check_json import check_file


@pytest.fixture(scope="module")
def run() -> RecommendRun:
    # at FlashAttention-2's rates, as the trial priced it (the default, torch's SDPA,
    # prices cuDNN's kernel on a GB200, and plan 1 is then another)
    return recommend(RecommendSpec.of(gpus=72, model="llama3-70b", gpu="gb200",
                                      precision="fp8", attention="flash"))


def test_plan_1_interleaves_a_count_torch_refuses(run: RecommendRun) -> None:
    plan = run.result.plans[0]
    assert (plan.schedule, plan.pp, plan.virtual_stages, plan.num_microbatches) == (
        Schedule.INTERLEAVED, 9, 3, 128)
    assert refused_rounds(128, 9) == 14


def test_torchtitan_writes_a_count_torch_runs_and_a_model_it_compiles(
        run: RecommendRun, tmp_path: Path) -> None:
    out = emit("torchtitan", run)
    assert out.notes[0].startswith(
        "torchtitan cannot express plan 1 (torch's ScheduleInterleaved1F1B refuses 128 "
        "micro-batches on pp 9: they must be a multiple of its round count max(1, m // pp) = "
        "14 (torch 2.13 torch/distributed/pipelining/schedules.py)); emitting the fastest "
        "plan it can run on the same ranks"), out.notes
    written = out.plan
    assert written.schedule is not Schedule.INTERLEAVED or not refused_rounds(
        written.num_microbatches, written.pp)
    # no zero-bubble or DualPipeV plan, whose float8 casts run eager, wins on compiled prices
    assert written.schedule not in SPLIT_BACKWARD
    toml = out.files["torchtitan.toml"]
    assert "[compile]" in toml and "components" not in toml  # the model and the loss
    code, found, doc = check_file(tmp_path / "torchtitan.toml", toml, "--gpus", "72")
    assert code == 0 and not [f for f, severity in found.items() if severity == "error"]
    assert doc["derived"]["step_time_s"] == pytest.approx(written.step_time_s, rel=1e-9)


def test_megatron_writes_the_group_megatron_core_runs(run: RecommendRun,
                                                      tmp_path: Path) -> None:
    out = emit("megatron", run)
    script = out.files["pretrain_megatron.sh"]
    plan = out.plan
    assert (plan.schedule, plan.pp, plan.virtual_stages, plan.num_microbatches) == (
        Schedule.INTERLEAVED, 9, 3, 128)
    assert "--microbatch-group-size-per-virtual-pipeline-stage 13 " in script
    code, found, doc = check_file(tmp_path / "run.sh", script, "--gpus", "72")
    assert code == 0 and not [f for f, severity in found.items() if severity == "error"]
    assert doc["derived"]["step_time_s"] == pytest.approx(plan.step_time_s, rel=1e-9)
