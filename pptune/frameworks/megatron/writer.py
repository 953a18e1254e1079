"""``pretrain_megatron.sh``: a torchrun launch of Megatron-LM's pretrain_gpt.py.

The flags state the plan's tensor and pipeline sizes, its split (as
``express`` found it: ``split.py`` builds exactly that), the model shape,
the batch, the distributed optimizer, full recomputation, sequence
parallelism, the local attention implementation when the plan priced
unfused attention, and the tp-pp-dp rank order; the launch runs exactly
the plan's GPUs (``launch_shape``).
"""

from __future__ import annotations

from pptune.costmodel.keys import Precision
from pptune.costmodel.search import PP_INNER, Recompute, Sharding
from pptune.frameworks.common.adapter import Stated
from pptune.frameworks.common.writing import header, plan_launch
from pptune.frameworks.megatron.cp_fp8 import cp_fp8_args
from pptune.frameworks.megatron.split import MegatronSplit

FILE = "pretrain_megatron.sh"


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


def write(stated: Stated, split: MegatronSplit) -> dict[str, str]:
    """The launch script; ``express`` never hands it a selective-recompute plan."""
    job, plan = stated.job, stated.plan
    shape = job.shape
    nodes, per_node = plan_launch(plan, job)
    lines = ["#!/usr/bin/env bash", *header(plan, job, "#"), "set -euo pipefail", ""]
    if plan.tp > 1 or plan.cp > 1:  # validate_args asserts it (tp or cp > 1) before Blackwell
        lines += ["# Megatron-LM requires this with tensor or context parallelism (validate_args)",
                  "export CUDA_DEVICE_MAX_CONNECTIONS=1", ""]
    args = [
        f"--tensor-model-parallel-size {plan.tp}",
        f"--pipeline-model-parallel-size {plan.pp}",
        *([f"--context-parallel-size {plan.cp}"] if plan.cp > 1 else []),
        *_split_args(split),
    ]
    if shape is not None:
        args += [
            f"--num-layers {shape.num_blocks}",
            f"--hidden-size {shape.hidden}",
            f"--num-attention-heads {shape.heads}",
            f"--ffn-hidden-size {shape.ffn}",
            f"--seq-length {shape.seq_len}",
            f"--max-position-embeddings {shape.seq_len}",
        ]
        if shape.kv_heads != shape.heads:
            args += ["--group-query-attention", f"--num-query-groups {shape.kv_heads}"]
        if shape.gated_mlp:
            args += ["--swiglu", "--normalization RMSNorm", "--position-embedding-type rope",
                     "--untie-embeddings-and-output-weights", "--disable-bias-linear"]
    else:  # a comment inside the continued command would end it: say it above
        lines.append("# the profile names no model shape: add --hidden-size, "
                     "--num-attention-heads etc. for your model")
        args.append(f"--num-layers {split.num_layers}")
    args += [
        f"--micro-batch-size {plan.micro_batch_size}",
        f"--global-batch-size {job.global_batch}",
        "--fp16" if plan.precision is Precision.FP16 else "--bf16",
    ]
    unsaid: list[str] = []
    args += cp_fp8_args(plan.cp, plan.tp, plan.precision, job.cost_options,
                        job.request.gpus_per_node, plan.sharding is Sharding.ZERO1, unsaid)
    lines += [f"# {line}" for line in unsaid]
    if plan.sharding is Sharding.ZERO1:
        args.append("--use-distributed-optimizer")
    if plan.recompute is Recompute.FULL:
        args += ["--recompute-granularity full", "--recompute-method uniform",
                 "--recompute-num-layers 1"]
    if plan.tp > 1 and job.sequence_parallel:
        args.append("--sequence-parallel")
    if job.attention == "eager":  # Transformer Engine (the default) fuses it
        args.append("--transformer-impl local")
    if plan.rank_order == PP_INNER:
        args.append("--use-tp-pp-dp-mapping")
    if plan.a2a_overlap:  # megatron-core 0.16: the combined 1F1B order (combined_1f1b.py)
        args.append("--overlap-moe-expert-parallel-comm")
    lines.append(
        f"torchrun --nnodes {nodes} --nproc_per_node {per_node} "
        "--rdzv_backend c10d --rdzv_endpoint \"${MASTER_ADDR:-localhost}:${MASTER_PORT:-29500}\" \\"
    )
    lines.append("    pretrain_gpt.py \\")
    lines += [f"    {a} \\" for a in args[:-1]] + [f"    {args[-1]} \\", '    "$@"', ""]
    return {FILE: "\n".join(lines)}
