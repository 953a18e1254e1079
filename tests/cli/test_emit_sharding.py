"""``--emit`` with a plan whose sharding or expert overlap the files cannot state.

Qwen3-30B-A3B on 64 GPUs without a pipeline (torchtitan 0.2.2 pipelines no qwen3):
the ranked plan shards by ZeRO-1, which torchtitan's files cannot state. The file
states the faster of that plan with FSDP and the best plan searched with the
shardings torchtitan states, searched without Megatron-LM's combined 1F1B order
(torch.distributed.pipelining has none); check-config prices the file the same.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.search import Sharding, evaluate
from pptune.errors import BadInput, NoFeasiblePlan
from pptune.plan.emit import Framework, emit, write
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend

runner = CliRunner()
FLAGS = ["--gpus", "64", "--gpu", "h100-sxm", "--output", "json", "--no-compare"]


@pytest.fixture(scope="module")
def run() -> RecommendRun:
    return recommend(RecommendSpec.of(gpus=64, model="qwen3-30b-a3b", gpu="h100-sxm", pp=[1],
                                      sharding="zero1,fsdp", top=1))


def _read_back(tmp_path: Path) -> dict:
    r = runner.invoke(app, ["check-config", str(tmp_path / "torchtitan.toml"), *FLAGS])
    assert r.exit_code == 0, r.stdout
    return json.loads(r.stdout)["derived"]


def test_the_best_stateable_plan_beats_the_same_plan_with_fsdp(run: RecommendRun,
                                                               tmp_path: Path) -> None:
    ranked = run.result.plans[0]
    assert ranked.sharding is Sharding.ZERO1
    same = evaluate(run.table_for(ranked.key), run.plan_request,
                    replace(ranked.spec, sharding=Sharding.FSDP, a2a_overlap=False))
    emitted = emit(Framework.TORCHTITAN, run)
    assert emitted.plan.sharding is Sharding.FSDP and not emitted.plan.a2a_overlap
    assert emitted.plan.step_time_s < same.step_time_s
    assert any("emitting the best plan with FSDP" in n for n in emitted.notes)
    write(emitted, tmp_path)
    assert _read_back(tmp_path)["step_time_s"] == pytest.approx(emitted.plan.step_time_s,
                                                                rel=1e-9)


def test_a_combined_order_plan_is_emitted_with_the_all_to_all_exposed(
        run: RecommendRun, tmp_path: Path) -> None:
    ranked = run.result.plans[0]
    spec = replace(ranked.spec, sharding=Sharding.FSDP, a2a_overlap=True)
    overlapped = evaluate(run.table_for(ranked.key), run.plan_request, spec)
    assert overlapped.a2a_overlap
    emitted = emit(Framework.TORCHTITAN, replace(run, result=replace(run.result,
                                                                     plans=[overlapped])))
    assert not emitted.plan.a2a_overlap
    assert any("no combined 1F1B order" in n for n in emitted.notes)
    # the all-to-all exposed costs time; where the substitutions cost more than 3% the
    # fastest plan a torchtitan file states is written instead, and says so
    assert emitted.plan.step_time_s > overlapped.step_time_s or any(
        "the fastest plan a torchtitan file states" in n for n in emitted.notes)
    write(emitted, tmp_path)
    assert _read_back(tmp_path)["step_time_s"] == pytest.approx(emitted.plan.step_time_s,
                                                                rel=1e-9)


def test_deepspeed_writes_the_fastest_plan_it_can_place_as_it_runs(tmp_path: Path) -> None:
    # Llama 3 70B with ZeRO-1 and no tensor parallelism on 64 H100: plan 1's stage
    # recomputation and split are substituted at a cost; the plans DeepSpeed states are
    # searched as DeepSpeed runs them and the next fastest tried where the search's split
    # is one its partition cannot place: the file's plan is faster than the
    # substitutions' end, and check-config reads it back at that step.
    ranked = recommend(RecommendSpec.of(gpus=64, model="llama3-70b", gpu="h100-sxm", tp=[1],
                                        sharding="zero1", top=1))
    emitted = emit(Framework.DEEPSPEED, ranked)
    subs = [n for n in emitted.notes if "those substitutions make plan 1" in n]
    assert len(subs) == 1
    # both ratios are to plan 1's step: the substitutions' end, then the plan written
    slower = float(subs[0].split("plan 1 slower, ")[1].split(" (")[1].split("x plan 1)")[0])
    written = emitted.plan.step_time_s / ranked.result.plans[0].step_time_s
    assert f"{written:.3f}x plan 1" in " ".join(emitted.notes)
    assert written < slower
    write(emitted, tmp_path)
    r = runner.invoke(app, ["check-config", str(tmp_path / "ds_config.json"), "--model",
                            "llama3-70b", "--gpus", "64", "--gpu", "h100-sxm",
                            "--output", "json", "--no-compare"])
    assert r.exit_code == 0, r.stdout
    derived = json.loads(r.stdout)["derived"]
    assert derived["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)


def test_deepspeed_runs_autotp_without_a_pipeline(tmp_path: Path) -> None:
    """DeepSpeed's engine replaces a PipelineModule's topology with AutoTP's data x
    tensor-parallel mesh (utils/groups.py _init_tp_mesh_device): a tp > 1 plan whose
    pipeline was forced is refused (plan/kept.py), not written without it, and a config
    with both is an error finding."""
    ranked = recommend(RecommendSpec.of(gpus=32, model="llama3-70b", seq_len=4096,
                                        gpu="a100-80gb", tp=[4], pp=[8], top=1))
    assert ranked.result.plans[0].pp == 8
    with pytest.raises(NoFeasiblePlan, match=r"forced --pp 8, which DeepSpeed files cannot "
                                             r"state.*deepspeed runs AutoTP without a pipeline"):
        emit(Framework.DEEPSPEED, ranked)
    # with ZeRO-1 alone nothing at tp 4 fits without a pipeline: refused, not written
    only = recommend(RecommendSpec.of(gpus=64, model="llama3-70b", gpu="h100-sxm", tp=[4],
                                      sharding="zero1", top=1))
    with pytest.raises(BadInput, match=r"AutoTP \(tp 4\) runs without a pipeline"):
        emit(Framework.DEEPSPEED, only)
    both = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
            "bf16": {"enabled": True}, "zero_optimization": {"stage": 1},
            "pipeline": {"stages": 8}, "tensor_parallel": {"autotp_size": 4}}
    (tmp_path / "ds.json").write_text(json.dumps(both))
    r = runner.invoke(app, ["check-config", str(tmp_path / "ds.json"), "--gpus", "32",
                            "--model", "llama3-70b", "--output", "json", "--no-compare"])
    assert r.exit_code == 1
    found = {f["id"]: f["severity"] for f in json.loads(r.stdout)["findings"]}
    assert found["deepspeed-autotp-pp"] == "error"
