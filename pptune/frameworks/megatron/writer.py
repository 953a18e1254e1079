"""``pretrain_megatron.sh``: a torchrun launch of Megatron-LM's pretrain_gpt.py.

The flags state the plan's tensor and pipeline sizes, its split (as
``express`` found it: the split flags ``split.py`` builds exactly, or a
``--pipeline-model-parallel-layout``, single-quoted for the shell), the model
shape with its MTP layers, the batch, the distributed optimizer or Megatron-FSDP
(ZeRO-2, ZeRO-3 and FSDP plans: ``fsdp.write_args``), full
recomputation (every layer, or the block method's first N layers of every
stage), sequence parallelism with Transformer Engine's TP overlap where the plan was
priced with it, no gradient accumulation fusion where the plan was priced without
it, the local attention implementation when the plan
priced unfused attention, and the tp-pp-dp rank order; the launch runs exactly
the plan's GPUs (``launch_shape``).
"""

from __future__ import annotations

from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import Precision
from pptune.costmodel.layout_grammar import KNOB
from pptune.costmodel.partition import mtp_count
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.rates import Swiglu, WgradAccum
from pptune.costmodel.schedule_orders import microbatch_group
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import PP_INNER, Plan, Recompute, Sharding
from pptune.frameworks.common.adapter import Stated
from pptune.frameworks.common.compression import sixteen_bit
from pptune.frameworks.common.writing import header, plan_launch
from pptune.frameworks.megatron.closest import Placement
from pptune.frameworks.megatron.closest import dispatcher as closest_dispatcher
from pptune.frameworks.megatron.cp_fp8 import cp_fp8_args
from pptune.frameworks.megatron.fsdp import STRATEGY, write_args
from pptune.frameworks.megatron.rules import before_blackwell
from pptune.frameworks.megatron.split import MegatronSplit
from pptune.frameworks.megatron.style import style_args
from pptune.options import CostOptions

FILE = "pretrain_megatron.sh"
# megatron-core warns below FP32 routing from 32 experts: 'Using a large number of experts
# (e.g. >=32) without fp32 routing. Consider enabling moe_router_dtype for better
# numerical stability.' (transformer_config.py __post_init__)
ROUTER_FP32_EXPERTS = 32


def _split_args(split: MegatronSplit) -> list[str]:
    args = []
    if split.vpp > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {split.vpp}")
    if split.first is not None:
        args.append(f"--decoder-first-pipeline-num-layers {split.first}")
    if split.last is not None:
        args.append(f"--decoder-last-pipeline-num-layers {split.last}")
    if split.account_embedding:
        args.append("--account-for-embedding-in-pipeline-split")
    if split.account_loss:
        args.append("--account-for-loss-in-pipeline-split")
    return args


def write(stated: Stated, placed: Placement) -> dict[str, str]:
    """The launch script; ``express`` never hands it a selective-recompute plan."""
    job, plan = stated.job, stated.plan
    split = placed.split
    shape = job.shape
    nodes, per_node = plan_launch(plan, job)
    lines = ["#!/usr/bin/env bash", *header(plan, job, "#"), "set -euo pipefail", ""]
    strategy = STRATEGY.get(plan.sharding)  # Megatron-FSDP's, for ZeRO-2, ZeRO-3 and FSDP
    if strategy is not None:
        lines += [f"# Megatron-FSDP ({strategy}), priced as pptune's {plan.sharding.value} "
                  "sharding (check-config says what",
                  "# that leaves out); validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS is "
                  "not 1 with it", "unset CUDA_DEVICE_MAX_CONNECTIONS", ""]
    else:
        lines += connections_lines(plan, job.device)
    args = [
        f"--tensor-model-parallel-size {plan.tp}",
        f"--pipeline-model-parallel-size {plan.pp}",
        *([f"--context-parallel-size {plan.cp}"] if plan.cp > 1 else []),
        # the layout states the virtual stages too (validate_args derives them from it)
        *(_split_args(split) if split is not None else [f"{KNOB} '{placed.layout}'"]),
    ]
    unsaid: list[str] = []
    if shape is not None:
        args += [
            f"--num-layers {shape.num_blocks}",
            f"--hidden-size {shape.hidden}",
            f"--num-attention-heads {shape.heads}",
            f"--ffn-hidden-size {shape.ffn}",
            f"--seq-length {shape.seq_len}",
            f"--max-position-embeddings {shape.seq_len}",
            # the vocabulary as priced (a tokenizer's own size replaces it where the job
            # names one; check-config reads it, for a model that is no preset)
            f"--vocab-size {shape.vocab}",
        ]
        if not shape.dropout:  # as priced: Megatron-LM's default is 0.1 each
            args += ["--attention-dropout 0.0", "--hidden-dropout 0.0"]
        if shape.kv_heads != shape.heads and not shape.mla:
            args += ["--group-query-attention", f"--num-query-groups {shape.kv_heads}"]
        if shape.gated_mlp:
            args += ["--swiglu", "--position-embedding-type rope"]
            if (job.cost_options or CostOptions()).swiglu_kernels is Swiglu.EAGER:
                args.append("--no-bias-swiglu-fusion")  # as priced (--swiglu eager)
        args += style_args(shape, unsaid, plan.etp)  # norm, biases, tied embeddings (style.py)
        args += moe_args(shape, plan, (job.cost_options or CostOptions()).dispatcher)
    else:  # a comment inside the continued command would end it: say it above
        lines.append("# the profile names no model shape: add --hidden-size, "
                     "--num-attention-heads etc. for your model")
        blocks = len(job.layer_names) - 2 - mtp_count(job.layer_names)
        args.append(f"--num-layers {blocks}")
    group = (microbatch_group(plan.pp, plan.num_microbatches)
             if plan.schedule is Schedule.INTERLEAVED else None)
    if group is not None and group != plan.pp:  # as simulated (schedule_orders.py)
        args.append(f"--microbatch-group-size-per-virtual-pipeline-stage {group}")
    args += [
        f"--micro-batch-size {plan.micro_batch_size}",
        f"--global-batch-size {job.global_batch}",
        "--fp16" if plan.precision is Precision.FP16 else "--bf16",
    ]
    args += cp_fp8_args(plan.cp, plan.tp, plan.precision, job.cost_options,
                        job.request.gpus_per_node,
                        plan.sharding is Sharding.ZERO1 or strategy is not None, unsaid,
                        job.shape)
    lines += [f"# {line}" for line in unsaid]
    if plan.sharding is Sharding.ZERO1:
        args.append("--use-distributed-optimizer")
    if strategy is not None:  # with the overlap Megatron-FSDP runs (and no fusion)
        args += write_args(plan.sharding, plan.precision is Precision.FP16)
    elif (job.cost_options or CostOptions()).wgrad is WgradAccum.UNFUSED:
        args.append("--no-gradient-accumulation-fusion")  # as priced (--wgrad-accum unfused)
    if job.moments != ("fp32", "fp32"):  # the search kept these on the distributed optimizer
        args += ["--use-precision-aware-optimizer", f"--exp-avg-dtype {job.moments[0]}",
                 f"--exp-avg-sq-dtype {job.moments[1]}"]
    if sixteen_bit(job.grad_compression) and plan.precision is not Precision.FP16 \
            and "--grad-reduce-in-bf16" not in args:  # --grad-compression, as priced
        args.append("--grad-reduce-in-bf16")  # (common/compression.py, widths.py)
    elif plan.precision is Precision.FP16 and strategy is None \
            and not sixteen_bit(job.grad_compression):  # the FP32 buffer priced, which
        args.append("--accumulate-allreduce-grads-in-fp32")  # --fp16 keeps only so (widths.py)
    # the data-parallel overlap the plan was priced with (megatron-core: off unless said)
    req = job.request
    if req.overlap_grad_reduce and strategy is None:
        args.append("--overlap-grad-reduce")
        gather = req.overlap_grad_reduce if req.overlap_param_gather is None \
            else req.overlap_param_gather
        if gather and plan.sharding is Sharding.ZERO1:
            args.append("--overlap-param-gather")
    if plan.recompute is Recompute.FULL and placed.block_layers is not None:
        args += ["--recompute-granularity full", "--recompute-method block",
                 f"--recompute-num-layers {placed.block_layers}"]
    elif plan.recompute is Recompute.FULL:
        args += ["--recompute-granularity full", "--recompute-method uniform",
                 "--recompute-num-layers 1"]
    elif plan.recompute is Recompute.MODULES:
        args += ["--recompute-granularity selective",
                 "--recompute-modules " + " ".join(plan.recompute_modules)]
    elif plan.recompute is Recompute.NONE and job.layer_modules:
        # the modules the table prices into every layer (check-config's best plan for a
        # file with --recompute-modules: Job.layer_modules), which the plan runs
        args += ["--recompute-granularity selective", "--recompute-modules " + " ".join(
            plan.recompute_modules or sorted(job.layer_modules))]
    if plan.tp > 1 and job.sequence_parallel:
        args.append("--sequence-parallel")
        if job.tp_comm_overlap:  # as priced (closest.py: never beside --transformer-impl local)
            args.append("--tp-comm-overlap")
    if job.attention == "eager":  # Transformer Engine (the default) fuses it
        args.append("--transformer-impl local")
    if plan.rank_order == PP_INNER:
        args.append("--use-tp-pp-dp-mapping")
    args.append("--cross-entropy-loss-fusion")  # the plan is priced so (closest.py)
    if plan.a2a_overlap:  # megatron-core 0.16: the combined 1F1B order (combined_1f1b.py)
        # with the experts' weight gradients beside the dispatch all-to-all's backward, the
        # order the F&B pair is priced in (a2a.py)
        args += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
    lines.append(
        f"torchrun --nnodes {nodes} --nproc_per_node {per_node} "
        "--rdzv_backend c10d --rdzv_endpoint \"${MASTER_ADDR:-localhost}:${MASTER_PORT:-29500}\" \\"
    )
    lines.append("    pretrain_gpt.py \\")
    lines += [f"    {a} \\" for a in args[:-1]] + [f"    {args[-1]} \\", '    "$@"', ""]
    return {FILE: "\n".join(lines)}


def connections_lines(plan: Plan, device: str | None) -> list[str]:
    """CUDA_DEVICE_MAX_CONNECTIONS as Megatron-LM core_v0.16.1 wants it for the plan
    (rules.connections_rule judges it back): 32 with the expert all-to-all overlap, which
    needs more than one connection (megatron-core's MoE README: 'Requirements for EP A2A
    Overlap: ... CUDA_DEVICE_MAX_CONNECTIONS > 1'; NVIDIA's MoE recipes export 32 with it,
    Megatron-Bridge scripts/moe_model_zoo/sbatch_benchmarking.sh) and beside which
    validate_args only warns of tp or cp > 1, offering 1 or 32 by which to favour; else 1
    with tp or cp > 1 on GPUs before Blackwell, where validate_args asserts it (a GPU that
    is no preset counts as one); nothing otherwise. Beside tensor parallelism alone, 32
    gives up only what the plan does not price (the order one connection keeps between
    the tensor-parallel collectives and their GEMMs: it prices them exposed), so the file
    says so. Beside context parallelism or overlapped tensor-parallel collectives before
    Blackwell no value serves both, and the plan comes without the overlap
    (connections.without_contested_overlap): 1."""
    early = before_blackwell(device) is not False
    sharded = plan.tp > 1 or plan.cp > 1
    if plan.a2a_overlap:
        said = ["# the expert all-to-all overlap (--overlap-moe-expert-parallel-comm) needs "
                "more than one connection"]
        if sharded and early:
            said += ["# (Megatron-LM validate_args warns of it beside tensor parallelism "
                     "before Blackwell and offers 1 or 32: 32 favours the overlap, and the",
                     "# tensor-parallel collectives are priced exposed, so what 1 would "
                     "give them is not counted on)"]
        return [*said, "export CUDA_DEVICE_MAX_CONNECTIONS=32", ""]
    if sharded and early:  # validate_args asserts it (tp or cp > 1) before Blackwell
        return ["# Megatron-LM requires this with tensor or context parallelism before "
                "Blackwell (validate_args)", "export CUDA_DEVICE_MAX_CONNECTIONS=1", ""]
    return []


def layer_pattern(shape: ModelShape) -> str:
    """``--moe-layer-freq``: N when block i is MoE for i % N == 0, else the list
    expression of one 0 (dense) or 1 (MoE) per block (gpt_layer_specs.py)."""
    n = shape.num_blocks
    flags = [int(shape.moe_block(i)) for i in range(n)]
    if not shape.first_dense and shape.moe_offset % shape.moe_every == 0:
        return str(shape.moe_every)
    runs: list[tuple[int, int]] = []  # (value, length)
    for v in flags:
        if runs and runs[-1][0] == v:
            runs[-1] = (v, runs[-1][1] + 1)
        else:
            runs.append((v, 1))
    listed = '"[' + ",".join(map(str, flags)) + ']"'
    repeated = '"(' + "+".join(f"[{v}]*{k}" for v, k in runs) + ')"'
    return min(listed, repeated, key=len)


def moe_args(shape: ModelShape, plan: Plan,
             dispatcher: Dispatcher = Dispatcher.ALLTOALL) -> list[str]:
    """The flags of the shape's experts, MTP modules and attention variant, the plan's
    expert placement and the dispatcher it was priced with (moe.py reads them back)."""
    args: list[str] = []
    if shape.kv_channels and not shape.mla:
        args.append(f"--kv-channels {shape.kv_channels}")
    if shape.qk_norm:
        args.append("--qk-layernorm")
    if shape.mla:
        args.append("--multi-latent-attention")
        if shape.q_lora_rank:
            args.append(f"--q-lora-rank {shape.q_lora_rank}")
        args += [f"--kv-lora-rank {shape.kv_lora_rank}", f"--qk-head-dim {shape.qk_nope_head_dim}",
                 f"--qk-pos-emb-head-dim {shape.qk_rope_head_dim}",
                 f"--v-head-dim {shape.v_head_dim}"]
    if shape.mtp_layers:
        args.append(f"--mtp-num-layers {shape.mtp_layers}")
    if shape.sliding_window and not shape.mla:  # window.py reads them back
        args.append(f"--window-size {shape.sliding_window},0")
        if shape.full_attention_every:
            args.append(f"--window-attn-skip-freq {shape.full_attention_every}")
    if not shape.moe:
        return args
    args += [f"--num-experts {shape.experts}", f"--moe-router-topk {shape.top_k}",
             f"--moe-ffn-hidden-size {shape.expert_ffn}"]
    if shape.top_k == 1 and shape.router_score == "softmax":
        args.append("--moe-router-pre-softmax")  # megatron-core: 'Please use ... when topk is 1'
    if shape.router_score != "softmax":  # the model's router (models.py)
        args.append(f"--moe-router-score-function {shape.router_score}")
    if shape.router_expert_bias:
        args.append("--moe-router-enable-expert-bias")
    if shape.experts >= ROUTER_FP32_EXPERTS:
        args.append("--moe-router-dtype fp32")
    if shape.shared_ffn:
        args.append(f"--moe-shared-expert-intermediate-size {shape.shared_ffn}")
    pattern = layer_pattern(shape)
    if pattern != "1":
        args.append(f"--moe-layer-freq {pattern}")
    if shape.route_groups:
        args += [f"--moe-router-num-groups {shape.route_groups}",
                 f"--moe-router-group-topk {shape.route_group_topk}"]
    # the dispatcher the plan was priced with (closest.dispatcher: flex needs tp x ep > 1,
    # else alltoall, as the plan was priced as run); the local experts as one grouped GEMM
    dispatcher = closest_dispatcher(dispatcher, plan.tp, plan.ep)
    if dispatcher is Dispatcher.DEEPEP:
        args += ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]
    elif dispatcher is Dispatcher.ALLGATHER:
        args.append("--moe-token-dispatcher-type allgather")
    else:
        args.append("--moe-token-dispatcher-type alltoall")
    # each (un)permutation is priced as one memory pass (costmodel/dispatch.py), as
    # megatron-core's fused kernels run it (NVIDIA's MoE recipes set it: Megatron-Bridge
    # scripts/moe_model_zoo/model_configs/DeepSeek-V3.yaml moe_permute_fusion)
    args += ["--moe-grouped-gemm", "--moe-permute-fusion",
             f"--expert-model-parallel-size {plan.ep}",
             f"--expert-tensor-parallel-size {plan.etp}"]
    return args
