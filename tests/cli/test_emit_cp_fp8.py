"""recommend --emit with context parallelism and FP8, round-tripped through
check-config: the file states the plan's cost key (tp, cp, precision), its
context-parallel exchange and FP8 parameters, and check-config predicts the
same split and step time from it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.precision import BLOCKWISE_RATE_NOTE
from pptune.costmodel.search import evaluate
from pptune.errors import BadInput
from pptune.frameworks.torchtitan.cp_fp8 import stateable_exchange, stateable_recipe
from pptune.plan.emit import Emitted, Framework, emit, job_of, write
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend
from pptune.report.fmt import fmt_seconds

runner = CliRunner()
Runs = Callable[[str, str, str], RecommendRun]
FILES = {Framework.MEGATRON: "pretrain_megatron.sh", Framework.TORCHTITAN: "torchtitan.toml",
         Framework.PPTUNE: "pptune.yaml"}


def planned(gpu: str, precision: str, cp_comm: str) -> RecommendRun:
    return recommend(RecommendSpec.of(
        gpus=16, model="llama3-8b", gpu=gpu, seq_len=16384, tp="1", cp="2",
        precision=precision, cp_comm=cp_comm, fp8_param_gather=True, sharding="zero1,none,fsdp",
        top=1))


@pytest.fixture(scope="module")
def runs() -> Runs:
    cache: dict[tuple[str, str, str], RecommendRun] = {}

    def get(gpu: str, precision: str, comm: str) -> RecommendRun:
        if (gpu, precision, comm) not in cache:
            cache[gpu, precision, comm] = planned(gpu, precision, comm)
        return cache[gpu, precision, comm]
    return get


def round_trip(framework: Framework, run: RecommendRun, tmp_path: Path
               ) -> tuple[Emitted, dict[str, Any]]:
    emitted = emit(framework, run)
    write(emitted, tmp_path)
    r = runner.invoke(app, ["check-config", str(tmp_path / FILES[framework]), "--output",
                            "json", "--no-compare", "--gpu", str(run.request.costs.gpu)])
    assert r.exit_code in (0, 1), r.stderr
    return emitted, json.loads(r.stdout)


@pytest.mark.parametrize("framework", list(FILES))
@pytest.mark.parametrize("comm", ["p2p", "all-gather", "a2a"])
def test_cp_and_fp8_round_trip(framework: Framework, comm: str, runs: Runs, tmp_path: Path) -> None:
    emitted, doc = round_trip(framework, runs("h100-sxm", "fp8", comm), tmp_path)
    plan = emitted.plan
    assert doc["exit_code"] == 0, doc["findings"]
    assert doc["derived"]["cost_key"] == str(plan.key) == "tp1 cp2 fp8"
    assert doc["derived"]["step_time_s"] == pytest.approx(plan.step_time_s, rel=1e-9)
    assert doc["derived"]["bubble_rate"] == pytest.approx(plan.bubble_rate, rel=1e-9)
    cfg = doc["config"]
    # torchtitan has no Ulysses exchange: its file runs the faster of its two rotate
    # methods, here torch's ring (test_torchtitan_runs_the_faster_rotate_method), re-priced so
    stated = "p2p" if framework is Framework.TORCHTITAN and comm == "a2a" else comm
    assert (cfg["precision"], cfg["cp_comm"]) == ("fp8", stated)
    assert cfg["fp8_param_gather"] is (plan.sharding.value in ("zero1", "fsdp")
                                       if framework is not Framework.PPTUNE else True)


def test_torchtitan_runs_the_faster_rotate_method(runs: Runs) -> None:
    """An a2a plan has no torchtitan setting: the file states whichever of allgather and
    alltoall (torch's ring, pptune's p2p) prices faster for the plan, here the ring (each
    step's K/V hop hides behind its attention, where the gather is exposed); the note
    says which and both times. The plan priced with the p2p and all-gather searches' own
    tables gives the same two times."""
    run = runs("h100-sxm", "fp8", "a2a")
    plan = run.result.plans[0]
    notes: list[str] = []
    job, alt = stateable_exchange(job_of(run, plan), plan, notes)
    ring = evaluate(runs("h100-sxm", "fp8", "p2p").table_for(plan.key), job.request, plan.spec)
    gather = evaluate(runs("h100-sxm", "fp8", "all-gather").table_for(plan.key), job.request,
                      plan.spec)
    assert ring.step_time_s < gather.step_time_s
    assert alt.step_time_s == pytest.approx(ring.step_time_s, rel=1e-12)
    assert job.cost_options is not None and job.cost_options.cp_comm.value == "p2p"
    (note,) = notes
    assert "no a2a context-parallel exchange" in note and "rotate_method alltoall" in note
    assert f"against {fmt_seconds(gather.step_time_s)} with allgather" in note
    out = emit(Framework.TORCHTITAN, run)
    assert 'context_parallel_rotate_method = "alltoall"' in out.files["torchtitan.toml"]


def test_torchtitan_gathers_where_the_ring_crosses_nodes() -> None:
    """cp 16 over two nodes of 8: each of the ring's 15 steps waits for a K/V hop over
    one NIC (16.8 MB, about 0.3 ms), longer than the step's attention at 2,048 tokens a
    rank (about 0.04 ms), where the all-gather's cross-node traffic runs over every NIC
    of the node (collectives.py): allgather is written."""
    def run(comm: str) -> RecommendRun:
        return recommend(RecommendSpec.of(gpus=16, model="gpt3-1.3b", seq_len=32768, tp="1",
                                          cp="16", cp_comm=comm, global_batch=4, top=1))
    ulysses = run("a2a")
    plan = ulysses.result.plans[0]
    notes: list[str] = []
    job, alt = stateable_exchange(job_of(ulysses, plan), plan, notes)
    ring = evaluate(run("p2p").table_for(plan.key), job.request, plan.spec)
    gather = evaluate(run("all-gather").table_for(plan.key), job.request, plan.spec)
    assert gather.step_time_s < ring.step_time_s
    assert alt.step_time_s == pytest.approx(gather.step_time_s, rel=1e-12)
    (note,) = notes
    assert "rotate_method allgather" in note
    assert f"against {fmt_seconds(ring.step_time_s)} with alltoall" in note
    out = emit(Framework.TORCHTITAN, ulysses)
    assert 'context_parallel_rotate_method = "allgather"' in out.files["torchtitan.toml"]


def test_torchtitan_prices_its_tensorwise_scaling(runs: Runs) -> None:
    """recommend prices FP8 as delayed scaling (Megatron-LM's default, what its script
    states): an amax all-reduce over the stage's 8 ranks after every chunk's forward and
    backward; torchtitan's float8 scales tensorwise, so its file is priced without them."""
    run = runs("h100-sxm", "fp8", "p2p")
    plan = run.result.plans[0]
    notes: list[str] = []
    job, alt = stateable_recipe(job_of(run, plan), plan, notes)
    assert not job.request.fp8_amax_reduction and alt.step_time_s < plan.step_time_s
    assert "scales tensorwise" in notes[0]
    assert any("scales tensorwise" in n for n in emit(Framework.TORCHTITAN, run).notes)
    script = emit(Framework.MEGATRON, run).files[FILES[Framework.MEGATRON]]
    assert "--fp8-recipe delayed" in script


def test_the_fp8_recipe_is_priced_and_written(tmp_path: Path) -> None:
    """--fp8-recipe tensorwise: no amax all-reduces in the plans, and the files say the
    recipe, so check-config prices them the same; a bad recipe is one line, exit 2."""
    def run(recipe: str) -> RecommendRun:
        return recommend(RecommendSpec.of(
            gpus=16, model="llama3-8b", gpu="h100-sxm", seq_len=16384, tp="1", cp="2",
            precision="fp8", fp8_recipe=recipe, fp8_param_gather=True, sharding="zero1",
            top=1))
    delayed, tensorwise = run("delayed"), run("tensorwise")
    assert tensorwise.result.plans[0].step_time_s < delayed.result.plans[0].step_time_s
    for framework in (Framework.MEGATRON, Framework.PPTUNE):
        emitted, doc = round_trip(framework, tensorwise, tmp_path / framework.value)
        assert doc["config"]["fp8_recipe"] == "tensorwise"
        assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s,
                                                               rel=1e-9)
    assert "--fp8-recipe tensorwise" in emit(Framework.MEGATRON, tensorwise).files[
        FILES[Framework.MEGATRON]]
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--precision", "fp8",
                            "--fp8-recipe", "current"])
    assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0
    assert "--fp8-recipe must be one of" in r.stderr


def test_blockwise_plans_price_their_scales_and_say_the_gemm_rate(tmp_path: Path) -> None:
    """--fp8-recipe blockwise: tensorwise's step with the scales' bytes (more memory, the
    casts a little longer), a note that its GEMMs run at tensorwise's rate, and a
    Megatron-LM script that check-config prices the same."""
    def run(recipe: str) -> RecommendRun:
        return recommend(RecommendSpec.of(
            gpus=16, model="llama3-8b", gpu="h100-sxm", seq_len=16384, tp="1", cp="2",
            precision="fp8", fp8_recipe=recipe, fp8_param_gather=True, sharding="zero1",
            top=1, micro_batch_sizes="1", schedules="1f1b", pp="2"))
    tensorwise, block = run("tensorwise"), run("blockwise")
    t, b = tensorwise.result.plans[0], block.result.plans[0]
    assert BLOCKWISE_RATE_NOTE in block.result.notes
    assert BLOCKWISE_RATE_NOTE not in tensorwise.result.notes
    assert max(b.peak_memory_bytes) > max(t.peak_memory_bytes)
    assert b.step_time_s > t.step_time_s
    emitted, doc = round_trip(Framework.MEGATRON, block, tmp_path)
    assert "--fp8-recipe blockwise" in emitted.files[FILES[Framework.MEGATRON]]
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
    assert max(doc["derived"]["peak_memory_bytes"]) == pytest.approx(
        max(emitted.plan.peak_memory_bytes), rel=1e-9)


def test_megatron_states_the_hierarchical_exchange_and_mxfp8(runs, tmp_path: Path) -> None:
    emitted, doc = round_trip(Framework.MEGATRON, runs("b200", "mxfp8", "a2a+p2p"), tmp_path)
    script = emitted.files[FILES[Framework.MEGATRON]]
    assert "--cp-comm-type a2a+p2p" in script and "--fp8-recipe mxfp8" in script
    # cp 2 inside one node: the all-to-all spans both ranks, the ring none
    assert "--hierarchical-context-parallel-sizes 2 1" in script
    assert doc["exit_code"] == 0, doc["findings"]
    assert doc["derived"]["cost_key"] == "tp1 cp2 mxfp8"
    assert doc["derived"]["step_time_s"] == pytest.approx(
        emitted.plan.step_time_s, rel=1e-9)


def test_deepspeed_files_state_no_cp_or_fp8(runs: Runs) -> None:
    """Every plan of this search has cp 2 and FP8 GEMMs: DeepSpeed's JSON states neither
    (no context parallelism; FP8 is not a ds_config setting), so there is nothing to emit."""
    with pytest.raises(BadInput, match=r"cannot express plan 1: .*state no cp 2, precision "
                       r"fp8; plan with --cp 1 --precision bf16"):
        emit(Framework.DEEPSPEED, runs("h100-sxm", "fp8", "p2p"))


def test_megatron_states_pp_last_order_with_cp(tmp_path: Path) -> None:
    """The best ZeRO-1 plan here (pp 2) runs tp-pp-dp with cp 2, which megatron-core
    refuses (parallel_state.py): the script states it in tp-cp-dp-pp instead,
    re-predicted, with a note. (Plan 1 of the search over every sharding, ZeRO-3 without
    a pipeline, is written as Megatron-FSDP with FP8 parameters, and read back so.)"""
    spec = {"gpus": 16, "model": "llama3-8b", "gpu": "h100-sxm", "seq_len": 16384, "cp": "2",
            "precision": "fp8", "cp_comm": "a2a+p2p", "fp8_param_gather": True}
    emitted, doc = round_trip(Framework.MEGATRON, recommend(RecommendSpec.of(**spec)),
                              tmp_path / "fsdp")
    assert emitted.plan.sharding.value == "zero3" and emitted.exact
    text = emitted.files[FILES[Framework.MEGATRON]]
    assert "--use-megatron-fsdp" in text and "--fp8-param-gather" in text
    assert doc["exit_code"] == 0 and doc["config"]["fp8_param_gather"], doc["findings"]
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
    run = recommend(RecommendSpec.of(**spec, sharding="zero1"))
    emitted, doc = round_trip(Framework.MEGATRON, run, tmp_path)
    assert any("refuses --use-tp-pp-dp-mapping" in n for n in emitted.notes)
    assert (emitted.plan.cp, emitted.plan.rank_order.value) == (2, "tp-dp-pp")
    assert "--use-tp-pp-dp-mapping" not in emitted.files[FILES[Framework.MEGATRON]]
    assert doc["exit_code"] == 0, doc["findings"]
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
