"""check-config against each framework's own rules: config in, finding out.

Every test names the framework source it re-states (repository path and
function). What the framework refuses is an error finding (exit 1); what it
runs is not an error, however slow; what pptune cannot model is a warning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.frameworks.deepspeed.partition import ds_partition_balanced, ds_partition_uniform
from pptune.frameworks.megatron.split import MegatronSplit, megatron_blocks
from pptune.frameworks.torchtitan.fqns import torchtitan_fqns
from tests.check_json import check_file

runner = CliRunner()


def run(tmp_path: Path, name: str, text: str, *flags: str) -> tuple[int, dict[str, str], dict]:
    return check_file(tmp_path / name, text, *flags)


def ds(tmp_path: Path, config: dict, *flags: str) -> tuple[int, dict[str, str], dict]:
    return run(tmp_path, "ds.json", json.dumps(config), *flags)


# --- DeepSpeed 0.19.8 -----------------------------------------------------------


def test_deepspeed_train_batch_size_alone_is_valid(tmp_path: Path) -> None:
    """deepspeed/runtime/config.py DeepSpeedConfig._set_batch_related_parameters: with
    only train_batch_size, GA = 1 and micro = train_batch_size // dp."""
    code, found, doc = ds(tmp_path, {"train_batch_size": 32}, "--pp", "2", "--gpus", "8")
    assert code == 0 and "error" not in found.values(), found
    cfg = doc["config"]
    assert (cfg["micro_batch_size"], cfg["grad_accum_steps"]) == (8, 1)  # dp 4


def test_deepspeed_runs_fewer_micro_batches_than_stages(tmp_path: Path) -> None:
    """deepspeed/runtime/pipe/schedule.py TrainSchedule: no micro-batch rule (steps
    with an invalid micro-batch id are skipped), so GA 2 on 4 stages runs."""
    code, found, _ = ds(tmp_path, {"train_micro_batch_size_per_gpu": 1,
                                   "gradient_accumulation_steps": 2}, "--pp", "4", "--gpus", "4")
    assert code == 0 and "1f1b-m-lt-pp" not in found


def test_deepspeed_refuses_bf16_with_fp16(tmp_path: Path) -> None:
    """deepspeed/runtime/config.py DeepSpeedConfig._initialize_params: 'bfloat16 and
    fp16 modes cannot be simultaneously enabled'."""
    code, found, _ = ds(tmp_path, {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                   "fp16": {"enabled": True}}, "--gpus", "1")
    assert code == 1 and found["deepspeed-bf16-fp16"] == "error"


def test_deepspeed_refuses_zero2_with_pipeline(tmp_path: Path) -> None:
    """deepspeed/runtime/pipe/engine.py PipelineEngine.__init__: 'ZeRO-2 and ZeRO-3 are
    incompatible with pipeline parallelism'."""
    code, found, _ = ds(tmp_path, {"train_micro_batch_size_per_gpu": 1,
                                   "gradient_accumulation_steps": 4,
                                   "zero_optimization": {"stage": 2}}, "--pp", "2", "--gpus", "2")
    assert code == 1 and found["deepspeed-zero-pp"] == "error"


def test_deepspeed_refuses_missing_batch_and_unknown_partition(tmp_path: Path) -> None:
    """deepspeed/runtime/config.py: 'Either train_batch_size or
    train_micro_batch_size_per_gpu needs to be provided'; deepspeed/runtime/pipe/
    module.py PipelineModule._partition_layers: NotImplementedError for other methods."""
    code, found, _ = ds(tmp_path, {"zero_optimization": {"stage": 1},
                                   "pipeline": {"partition": "profile"}}, "--gpus", "1")
    assert code == 1
    assert found["deepspeed-batch"] == "error" and found["deepspeed-partition-method"] == "error"


def test_deepspeed_type_partition_is_a_warning(tmp_path: Path) -> None:
    """PipelineModule 'type:REGEX' balances by layer class names pptune cannot see."""
    code, found, _ = ds(tmp_path, {"train_micro_batch_size_per_gpu": 1,
                                   "pipeline": {"partition": "type:Transformer"}}, "--gpus", "1")
    assert code == 0 and found["deepspeed-partition-type"] == "warning"


def test_deepspeed_partition_uniform_gives_extras_to_the_first_stages() -> None:
    """deepspeed/runtime/utils.py partition_uniform (DeepSpeed >= 0.10.1, PR #4053):
    38 items on 8 parts are 5,5,5,5,5,5,4,4; before, the last stage took the rest."""
    assert ds_partition_uniform(38, 8) == [0, 5, 10, 15, 20, 25, 30, 34, 38]
    assert ds_partition_uniform(38, 8, first_gets_extra=False) == [0, 4, 8, 12, 16, 20, 24, 28, 38]
    assert ds_partition_uniform(3, 5) == [0, 1, 2, 3, 3, 3]  # empty last stages


def test_deepspeed_partition_balanced_minimises_the_spread() -> None:
    """deepspeed/runtime/utils.py partition_balanced: the linear-partition DP keeps
    the smallest (heaviest - lightest) part, later split points winning ties."""
    assert ds_partition_balanced([1, 1, 1, 1, 1], 4) == [0, 2, 3, 4, 5]
    assert ds_partition_balanced([5, 1, 1, 1, 1, 5], 3) == [0, 1, 5, 6]
    assert ds_partition_balanced([1, 2], 4) == [0, 1, 2, 2, 2]


def test_deepspeed_uniform_split_is_what_check_config_predicts(tmp_path: Path) -> None:
    """PipelineModule(partition_method='uniform') over the layer list (embedding, 32
    blocks, head = 34 items) on 4 stages: 9, 9, 8, 8."""
    _code, _found, doc = ds(tmp_path, {"train_micro_batch_size_per_gpu": 1,
                                      "gradient_accumulation_steps": 8,
                                      "pipeline": {"stages": 4, "partition": "uniform"}},
                           "--gpus", "4", "--model", "llama3-8b", "--gpu", "h100-sxm")
    assert doc["derived"]["stage_layers"] == [9, 9, 8, 8]


# --- Megatron-LM core_r0.16 / megatron-core 0.16.1 --------------------------------

MEGATRON = ("torchrun --nproc_per_node {gpus} pretrain_gpt.py --num-layers {layers} "
            "--hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
            "--pipeline-model-parallel-size {pp} --micro-batch-size 1 {extra}\n")


def mega(tmp_path: Path, extra: str = "", *, layers: int = 32, pp: int = 4, gpus: int = 4
         ) -> tuple[int, dict[str, str], dict]:
    return run(tmp_path, "run.sh", MEGATRON.format(layers=layers, pp=pp, gpus=gpus, extra=extra))


def test_megatron_uneven_split_with_virtual_stages_per_rank_is_accepted(tmp_path: Path) -> None:
    """megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__:
    uneven first/last stages with --num-virtual-stages-per-pipeline-rank are valid
    when each is divisible by vpp and the middle ranks share the rest evenly."""
    _code, found, doc = mega(tmp_path, "--global-batch-size 8 --decoder-first-pipeline-num-layers 6 "
                            "--decoder-last-pipeline-num-layers 6 "
                            "--num-virtual-stages-per-pipeline-rank 2")
    assert "error" not in found.values(), found
    assert doc["config"]["stage_layers"] == [3, 5, 5, 3, 3, 5, 5, 3]
    assert megatron_blocks(MegatronSplit(32, 4, 2, 6, 6)) == [3, 5, 5, 3, 3, 5, 5, 3]


def test_megatron_refuses_uneven_split_with_layers_per_virtual_stage(tmp_path: Path) -> None:
    """megatron/training/arguments.py validate_args: 'please use
    --num-virtual-stages-per-pipeline-rank to specify virtual pipeline parallel degree
    when enable uneven pipeline parallelism'."""
    code, found, _ = mega(tmp_path, "--global-batch-size 8 --decoder-first-pipeline-num-layers 6 "
                          "--num-layers-per-virtual-pipeline-stage 2")
    assert code == 1 and found["megatron-uneven-vpp"] == "error"


def test_megatron_account_for_embedding_and_loss_count_as_layers(tmp_path: Path) -> None:
    """TransformerConfig.__post_init__ / validate_args: each account-for flag adds one
    layer to the split (30 + 2 = 32 over pp 4: 7, 8, 8, 7 blocks); 31 + 2 is refused."""
    flags = ("--global-batch-size 8 --account-for-embedding-in-pipeline-split "
             "--account-for-loss-in-pipeline-split")
    code, found, doc = mega(tmp_path, flags, layers=30)
    assert "error" not in found.values(), found
    assert doc["config"]["stage_layers"] == [7, 8, 8, 7]
    code, found, _ = mega(tmp_path, flags, layers=31)
    assert code == 1 and found["megatron-layers-not-divisible"] == "error"


def test_megatron_non_interleaved_runs_fewer_micro_batches_than_stages(tmp_path: Path) -> None:
    """megatron/core/pipeline_parallel/schedules.py get_pp_rank_microbatches clamps the
    warm-up to the micro-batch count: m = 2 on pp 4 runs."""
    code, found, _ = mega(tmp_path, "--global-batch-size 2")
    assert code == 0 and "1f1b-m-lt-pp" not in found


def test_megatron_global_batch_defaults_to_micro_times_dp(tmp_path: Path) -> None:
    """megatron/training/arguments.py validate_args: without --global-batch-size,
    global = micro-batch-size x dp (one micro-batch per step)."""
    code, found, doc = mega(tmp_path, gpus=8)
    assert code == 0
    assert "batch-unknown" not in found and doc["derived"]["microbatches"] == 1


def test_megatron_microbatch_group_rules(tmp_path: Path) -> None:
    """schedules.py forward_backward_pipelining_with_interleaving: the group N of
    micro-batches per virtual stage (default pp) must lie in [pp, m], and m % N must be
    0 or >= pp."""
    vpp = "--num-layers-per-virtual-pipeline-stage 4"  # 32 / 4 / 4 = vpp 2
    code, found, _ = mega(tmp_path, f"{vpp} --global-batch-size 8")
    assert "error" not in found.values(), found
    code, found, _ = mega(tmp_path, f"{vpp} --global-batch-size 6")  # 6 % 4 = 2 < 4
    assert code == 1 and found["interleaved-m-not-multiple"] == "error"
    code, found, _ = mega(tmp_path, f"{vpp} --global-batch-size 8 "
                          "--microbatch-group-size-per-virtual-pipeline-stage 16")
    assert code == 1 and found["megatron-microbatch-group"] == "error"


def test_megatron_refuses_layers_not_divisible_with_a_finding_and_annotation(
        tmp_path: Path) -> None:
    """validate_args: 'Number of layers should be divisible by the pipeline-model-parallel
    size' is an error finding (exit 1), annotated under --output github."""
    path = tmp_path / "run.sh"
    path.write_text(MEGATRON.format(layers=30, pp=4, gpus=4, extra="--global-batch-size 8"))
    r = runner.invoke(app, ["check-config", str(path), "--output", "github"])
    assert r.exit_code == 1
    assert "::error file=" in r.stdout and "megatron-layers-not-divisible" in r.stdout


def test_check_config_json_flag_is_output_json(tmp_path: Path) -> None:
    """--json, as recommend and presets take it: the same report as --output json."""
    import json
    path = tmp_path / "run.sh"
    path.write_text(MEGATRON.format(layers=30, pp=4, gpus=4, extra="--global-batch-size 8"))
    a = runner.invoke(app, ["check-config", str(path), "--json", "--no-compare"])
    b = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare"])
    assert a.exit_code == b.exit_code == 1
    assert json.loads(a.stdout) == json.loads(b.stdout)
    c = runner.invoke(app, ["check-config", str(path), "--json", "--output", "github"])
    assert c.exit_code == 2 and "give one" in c.stderr


def test_megatron_refuses_bf16_with_fp16_and_several_vpp_flags(tmp_path: Path) -> None:
    """validate_args: --fp16 asserts not --bf16; 'No more than one of the following
    arguments can be set at the same time' for the virtual-pipeline flags."""
    _code, found, _ = mega(tmp_path, "--bf16 --fp16 --num-layers-per-virtual-pipeline-stage 4 "
                          "--num-virtual-stages-per-pipeline-rank 2")
    assert found["megatron-bf16-fp16"] == "error" and found["megatron-vpp-flags"] == "error"


def test_megatron_interleaving_needs_pp_above_two_without_p2p_overlap(tmp_path: Path) -> None:
    """validate_args: interleaving needs pp > 2 with --no-overlap-p2p-communication."""
    code, found, _ = mega(tmp_path, "--num-virtual-stages-per-pipeline-rank 2 "
                          "--global-batch-size 4 --no-overlap-p2p-communication", pp=2, gpus=2)
    assert code == 1 and found["megatron-interleaved-pp"] == "error"


def test_megatron_recompute_method_with_selective_is_refused(tmp_path: Path) -> None:
    """validate_args: 'recompute method is not yet supported for selective recomputing
    granularity'."""
    _code, found, _ = mega(tmp_path, "--recompute-activations --recompute-method uniform")
    assert found["megatron-recompute-method"] == "error"


def test_megatron_tensor_parallel_script_without_max_connections_warns(tmp_path: Path) -> None:
    """validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tp > 1 before Blackwell;
    the job environment may set it, so pptune warns."""
    _code, found, _ = mega(tmp_path, "--tensor-model-parallel-size 2", gpus=8)
    assert found["megatron-cuda-connections"] == "warning"
    path = tmp_path / "run2.sh"
    path.write_text("export CUDA_DEVICE_MAX_CONNECTIONS=1\n" + MEGATRON.format(
        layers=32, pp=4, gpus=8, extra="--tensor-model-parallel-size 2"))
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare"])
    assert "megatron-cuda-connections" not in r.stdout


# --- torch 2.13 / torchtitan 0.2.2 and 0.3.0 ---------------------------------------

TITAN = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = {local}
[parallelism]
pipeline_parallel_degree = 4
data_parallel_shard_degree = 1
pipeline_parallel_schedule = "{schedule}"
{extra}
"""


def titan(tmp_path: Path, schedule: str = "1F1B", local: int = 8, extra: str = "",
          *flags: str) -> tuple[int, dict[str, str], dict]:
    return run(tmp_path, "job.toml", TITAN.format(schedule=schedule, local=local, extra=extra),
               *flags)


def test_torch_interleaved_rounds_rule_and_the_older_rule(tmp_path: Path) -> None:
    """torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B (torch >= 2.6):
    m a multiple of max(1, m // pp): 6 on pp 4 runs, 9 does not; torch < 2.6 needed a
    multiple of pp (--framework-version torch=2.5)."""
    code, found, _ = titan(tmp_path, "Interleaved1F1B", 6)
    assert "interleaved-rounds" not in found and "interleaved-m-not-multiple" not in found
    code, found, _ = titan(tmp_path, "Interleaved1F1B", 9)
    assert code == 1 and found["interleaved-rounds"] == "error"
    code, found, _ = titan(tmp_path, "Interleaved1F1B", 6, "", "--framework-version", "torch=2.5")
    assert code == 1 and found["interleaved-m-not-multiple"] == "error"


def test_torch_1f1b_needs_m_ge_stages_gpipe_does_not(tmp_path: Path) -> None:
    """schedules.py Schedule1F1B.__init__: 'Number of microbatches (2) must be greater than
    or equal to the number of stages (4)' (torch >= 2.7); ScheduleGPipe has no rule."""
    code, found, _ = titan(tmp_path, "1F1B", 2)
    assert code == 1 and found["1f1b-m-lt-pp"] == "error"
    code, found, _ = titan(tmp_path, "GPipe", 2)
    assert "1f1b-m-lt-pp" not in found
    code, found, _ = titan(tmp_path, "1F1B", 2, "", "--framework-version", "torch=2.6")
    assert "1f1b-m-lt-pp" not in found


def test_torchtitan_refused_stage_count_is_an_error_finding(tmp_path: Path) -> None:
    """torchtitan/distributed/pipeline_parallel.py pipeline_llm: 'Number of virtual stages
    (5) must be divisible by pipeline parallel size (4)': exit 1, annotated, not exit 2."""
    extra = "pipeline_parallel_layers_per_stage = 7"  # ceil(34 / 7) = 5 stages
    path = tmp_path / "job.toml"
    path.write_text(TITAN.format(schedule="Interleaved1F1B", local=8, extra=extra))
    r = runner.invoke(app, ["check-config", str(path), "--output", "github"])
    assert r.exit_code == 1 and "::error" in r.stdout and "torchtitan-stage-count" in r.stdout


def test_torchtitan_head_name_follows_the_version(tmp_path: Path) -> None:
    """pipeline_parallel.py generate_llm_fqn_per_model_part: the head is 'output' in
    0.2.2 and 'lm_head' in 0.3.0; a split naming the other places the head nowhere."""
    assert torchtitan_fqns(2, 2)[-1][-1] == "output"
    assert torchtitan_fqns(2, 2, head="lm_head")[-1][-1] == "lm_head"
    parts = [["tok_embeddings"] + [f"layers.{i}" for i in range(16)],
             [f"layers.{i}" for i in range(16, 32)] + ["norm", "lm_head"]]
    extra = f"pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = {json.dumps(parts)}"
    text = TITAN.format(schedule="1F1B", local=8, extra="").replace(
        "pipeline_parallel_degree = 4\n", "") + extra + "\n"
    code, found, _ = run(tmp_path, "job.toml", text)
    assert code == 1 and found["torchtitan-module-missing"] == "error"
    code, found, _ = run(tmp_path, "job.toml", text, "--framework-version", "torchtitan=0.3.0")
    assert "torchtitan-module-missing" not in found and found["torchtitan-toml"] == "warning"


def test_torchtitan_defaults_selective_every_second_block_and_fsdp(tmp_path: Path) -> None:
    """torchtitan/config/job_config.py: [activation_checkpoint] mode 'selective',
    selective_ac_option '2'; data_parallel_shard_degree -1 is FSDP (not ZeRO-2), and
    fsdp_reshard_after_forward 'default' keeps weights gathered under pp."""
    text = TITAN.format(schedule="1F1B", local=8, extra="").replace(
        "data_parallel_shard_degree = 1", "data_parallel_shard_degree = -1")
    _code, _found, doc = run(tmp_path, "job.toml", text, "--gpus", "8")
    cfg = doc["config"]
    assert (cfg["recompute"], cfg["recompute_every"]) == ("selective", 2)
    assert (cfg["sharding"], cfg["fsdp_reshard_after_forward"]) == ("fsdp", False)


def test_unreadable_file_still_annotates_under_github_output(tmp_path: Path) -> None:
    """Exit 2 (cannot read) under --output github prints an annotation, never nothing."""
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    r = runner.invoke(app, ["check-config", str(path), "--output", "github"])
    assert r.exit_code == 2 and r.stdout.startswith("::error file=")


@pytest.mark.parametrize("value", ["torchtitan", "spark=1.0", "torch=two"])
def test_bad_framework_version_is_bad_usage(tmp_path: Path, value: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("micro_batch_size: 1\n")
    r = runner.invoke(app, ["check-config", str(path), "--framework-version", value])
    assert r.exit_code == 2 and "--framework-version" in r.stderr


def test_megatron_overlap_param_gather_needs_distributed_optimizer_and_grad_overlap(
        tmp_path: Path) -> None:
    """megatron/training/arguments.py validate_args: '--overlap-param-gather only supported
    with distributed optimizer or megatron fsdp', 'Must use --overlap-param-gather with
    --overlap-grad-reduce'."""
    code, found, _ = mega(tmp_path, "--global-batch-size 8 --overlap-param-gather", gpus=8)
    assert code == 1 and found["megatron-overlap-param-gather"] == "error"
    ok = ("--global-batch-size 8 --use-distributed-optimizer --overlap-grad-reduce "
          "--overlap-param-gather")
    _code, found, doc = mega(tmp_path, ok, gpus=8)
    assert "megatron-overlap-param-gather" not in found
    assert (doc["config"]["overlap_grad_reduce"], doc["config"]["overlap_param_gather"]) == (
        True, True)


def test_megatron_data_parallel_overlap_is_priced_as_the_script_states(tmp_path: Path) -> None:
    """megatron-core's DistributedDataParallelConfig overlaps neither the gradient
    reduction nor the parameter gather unless the flags say: without them the traffic
    is exposed after the last backward, so the predicted step is longer."""
    base = "--global-batch-size 16 --bf16 --use-distributed-optimizer"
    steps = {}
    for name, extra in (("none", ""), ("both", " --overlap-grad-reduce --overlap-param-gather")):
        _code, _found, doc = run(tmp_path, f"{name}.sh",
                                 MEGATRON.format(layers=32, pp=2, gpus=8, extra=base + extra),
                                 "--gpu", "h100-sxm", "--model", "llama3-8b")
        steps[name] = doc["derived"]["step_time_s"]
    assert steps["none"] > steps["both"] > 0
