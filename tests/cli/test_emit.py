"""recommend --emit: each framework's file, and the round trip through check-config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.schedules import Schedule
from pptune.errors import NoFeasiblePlan
from pptune.plan.emit import Framework, emit
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()


@pytest.fixture(scope="module")
def run8():
    # llama3-8b on h100-sxm with plain data parallelism: pp=4, uneven split
    return recommend(RecommendSpec.of(gpus=8, sharding="none", recompute="none"))


def check_json(path: Path, *extra: str) -> dict:
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", *extra])
    assert r.exit_code in (0, 1), r.stderr
    return json.loads(r.stdout)


ROUND_TRIP = {
    Framework.MEGATRON: ("pretrain_megatron.sh", ["--gpu", "h100-sxm"]),
    Framework.TORCHTITAN: ("torchtitan.toml", ["--gpu", "h100-sxm"]),
    Framework.PPTUNE: ("pptune.yaml", []),
    Framework.DEEPSPEED: ("ds_config.json", ["--gpus", "8", "--model", "llama3-8b", "--gpu",
                                             "h100-sxm"]),
}


@pytest.mark.parametrize("framework", list(Framework))
def test_round_trip_through_check_config(framework: Framework, run8, tmp_path: Path) -> None:
    from pptune.plan.emit import write

    emitted = emit(framework, run8)
    write(emitted, tmp_path)
    name, flags = ROUND_TRIP[framework]
    doc = check_json(tmp_path / name, *flags)
    assert doc["exit_code"] == 0, doc["findings"]
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
    assert doc["derived"]["bubble_rate"] == pytest.approx(emitted.plan.bubble_rate, rel=1e-9)


def test_megatron_script_carries_the_uneven_split() -> None:
    run = recommend(RecommendSpec.of(gpus=8, sharding="none", recompute="none",
                                     schedules=["1f1b"]))
    plan = run.result.plans[0]
    split = list(plan.stage_layers)  # embedding with the first stage, head with the last
    assert plan.pp == 4 and len(set(split)) > 1
    text = emit("megatron", run).files["pretrain_megatron.sh"]
    assert "--pipeline-model-parallel-size 4" in text
    blocks = [split[0] - 1, *split[1:-1], split[-1] - 1]
    if len(set(blocks[1:-1])) == 1:  # even middle stages: the first and last given apart
        assert f"--decoder-first-pipeline-num-layers {blocks[0]}" in text
        assert f"--decoder-last-pipeline-num-layers {blocks[-1]}" in text
    else:  # else the layout, stage by stage
        stages = [f"t*{n}" for n in blocks]
        layout = "|".join(["E" + stages[0], *stages[1:-1], stages[-1] + "L"])
        assert f"--pipeline-model-parallel-layout '{layout}'" in text
    assert "--global-batch-size 512" in text and "--micro-batch-size 1" in text


def test_sharding_and_recompute_reach_every_framework() -> None:
    run = recommend(RecommendSpec.of(gpus=8, pp=[4], sharding="zero1", recompute="full"))
    assert run.result.plans[0].sharding.value == "zero1"
    megatron = emit("megatron", run).files["pretrain_megatron.sh"]
    assert "--use-distributed-optimizer" in megatron
    assert "--recompute-granularity full" in megatron
    ds = json.loads(emit("deepspeed", run).files["ds_config.json"])
    assert ds["zero_optimization"]["stage"] == 1
    assert ds["pipeline"]["activation_checkpoint_interval"] == 1
    titan = emit("torchtitan", run)
    assert 'mode = "full"' in titan.files["torchtitan.toml"]
    assert any("ZeRO-1" in n for n in titan.notes)  # torchtitan shards with FSDP only
    yaml = emit("pptune", run).files["pptune.yaml"]
    assert "sharding: zero1" in yaml and "recompute: full" in yaml


def test_unexpressible_schedule_falls_back_and_says_so() -> None:
    # priced with the attention a Megatron-LM script runs (cuDNN's), so the emit re-prices
    # nothing but the schedule
    run = recommend(RecommendSpec.of(gpus=8, schedules=["zb-h1"], pp=[8], attention="cudnn"))
    out = emit("megatron", run)
    assert not out.exact
    assert out.plan.schedule.value in ("1f1b", "interleaved-1f1b")
    assert any("cannot express" in n and "fastest plan it can run" in n for n in out.notes)
    # the emitted plan's own numbers, not the original's
    assert out.plan.step_time_s >= run.result.plans[0].step_time_s


def test_fallback_is_the_fastest_plan_megatron_runs_on_the_ranks(tmp_path: Path) -> None:
    """A zbv plan has no Megatron-LM schedule: the script states the fastest plan of
    1f1b and interleaved-1f1b (any split, any searched v and micro-batch size) on the
    same pp, sharding and recomputation, not only 1F1B over the plan's split."""
    from dataclasses import replace

    from pptune.costmodel.search import evaluate, search
    from pptune.plan.emit import job_of, write

    # priced with the kernels a Megatron-LM script runs: the emit re-prices nothing
    run = recommend(RecommendSpec.of(gpus=8, schedules=["zbv"], pp=[2], attention="cudnn",
                                     cross_entropy="native", wgrad_accum="fused"))
    zbv = run.result.plans[0]
    out = emit("megatron", run)
    assert not any("fused cross-entropy" in n for n in out.notes)
    assert out.plan.schedule.value == "interleaved-1f1b" and out.plan.pp == 2
    assert (out.plan.pp, out.plan.dp, out.plan.sharding) == (zbv.pp, zbv.dp, zbv.sharding)
    job = job_of(run, zbv)
    one_f_one_b = evaluate(job.table, job.request, replace(
        zbv.spec, schedule=Schedule.ONE_F_ONE_B, virtual_stages=1, stage_layers=(
            zbv.stage_layers[0] + zbv.stage_layers[3], zbv.stage_layers[1] + zbv.stage_layers[2])))
    assert out.plan.step_time_s < one_f_one_b.step_time_s
    best = search(job.table, replace(
        job.request, schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED), pp=(2,),
        shardings=(zbv.sharding,), recomputes=(zbv.recompute,), top=1,
        with_best_pp1=False)).plans[0]
    assert out.plan.step_time_s == pytest.approx(best.step_time_s, rel=1e-12)
    write(out, tmp_path)
    doc = check_json(tmp_path / "pretrain_megatron.sh", "--gpu", "h100-sxm")
    assert doc["exit_code"] == 0, doc["findings"]
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_emit_cli_prints_files_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--emit", "pptune"])
    assert r.exit_code == 0
    best = recommend(RecommendSpec.of(gpus=8)).result.plans[0]
    assert "# ----- pptune.yaml" in r.stdout
    assert f"schedule: {best.schedule.value}" in r.stdout
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--emit", "slurm"])
    assert r.exit_code == 2 and "unknown --emit 'slurm'" in r.stderr
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--emit", "pptune", "--plan", "99"])
    assert r.exit_code == 2 and "--plan 99" in r.stderr


def test_train_tokens_adds_days_and_gpu_hours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--train-tokens", "1e12", "--json"])
    assert r.exit_code == 0
    plan = json.loads(r.stdout)["plans"][0]
    steps = 1e12 / (plan["global_batch"] * 8192)
    assert plan["training_days"] == pytest.approx(steps * plan["step_time_s"] / 86400)
    assert plan["gpu_hours"] == pytest.approx(steps * plan["step_time_s"] * 8 / 3600)
    table = runner.invoke(app, ["recommend", "--gpus", "8", "--train-tokens", "1e12"])
    assert "GPU-h" in table.stdout


@pytest.fixture(scope="module")
def run32():
    # 4 nodes of 8 A100s, a pipeline of 4, the one-direction schedules: the winner
    # keeps each pipeline inside a node (tp-pp-dp). (Dualpipe wins in tp-dp-pp: its
    # pipelines cross the nodes and its data-parallel groups stay inside them.)
    return recommend(RecommendSpec.of(gpus=32, model="gpt3-13b", gpu="a100-80gb", tp=2,
                                   sharded_optimizer=True, pp=[4],
                                   schedules=["gpipe", "1f1b", "interleaved-1f1b", "zb-h1",
                                              "zbv"]))


def test_multi_node_rank_order_round_trips(run32, tmp_path: Path) -> None:
    from pptune.plan.emit import write

    assert run32.result.plans[0].rank_order == "tp-pp-dp"
    for framework, name, flags in [
        ("megatron", "pretrain_megatron.sh", ["--gpu", "a100-80gb"]),
        ("pptune", "pptune.yaml", []),
    ]:
        emitted = emit(framework, run32)
        folder = tmp_path / framework
        write(emitted, folder)
        if framework == "megatron":
            assert "--use-tp-pp-dp-mapping" in emitted.files[name]
        doc = check_json(folder / name, *flags)
        assert doc["exit_code"] == 0, (framework, doc["findings"])
        assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
    # DeepSpeed runs AutoTP (tp 2) at pp 1 only: the forced --pp 4 is refused, not
    # written as pp 1 under held=pp (plan/kept.py; it had been, trial u31 B1)
    with pytest.raises(NoFeasiblePlan, match=r"forced --pp 4.*AutoTP without a pipeline"):
        emit("deepspeed", run32)


@pytest.fixture(scope="module")
def run12():
    # 8-GPU nodes; sharding every framework's file can state, so all four round-trip
    return recommend(RecommendSpec.of(gpus=12, sharding="none"))


def test_launch_uses_exactly_the_plans_gpus(run12, tmp_path: Path) -> None:
    """12 GPUs on 8-GPU nodes launch as 2 x 6 ranks, never 2 x 8 = 16 (megatron-core's
    initialize_model_parallel needs world = tp x pp x dp)."""
    from pptune.frameworks.common.writing import launch_shape
    from pptune.plan.emit import write

    assert launch_shape(12, 8) == (2, 6) and launch_shape(16, 8) == (2, 8)
    assert launch_shape(7, 8) == (1, 7) and launch_shape(13, 8) == (13, 1)
    text = emit("megatron", run12).files["pretrain_megatron.sh"]
    assert "torchrun --nnodes 2 --nproc_per_node 6 " in text
    assert "--num_nodes 2 --num_gpus 6" in emit("deepspeed", run12).files["ds_partition.txt"]
    for framework, (name, flags) in ROUND_TRIP.items():
        emitted = emit(framework, run12)
        write(emitted, tmp_path / framework.value)
        extra = ["--gpus", "12", *flags[2:]] if framework is Framework.DEEPSPEED else flags
        doc = check_json(tmp_path / framework.value / name, *extra)
        assert doc["exit_code"] == 0, (framework, doc["findings"])
        assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
        assert doc["derived"]["bubble_rate"] == pytest.approx(emitted.plan.bubble_rate, rel=1e-9)


def test_tensor_parallel_megatron_exports_max_connections(run32) -> None:
    """Megatron-LM validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tp > 1
    (before Blackwell); its example scripts export it."""
    text = emit("megatron", run32).files["pretrain_megatron.sh"]
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in emit("megatron", run12_plain()).files[
        "pretrain_megatron.sh"]


def run12_plain():
    return recommend(RecommendSpec.of(gpus=4, pp=[4]))


def test_deepspeed_partition_is_deepspeeds_own(run8) -> None:
    """deepspeed/runtime/utils.py partition_uniform / partition_balanced over the layer
    list decide the stages; the emitted plan is evaluated on exactly that split."""
    from pptune.frameworks.deepspeed.partition import ds_split

    out = emit("deepspeed", run8)
    method = json.loads(out.files["ds_config.json"])["pipeline"]["partition"]
    params = [b / run8.table.param_dtype_bytes for b in run8.table.param_bytes]
    assert out.plan.stage_layers == ds_split(method, params, out.plan.pp)


def test_torchtitan_file_names_the_head_for_its_release(run8) -> None:
    """torchtitan 0.2.2 (the last TOML release) names the head 'output'
    (pipeline_parallel.py generate_llm_fqn_per_model_part); the file states the
    activation checkpointing the plan assumes, since torchtitan defaults to selective.
    A llama3 split that torchtitan builds itself is stated through its options (no
    module names); another model's stages name their modules."""
    text = emit("torchtitan", run8).files["torchtitan.toml"]
    assert "lm_head" not in text
    assert '[activation_checkpoint]\nmode = "none"' in text
    other = recommend(RecommendSpec.of(gpus=4, pp=[2], model="gpt-small", gpu="h100-sxm",
                                       recompute="none", top=1))
    text = emit("torchtitan", other).files["torchtitan.toml"]
    assert '"norm", "output"]' in text and "lm_head" not in text


def test_full_recompute_is_carried_into_every_framework(tmp_path: Path) -> None:
    """recommend --recompute full: Megatron-LM --recompute-granularity full, DeepSpeed
    pipeline.activation_checkpoint_interval 1, torchtitan mode "full"; each reads back
    as full recomputation with the same prediction."""
    from pptune.plan.emit import write

    run = recommend(RecommendSpec.of(gpus=8, pp=[4], recompute="full", sharding="none"))
    for framework, (name, flags) in ROUND_TRIP.items():
        emitted = emit(framework, run)
        write(emitted, tmp_path / framework.value)
        doc = check_json(tmp_path / framework.value / name, *flags)
        assert doc["config"]["recompute"] == "full", framework
        assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)


def test_deepspeed_without_a_pipeline_recomputes_in_the_model_code(tmp_path: Path) -> None:
    """Only DeepSpeed's PipelineEngine reads pipeline.activation_checkpoint_interval
    (deepspeed/runtime/pipe/engine.py): a pp = 1 plan that recomputes every block is
    written with "pptune": {"recompute": "full"} and the model code's checkpointing named,
    and reads back at the plan's step."""
    from pptune.plan.emit import write

    run = recommend(RecommendSpec.of(gpus=8, pp=[1], recompute="full", sharding="zero1"))
    emitted = emit("deepspeed", run)
    assert emitted.plan.pp == 1
    ds = json.loads(emitted.files["ds_config.json"])
    assert "pipeline" not in ds and ds["pptune"]["recompute"] == "full"
    assert "gradient_checkpointing_enable()" in emitted.files["ds_partition.txt"]
    write(emitted, tmp_path)
    doc = check_json(tmp_path / "ds_config.json", *ROUND_TRIP[Framework.DEEPSPEED][1])
    assert doc["config"]["recompute"] == "full"
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
    # a user's file with the interval and no pipeline: read as written, with a note
    ds.pop("pptune")
    ds["pipeline"] = {"stages": 1, "activation_checkpoint_interval": 1}
    (tmp_path / "user.json").write_text(json.dumps(ds))
    doc = check_json(tmp_path / "user.json", *ROUND_TRIP[Framework.DEEPSPEED][1])
    assert any("PipelineEngine only" in n for n in doc["notes"])


def test_deepspeed_pipeline_file_never_asks_for_zero2_or_3() -> None:
    """deepspeed/runtime/pipe/engine.py PipelineEngine.__init__: 'ZeRO-2 and ZeRO-3 are
    incompatible with pipeline parallelism': a pipelined plan is emitted with ZeRO-1."""
    # the best FSDP plan at pp 2 (ZeRO-3 in DeepSpeed)
    run = recommend(RecommendSpec.of(gpus=16, pp=[2], sharding="fsdp"))
    plan = run.result.plans[0]
    assert plan.pp > 1 and plan.sharding.value in ("zero2", "zero3", "fsdp")
    out = emit("deepspeed", run)
    assert json.loads(out.files["ds_config.json"])["zero_optimization"]["stage"] <= 1
    assert not out.exact and any("ZeRO stage 0 or 1" in n for n in out.notes)


@pytest.mark.parametrize("framework", [Framework.MEGATRON, Framework.TORCHTITAN])
def test_default_search_emits_a_plan_the_file_states(framework: Framework, tmp_path: Path) -> None:
    """Without recomputation the search picks ZeRO-2/3 at pp = 1 on 4 GPUs. A Megatron-LM
    script states both as Megatron-FSDP (optim_grads, optim_grads_params: fsdp.py) and
    writes the plan itself; torchtitan files cannot, so emit falls back to the same plan
    with FSDP where it fits, else the best plan torchtitan states: check-config then
    predicts it exactly (no memory overflow, same step time). (The default search,
    which also recomputes per stage, puts a ZeRO-1 pipeline with cp = 2 first.)"""
    run = recommend(RecommendSpec.of(gpus=4, recompute="none"))
    ranked = run.result.plans[0]
    assert ranked.sharding.value in ("zero2", "zero3")
    out = emit(framework, run)
    if framework is Framework.MEGATRON:
        assert out.exact and out.plan.spec == ranked.spec
        assert "--use-megatron-fsdp" in out.files["pretrain_megatron.sh"]
    else:
        assert out.plan.sharding.value in ("none", "fsdp")
        # the plan with FSDP where it fits as torchtitan runs it (an uncompiled BF16 file:
        # eager SwiGLU and loss), else the best plan that states
        assert any(f in n for n in out.notes
                   for f in ("emitting the plan with FSDP", "best plan with"))
    name, extra = ROUND_TRIP[framework]
    from pptune.plan.emit import write

    write(out, tmp_path)
    doc = check_json(tmp_path / name, *extra)
    assert doc["exit_code"] == 0, doc["findings"]
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_deepspeed_check_compares_with_plans_its_engine_runs(tmp_path: Path) -> None:
    """Mixtral 8x7B on 64 H100s: the search's zbv plan is emitted for DeepSpeed as 1F1B
    (its pipeline engine runs nothing else), and check-config of that file compares it
    with the best plan DeepSpeed states, a 1F1B plan with data-parallel ranks innermost,
    not with the interleaved plan it had named as 1.19x faster."""
    from pptune.check.framework import stateable_requests
    from pptune.frameworks.read import read_config
    from pptune.plan.emit import write

    run = recommend(RecommendSpec.of(gpus=64, model="mixtral-8x7b", gpu="h100-sxm", top=1))
    out = emit("deepspeed", run)
    write(out, tmp_path)
    assert out.plan.schedule is Schedule.ONE_F_ONE_B
    doc = check_json(tmp_path / "ds_config.json", "--gpus", "64", "--model", "mixtral-8x7b",
                     "--gpu", "h100-sxm")
    assert doc["warnings"] == 0 and doc["exit_code"] == 0, doc["findings"]
    assert 1.0 <= doc["derived"]["slowdown_vs_best"] < 1.1
    reqs = stateable_requests(read_config(tmp_path / "ds_config.json", gpus=64).config,
                              run.plan_request)
    for req in reqs:
        assert list(req.schedules) == [Schedule.ONE_F_ONE_B] and not req.combined_order
        assert {r.value for r in req.recomputes} <= {"none", "full"} and not req.stage_recompute
    # AutoTP runs without a pipeline: the keys of tp > 1 are searched apart, at pp 1
    assert [(sorted({k.tp for k in r.keys()}), r.pp) for r in reqs] == [
        ([1], None), ([2, 4, 8], (1,))]


def test_deepspeed_file_states_the_model_sequence_and_gpu_it_was_planned_for(
        tmp_path: Path) -> None:
    """DeepSpeed's keys state no model, sequence length or GPU: the emitted file carries
    them under "pptune" (a key DeepSpeed ignores), so check-config prices the run the
    plan was made for (Llama 3 8B at 32,768 tokens on 64 H100s) with --gpus alone,
    where it had priced the preset's 8,192 tokens (9.3 s for a 60.9 s step)."""
    from pptune.plan.emit import write

    run = recommend(RecommendSpec.of(gpus=64, model="llama3-8b", seq_len=32768, top=1))
    out = emit("deepspeed", run)
    write(out, tmp_path)
    stated = json.loads((tmp_path / "ds_config.json").read_text())["pptune"]
    # what DeepSpeed's keys leave out; a pp = 1 plan's full recomputation (the model
    # code's checkpointing) is stated there too (the plan written here runs AutoTP,
    # tp 4, and recomputes nothing: the search over every tp finds it faster)
    assert {k: v for k, v in stated.items() if k != "recompute"} == {
        "attention": "sdpa", "model": "llama3-8b", "seq_len": 32768, "gpu": "h100-sxm",
        "gpus_per_node": 8}
    assert stated.get("recompute", "none") == out.plan.recompute.value
    doc = check_json(tmp_path / "ds_config.json", "--gpus", "64")
    assert doc["exit_code"] == 0 and doc["warnings"] == 0, doc["findings"]
    assert doc["config"]["seq_len"] == 32768 and doc["config"]["gpu"] == "h100-sxm"
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_relaunched_plan_keeps_the_recomputation_its_script_states(tmp_path: Path) -> None:
    """Llama 3 70B on 36 H100s runs as 6 nodes x 6 GPUs; the script states
    --recompute-num-layers 5 for every stage, and the step predicted for that placement
    prices those counts (not the plan's fitted 5,3,2,1,0..., which had made the note's
    step faster than check-config's of the same script)."""
    from pptune.plan.emit import write

    run = recommend(RecommendSpec.of(gpus=36, model="llama3-70b", gpu="h100-sxm", top=1,
                                     sequence_parallel=False))
    out = emit("megatron", run)
    assert any("launched as 6 nodes x 6 GPUs" in n for n in out.notes)
    counts = out.plan.recompute_layers
    assert counts is not None and len(set(counts)) == 1
    write(out, tmp_path)
    text = (tmp_path / "pretrain_megatron.sh").read_text()
    assert f"--recompute-num-layers {counts[0]}" in text and "--nproc_per_node 6" in text
    doc = check_json(tmp_path / "pretrain_megatron.sh", "--gpu", "h100-sxm")
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    assert f"predicted: step {out.plan.step_time_s:.3f} s" in text  # the header's step


def test_gb200_scripts_launch_compute_trays_of_one_nvlink_domain(tmp_path: Path) -> None:
    """A GB200 NVL72 host (compute tray) holds 4 GPUs of a 72-GPU NVLink domain: the
    script launches 4 ranks a node, and check-config, reading --nproc_per_node 4 on
    gb200, prices the 72-GPU domain the plan was made for (not 4-GPU nodes)."""
    from pptune.plan.emit import write

    run = recommend(RecommendSpec.of(gpus=128, model="mixtral-8x22b", gpu="gb200", top=1))
    out = emit("megatron", run)
    write(out, tmp_path)
    assert "--nnodes 32 --nproc_per_node 4" in (tmp_path / "pretrain_megatron.sh").read_text()
    assert not any("launched as" in n for n in out.notes)
    doc = check_json(tmp_path / "pretrain_megatron.sh", "--gpu", "gb200")
    assert doc["config"]["gpus_per_node"] == 4  # as the script states it
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_fallback_may_take_another_micro_batch_size(tmp_path: Path) -> None:
    """GPT-3 175B on 1,024 H100s at tp 8: the zbv plan runs micro-batches of 2, on which
    Megatron-LM's fastest plan is 1F1B at 1.12x; interleaved 1F1B v=4 over micro-batches
    of 1 runs at 1.01x, and check-config of the script finds nothing faster at its tp 8
    (it had flagged the 1F1B script 1.11x slower than best): only at tp 4, which
    recommend was not asked to search, the same plan is faster."""
    from pptune.plan.emit import write

    run = recommend(RecommendSpec.of(gpus=1024, model="gpt3-175b", gpu="h100-sxm", tp=8,
                                     top=3, sequence_parallel=False))
    plan = run.result.plans[0]
    assert plan.schedule is Schedule.ZBV and plan.micro_batch_size == 2
    out = emit("megatron", run)
    assert (out.plan.schedule, out.plan.micro_batch_size) == (Schedule.INTERLEAVED, 1)
    assert any("on the same ranks and batch, 96 micro-batches of 1" in n for n in out.notes)
    assert out.plan.step_time_s < 1.02 * plan.step_time_s
    write(out, tmp_path)
    doc = check_json(tmp_path / "pretrain_megatron.sh", "--gpu", "h100-sxm")
    # the script holds the tp recommend held (held=tp): nothing faster at tp 8
    assert not [f for f in doc["findings"] if f["severity"] == "warning"]
    assert doc["config"]["limits"]["held"] == ["tp"]
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    assert any(n.startswith("the best-plan comparison keeps the file's tp") for n in doc["notes"])
    # under --no-compare no comparison runs: no note of what it keeps
    quick = check_json(tmp_path / "pretrain_megatron.sh", "--gpu", "h100-sxm", "--no-compare")
    assert not any("best-plan comparison" in n for n in quick["notes"])
    # without the line's held=, every tp is compared: the same plan at tp 4 is faster
    script = tmp_path / "pretrain_megatron.sh"
    script.write_text(script.read_text().replace(" held=tp", ""))
    doc = check_json(script, "--gpu", "h100-sxm")
    [slower] = [f for f in doc["findings"] if f["severity"] == "warning"]
    assert slower["id"] == "slower-than-best" and slower["values"]["differs"] == {"tp": [8, 4]}


def test_files_for_four_gpu_nodes_are_checked_on_four_gpu_nodes(tmp_path: Path) -> None:
    """Llama 3 70B on 48 H100s in nodes of 4 (--gpus-per-node 4): the plan's tp 2 x cp 4
    spans two nodes. check-config prices the analytic costs' collectives on the node the
    file states (--nproc_per_node 4, gpus_per_node: 4), as recommend planned them; it had
    priced them on the GPU's 8-GPU node (68.5 s for a 70.1 s Megatron-LM step)."""
    from pptune.plan.emit import write

    run = recommend(RecommendSpec.of(gpus=48, model="llama3-70b", gpu="h100-sxm",
                                     gpus_per_node=4, top=1))
    for framework, name in ((Framework.MEGATRON, "pretrain_megatron.sh"),
                            (Framework.PPTUNE, "pptune.yaml")):
        out = emit(framework, run)
        write(out, tmp_path / framework.value)
        doc = check_json(tmp_path / framework.value / name, "--gpu", "h100-sxm")
        assert doc["config"]["gpus_per_node"] == 4
        assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_a_deepspeed_file_states_the_node_shape_it_launches(tmp_path: Path) -> None:
    """Llama 3 8B on 12 H100s launches 2 nodes x 6 GPUs: the DeepSpeed file states 6 under
    "pptune" and its prediction is for that placement, which check-config repeats."""
    from pptune.plan.emit import write

    run = recommend(RecommendSpec.of(gpus=12, model="llama3-8b", gpu="h100-sxm", top=1))
    out = emit("deepspeed", run)
    assert any("launched as 2 nodes x 6 GPUs" in n for n in out.notes)
    write(out, tmp_path)
    assert json.loads((tmp_path / "ds_config.json").read_text())["pptune"]["gpus_per_node"] == 6
    assert "--num_nodes 2 --num_gpus 6" in (tmp_path / "ds_partition.txt").read_text()
    doc = check_json(tmp_path / "ds_config.json", "--gpus", "12")
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_deepspeed_says_how_to_rank_plans_as_it_runs_tensor_parallelism() -> None:
    """Sequence parallelism is on by default and DeepSpeed's AutoTP has none: the file is
    re-predicted without it, and the note says which flag ranks the plans that way."""
    hint = "recommend --no-sequence-parallel ranks the plans as DeepSpeed runs"
    on = emit("deepspeed", recommend(RecommendSpec.of(gpus=16, model="llama3-8b", tp=[2],
                                                      top=1)))
    assert any(hint in n for n in on.notes)
    off = emit("deepspeed", recommend(RecommendSpec.of(gpus=16, model="llama3-8b", tp=[2],
                                                       sequence_parallel=False, top=1)))
    assert not any(hint in n for n in off.notes)


def test_megatron_states_one_recomputed_block_count_for_every_stage() -> None:
    """--recompute-method block with --recompute-num-layers N recomputes the first N
    blocks of every stage: the plans a Megatron-LM script states (what check-config
    compares a script with, and what emit searches when its substitutions cost much)
    carry one count for every stage, never counts fitted stage by stage."""
    from dataclasses import replace

    from pptune.costmodel.search import Sharding, search
    from pptune.costmodel.stage_recompute import stage_blocks
    from pptune.frameworks.megatron.closest import stateable_request

    run = recommend(RecommendSpec.of(gpus=64, model="llama3-70b", gpu="h100-sxm",
                                     seq_len=32768, top=1))
    assert run.plan_request.stage_recompute and not run.plan_request.uniform_recompute
    req = stateable_request(run.plan_request, "llama3-70b")
    assert req.uniform_recompute
    assert {s.value for s in req.schedules} <= {"1f1b", "interleaved-1f1b"}
    # the distributed optimizer's plans, which pipeline (Megatron-FSDP's ZeRO-3 wins
    # without a pipeline here, and recomputes no stage)
    counted = [p for p in search(run.costs.table_for, replace(
        req, top=5, shardings=(Sharding.ZERO1,))).plans if p.recompute_layers is not None]
    assert counted  # at 32k tokens some stage must recompute, and not all of them all
    for plan in counted:
        n = max(plan.recompute_layers)
        blocks = stage_blocks(list(run.table_for(plan.key).names), plan.stage_layers)
        assert plan.recompute_layers == tuple(min(n, b) for b in blocks)


def test_emit_prices_the_written_plan_at_the_searchs_gemm_efficiency(tmp_path: Path) -> None:
    """torchtitan's kernels re-price the plan; with --efficiency 0.3 the re-priced GEMMs
    keep that efficiency (they had taken the per-shape model's, about twice as fast: the
    written plan came out at 0.497x plan 1). The torchtitan file compiles, keeps flash
    attention and no faster kernels than the search priced: it is never faster."""
    import re

    r = runner.invoke(app, ["recommend", "--gpus", "8", "--model", "llama3-8b",
                            "--efficiency", "0.3", "--emit", "torchtitan", "-o",
                            str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    ratios = [float(x) for x in re.findall(r"\(([0-9.]+)x plan 1\)", r.stderr)]
    assert ratios and all(0.99 <= x < 1.1 for x in ratios), r.stderr
