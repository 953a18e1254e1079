"""What check-config says of the MoE kernel flags a Megatron-LM script states beside
what pptune prices: the token permutation and the router's precision (moe.py reads
the rest of the MoE flags)."""

from __future__ import annotations

from typing import Any

from pptune.frameworks.megatron.flags import FlagReader


def kernels_noted(r: FlagReader, fields: dict[str, Any]) -> None:
    """What pptune prices of the router and the token permutation, where the script
    states otherwise: each (un)permutation is one memory pass, as megatron-core's fused
    kernels run it (--moe-permute-fusion; without it, moe_utils.permute's unfused
    PyTorch ops take several), and the router's GEMMs in BF16 (costmodel/moe.py).
    --moe-router-dtype fp32 (what --emit megatron writes from 32 experts) changes only
    the backward: megatron-core's moe_utils.py RouterGatingLinearFunction runs the
    forward through Transformer Engine's general_gemm on the BF16 activations and
    weights with FP32 logits out, and the two backward GEMMs on FP32 operands, which
    general_gemm runs on TF32 tensor cores (transformer_engine/common/gemm/
    cublaslt_gemm.cu: 'default to tf32 except for e5m2 inputs'), half the BF16 dense
    rate (NVIDIA's A100, H100 and B200 datasheets: TF32 156 / 495 / 1,100 against BF16
    312 / 989 / 2,250 TFLOP/s); the note gives their FLOPs beside the routed experts'.
    fp64 runs torch.mm in FP64, not priced."""
    ctx, flags = r.ctx, r.flags
    if not flags.has("--moe-permute-fusion"):
        ctx.note("no --moe-permute-fusion: megatron-core permutes tokens with unfused PyTorch "
                 "ops; priced as the fused kernels' one memory pass each way")
    dtype = r.text("--moe-router-dtype")
    if dtype == "fp32":
        ctx.note("--moe-router-dtype fp32: the router's forward GEMM takes the BF16 "
                 "activations and weights and writes FP32 logits, priced as it runs; its two "
                 "backward GEMMs take FP32 operands, which Transformer Engine runs on TF32 "
                 "tensor cores at half the BF16 rate (megatron-core moe_utils.py "
                 "RouterGatingLinearFunction, TE cublaslt_gemm.cu): their "
                 f"4 x hidden x experts FLOPs a token{_router_share(fields)}, are priced at "
                 "the BF16 rate")
    elif dtype is not None:
        ctx.note(f"--moe-router-dtype {dtype}: the router's GEMMs are priced in BF16, not in "
                 f"{dtype}")


def _router_share(fields: dict[str, Any]) -> str:
    """``, 0.35% of the routed experts' GEMM FLOPs``: the router's backward 4 h E FLOPs a
    token beside its k experts' forward and backward 3 x (6 h f gated, 4 h f GeLU); empty
    where the expert width is unknown (Megatron-LM's defaults: --moe-ffn-hidden-size =
    --ffn-hidden-size = 4 x hidden for GeLU, validate_args)."""
    hidden, experts, k = fields.get("hidden_size"), fields["num_experts"], fields["moe_top_k"]
    ffn = fields.get("moe_ffn_hidden_size") or fields.get("ffn_hidden_size") or (
        4 * hidden if hidden and not fields.get("gated_mlp") else None)
    if not ffn:
        return ""
    share = 4 * experts / (3 * (6 if fields.get("gated_mlp") else 4) * k * ffn)
    return f", {share:.2%} of the routed experts' GEMM FLOPs"
