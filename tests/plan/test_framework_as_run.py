"""recommend --framework megatron|deepspeed: plan 1 at the step its emitted file runs.

Each case ranks one job's plans for a framework, writes plan 1 with ``--emit`` of the
same framework and reads the file back with check-config: the table's step and the
file's agree to the digits printed (three decimals of a second), and no plan listed is
one the framework refuses (Megatron-LM: cp > 1 in the tp-pp-dp rank order under a
pipeline, megatron-core's parallel_state.py assert, mirrored by the reader's
megatron-cp-rank-order rule; DeepSpeed: a split PipelineModule's partition_method does
not build, and what else its config cannot state), and the search's allowance for plans
DeepSpeed runs faster than priced (its 16-bit gradients) bounds each plan it priced again.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.layout import DP_INNER, PP_INNER
from pptune.costmodel.memory import Recompute
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.sharding import Sharding
from pptune.errors import BadInput
from pptune.frameworks.common.as_run import as_itself
from pptune.frameworks.deepspeed.adapter import ADAPTER as DEEPSPEED
from pptune.frameworks.megatron.adapter import ADAPTER as MEGATRON
from pptune.frameworks.megatron.cp_fp8 import refuses_rank_order
from pptune.plan.emit import job_of
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
FILES = {"megatron": ("pretrain_megatron.sh",), "deepspeed": ("ds_config.json",),
         "torchtitan": ("torchtitan.toml",)}
JOBS = {"8 GPUs": ["--gpus", "8"],
        "llama3-70b 64": ["--gpus", "64", "--model", "llama3-70b"],
        "mixtral-8x7b 32": ["--gpus", "32", "--model", "mixtral-8x7b"],
        "qwen3-30b-a3b 16": ["--gpus", "16", "--model", "qwen3-30b-a3b"]}


def round_trip(framework: str, flags: list[str], folder: Path) -> tuple[str, list[float]]:
    """Plan 1's step as recommend's table prints it, and check-config's step of each file
    ``--emit`` wrote for it."""
    r = runner.invoke(app, ["recommend", *flags, "--framework", framework, "--emit",
                            framework, "-o", str(folder)])
    assert r.exit_code == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith(" 1 "))
    shown = re.search(r" (\d+\.\d{3}) s ", row)
    assert shown is not None, row
    steps = []
    for name in FILES[framework]:
        c = runner.invoke(app, ["check-config", str(folder / name), "--output", "json",
                                "--no-compare"])
        assert c.exit_code == 0, c.stdout
        doc = json.loads(c.stdout)
        assert doc["errors"] == 0, doc["findings"]
        steps.append(doc["derived"]["step_time_s"])
    return shown.group(1), steps


@pytest.mark.parametrize("job", list(JOBS))
@pytest.mark.parametrize("framework", ["megatron", "deepspeed"])
def test_plan_one_is_ranked_at_the_step_its_file_runs(framework: str, job: str,
                                                      tmp_path: Path) -> None:
    shown, steps = round_trip(framework, JOBS[job], tmp_path)
    assert [f"{s:.3f}" for s in steps] == [shown] * len(steps)


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed"])
def test_a_model_with_mtp_is_planned_as_the_files_build_it(framework: str,
                                                           tmp_path: Path) -> None:
    # neither builds DeepSeek-V3's MTP layer: planned without it, plan 1 is what its
    # file runs (the table had priced the MTP layer and torchtitan's file 7% slower)
    flags = ["--gpus", "256", "--model", "deepseek-v3", "--pp", "8", "--ep", "32",
             "--tp", "1", "--cp", "1"]
    shown, steps = round_trip(framework, flags, tmp_path)
    assert [f"{s:.3f}" for s in steps] == [shown]
    r = runner.invoke(app, ["recommend", *flags, "--framework", framework])
    assert "build no multi-token-prediction module: planned without deepseek-v3's 1 MTP " \
           "layer" in " ".join(r.stderr.split())


def test_megatron_ranks_no_rank_order_megatron_core_refuses() -> None:
    """Llama 3 70B on 64 H100s: the fastest plan Megatron-LM's files state as searched is
    pp 8 x dp 2 x tp 2 x cp 2 in the tp-pp-dp order, which megatron-core refuses (a dense
    model: the script states no --expert-model-parallel-size): it is left out, and its
    tp-dp-pp twin ranked first."""
    run = recommend(replace(RecommendSpec.of(gpus=64, model="llama3-70b"),
                            framework="megatron"))
    plans = run.result.plans
    assert plans and not any(refuses_rank_order(job_of(run, p), p) for p in plans)
    assert (plans[0].pp, plans[0].cp, plans[0].rank_order) == (8, 2, DP_INNER)
    refused = run.result.dropped
    assert [(p.pp, p.dp, p.tp, p.cp, p.rank_order) for p in refused[:1]] == [
        (8, 2, 2, 2, PP_INNER)]
    assert refused[0].step_time_s < plans[0].step_time_s
    job = job_of(run, refused[0])
    with pytest.raises(BadInput, match="megatron-core refuses --use-tp-pp-dp-mapping"):
        MEGATRON.as_run(job, refused[0], substitute=False)
    assert as_itself(MEGATRON, job, refused[0]) is None


def test_megatron_ranks_zero2_at_megatron_fsdps_bf16_weight_gradients() -> None:
    """Llama 3 8B on 8 H100s: ZeRO-2 is written as Megatron-FSDP, whose BF16 weight
    gradients skip the fused FP32 accumulation the search ranks with: plan 1 (ZeRO-2
    without a pipeline) is listed at that faster step, as --emit and check-config price
    it, and the note says a listed plan was priced again."""
    run = recommend(replace(RecommendSpec.of(gpus=8), framework="megatron"))
    first = run.result.plans[0]
    assert (first.pp, first.sharding.value, first.schedule) == (1, "zero2", Schedule.ONE_F_ONE_B)
    searched = {p.spec: p for p in run.result.repriced}
    assert searched[first.spec].step_time_s > first.step_time_s
    _, ran = MEGATRON.as_run(job_of(run, first), first)
    assert (ran.step_time_s, ran.peak_memory_bytes) == (first.step_time_s,
                                                        first.peak_memory_bytes)
    stated = MEGATRON.express(job_of(run, first), first, 1)
    assert stated.plan.step_time_s == first.step_time_s


def test_deepspeed_searches_its_pipelines_on_partition_method_splits() -> None:
    """Llama 3 8B on 8 H100s: 34 layers (the embedding and the head 525.3M parameters
    each, 32 blocks of 218.1M). Two stages: "uniform" 17 + 17, and "parameters" 17 + 17
    too (embedding + 16 blocks against 16 blocks + head: 4,096 parameters apart, the final
    norm's). Four: "uniform" 9, 9, 8, 8 (34 = 4 x 8 + 2, the first two stages one more);
    "parameters" 8, 9, 9, 8 (2,052.1M, 1,963.0M, 1,963.0M, 2,052.1M: any boundary a
    block away spreads the parts wider). The search places its pipelines on those alone,
    each as DeepSpeed runs it, none left out for its split."""
    run = recommend(replace(RecommendSpec.of(gpus=8), framework="deepspeed"))
    own = {2: {(17, 17)}, 4: {(9, 9, 8, 8), (8, 9, 9, 8)}}
    piped = [p for p in (*run.result.plans, *run.result.repriced) if p.pp > 1]
    assert {p.pp for p in piped} == {2, 4}
    assert all(tuple(p.stage_layers) in own[p.pp] for p in piped)
    assert [tuple(p.stage_layers) for p in run.result.plans if p.pp > 1] == [(17, 17),
                                                                              (9, 9, 8, 8)]
    for plan in run.result.plans:
        _, ran = DEEPSPEED.as_run(job_of(run, plan), plan)
        assert ran.step_time_s == plan.step_time_s
    assert not [p for p in run.result.dropped if p.pp > 1]


def test_deepspeed_refuses_a_split_partition_method_cannot_build() -> None:
    """18 + 16 layers is neither DeepSpeed split of Llama 3 8B (above): a plan on it is
    refused, as check-config and --emit price it."""
    run = recommend(replace(RecommendSpec.of(gpus=8), framework="deepspeed"))
    piped = next(p for p in run.result.plans if p.pp == 2)
    left = replace(piped, stage_layers=[18, 16])
    job = job_of(run, left)
    with pytest.raises(BadInput, match="partition_method cannot place these boundaries"):
        DEEPSPEED.as_run(job, left)
    assert as_itself(DEEPSPEED, job, left) is None


def test_deepspeed_plan_one_on_a_pipeline_round_trips(tmp_path: Path) -> None:
    """--pp 4: plan 1 is pipelined, on the "uniform" split; the config --emit writes for
    it (partition_method "uniform") steps as the table says."""
    shown, steps = round_trip("deepspeed", ["--gpus", "8", "--pp", "4"], tmp_path)
    assert [f"{s:.3f}" for s in steps] == [shown]
    config = json.loads((tmp_path / "ds_config.json").read_text())
    assert config["pipeline"] == {"stages": 4, "partition": "uniform"}


@pytest.mark.parametrize(("change", "why"), [
    ({"pp": 2, "stage_layers": (17, 17), "sharding": Sharding.ZERO2}, "ZeRO stage 0 or 1 only"),
    ({"schedule": Schedule.INTERLEAVED, "virtual_stages": 2}, "runs 1F1B only"),
    ({"rank_order": PP_INNER}, "data-parallel ranks innermost"),
    ({"recompute": Recompute.SELECTIVE}, "every block or none"),
    ({"sharding": Sharding.FSDP}, "no torch FSDP"),
])
def test_deepspeed_refuses_what_its_config_cannot_state(change: dict[str, object],
                                                        why: str) -> None:
    run = recommend(replace(RecommendSpec.of(gpus=8), framework="deepspeed"))
    first = run.result.plans[0]
    plan = replace(first, **change)
    with pytest.raises(BadInput, match=why):
        DEEPSPEED.as_run(job_of(run, first), plan)


@pytest.mark.parametrize("job", list(JOBS))
def test_deepspeed_allowance_bounds_every_plan_priced_again(job: str) -> None:
    """Each plan the search priced again as DeepSpeed runs it steps no faster than its
    searched step less the allowance (m x the per-micro-batch saving plus the per-step
    one), which the search's cut-offs rely on; the 16-bit gradients do run some faster."""
    flags = dict(zip(JOBS[job][::2], JOBS[job][1::2], strict=True))
    spec = RecommendSpec.of(gpus=int(flags["--gpus"]), model=flags.get("--model"))
    run = recommend(replace(spec, framework="deepspeed"))
    listed = {p.spec: p for p in run.result.plans}
    faster = 0
    for searched in run.result.repriced:
        job_ = job_of(run, searched)
        _, ran = DEEPSPEED.as_run(job_, searched)
        allowed = (searched.num_microbatches * DEEPSPEED.as_run_saving_s(job_, searched.spec)
                   + DEEPSPEED.as_run_step_saving_s(job_, searched.spec))
        assert ran.step_time_s >= searched.step_time_s - allowed - 1e-9
        faster += ran.step_time_s < searched.step_time_s
        if searched.spec in listed:
            assert listed[searched.spec].step_time_s == ran.step_time_s
    assert faster > 0
