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


def test_deepspeed_writes_the_fastest_plan_it_can_place_priced_without_sequence_parallelism(
        tmp_path: Path) -> None:
    # Llama 3 70B at tp 4 on 64 H100: plan 1 fits only with sequence parallelism, which
    # DeepSpeed does not run. The stateable plans are searched as DeepSpeed runs (no SP),
    # and the next fastest are tried where the search's split is one DeepSpeed's
    # partition cannot place: the file's plan is faster than the substitutions' end.
    ranked = recommend(RecommendSpec.of(gpus=64, model="llama3-70b", gpu="h100-sxm", tp=[4],
                                        sharding="zero1", top=1))
    emitted = emit(Framework.DEEPSPEED, ranked)
    subs = [n for n in emitted.notes if "those substitutions make plan 1" in n]
    assert len(subs) == 1
    slower = float(subs[0].split("plan 1 ")[1].split("x slower")[0])
    ratio = emitted.plan.step_time_s / ranked.result.plans[0].step_time_s
    assert ratio < slower
    write(emitted, tmp_path)
    r = runner.invoke(app, ["check-config", str(tmp_path / "ds_config.json"), "--model",
                            "llama3-70b", "--gpus", "64", "--tp", "4", "--gpu", "h100-sxm",
                            "--output", "json", "--no-compare"])
    assert r.exit_code == 0, r.stdout
    derived = json.loads(r.stdout)["derived"]
    assert derived["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
