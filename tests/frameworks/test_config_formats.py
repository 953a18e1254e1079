"""Each reader on a consistent, real-shaped config: exact fields and notes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput
from pptune.frameworks.read import ConfigFormat, ReadResult, read_config

DATA = Path(__file__).resolve().parent.parent / "data" / "configs"


def fields(result: ReadResult) -> dict:
    return result.config.model_dump(exclude_defaults=True, mode="json")


# --- pptune's own format ----------------------------------------------------


def test_pptune_yaml_reads_every_field_as_written() -> None:
    result = read_config(DATA / "pptune.yaml")
    assert result.format is ConfigFormat.PPTUNE
    assert fields(result) == {
        "gpus": 16, "tp": 2, "pp": 4, "dp": 2, "schedule": "interleaved-1f1b",
        "virtual_stages": 2, "micro_batch_size": 1, "global_batch": 128,
        "grad_accum_steps": 64, "seq_len": 8192, "model": "llama3-8b", "gpu": "h100-sxm",
        "limits": {"max_bubble": 0.2, "memory_fraction": 0.9},
    }
    # tp 2 without sequence_parallel, pp 4 without stage_layers: priced as the file says,
    # and said (reader.py)
    assert result.notes == [
        "tp 2 priced without sequence parallelism: the file does not state sequence_parallel "
        "(default false), where recommend's plans split the sequence over tp; set "
        "sequence_parallel: true to price it as they do",
        "pp 4 priced on an even split of the blocks: the file does not state stage_layers, "
        "where recommend's plans balance the stages around the embedding and the head; set "
        "stage_layers: [...], as recommend --emit writes it, to price it as they do"]


def test_pptune_toml_and_json_read_the_same_run(tmp_path: Path) -> None:
    toml = read_config(DATA / "pptune.toml").config
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps({"gpus": 16, "tp": 2, "pp": 4, "schedule": "interleaved-1f1b",
                                   "virtual_stages": 2, "micro_batch_size": 1,
                                   "global_batch": 128, "model": "llama3-8b",
                                   "gpu": "h100-sxm", "limits": {"max_bubble": 0.2}}))
    assert read_config(as_json).config == toml
    assert toml.schedule is Schedule.INTERLEAVED and toml.limits.max_bubble == 0.2


def test_pptune_schedule_name_is_case_insensitive(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("micro_batch_size: 2\nschedule: ZB-H1\n")
    assert read_config(path).config.schedule is Schedule.ZB_H1


def test_pptune_inconsistent_values_are_carried_not_rejected(tmp_path: Path) -> None:
    # 10 GPUs cannot be tp 2 x pp 4 x dp 2, and 1 x 7 x 2 != 128: findings for the check
    path = tmp_path / "c.yaml"
    path.write_text("gpus: 10\ntp: 2\npp: 4\ndp: 2\nmicro_batch_size: 1\n"
                    "global_batch: 128\ngrad_accum_steps: 7\n")
    cfg = read_config(path).config
    assert (cfg.gpus, cfg.tp, cfg.pp, cfg.dp) == (10, 2, 4, 2)
    assert (cfg.global_batch, cfg.grad_accum_steps) == (128, 7)


# --- DeepSpeed ----------------------------------------------------------------


def test_deepspeed_config_maps_batch_zero_and_pipeline() -> None:
    result = read_config(DATA / "ds_config.json", gpus=8)
    assert result.format is ConfigFormat.DEEPSPEED
    assert fields(result) == {
        "gpus": 8, "pp": 2, "micro_batch_size": 2, "global_batch": 64, "grad_accum_steps": 8,
        "partition_method": "parameters", "precision": "bf16", "zero_stage": 1,
        "sharded_optimizer": True, "source_format": "deepspeed", "sharding": "zero1",
        "attention": "sdpa",  # unstated: the Hugging Face default (SDPA)
        # pipeline.activation_checkpoint_interval 1: PipelineModule checkpoints every layer
        "recompute": "full",
        # the pipeline engine reduces gradients after the last micro-batch
        "overlap_grad_reduce": False, "overlap_param_gather": False,
        "mtp_layers": 0,  # PipelineModule runs the model code's layers: no MTP module
        # ZeRO-1 in bf16 accumulates in the model's dtype (engine.py get_data_types)
        "main_grads_dtype": "bf16",
    }
    assert "gpus 8 from --gpus: the file does not state a GPU count" in result.notes
    assert any(n.startswith("ignored keys: gradient_clipping, optimizer") for n in result.notes)


@pytest.mark.parametrize(("zero", "pp", "expect"), [
    ({"stage": 3}, 1, (True, True)),  # overlap_comm defaults to stage == 3
    ({"stage": 2}, 1, (False, False)),
    ({"stage": 2, "overlap_comm": True}, 1, (True, False)),  # the gather follows the step
    ({"stage": 0}, 1, (False, False)),  # all-reduce after the backward
    ({"stage": 1, "overlap_comm": True}, 2, (False, False)),  # the pipeline engine's order
])
def test_deepspeed_overlap_follows_deepspeed(tmp_path: Path, zero: dict, pp: int,
                                             expect: tuple[bool, bool]) -> None:
    """deepspeed 0.19.8: runtime/zero/config.py overlap_comm_valid; runtime/pipe/schedule.py
    TrainSchedule (ReduceGrads after the last micro-batch)."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
                                "zero_optimization": zero, "bf16": {"enabled": True}}))
    cfg = read_config(path, gpus=8, pp=pp).config
    assert (cfg.overlap_grad_reduce, cfg.overlap_param_gather) == expect


@pytest.mark.parametrize(("zero", "pp", "types", "sixteen"), [
    (1, 1, None, True), (1, 2, None, True), (2, 1, None, True),  # ZeRO in the model dtype
    (0, 1, None, True),  # DDP_BFLOAT16
    (0, 2, None, False),  # the pipeline's BF16_Optimizer keeps FP32 gradients
    (1, 1, {"grad_accum_dtype": "fp32"}, False),  # stated FP32 accumulation
])
def test_deepspeed_gradient_width_follows_its_optimizer_choice(
        tmp_path: Path, zero: int, pp: int, types: dict | None, sixteen: bool) -> None:
    """deepspeed runtime/engine.py _do_optimizer_sanity_check and get_data_types."""
    doc = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
           "zero_optimization": {"stage": zero}, "bf16": {"enabled": True}}
    if types is not None:
        doc["data_types"] = types
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(doc))
    cfg = read_config(path, gpus=8, pp=pp).config
    assert (cfg.main_grads_dtype == "bf16") is sixteen


def test_deepspeed_auto_values_are_noted_and_left_unset() -> None:
    result = read_config(DATA / "ds_config_hf_auto.json", pp=4)
    cfg = result.config
    assert (cfg.global_batch, cfg.grad_accum_steps, cfg.precision) == (None, None, None)
    assert (cfg.micro_batch_size, cfg.pp, cfg.zero_stage, cfg.sharded_optimizer) == (4, 4, 3, True)
    auto = [n for n in result.notes if '"auto"' in n]
    assert len(auto) == 3 and any(n.startswith("train_batch_size") for n in auto)


def test_deepspeed_pipeline_size_top_level_and_flag_does_not_override(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 1,'
                    ' "pipeline_parallel_size": 4}')
    result = read_config(path, pp=8)
    assert result.config.pp == 4
    assert "--pp 8 ignored: the file states a pipeline size = 4" in result.notes


def test_deepspeed_micro_batch_derived_like_deepspeed(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 64, "gradient_accumulation_steps": 4,'
                    ' "train_micro_batch_size_per_gpu": "auto"}')
    result = read_config(path, gpus=8, pp=2)  # dp = 8 / 2 = 4 -> 64 / (4 x 4) = 4
    assert result.config.micro_batch_size == 4
    assert any("derived as DeepSpeed does" in n for n in result.notes)
    with pytest.raises(BadInput, match="train_micro_batch_size_per_gpu is 'auto'"):
        read_config(path)  # no --gpus: cannot derive


def test_deepspeed_inconsistent_batch_is_carried(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"  # 2 x 8 x dp never makes 100 with 8 GPUs: a finding
    path.write_text('{"train_batch_size": 100, "train_micro_batch_size_per_gpu": 2,'
                    ' "gradient_accumulation_steps": 8}')
    cfg = read_config(path, gpus=8).config
    assert (cfg.global_batch, cfg.micro_batch_size, cfg.grad_accum_steps) == (100, 2, 8)


# --- Megatron-LM ----------------------------------------------------------------


def test_megatron_llama3_script_resolves_variables_arrays_and_launcher() -> None:
    result = read_config(DATA / "megatron_llama3_8b.sh")
    assert result.format is ConfigFormat.MEGATRON
    assert fields(result) == {
        "gpus": 16, "tp": 2, "pp": 4, "schedule": "interleaved-1f1b", "virtual_stages": 2,
        "micro_batch_size": 1, "global_batch": 128, "seq_len": 8192, "model": "llama3-8b",
        "num_layers": 32, "hidden_size": 4096, "num_heads": 32, "num_kv_heads": 8,
        "ffn_hidden_size": 14336, "gated_mlp": True, "precision": "bf16",
        "dropout": True,  # Megatron-LM's 0.1 of each: the script sets neither
        "recompute": "selective", "sharded_optimizer": True, "sequence_parallel": True,
        # Transformer Engine (the default --transformer-impl) at --attention-backend auto
        # runs cuDNN's fused attention on Hopper and later
        "source_format": "megatron", "sharding": "zero1", "attention": "cudnn",
        # megatron-core overlaps neither unless the flags say: the script does not
        "overlap_grad_reduce": False, "overlap_param_gather": False,
        # no --cross-entropy-loss-fusion: megatron-core's unfused loss (loss.py)
        "cross_entropy": "unfused",
        "swiglu": "fused",  # megatron-core's bias_swiglu_impl: no --no-bias-swiglu-fusion
        # weight gradients into main_grad by the GEMMs: no --no-gradient-accumulation-fusion
        "wgrad_accum": "fused",
        # --normalization RMSNorm, --disable-bias-linear, --untie-embeddings-and-output-weights
        "normalization": "rmsnorm", "qkv_bias": False, "attn_out_bias": False,
        "mlp_bias": False, "tied_embeddings": False,
    }
    assert "shell variable NUM_NODES is not set in the script; used its default '2' "\
        "(check-config --env NUM_NODES=VALUE sets it)" in (
        result.notes)
    # --max-position-embeddings is read (checked against --seq-length), not ignored
    assert any(n.startswith("ignored 22 other flags: --use-mcore-models") for n in result.notes)


def test_megatron_gpt3_string_variables_and_distributed_launch() -> None:
    result = read_config(DATA / "megatron_gpt3_175b.sh")
    cfg = result.config
    assert (cfg.gpus, cfg.gpus_per_node, cfg.tp, cfg.pp) == (128, 8, 8, 16)
    assert (cfg.micro_batch_size, cfg.global_batch, cfg.grad_accum_steps) == (1, 1536, None)
    assert (cfg.model, cfg.precision, cfg.schedule) == ("gpt3-175b", "fp16", Schedule.ONE_F_ONE_B)
    assert "--rampup-batch-size ignored: checked at the final --global-batch-size" in result.notes


def test_megatron_argument_file_with_uneven_first_and_last_stage() -> None:
    cfg = read_config(DATA / "megatron_args.txt").config
    assert cfg.stage_layers == [5, 7, 7, 5]  # 24 - 5 - 5 = 14 over 2 middle stages
    assert (cfg.pp, cfg.num_layers, cfg.micro_batch_size, cfg.global_batch) == (4, 24, 2, 512)
    assert cfg.gpus is None  # no launcher: --gpus would fill it


def test_megatron_unresolved_variable_left_unset_then_flag_fills(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --micro-batch-size 1 \\\n"
                    "  --pipeline-model-parallel-size $PP --global-batch-size ${GBS}\n")
    result = read_config(path)
    assert (result.config.pp, result.config.global_batch, result.config.gpus) == (1, None, 8)
    assert ("--pipeline-model-parallel-size is $PP, which pptune cannot resolve without running "
            "the script; left unset") in result.notes
    assert "pp assumed 1: pass --pp" in result.notes
    filled = read_config(path, pp=4)
    assert filled.config.pp == 4
    assert any(n.startswith("pp 4 from --pp") for n in filled.notes)


def test_megatron_flag_does_not_override_the_script(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text("python pretrain_gpt.py --micro-batch-size 1 "
                    "--pipeline-model-parallel-size 2\n")
    result = read_config(path, pp=8)
    assert result.config.pp == 2
    assert "--pp 8 ignored: the file states --pipeline-model-parallel-size = 2" in result.notes


@pytest.mark.parametrize(("env", "flags", "attention"), [
    ("", "", "cudnn"),  # Transformer Engine at backend auto: cuDNN's on Hopper and later
    ("", "--attention-backend fused", "cudnn"),
    ("", "--attention-backend flash", "flash"),
    ("", "--attention-backend unfused", "eager"),
    ("", "--transformer-impl local", "eager"),
    ("", "--transformer-impl local --use-flash-attn", "flash"),
    # at backend auto, Transformer Engine's own switches decide
    ("export NVTE_FUSED_ATTN=0\n", "", "flash"),
    ("export NVTE_FUSED_ATTN=0\nexport NVTE_FLASH_ATTN=0\n", "", "eager"),
    ("export NVTE_FUSED_ATTN=1\n", "", "cudnn"),
])
def test_megatron_attention_kernel_as_transformer_engine_picks_it(
        tmp_path: Path, env: str, flags: str, attention: str) -> None:
    path = tmp_path / "run.sh"
    path.write_text(f"{env}python pretrain_gpt.py --micro-batch-size 1 "
                    f"--pipeline-model-parallel-size 2 {flags}\n")
    assert read_config(path).config.attention == attention


def test_megatron_virtual_stages_direct_and_last_repeat_wins(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text("python pretrain_gpt.py --micro-batch-size 1 --micro-batch-size 2 "
                    "--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 3\n")
    result = read_config(path)
    assert (result.config.micro_batch_size, result.config.virtual_stages) == (2, 3)
    assert result.config.schedule is Schedule.INTERLEAVED
    assert any("given 2 times (1, 2); Megatron-LM uses the last, 2" in n for n in result.notes)


def test_megatron_arithmetic_and_default_expansions(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text("NODES=${NODES:-4}\nGPN=8\nTP=$((64 / GPN))\nexport PP=4\n"
                    "torchrun --nnodes=$NODES --nproc-per-node=$GPN pretrain_gpt.py "
                    "--tensor-model-parallel-size $TP --pipeline-model-parallel-size=${PP} "
                    "--micro-batch-size 1 --global-batch-size $(( 4 * 64 ))\n")
    cfg = read_config(path).config
    assert (cfg.gpus, cfg.gpus_per_node, cfg.tp, cfg.pp, cfg.global_batch) == (32, 8, 8, 4, 256)


# --- torchtitan -------------------------------------------------------------------


def test_torchtitan_llama3_8b_pipeline_config() -> None:
    result = read_config(DATA / "torchtitan_llama3_8b.toml")
    assert result.format is ConfigFormat.TORCHTITAN
    assert fields(result) == {
        "pp": 2, "dp": 4, "schedule": "interleaved-1f1b", "virtual_stages": 2,
        "micro_batch_size": 1, "global_batch": 32, "grad_accum_steps": 8, "seq_len": 8192,
        "model": "llama3-8b", "precision": "bf16", "recompute": "selective", "zero_stage": 2,
        # selective_ac_option = "op": torchtitan's per-op policy (costmodel/op_sac.py)
        "recompute_modules": ["op_sac"],
        "sharded_optimizer": True, "source_format": "torchtitan", "sharding": "fsdp",
        "fsdp_reshard_after_forward": False, "attention": "sdpa",
        # torchtitan's generate_llm_fqn_per_model_part: 32 + 2 effective layers over 4
        # stages -> 9, 9, 8, 8 with the embedding and the norm + head counting one each
        "stage_layers": [8, 9, 8, 7],
        # no [compile]: PyTorch's eager cross-entropy (costmodel/loss.py) and SwiGLU
        "cross_entropy": "eager", "swiglu": "eager",
    }
    assert "virtual stages 2 per device: torchtitan's default for looped schedules" in (
        result.notes)


def test_torchtitan_older_layout() -> None:
    result = read_config(DATA / "torchtitan_llama3_70b_legacy.toml", gpus=64)
    assert fields(result) == {
        "gpus": 64, "tp": 8, "pp": 4, "dp": 2, "micro_batch_size": 2, "global_batch": 32,
        "grad_accum_steps": 8, "seq_len": 8192, "model": "llama3-70b",
        "stage_layers": [20, 20, 20, 20], "precision": "bf16", "recompute": "full",
        "zero_stage": 2, "sharded_optimizer": True, "source_format": "torchtitan",
        "sharding": "fsdp", "fsdp_reshard_after_forward": False, "attention": "sdpa",
        "sequence_parallel": True,  # torchtitan's tensor parallelism always is
        "cross_entropy": "eager",  # no training.compile: the loss runs uncompiled
        "swiglu": "eager",  # and so does the model's silu and mul
    }
    assert "read tensor_parallel_degree from [training] (older torchtitan)" in result.notes


def test_torchtitan_older_layout_data_parallel_degrees_under_training(tmp_path: Path) -> None:
    """torchtitan before [parallelism] kept every degree under [training], the data
    parallel ones too: data_parallel_shard_degree = 2 there is dp 2, not -1."""
    text = (DATA / "torchtitan_llama3_70b_legacy.toml").read_text().replace(
        "[parallelism]\ndata_parallel_shard_degree = 2\n", "").replace(
        "tensor_parallel_degree = 8\n", "tensor_parallel_degree = 8\ndata_parallel_shard_degree = 2\n")
    assert "[parallelism]" not in text
    path = tmp_path / "old.toml"
    path.write_text(text)
    result = read_config(path, gpus=64)
    assert fields(result)["dp"] == 2
    assert ("read data_parallel_shard_degree, tensor_parallel_degree from [training] "
            "(older torchtitan)") in result.notes


TITAN = """
[model]
name = "llama3"
flavor = "{flavor}"
[training]
local_batch_size = 16
{extra_training}
[parallelism]
pipeline_parallel_degree = 4
pipeline_parallel_schedule = "{schedule}"
pipeline_parallel_microbatch_size = 2
data_parallel_shard_degree = {shard}
{extra_parallel}
"""


def titan(tmp_path: Path, flavor: str = "70B", schedule: str = "1F1B", shard: int = 2,
          extra_training: str = "", extra_parallel: str = "") -> Path:
    path = tmp_path / "job.toml"
    path.write_text(TITAN.format(flavor=flavor, schedule=schedule, shard=shard,
                                 extra_training=extra_training, extra_parallel=extra_parallel))
    return path


@pytest.mark.parametrize(("name", "schedule", "chunks"), [
    ("1F1B", "1f1b", 1), ("gpipe", "gpipe", 1), ("Interleaved1F1B", "interleaved-1f1b", 2),
    ("InterleavedZeroBubble", "interleaved-1f1b", 2), ("ZBVZeroBubble", "zbv", 2),
])
def test_torchtitan_schedule_names(tmp_path: Path, name: str, schedule: str, chunks: int) -> None:
    cfg = read_config(titan(tmp_path, schedule=name)).config
    assert (cfg.schedule.value, cfg.virtual_stages) == (schedule, chunks)


def test_torchtitan_interleaved_zero_bubble_has_the_stages_torchtitan_builds(
        tmp_path: Path) -> None:
    """torchtitan 0.2.2 builds InterleavedZeroBubble with stages per rank from
    pipeline_parallel_layers_per_stage (pipeline_llm), at least 2. It was priced as zb-h1
    with one stage per rank whatever the file said (a user trial); pptune has no interleaved
    zero-bubble schedule, so it is interleaved-1f1b over torchtitan's stages, with a warning.
    llama3 70B: 80 blocks + embedding + head = 82 layer units; per stage 7 -> ceil(82/7)
    = 12 stages, 3 per rank on pp 4; per stage 21 -> 4 stages, 1 per rank: torchtitan's
    error; compiled, torch's split-backward refusal still names it."""
    izb = "InterleavedZeroBubble"
    three = read_config(titan(tmp_path, schedule=izb,
                              extra_parallel="pipeline_parallel_layers_per_stage = 7"))
    assert (three.config.schedule, three.config.virtual_stages) == (Schedule.INTERLEAVED, 3)
    assert len(three.config.stage_layers or []) == 12
    (warned,) = [f for f in three.semantics.findings if f.id == "torchtitan-unmodelled"]
    assert warned.severity == "warning" and "priced as interleaved-1f1b" in warned.message
    one = read_config(titan(tmp_path, schedule=izb,
                            extra_parallel="pipeline_parallel_layers_per_stage = 21"))
    (refused,) = [f for f in one.semantics.findings if f.id == "torchtitan-stage-count"]
    assert refused.severity == "error"
    assert "'Multi-stage schedule requires at least 2 stages per rank' for " + izb \
        in refused.message
    path = titan(tmp_path, schedule=izb)
    path.write_text(path.read_text() + "[compile]\nenable = true\n")
    (compiled,) = [f for f in read_config(path).semantics.findings
                   if f.id == "torchtitan-compile-split-backward"]
    assert compiled.message.startswith(izb + " with [compile]")


def test_torchtitan_unmodelled_schedule_is_a_warning_unknown_one_a_refusal(
        tmp_path: Path) -> None:
    """torch's get_schedule_class knows LoopedBFS (pptune cannot model it: a warning
    naming it) and refuses unknown names ("Unknown schedule name 'Fancy'. The valid options
    are [...]",
    torch/distributed/pipelining/schedules.py): an error finding, not exit 2."""
    found = read_config(titan(tmp_path, schedule="LoopedBFS")).semantics.findings
    assert [(f.id, f.severity) for f in found] == [("torchtitan-unmodelled", "warning")]
    assert "LoopedBFS is not modelled" in found[0].message
    found = read_config(titan(tmp_path, schedule="Fancy")).semantics.findings
    assert [(f.id, f.severity) for f in found] == [("torchtitan-schedule", "error")]
    assert "expected" not in found[0].message and "1F1B, GPipe, Interleaved1F1B" in found[0].message
    # torch 2.13's words (torch/distributed/pipelining/schedules.py get_schedule_class)
    assert "Unknown schedule name 'Fancy'. The valid options are" in found[0].message


def test_torchtitan_global_batch_over_local_times_dp_is_pipeline_runs(tmp_path: Path) -> None:
    path = titan(tmp_path, extra_training="global_batch_size = 96")
    cfg = read_config(path).config  # local 16 x dp 2 = 32: 3 runs of 16 / 2 = 8 micro-batches
    assert (cfg.global_batch, cfg.pipeline_flushes, cfg.grad_accum_steps) == (96, 3, 24)
    assert (cfg.micro_batch_size, cfg.dp, cfg.model) == (2, 2, "llama3-70b")
    # global = micro x GA x dp holds, as it must for check-config
    assert cfg.global_batch == cfg.micro_batch_size * cfg.grad_accum_steps * cfg.dp


def test_torchtitan_llama3_405b_flavor_is_the_405b_preset(tmp_path: Path) -> None:
    """torchtitan's llama3 405B (dim 16384, 126 layers, FFN 1.2 x 8/3 x 16384 rounded up to
    4096 = 53248) is Llama 3.1 405B: read as that preset, and written back as it."""
    from pptune.costmodel.models import MODELS
    from pptune.frameworks.torchtitan.reader import flavor_of

    assert read_config(titan(tmp_path, flavor="405B")).config.model == "llama3.1-405b"
    m = MODELS["llama3.1-405b"]
    assert (m.hidden, m.num_blocks, m.ffn) == (16384, 126, 53248)
    assert flavor_of("llama3.1-405b") == ("llama3", "405B")


def test_torchtitan_training_dtype_sets_the_state_widths(tmp_path: Path) -> None:
    """job_config.py Training: dtype "bfloat16" keeps parameters, gradients and optimizer
    state in BF16 with no FP32 copy, yet FSDP (this file's) still reduces them in the
    default mixed_precision_reduce "float32"; mixed_precision_reduce "bfloat16" the
    reduction alone (frameworks/torchtitan/widths.py); another value is one clear error."""
    cfg = read_config(titan(tmp_path)).config
    assert (cfg.main_params_dtype, cfg.main_grads_dtype, cfg.exp_avg_dtype) == (None, None, None)
    cfg = read_config(titan(tmp_path, extra_training='dtype = "bfloat16"')).config
    assert (cfg.main_params_dtype, cfg.main_grads_dtype, cfg.exp_avg_dtype,
            cfg.exp_avg_sq_dtype) == ("bf16", None, "bf16", "bf16")
    cfg = read_config(titan(tmp_path, extra_training='mixed_precision_reduce = "bfloat16"')).config
    assert (cfg.main_params_dtype, cfg.main_grads_dtype, cfg.exp_avg_dtype) == (None, "bf16", None)
    with pytest.raises(BadInput, match=r"training\.dtype is 'fp16'"):
        read_config(titan(tmp_path, extra_training='dtype = "fp16"'))


# torchtitan's own Llama 3 70B job on 8 B200s at 32,768 tokens (configs/llama3_70b-8xb200-
# 32k.toml in pytorch/torchtitan): FSDP over 8, full checkpointing, full BF16 training
B200_70B = """[model]
name = "llama3"
flavor = "70B"
[training]
local_batch_size = 1
seq_len = 32768
dtype = "{dtype}"
mixed_precision_reduce = "{dtype}"
[parallelism]
data_parallel_shard_degree = 8
[activation_checkpoint]
mode = "full"
[compile]
enable = true
"""


def test_torchtitan_full_bf16_job_fits_as_it_ran(tmp_path: Path) -> None:
    """At FP32 widths the state alone is (4 + 4 + 8) x 70.6e9 / 8 = 141 GB a GPU and the
    job overflows a B200; in BF16 (8 bytes a parameter) it fits, as torchtitan runs it."""
    from tests.check_json import check_file

    code, found, doc = check_file(tmp_path / "bf16.toml", B200_70B.format(dtype="bfloat16"),
                                  "--gpu", "b200")
    assert code == 0 and "memory-overflow" not in found, doc["findings"]
    code, found, _ = check_file(tmp_path / "fp32.toml", B200_70B.format(dtype="float32"),
                                "--gpu", "b200")
    assert code == 1 and found["memory-overflow"] == "error"


def test_torchtitan_layers_per_stage_sets_virtual_stages(tmp_path: Path) -> None:
    path = titan(tmp_path, schedule="Interleaved1F1B",
                 extra_parallel="pipeline_parallel_layers_per_stage = 7")
    cfg = read_config(path).config  # ceil((80 + 1 + 1) / 7) = 12 stages over pp 4 -> 3
    assert cfg.virtual_stages == 3
    path = titan(tmp_path, schedule="Interleaved1F1B",
                 extra_parallel="pipeline_parallel_layers_per_stage = 9")  # 10 stages
    found = read_config(path).semantics.findings
    assert found[0].id == "torchtitan-stage-count" and found[0].severity == "error"
    assert "gives 10 stages for 80 layers" in found[0].message


def test_torchtitan_rest_of_gpus_shard(tmp_path: Path) -> None:
    path = titan(tmp_path, shard=-1, flavor="debugmodel")
    result = read_config(path)
    assert (result.config.dp, result.config.global_batch, result.config.model) == (None, None,
                                                                                   None)
    assert any("data_parallel_shard_degree is -1" in n for n in result.notes)
    assert any("flavor debugmodel has no pptune preset" in n for n in result.notes)
    resolved = read_config(path, gpus=16).config  # 16 / pp 4 = 4
    assert (resolved.dp, resolved.global_batch, resolved.gpus) == (4, 64, 16)


def test_torchtitan_local_not_multiple_of_microbatch(tmp_path: Path) -> None:
    path = titan(tmp_path, extra_parallel="")
    path.write_text(path.read_text().replace("microbatch_size = 2", "microbatch_size = 3"))
    found = read_config(path).semantics.findings
    assert found[0].id == "torchtitan-microbatch-size"
    assert ("local_batch_size 16 is not a multiple of "
            "parallelism.pipeline_parallel_microbatch_size 3") in found[0].message


def test_torchtitan_without_pipeline_each_local_batch_is_a_micro_batch(tmp_path: Path) -> None:
    path = tmp_path / "fsdp.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 4\n'
                    "seq_len = 8192\n[parallelism]\ndata_parallel_shard_degree = 8\n")
    cfg = read_config(path).config
    assert (cfg.pp, cfg.micro_batch_size, cfg.grad_accum_steps, cfg.global_batch) == (1, 4, 1, 32)
    assert cfg.zero_stage == 3  # FSDP reshards after forward without PP


# --- detection and format_in -------------------------------------------------------


@pytest.mark.parametrize("fmt", list(ConfigFormat))
def test_every_format_member_round_trips_by_name(fmt: ConfigFormat) -> None:
    sample = {ConfigFormat.PPTUNE: "pptune.yaml", ConfigFormat.DEEPSPEED: "ds_config.json",
              ConfigFormat.MEGATRON: "megatron_llama3_8b.sh",
              ConfigFormat.TORCHTITAN: "torchtitan_llama3_8b.toml"}[fmt]
    detected = read_config(DATA / sample)
    forced = read_config(DATA / sample, fmt.value)
    assert detected.format is fmt and forced.format is fmt
    assert forced.config == detected.config
    assert forced.config.source_format == fmt.value


def test_format_in_overrides_detection(tmp_path: Path) -> None:
    path = tmp_path / "args"
    path.write_text("--micro-batch-size 4\n")
    assert read_config(path, "megatron").config.micro_batch_size == 4
    with pytest.raises(BadInput, match=re.escape("--format-in 'xml' is unknown; expected one of "
                                                 "pptune|deepspeed|megatron|torchtitan")):
        read_config(path, "xml")


def test_unknown_content_asks_for_format_in(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello: world\n")
    with pytest.raises(BadInput, match=r"cannot tell the format of .*notes\.txt.*"
                                       r"--format-in pptune\|deepspeed"):
        read_config(path)


def test_comment_mentioning_pretrain_does_not_make_yaml_megatron(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("# ported from pretrain_gpt.py\nmicro_batch_size: 2\npp: 2\n")
    assert read_config(path).format is ConfigFormat.PPTUNE


def test_torchtitan_module_fqns_per_model_part_gives_the_split(tmp_path: Path) -> None:
    parts = [["tok_embeddings"] + [f"layers.{i}" for i in range(0, 19)],
             [f"layers.{i}" for i in range(19, 40)],
             [f"layers.{i}" for i in range(40, 61)],
             [f"layers.{i}" for i in range(61, 80)] + ["norm", "output"]]
    path = titan(tmp_path, extra_parallel=f"module_fqns_per_model_part = {json.dumps(parts)}")
    cfg = read_config(path).config
    assert (cfg.stage_layers, cfg.virtual_stages) == ([19, 21, 21, 19], 1)


def test_torchtitan_split_sets_chunks_for_interleaved(tmp_path: Path) -> None:
    parts = [[f"layers.{i}" for i in range(k * 10, k * 10 + 10)] for k in range(8)]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    path = titan(tmp_path, schedule="Interleaved1F1B",
                 extra_parallel=f"module_fqns_per_model_part = {json.dumps(parts)}")
    cfg = read_config(path).config
    assert (cfg.virtual_stages, cfg.stage_layers) == (2, [10] * 8)
    path = titan(tmp_path, schedule="1F1B",
                 extra_parallel=f"module_fqns_per_model_part = {json.dumps(parts)}")
    found = read_config(path).semantics.findings
    assert "has 2 stages per rank, but 1F1B runs 1" in found[0].message


def test_torchtitan_split_points(tmp_path: Path) -> None:
    path = titan(tmp_path, extra_parallel='pipeline_parallel_split_points = '
                                          '["layers.18", "layers.40", "layers.62"]')
    assert read_config(path).config.stage_layers == [18, 22, 22, 18]
    path = titan(tmp_path, extra_parallel='pipeline_parallel_split_points = ["layers.40", 7]')
    with pytest.raises(BadInput, match="expected block names such as"):
        read_config(path)


@pytest.mark.parametrize(("compile_table", "swiglu", "loss"), [
    ("[compile]\nenable = true\n", "fused", "fused"),  # components default: model, loss
    ('[compile]\nenable = true\ncomponents = ["loss"]\n', "eager", "fused"),
    ('[compile]\nenable = true\ncomponents = ["model"]\n', "fused", "eager"),
    ("[compile]\nenable = false\n", "eager", "eager"),
])
def test_torchtitan_compile_components_set_swiglu_and_loss_kernels(
        tmp_path: Path, compile_table: str, swiglu: str, loss: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text((DATA / "torchtitan_llama3_8b.toml").read_text() + "\n" + compile_table)
    cfg = read_config(path, gpus=16).config
    assert (cfg.swiglu, cfg.cross_entropy) == (swiglu, loss)


def test_megatron_no_bias_swiglu_fusion_is_the_eager_swiglu(tmp_path: Path) -> None:
    text = (DATA / "megatron_llama3_8b.sh").read_text()
    path = tmp_path / "m.sh"
    path.write_text(text.replace("--swiglu", "--swiglu --no-bias-swiglu-fusion", 1))
    assert read_config(path).config.swiglu == "eager"
    assert read_config(DATA / "megatron_llama3_8b.sh").config.swiglu == "fused"


@pytest.mark.parametrize(("section", "says"), [
    (["x"], "pptune is ['x']; expected a mapping"),
    ({"model": 5}, "pptune.model is 5"),
    ({"seq_len": "8k"}, "pptune.seq_len is '8k'"),
    ({"gpu": "h900"}, "pptune.gpu is 'h900'; expected one of"),
    ({"gpu": ["h100-sxm"]}, "pptune.gpu is ['h100-sxm']; expected one of"),
    ({"hf_config": ""}, "pptune.hf_config is ''"),
])
def test_deepspeed_pptune_key_refuses_bad_values(tmp_path: Path, section: object,
                                                 says: str) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 8, "pptune": section}))
    with pytest.raises(BadInput, match=re.escape(says)):
        read_config(path, gpus=8)


def test_gpus_per_node_flag_fills_a_node_size_the_file_lacks(tmp_path: Path) -> None:
    """A torchtitan TOML states no node size: --gpus-per-node gives it (a note says so);
    a Megatron-LM script's --nproc_per_node wins over the flag, which is left to
    check-config (it may be the NVLink domain of the script's hosts: check/domain.py); a
    bad value is one clear error."""
    read = read_config(titan(tmp_path), gpus_per_node=4)
    assert read.config.gpus_per_node == 4 and "gpus_per_node" in read.config.model_fields_set
    assert any("gpus_per_node 4 from --gpus-per-node" in n for n in read.notes)
    script = DATA / "megatron_llama3_8b.sh"
    read = read_config(script, gpus_per_node=4)
    assert read.config.gpus_per_node != 4 and read.semantics.gpus_per_node_flag == 4
    with pytest.raises(BadInput, match="--gpus-per-node 0: expected a whole number"):
        read_config(titan(tmp_path), gpus_per_node=0)


@pytest.mark.parametrize("value", ["`echo 32`", "$(echo 32)"])
def test_megatron_command_substitution_is_unresolved_not_a_bad_number(
        tmp_path: Path, value: str) -> None:
    path = tmp_path / "run.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --micro-batch-size 1 "
                    f"--num-layers {value} --pipeline-model-parallel-size 2\n")
    result = read_config(path)
    assert result.config.num_layers is None
    assert (f"--num-layers is {value}, which pptune cannot resolve without running the "
            "script; left unset") in result.notes
