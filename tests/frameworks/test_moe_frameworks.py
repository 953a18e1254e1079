"""Mixtures of experts in each framework's files: read, judged by the framework's own
rules, written, and read back to the same expert placement and prediction.

Megatron-LM core_v0.16.1 / megatron-core 0.16.1 (megatron/training/arguments.py
validate_args, megatron/core/transformer/transformer_config.py, moe_layer.py,
parallel_state.py), torchtitan 0.2.2 (torchtitan/distributed/parallel_dims.py),
DeepSpeed 0.19.8 (deepspeed/module_inject/auto_ep_*.py).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.check.rules import CheckOptions, check
from pptune.cli.app import app
from pptune.costmodel import presets
from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import CostKey
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.rates import WgradAccum
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import PlanRequest, PlanSpec, Recompute, Sharding, evaluate
from pptune.costs.resolve import analytic_costs
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.megatron.writer import layer_pattern
from pptune.frameworks.read import read_config
from pptune.frameworks.registry import ADAPTERS, Framework
from pptune.options import CostOptions
from tests.check_json import check_file

runner = CliRunner()

# Written like Megatron-LM's examples/mixtral/train_mixtral_8x7b_distributed.sh
# (arrays of flags, the MoE flags apart, torchrun with per-node processes)
MIXTRAL_SCRIPT = """#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NNODES=${{SLURM_NNODES:-"{nodes}"}}
DISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES)
MODEL_ARGS=(
    --use-mcore-models --disable-bias-linear --seq-length 4096
    --max-position-embeddings 32768 --num-layers 32 --hidden-size 4096
    --ffn-hidden-size 14336 --num-attention-heads 32 --normalization RMSNorm
    --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights
    --group-query-attention --num-query-groups 8 --rotary-base 1000000
)
MOE_ARGS=(
    --num-experts 8 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 1e-2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall
    {moe}
)
TRAINING_ARGS=(--micro-batch-size 1 --global-batch-size 256 --bf16)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size {tp} --pipeline-model-parallel-size 4
    --expert-model-parallel-size {ep} --use-distributed-optimizer --sequence-parallel
)
torchrun ${{DISTRIBUTED_ARGS[@]}} pretrain_gpt.py ${{MODEL_ARGS[@]}} ${{MOE_ARGS[@]}} \\
    ${{TRAINING_ARGS[@]}} ${{MODEL_PARALLEL_ARGS[@]}}
"""

# Written like the DeepSeek flags of Megatron-LM's
# examples/post_training/modelopt/conf/deepseek-ai/DeepSeek-R1.sh, with its parallel sizes
DEEPSEEK_ARGS = """--micro-batch-size 1 --global-batch-size 8192 --bf16 --disable-bias-linear
--untie-embeddings-and-output-weights --position-embedding-type rope --normalization RMSNorm
--swiglu --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432
--num-attention-heads 128 --kv-channels 128 --multi-latent-attention --kv-lora-rank 512
--v-head-dim 128 --q-lora-rank 1536 --qk-head-dim 128 --qk-layernorm --qk-pos-emb-head-dim 64
--num-experts 256 --moe-layer-freq [0]*3+[1]*58 --moe-ffn-hidden-size 2048
--moe-router-score-function sigmoid --moe-router-topk 8 --moe-router-pre-softmax
--moe-shared-expert-overlap --moe-shared-expert-intermediate-size 2048
--moe-router-load-balancing-type seq_aux_loss --moe-token-dispatcher-type alltoall
--moe-grouped-gemm --seq-length 4096 --max-position-embeddings 4096 --sequence-parallel
--use-distributed-optimizer
--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8
--expert-model-parallel-size 64 --expert-tensor-parallel-size 1 --mtp-num-layers 1
--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 6
"""


def run(tmp_path: Path, name: str, text: str, *flags: str) -> tuple[int, dict[str, str], dict]:
    return check_file(tmp_path / name, text, *flags, by="message")


def mixtral(tmp_path: Path, moe: str = "", tp: int = 1, ep: int = 8, nodes: int = 4,
            *flags: str) -> tuple[int, dict[str, str], dict]:
    return run(tmp_path, "mixtral.sh", MIXTRAL_SCRIPT.format(moe=moe, tp=tp, ep=ep, nodes=nodes),
               "--gpu", "h100-sxm", *flags)


# --- Megatron-LM: reading --------------------------------------------------------


def test_megatron_mixtral_script_reads_its_experts(tmp_path: Path) -> None:
    code, found, doc = mixtral(tmp_path)
    cfg = doc["config"]
    assert code == 0, found
    assert (cfg["num_experts"], cfg["moe_top_k"], cfg["ep"], cfg["etp"]) == (8, 2, 8, 1)
    assert cfg["moe_grouped_gemm"] is True and cfg["model"] == "mixtral-8x7b"
    assert doc["derived"]["dp"] == 8 and doc["derived"]["step_time_s"] > 0
    assert "routing priced as balanced" in " ".join(doc["notes"])


def test_megatron_expert_tensor_parallel_defaults_to_tp(tmp_path: Path) -> None:
    """validate_args: ``args.expert_tensor_parallel_size = args.tensor_model_parallel_size``."""
    cfg = mixtral(tmp_path, tp=2)[2]["config"]
    assert (cfg["tp"], cfg["etp"]) == (2, 2)


def test_megatron_deepseek_flags_read_as_its_shape(tmp_path: Path) -> None:
    code, found, doc = run(tmp_path, "ds.txt", DEEPSEEK_ARGS, "--gpus", "1024", "--gpu",
                           "h100-sxm")
    cfg = doc["config"]
    assert (cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_nope_head_dim"],
            cfg["qk_rope_head_dim"], cfg["v_head_dim"]) == (1536, 512, 128, 64, 128)
    assert (cfg["moe_first_dense_layers"], cfg["moe_layer_freq"], cfg["mtp_layers"]) == (3, 1, 1)
    assert cfg["moe_shared_ffn_hidden_size"] == 2048 and cfg["model"] == "deepseek-v3"
    # the MTP module sits on the last stage with its 6 blocks (megatron-core builds it there)
    assert doc["derived"]["stage_layers"][-1] == 6 + 1 + 1  # blocks, mtp0, head
    assert "megatron-unmodelled-flag" not in found and code in (0, 1)


def test_megatron_dense_script_without_mtp_flag_builds_none(tmp_path: Path) -> None:
    text = DEEPSEEK_ARGS.replace("--mtp-num-layers 1", "")
    doc = run(tmp_path, "ds.txt", text, "--gpus", "1024", "--gpu", "h100-sxm")[2]
    assert doc["config"]["mtp_layers"] == 0
    assert doc["derived"]["stage_layers"][-1] == 6 + 1


@pytest.mark.parametrize(("freq", "expect"), [
    ("2", (0, 2, 0)),
    ('"([0]*2+[1]*30)"', (2, 1, 0)),
    ('"([0,1]*16)"', (1, 2, 1)),
])
def test_megatron_moe_layer_freq(tmp_path: Path, freq: str, expect: tuple[int, int, int]) -> None:
    """Megatron's int N: block i is MoE when i % N == 0; a list: one 0/1 per block
    (gpt_layer_specs.py)."""
    cfg = mixtral(tmp_path, f"--moe-layer-freq {freq}")[2]["config"]
    assert (cfg["moe_first_dense_layers"], cfg["moe_layer_freq"], cfg["moe_layer_offset"]) == expect


# --- Megatron-LM: its refusals and what pptune does not price ----------------------


@pytest.mark.parametrize(("moe", "rule", "words"), [
    ("--moe-router-topk 1", "megatron-topk1-softmax",
     "Please use --moe-router-pre-softmax when topk is 1."),
    ("--moe-token-dispatcher-type allgather --moe-shared-expert-overlap",
     "megatron-shared-overlap", "moe_shared_expert_overlap only works with alltoall"),
    ("--moe-router-load-balancing-type sinkhorn --moe-expert-capacity-factor 1.0",
     "megatron-capacity-balancing", "moe_expert_capacity_factor only works with aux_loss"),
    ('--moe-layer-freq "([1]*30)"', "megatron-moe-layer-freq",
     "Invalid length of moe_layer_pattern"),
    ("--multi-latent-attention", "megatron-mla-gqa",
     "Group query attention is mutually exclusive with multi latent attention"),
    ("--use-torch-fsdp2", "megatron-fsdp2-ep", "not supported with expert parallelism"),
    ("--mtp-num-layers 1 --position-embedding-type learned_absolute", "megatron-mtp-position",
     "Multi-Token Prediction (MTP) is not supported with learned_absolute"),
    ("--overlap-moe-expert-parallel-comm", "megatron-a2a-overlap",
     "virtual_pipeline_model_parallel_size must be specified"),
    ("--overlap-moe-expert-parallel-comm --moe-token-dispatcher-type allgather",
     "megatron-moe-overlap", "supported with alltoall/flex token dispatcher"),
])
def test_megatron_refuses(tmp_path: Path, moe: str, rule: str, words: str) -> None:
    code, found, _ = mixtral(tmp_path, moe)
    assert code == 1 and rule in found, found
    assert words in found[rule]


SELECTIVE = "--recompute-granularity selective --recompute-modules "


@pytest.mark.parametrize(("moe", "words"), [
    (SELECTIVE + "moe_act attn", "'Invalid choices for recompute_modules'"),
    (SELECTIVE + "mla_up_proj", "'mla_up_proj in recompute_modules is only supported with "
     "multi_latent_attention'"),
    (SELECTIVE + "moe_act --fp8-format e4m3",
     "'Delayed scaling does not support moe_act and layernorm recompute for fp8'"),
])
def test_megatron_recompute_module_refusals(tmp_path: Path, moe: str, words: str) -> None:
    """megatron-core TransformerConfig.__post_init__ (transformer_config.py)."""
    code, found, _ = mixtral(tmp_path, moe)
    assert code == 1 and words in found["megatron-recompute-modules"], found


def test_megatron_moe_act_needs_grouped_gemm(tmp_path: Path) -> None:
    script = MIXTRAL_SCRIPT.replace("--moe-grouped-gemm ", "")
    code, found, _ = run(tmp_path, "m.sh", script.format(moe=SELECTIVE + "moe_act", tp=1, ep=8,
                                                         nodes=4), "--gpu", "h100-sxm")
    assert code == 1 and "only supported with moe_grouped_gemm" in (
        found["megatron-recompute-modules"])


def test_megatron_recompute_modules_are_priced(tmp_path: Path) -> None:
    """moe_act drops the experts' activation output from every MoE block (moe.py): the
    peak falls and the backward reruns the activation; layernorm drops the MoE layers'
    pre-MLP norm outputs (Mixtral's attention norm is fused into its QKV linear) and
    reruns the norms; without selective granularity the modules are ignored."""
    base = mixtral(tmp_path)[2]
    code, found, doc = mixtral(tmp_path, SELECTIVE + "moe_act")
    assert code == 0 and doc["config"]["recompute_modules"] == ["moe_act"], found
    assert max(doc["derived"]["peak_memory_bytes"]) < max(base["derived"]["peak_memory_bytes"])
    assert doc["derived"]["step_time_s"] > base["derived"]["step_time_s"]
    code, found, doc = mixtral(tmp_path, SELECTIVE + "core_attn layernorm")
    assert code == 0 and doc["config"]["recompute_modules"] == ["core_attn", "layernorm"]
    assert max(doc["derived"]["peak_memory_bytes"]) < max(base["derived"]["peak_memory_bytes"])
    assert doc["derived"]["step_time_s"] > base["derived"]["step_time_s"]
    code, found, doc = mixtral(tmp_path, SELECTIVE + "core_attn")
    assert doc["derived"]["peak_memory_bytes"] == base["derived"]["peak_memory_bytes"]
    doc = mixtral(tmp_path, "--recompute-modules moe_act")[2]
    assert doc["config"]["recompute_modules"] is None
    assert "ignored without --recompute-granularity selective" in " ".join(doc["notes"])


def test_megatron_moe_layer_recompute_reads_as_megatron_core_turns_it(tmp_path: Path) -> None:
    """megatron-core TransformerConfig.__post_init__: the deprecated --moe-layer-recompute
    is selective granularity with "moe" appended to the modules; with full granularity
    it raises."""
    same = mixtral(tmp_path, SELECTIVE + "moe")[2]
    code, found, doc = mixtral(tmp_path, "--moe-layer-recompute")
    assert doc["config"]["recompute"] == "selective"
    assert doc["config"]["recompute_modules"] == ["moe"]
    assert doc["derived"]["peak_memory_bytes"] == same["derived"]["peak_memory_bytes"]
    doc = mixtral(tmp_path, SELECTIVE + "moe_act --moe-layer-recompute")[2]
    assert doc["config"]["recompute_modules"] == ["moe_act", "moe"]
    code, found, _ = mixtral(tmp_path, "--moe-layer-recompute --recompute-granularity full "
                             "--recompute-method uniform --recompute-num-layers 1")
    assert code == 1 and "Do not set --moe-layer-recompute with full" in (
        found["megatron-moe-layer-recompute"])


def test_megatron_sliding_windows_are_read_as_megatron_core_places_them(tmp_path: Path
                                                                      ) -> None:
    """is_layer_window_attention (megatron/core/transformer/utils.py): --window-size
    LEFT,0 windows every layer but those whose number (from 1) is a multiple of
    --window-attn-skip-freq N; a list marks each layer (1 windowed, 0 full)."""
    base = mixtral(tmp_path)[2]
    doc = mixtral(tmp_path, "--window-size 128,0 --window-attn-skip-freq 2")[2]
    assert (doc["config"]["sliding_window"], doc["config"]["full_attention_every"]) == (128, 2)
    assert doc["derived"]["step_time_s"] < base["derived"]["step_time_s"]
    doc = mixtral(tmp_path, '--window-size "(128,0)" --window-attn-skip-freq "([1]+[0])*16"')[2]
    assert (doc["config"]["sliding_window"], doc["config"]["full_attention_every"]) == (128, 2)
    _, found, doc = mixtral(tmp_path, '--window-size 128,0 --window-attn-skip-freq '
                                      '"[0]*16+[1]*16"')
    assert "irregularly" in found["megatron-unmodelled-flag"]
    assert doc["config"]["sliding_window"] is None
    assert doc["derived"]["step_time_s"] == base["derived"]["step_time_s"]


def test_megatron_generic_placement_rules(tmp_path: Path) -> None:
    code, found, _ = mixtral(tmp_path, ep=3)
    assert code == 1 and "num_moe_experts % ep_size == 0" in found["moe-experts-ep"]
    code, found, _ = mixtral(tmp_path, ep=8, nodes=1, tp=2)  # 8 GPUs, pp 4, tp 2: 2 a stage
    assert code == 1 and "expert_tensor_model_pipeline_parallel" in found["moe-world"]


def test_megatron_what_pptune_does_not_price_is_a_warning(tmp_path: Path) -> None:
    _, found, _ = mixtral(tmp_path, '--moe-layer-freq "([1,1,0]*10+[1,1])"')
    assert "places MoE layers irregularly" in found["megatron-unmodelled-flag"]


def test_megatron_capacity_padding_is_the_imbalance_priced(tmp_path: Path) -> None:
    cfg = mixtral(tmp_path, "--moe-expert-capacity-factor 1.25 "
                  "--moe-pad-expert-input-to-capacity")[2]["config"]
    assert cfg["moe_routing_imbalance"] == 1.25


@pytest.mark.parametrize(("moe", "words"), [
    ("--moe-token-dispatcher-type alltoal", "--moe-token-dispatcher-type is 'alltoal'"),
    ('--moe-layer-freq "[1]*2**40"', "is not a list expression of 0s and 1s"),
    ("--moe-layer-freq \"[__import__('os')]\"", "is not a list expression of 0s and 1s"),
    ("--moe-expert-capacity-factor lots", "--moe-expert-capacity-factor is 'lots'"),
])
def test_megatron_bad_moe_values_are_bad_input(tmp_path: Path, moe: str, words: str) -> None:
    path = tmp_path / "bad.sh"
    path.write_text(MIXTRAL_SCRIPT.format(moe=moe, tp=1, ep=8, nodes=4))
    r = runner.invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2 and words in r.stderr and "Traceback" not in r.stderr


def test_megatron_layer_pattern_flag_of_each_shape() -> None:
    assert layer_pattern(presets.MODELS["mixtral-8x7b"]) == "1"
    assert layer_pattern(presets.MODELS["deepseek-v3"]) == '"([0]*3+[1]*58)"'
    qwen_like = presets.ModelShape("q", 4, 64, 4, 4, 128, 100, 16, 8, True, False, "t",
                                   experts=4, top_k=2, expert_ffn=32, moe_every=2, moe_offset=1)
    assert layer_pattern(qwen_like) == '"[0,1,0,1]"'


# --- torchtitan 0.2.2 -------------------------------------------------------------

TITAN = """[model]
name = "qwen3"
flavor = "30B-A3B"
[training]
local_batch_size = 2
seq_len = 4096
[parallelism]
pipeline_parallel_degree = {pp}
data_parallel_shard_degree = {shard}
tensor_parallel_degree = {tp}
{extra}
"""


def titan(tmp_path: Path, extra: str, shard: int = 8, tp: int = 2, gpus: int = 16,
          *flags: str, pp: int = 1) -> tuple[int, dict[str, str], dict]:
    return run(tmp_path, "job.toml", TITAN.format(extra=extra, shard=shard, tp=tp, pp=pp),
               "--gpus", str(gpus), "--gpu", "h100-sxm", *flags)


def test_torchtitan_cannot_pipeline_its_qwen3(tmp_path: Path) -> None:
    """torchtitan 0.2.2 train.py: 'Pipeline Parallel is enabled but qwen3 does not support
    pipelining' (models/qwen3: pipelining_fn=None)."""
    code, found, _ = titan(tmp_path, "expert_parallel_degree = 4", 4, pp=2)
    assert code == 1 and "does not support pipelining" in found["torchtitan-no-pipelining"]


def test_torchtitan_reads_its_expert_degrees(tmp_path: Path) -> None:
    code, found, doc = titan(tmp_path, "expert_parallel_degree = 8\n"
                             "expert_tensor_parallel_degree = 1")
    cfg = doc["config"]
    assert code == 0, found
    assert (cfg["model"], cfg["ep"], cfg["etp"]) == ("qwen3-30b-a3b", 8, 1)
    # ep 1: its tensor-parallel plan shards the experts (apply_moe_ep_tp)
    assert titan(tmp_path, "")[2]["config"]["etp"] == 2


def test_torchtitan_per_op_checkpointing_is_priced_on_moe_blocks(tmp_path: Path) -> None:
    """selective_ac_option "op" on Qwen3-30B-A3B (costmodel/op_sac.py): no warning, less
    memory and a longer step than without checkpointing (the experts rerun, the
    all-to-alls' outputs kept); 4 sequences a rank, so that compute sets the step."""
    def job(ac: str) -> tuple[int, dict[str, str], dict]:
        text = TITAN.format(extra="expert_parallel_degree = 8\n[activation_checkpoint]\n"
                            + ac, shard=8, tp=2, pp=1)
        return run(tmp_path, "job.toml", text.replace("local_batch_size = 2",
                                                      "local_batch_size = 4"),
                   "--gpus", "16", "--gpu", "h100-sxm")
    code, found, base = job('mode = "none"')
    assert code == 0, found
    code, found, doc = job('mode = "selective"\nselective_ac_option = "op"')
    assert code == 0 and "recompute-op-unmodelled" not in found, found
    assert doc["config"]["recompute_modules"] == ["op_sac"]
    assert max(doc["derived"]["peak_memory_bytes"]) < max(base["derived"]["peak_memory_bytes"])
    assert doc["derived"]["step_time_s"] > base["derived"]["step_time_s"]


def test_torchtitan_per_op_checkpointing_on_gpt_oss_is_a_warning(tmp_path: Path) -> None:
    text = TITAN.format(extra='expert_parallel_degree = 8\n[activation_checkpoint]\n'
                        'mode = "selective"\nselective_ac_option = "op"', shard=64, tp=1, pp=1)
    text = text.replace('"qwen3"', '"gpt_oss"').replace('"30B-A3B"', '"120b"')
    text = text.replace("local_batch_size = 2", "local_batch_size = 1")
    code, found, _ = run(tmp_path, "job.toml", text, "--gpus", "64", "--gpu", "h100-sxm")
    assert "GPT-OSS-style attention" in found["recompute-op-unmodelled"], found
    assert code == 0  # a warning: the file is checked, the rest priced


def test_torchtitan_refuses_other_expert_tensor_degrees(tmp_path: Path) -> None:
    code, found, _ = titan(tmp_path, "expert_parallel_degree = 2\n"
                           "expert_tensor_parallel_degree = 2", shard=4, tp=4)
    assert code == 1 and "Currently we only support ETP=TP or ETP=1" in found["torchtitan-etp"]


def test_torchtitan_experts_borrow_fsdp_ranks_not_replicas(tmp_path: Path) -> None:
    """efsdp = dp_shard x cp x tp / (etp x ep): replicas lend no ranks to the experts."""
    code, found, _ = titan(tmp_path, "data_parallel_replicate_degree = 4\n"
                           "expert_parallel_degree = 8\nexpert_tensor_parallel_degree = 1",
                           shard=1, tp=2, gpus=8)
    assert code == 1 and "not replicas" in found["torchtitan-ep-mesh"]


def test_torchtitan_versions_before_the_expert_keys(tmp_path: Path) -> None:
    code, found, doc = titan(tmp_path, "expert_parallel_degree = 8", 8, 2, 16,
                             "--framework-version", "torchtitan=0.1.0")
    assert "the keys arrived in 0.2.0" in found["torchtitan-unmodelled"]
    assert doc["config"]["ep"] == 1
    # 0.2.0 asserted ep % (cp x tp) == 0 with etp 1
    code, found, _ = titan(tmp_path, "expert_parallel_degree = 4\n"
                           "expert_tensor_parallel_degree = 1", 8, 8, 64,
                           "--framework-version", "torchtitan=0.2.0")
    assert code == 1 and "ep % (cp * tp) == 0" in found["torchtitan-ep-mesh"]


# --- DeepSpeed 0.19.8 AutoEP ------------------------------------------------------

DS = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
      "bf16": {"enabled": True}, "zero_optimization": {"stage": 1},
      "pptune": {"attention": "flash"}}


def ds(tmp_path: Path, section: dict, *flags: str) -> tuple[int, dict[str, str], dict]:
    return run(tmp_path, "ds.json", json.dumps({**DS, "expert_parallel": section}),
               "--model", "mixtral-8x7b", "--gpu", "h100-sxm", *flags)


def test_deepspeed_autoep_states_the_expert_parallel_size(tmp_path: Path) -> None:
    code, found, doc = ds(tmp_path, {"enabled": True, "autoep_size": 8}, "--gpus", "64",
                          "--pp", "4")
    assert code == 0, found
    assert (doc["config"]["ep"], doc["config"]["etp"]) == (8, 1)
    off = ds(tmp_path, {"enabled": False, "autoep_size": 8}, "--gpus", "8")[2]
    assert off["config"]["ep"] == 1 and any("AutoEP off" in n for n in off["notes"])


def test_deepspeed_autoep_refusals(tmp_path: Path) -> None:
    code, found, _ = ds(tmp_path, {"enabled": True, "autoep_size": 4,
                                   "expert_tensor_parallel_size": 2}, "--gpus", "8")
    assert code == 1 and "is not supported yet" in found["deepspeed-autoep-etp"]
    code, found, _ = ds(tmp_path, {"enabled": True, "autoep_size": 2}, "--gpus", "8",
                        "--pp", "2", "--tp", "2")
    assert code == 1 and "supports pp_size=1 only" in found["deepspeed-autoep-pp"]


# --- emit -> check-config: the same experts and prediction --------------------------

FLAGS = {
    Framework.MEGATRON: ("pretrain_megatron.sh", ["--gpu", "h100-sxm"]),
    Framework.TORCHTITAN: ("torchtitan.toml", ["--gpu", "h100-sxm", "--gpus", "64"]),
    Framework.PPTUNE: ("pptune.yaml", []),
    Framework.DEEPSPEED: ("ds_config.json", ["--gpus", "64", "--model", "qwen3-30b-a3b",
                                             "--gpu", "h100-sxm"]),
}


def moe_job(model: str, tp: int, ep: int, pp: int, gpus: int, sp: bool | None = None,
            loss: CrossEntropy = CrossEntropy.FUSED,
            dispatcher: Dispatcher = Dispatcher.ALLTOALL,
            attention: str = "flash",
            wgrad_accum: WgradAccum = WgradAccum.BF16) -> tuple[Job, object]:
    """A job priced at CostKey(tp, ep) and a 1F1B plan of it with an even split
    (``sp``: sequence parallelism, default with tp > 1; ``loss``: its kernels;
    ``dispatcher``: its MoE dispatcher, in its cost options when not alltoall;
    ``attention``: its kernel; ``wgrad_accum``: where its weight gradients go)."""
    shape = presets.MODELS[model]
    key = CostKey(tp=tp, ep=ep)
    sp = tp > 1 if sp is None else sp
    table, _ = analytic_costs(shape, "h100-sxm", (1,), key,
                              ExpertParallel(dispatcher=dispatcher), sequence_parallel=sp,
                              gpus=gpus, cross_entropy=loss, attention=attention,
                              wgrad_accum=wgrad_accum)
    req = PlanRequest(gpus=gpus, global_batch=shape.global_batch, tp=tp, cost_keys=(key,))
    per = shape.num_blocks // pp  # the rest on the first stage (--decoder-first-...)
    blocks = [shape.num_blocks - per * (pp - 1)] + [per] * (pp - 1)
    split = ([shape.num_blocks + 2 + shape.mtp_layers] if pp == 1 else
             [blocks[0] + 1, *blocks[1:-1], blocks[-1] + 1 + shape.mtp_layers])
    m = shape.global_batch // (gpus // (tp * pp))
    plan = evaluate(table, req, PlanSpec(Schedule.ONE_F_ONE_B, pp, 1, m, tuple(split), 1,
                                         sharding=Sharding.ZERO1, key=key))
    job = Job(table, req, tuple(table.names), shape.global_batch,
              f"analytic {model} on h100-sxm", shape, model, "h100-sxm", attention, sp, False,
              None if dispatcher is Dispatcher.ALLTOALL
              else CostOptions(moe_dispatcher=dispatcher))
    return job, plan


@pytest.mark.parametrize("framework", list(Framework))
def test_emitted_expert_plans_read_back_the_same(framework: Framework, tmp_path: Path) -> None:
    # torchtitan 0.2.2 pipelines no qwen3 (its TrainSpec has no pipelining_fn): pp 1 there
    pp = 1 if framework is Framework.TORCHTITAN else 4
    job, plan = moe_job("qwen3-30b-a3b", tp=1, ep=8, pp=pp, gpus=64)
    adapter = ADAPTERS[framework]
    stated = adapter.express(job, plan, 1)
    for name, text in adapter.write(stated).items():
        (tmp_path / name).write_text(text)
    name, flags = FLAGS[framework]
    r = runner.invoke(app, ["check-config", str(tmp_path / name), "--output", "json", *flags])
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 0, doc["findings"]
    assert (doc["config"]["ep"], doc["config"]["etp"]) == (8, 1)
    assert doc["derived"]["step_time_s"] == pytest.approx(stated.plan.step_time_s, rel=1e-9)
    assert doc["derived"]["peak_memory_bytes"] == pytest.approx(stated.plan.peak_memory_bytes)


def test_emitted_deepseek_script_reads_back_its_mla_mtp_and_layers(tmp_path: Path) -> None:
    job, plan = moe_job("deepseek-v3", tp=2, ep=64, pp=8, gpus=1024)
    adapter = ADAPTERS[Framework.MEGATRON]
    stated = adapter.express(job, plan, 1)
    text = adapter.write(stated)["pretrain_megatron.sh"]
    for flag in ("--multi-latent-attention", "--q-lora-rank 1536", "--mtp-num-layers 1",
                 '--moe-layer-freq "([0]*3+[1]*58)"', "--expert-model-parallel-size 64",
                 "--moe-shared-expert-intermediate-size 2048"):
        assert flag in text
    assert "--group-query-attention" not in text  # MLA excludes it (validate_args)
    _code, found, doc = run(tmp_path, "pretrain_megatron.sh", text, "--gpu", "h100-sxm")
    assert "megatron-unmodelled-flag" not in found and "moe-world" not in found
    assert doc["derived"]["step_time_s"] == pytest.approx(stated.plan.step_time_s, rel=1e-9)


def test_frameworks_that_cannot_place_the_experts_say_so() -> None:

    job, plan = moe_job("qwen3-30b-a3b", tp=2, ep=8, pp=4, gpus=64)
    # AutoTP (and AutoEP beside it) run without a pipeline: the plan at tp 2 without one
    ds = ADAPTERS[Framework.DEEPSPEED].express(job, plan, 1)
    assert (ds.plan.pp, ds.plan.tp, ds.plan.ep) == (1, 2, 8) and not ds.exact
    assert any("deepspeed runs AutoTP without a pipeline" in n for n in ds.notes)
    piped = ADAPTERS[Framework.TORCHTITAN].express(job, plan, 1)  # no pipelining_fn: pp 1
    assert piped.plan.pp == 1 and not piped.exact
    assert "qwen3 model has no pipelining" in piped.notes[0]
    job, plan = moe_job("qwen3-30b-a3b", tp=2, ep=8, pp=1, gpus=64)
    stated = ADAPTERS[Framework.TORCHTITAN].express(job, plan, 1)  # ZeRO-1 -> FSDP
    assert stated.plan.sharding is Sharding.FSDP and not stated.exact


def test_torchtitan_deepseek_file_leaves_out_the_mtp_module() -> None:
    """torchtitan's deepseek_v3 builds no MTP module: the file names blocks 0..60 only."""
    job, plan = moe_job("deepseek-v3", tp=2, ep=64, pp=8, gpus=1024)
    adapter = ADAPTERS[Framework.TORCHTITAN]
    stated = adapter.express(job, plan, 1)
    text = adapter.write(stated)["torchtitan.toml"]
    assert '"layers.61"' not in text
    # a split the file states by module names ends at the last block
    assert '"layers.60"' in text or "module_fqns_per_model_part" not in text
    assert "expert_parallel_degree = 64" in text and not stated.exact
    assert any("no multi-token-prediction module" in n for n in stated.notes)


def test_megatron_refuses_moe_with_tp_and_no_sequence_parallelism(tmp_path: Path) -> None:
    """megatron-core 0.16.1 moe_layer.py MoELayer.forward raises 'During training,
    performance may degrade if MoE and tensor parallelism are enabled without also
    enabling sequence parallelism.' whenever the tensor-parallel group has more than one
    rank and sequence parallelism is off, whatever the expert-parallel size."""
    script = MIXTRAL_SCRIPT.replace(" --sequence-parallel", "")
    # 64 GPUs, pp 4, tp 2: 16 ranks a stage for ep 8 x etp 2 (etp defaults to tp)
    for ep, nodes in ((8, 8), (1, 1)):
        code, found, _ = run(tmp_path, "m.sh", script.format(moe="", tp=2, ep=ep, nodes=nodes),
                             "--gpu", "h100-sxm")
        assert code == 1, found
        message = found["megatron-moe-sequence-parallel"]
        assert f"tensor parallel size 2 and no --sequence-parallel (expert parallel size {ep})" \
            in message and "moe_layer.py MoELayer.forward" in message
    # tp 1: no tensor-parallel group to split the sequence over
    code, found, _ = run(tmp_path, "m.sh", script.format(moe="", tp=1, ep=8, nodes=4),
                         "--gpu", "h100-sxm")
    assert "megatron-moe-sequence-parallel" not in found
    code, found, _ = mixtral(tmp_path, "", 2, 8, 8)  # the script states --sequence-parallel
    assert "megatron-moe-sequence-parallel" not in found


@pytest.mark.parametrize("ep", [8, 1])
def test_megatron_emits_sequence_parallelism_for_tp_with_moe(ep: int, tmp_path: Path) -> None:
    """A tp 2 plan of an MoE model priced without sequence parallelism (ep 8, or ep 1:
    megatron-core's MoELayer refuses either) is written with --sequence-parallel,
    re-priced that way (a note), and reads back the same."""
    job, plan = moe_job("qwen3-30b-a3b", tp=2, ep=ep, pp=4, gpus=64, sp=False)
    adapter = ADAPTERS[Framework.MEGATRON]
    stated = adapter.express(job, plan, 1)
    assert stated.job.sequence_parallel and not job.sequence_parallel
    assert any("sequence parallelism with MoE layers and tp > 1" in n for n in stated.notes)
    # the same plan priced with sequence parallelism (and the fused loss the script
    # states, --cross-entropy-loss-fusion, Transformer Engine's cuDNN attention and the weight
    # gradients accumulated into main_grad by the GEMMs, as it runs) from the start
    _sp_job, sp_plan = moe_job("qwen3-30b-a3b", tp=2, ep=ep, pp=4, gpus=64, sp=True,
                               loss=CrossEntropy.NATIVE, attention="cudnn",
                               wgrad_accum=WgradAccum.FUSED)
    assert stated.plan.step_time_s == pytest.approx(sp_plan.step_time_s, rel=1e-12)
    text = adapter.write(stated)["pretrain_megatron.sh"]
    assert "--sequence-parallel" in text
    _code, found, doc = run(tmp_path, "pretrain_megatron.sh", text, "--gpu", "h100-sxm")
    assert "megatron-moe-sequence-parallel" not in found
    assert doc["config"]["sequence_parallel"] is True
    assert doc["derived"]["step_time_s"] == pytest.approx(stated.plan.step_time_s, rel=1e-9)


def test_which_files_state_expert_layouts() -> None:
    """emit's stateable-layout check: every writer states ep; DeepSpeed's AutoEP no etp."""
    experts = CostKey(tp=2, ep=8, etp=2)
    for framework in (Framework.MEGATRON, Framework.TORCHTITAN, Framework.PPTUNE):
        assert ADAPTERS[framework].cannot_state(experts) is None
    assert ADAPTERS[Framework.DEEPSPEED].cannot_state(CostKey(tp=2, ep=8)) is None
    assert ADAPTERS[Framework.DEEPSPEED].cannot_state(experts) == (
        "DeepSpeed files here state no etp 2")


def test_torchtitan_cannot_state_cp_with_a_flex_attention_model() -> None:
    """DeepSeek-V3's flavors run flex attention, which torchtitan's context parallelism
    refuses (its model args' update_from_config): emit falls back to a plan of cp 1, and
    check-config compares with none of cp 2, for that model only."""
    titan = ADAPTERS[Framework.TORCHTITAN]
    cp2 = CostKey(tp=4, cp=2, ep=8)
    why = titan.cannot_state(cp2, 4096, model="deepseek-v3")
    assert why is not None and why.startswith("context_parallel_degree 2 with deepseek_v3 671B")
    assert titan.cannot_state(cp2, 4096, shape=presets.MODELS["deepseek-v3"]) == why
    assert titan.cannot_state(CostKey(tp=4, ep=8), 4096, model="deepseek-v3") is None
    assert titan.cannot_state(CostKey(tp=4, cp=2), 8192, model="llama3-8b") is None
    assert titan.cannot_state(cp2, 4096) is None  # no model: the key alone


PPTUNE_MOE = """gpus: 64
pp: 1
ep: 8
model: mixtral-8x7b
gpu: h100-sxm
micro_batch_size: 1
global_batch: 256
sharded_optimizer: true
{extra}"""


def test_pptune_config_states_recompute_modules(tmp_path: Path) -> None:
    base = run(tmp_path, "p.yaml", PPTUNE_MOE.format(extra=""))[2]
    code, found, doc = run(tmp_path, "p.yaml", PPTUNE_MOE.format(
        extra="recompute: selective\nrecompute_modules: [moe_act]\n"))
    assert code == 0 and doc["config"]["recompute_modules"] == ["moe_act"], found
    assert max(doc["derived"]["peak_memory_bytes"]) < max(base["derived"]["peak_memory_bytes"])
    _, found, doc = run(tmp_path, "p.yaml", PPTUNE_MOE.format(
        extra="recompute_modules: [moe_act]\n"))
    assert "ignored, as megatron-core ignores them" in found["recompute-modules-ignored"]
    assert doc["derived"]["peak_memory_bytes"] == base["derived"]["peak_memory_bytes"]
    path = tmp_path / "bad.yaml"
    path.write_text(PPTUNE_MOE.format(extra="recompute: selective\nrecompute_modules: [mlpp]\n"))
    r = runner.invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2 and "recompute_modules" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


AWARE = ("--use-precision-aware-optimizer --main-grads-dtype bf16 --exp-avg-dtype bf16 "
         "--exp-avg-sq-dtype bf16")


def test_megatron_precision_aware_optimizer_states_its_widths(tmp_path: Path) -> None:
    """megatron-core OptimizerConfig: BF16 gradient buffer and moments hold 2 bytes a
    parameter each instead of 4 (sharding.state_bytes_per_param): the peak falls."""
    base = mixtral(tmp_path)[2]
    code, found, doc = mixtral(tmp_path, AWARE)
    cfg = doc["config"]
    assert code == 0, found
    assert (cfg["main_grads_dtype"], cfg["exp_avg_dtype"], cfg["exp_avg_sq_dtype"]) == (
        "bf16", "bf16", "bf16")
    assert max(doc["derived"]["peak_memory_bytes"]) < max(base["derived"]["peak_memory_bytes"])


@pytest.mark.parametrize(("moe", "words"), [
    ("--exp-avg-dtype bf16", "'exp_avg_dtype can only be fp32 when not using "
     "precision-aware optimizer'"),
])
def test_megatron_precision_aware_optimizer_refusals(tmp_path: Path, moe: str,
                                                     words: str) -> None:
    code, found, _ = mixtral(tmp_path, moe)
    assert code == 1 and words in found["megatron-precision-aware-optimizer"], found


def test_megatron_precision_aware_optimizer_needs_the_distributed_one(tmp_path: Path) -> None:
    script = MIXTRAL_SCRIPT.replace("--use-distributed-optimizer ", "")
    code, found, _ = run(tmp_path, "m.sh", script.format(moe=AWARE, tp=1, ep=8, nodes=4),
                         "--gpu", "h100-sxm")
    assert code == 1 and "only supported with distributed optimizer" in (
        found["megatron-precision-aware-optimizer"])
    path = tmp_path / "bad.sh"
    path.write_text(MIXTRAL_SCRIPT.format(moe="--use-precision-aware-optimizer --exp-avg-dtype "
                                          "int4", tp=1, ep=8, nodes=4))
    r = runner.invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2 and "--exp-avg-dtype is 'int4'" in r.stderr


# --- recomputation by module: stated by Megatron-LM (and pptune), closest elsewhere ---

def modules_plan(model: str, tp: int, ep: int, pp: int, gpus: int) -> tuple[Job, object]:
    """moe_job's plan recomputing the modules its table prices (Recompute.MODULES)."""
    from dataclasses import replace

    from pptune.costmodel.memory import Recompute

    job, plan = moe_job(model, tp, ep, pp, gpus)
    spec = replace(plan.spec, recompute=Recompute.MODULES)  # type: ignore[attr-defined]
    return job, evaluate(job.table, job.request, spec)


@pytest.mark.parametrize("framework", list(Framework))
def test_module_recomputation_reads_back_as_emitted(framework: Framework, tmp_path: Path) -> None:
    pp = 1 if framework is Framework.TORCHTITAN else 4
    job, plan = modules_plan("qwen3-30b-a3b", tp=1, ep=8, pp=pp, gpus=64)
    assert plan.recompute_modules == ("moe_act",)  # type: ignore[attr-defined]
    adapter = ADAPTERS[framework]
    stated = adapter.express(job, plan, 1)
    files = adapter.write(stated)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    if framework in (Framework.MEGATRON, Framework.PPTUNE):
        assert stated.plan is plan or stated.plan.recompute_modules == ("moe_act",)
        text = "\n".join(files.values())
        assert ("--recompute-granularity selective" in text
                and "--recompute-modules moe_act" in text) if framework is Framework.MEGATRON \
            else "recompute_modules: [moe_act]" in text
    else:  # no recomputation by module there: the full-recomputation plan, said in a note
        assert stated.plan.recompute.value == "full" and not stated.exact
        assert any("recomputation by module" in n for n in stated.notes)
    name, flags = FLAGS[framework]
    r = runner.invoke(app, ["check-config", str(tmp_path / name), "--output", "json", *flags])
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 0, doc["findings"]
    assert doc["derived"]["step_time_s"] == pytest.approx(stated.plan.step_time_s, rel=1e-9)
    assert doc["derived"]["peak_memory_bytes"] == pytest.approx(stated.plan.peak_memory_bytes)


def test_deepseek_module_recomputation_is_nvidias_recipe_flags(tmp_path: Path) -> None:
    job, plan = modules_plan("deepseek-v3", tp=2, ep=64, pp=8, gpus=1024)
    stated = ADAPTERS[Framework.MEGATRON].express(job, plan, 1)
    text = ADAPTERS[Framework.MEGATRON].write(stated)["pretrain_megatron.sh"]
    assert "--recompute-modules mla_up_proj mlp moe_act" in text
    _code, found, doc = run(tmp_path, "pretrain_megatron.sh", text, "--gpu", "h100-sxm")
    assert not {"recompute-modules-unmodelled", "megatron-recompute-modules"} & set(found)
    assert doc["derived"]["step_time_s"] == pytest.approx(stated.plan.step_time_s, rel=1e-9)
    assert doc["derived"]["peak_memory_bytes"] == pytest.approx(stated.plan.peak_memory_bytes)


def test_each_framework_narrows_the_search_to_what_its_files_state() -> None:
    """Adapter.stateable: the search check-config compares with and --emit's substitute."""
    req = PlanRequest(gpus=64, global_batch=512)
    titan = ADAPTERS[Framework.TORCHTITAN].stateable(req, "qwen3-30b-a3b")
    assert set(titan.shardings) == {Sharding.FSDP, Sharding.NONE}
    assert titan.pp == (1,) and not titan.combined_order  # qwen3 has no pipelining_fn
    assert Schedule.DUALPIPE not in titan.schedules and Schedule.ZB_H1 not in titan.schedules
    assert Recompute.MODULES not in titan.recomputes and len(titan.rank_orders) == 1
    assert ADAPTERS[Framework.TORCHTITAN].stateable(req, "llama3-8b").pp is None
    megatron = ADAPTERS[Framework.MEGATRON].stateable(req, None)
    # the distributed optimizer, Megatron-FSDP's strategies (FSDP gathered per layer, as
    # it runs) or none
    assert set(megatron.shardings) == set(Sharding) and megatron.fsdp_reshard_after_forward
    assert set(megatron.schedules) == {Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED}
    # pptune's own files run in torch's runtime: all but interleaving's micro-batch groups
    assert ADAPTERS[Framework.PPTUNE].stateable(req, None) == replace(
        req, interleaved_groups=False)
    assert megatron.interleaved_groups and not titan.interleaved_groups


def test_check_config_compares_a_torchtitan_file_with_what_torchtitan_runs(
        tmp_path: Path) -> None:
    text = TITAN.format(extra="expert_parallel_degree = 8", shard=8, tp=2, pp=1)
    path = tmp_path / "job.toml"
    path.write_text(text)
    read = read_config(path, gpus=16)
    report = check(read.config, tmp_path, CheckOptions(costs=CostOptions(gpu="h100-sxm")),
                   read.semantics)
    assert report.best is not None
    assert report.best.sharding in (Sharding.FSDP, Sharding.NONE)
    assert not report.best.a2a_overlap and report.best.pp == 1


OVERLAP_VP = "--overlap-moe-expert-parallel-comm --num-virtual-stages-per-pipeline-rank 2"


def test_megatron_moe_overlap_runs_fp8_compute_on_a_bf16_model(tmp_path: Path) -> None:
    """megatron-core asserts ``self.bf16 or self.fp16`` (the model's dtype flags), which an
    FP8 recipe on a --bf16 model passes: Megatron-Bridge runs Qwen3-30B-A3B that way."""
    code, found, doc = mixtral(tmp_path, OVERLAP_VP + " --fp8-format hybrid --fp8-recipe tensorwise")
    assert code == 0 and doc["errors"] == 0 and "megatron-moe-overlap" not in found, found


def test_megatron_moe_overlap_refuses_an_fp32_model(tmp_path: Path) -> None:
    script = MIXTRAL_SCRIPT.replace(" --bf16)", ")").format(
        moe=OVERLAP_VP, tp=1, ep=8, nodes=4)
    code, found, _ = run(tmp_path, "m.sh", script, "--gpu", "h100-sxm")
    assert code == 1 and "only supported with bf16 or fp16 model" in found["megatron-moe-overlap"]


def test_megatron_forced_balance_is_read_as_balanced(tmp_path: Path) -> None:
    """--moe-router-force-load-balancing routes on random logits (megatron-core's
    benchmarking setting): balanced by construction, no longer listed as ignored."""
    _, _, out = mixtral(tmp_path, "--moe-router-force-load-balancing")
    notes = " ".join(out.get("notes", [])) if isinstance(out, dict) else str(out)
    assert "routing forced to balance" in notes, out
    assert "--moe-router-force-load-balancing" not in notes.split("ignored")[-1]



@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "pptune"])
def test_a_measured_routing_imbalance_travels_with_the_emitted_file(framework: str,
                                                                    tmp_path: Path) -> None:
    """--moe-imbalance is no framework setting: the Megatron-LM script and torchtitan file
    carry it on their '# pptune-plan:' line, pptune's YAML as moe_routing_imbalance, so
    check-config prices the file at the step recommend predicted for it."""
    from pptune.plan.emit import emit
    from pptune.plan.recommend import RecommendSpec, recommend

    run = recommend(replace(RecommendSpec.of(gpus=16, model="qwen3-30b-a3b", gpu="h100-sxm",
                                             ep="8", moe_imbalance=1.5, top=1),
                            written_as=framework))
    out = emit(framework, run)
    name = next(iter(out.files))
    text = out.files[name]
    assert "moe_imbalance=1.5" in text or "moe_routing_imbalance: 1.5" in text
    assert not any("state no routing imbalance" in n for n in out.notes)
    code, found, doc = check_file(tmp_path / name, text)
    assert code == 0, found
    # one word on routing: the plan line's value, not also the reader's 'balanced'
    assert not any("routing priced as balanced" in n for n in doc["notes"]), doc["notes"]
    # Megatron-LM's plan 1 (DualPipeV) gives way to a ZeRO-1 interleaved plan found at
    # Megatron-FSDP's prices: it is priced again as itself before it is written
    assert abs(doc["derived"]["step_time_s"] - out.plan.step_time_s) < 1e-3 * out.plan.step_time_s


def test_deepspeed_says_its_json_states_no_routing_imbalance() -> None:
    from pptune.plan.emit import emit
    from pptune.plan.recommend import RecommendSpec, recommend

    run = recommend(RecommendSpec.of(gpus=16, model="mixtral-8x7b", gpu="h100-sxm", ep="8",
                                     moe_imbalance=1.5, top=1))
    notes = emit("deepspeed", run).notes
    assert ("DeepSpeed's files state no routing imbalance: check-config prices the file with "
            "balanced routing, not the --moe-imbalance 1.5 predicted here") in notes
