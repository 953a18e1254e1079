"""Activation bytes one transformer block keeps for backward (analytic.py's blocks,
and the memory checks that count them without pricing a block)."""

from __future__ import annotations

from pptune.costmodel.ops import mlp_inner_bytes
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.rates import Swiglu


def block_act_bytes(
    m: ModelShape, b: int, tp: int = 1, flash_attention: bool = True,
    sequence_parallel: bool = False, *, attn_bytes: float | None = None,
    mlp_bytes: float | None = None, cp: int = 1, gemm_input_bytes: float = 2.0,
    kept_inputs: tuple[bool, bool] = (True, True), swiglu: Swiglu = Swiglu.FUSED,
) -> float:
    """Bytes one block keeps for backward, per micro-batch (Korthikanti et al. 2022).

    With sequence parallelism the parts tensor parallelism leaves whole
    (layernorms, dropout, block inputs) are split along the sequence too:
    ``s b h (34/t + 5 a s / (h t))`` for a GPT block (their eq. 4).
    ``attn_bytes`` / ``mlp_bytes``: the attention's (MLA) or MLP's (MoE, or a
    recomputed MLP: 0) inner tensors in bytes, instead of a dense block's.
    ``kept_inputs``: whether the attention's and the MLP's inputs (the norms' outputs)
    are kept (megatron-core's ``layernorm`` recomputation drops them).
    ``swiglu``: a gated MLP's kernels (rates.Swiglu). Context parallelism keeps ``s / cp``
    tokens a rank (context.py). Under FP8 the GEMM inputs (QKV, attention output, both
    MLP inputs) are saved at ``gemm_input_bytes`` instead of 2 (precision.py)."""
    s, h, f, a = m.seq_len // cp, m.hidden, m.ffn, m.heads
    low = 2.0 - gemm_input_bytes  # saved per GEMM-input element by FP8
    kv_frac = max(m.kv_heads, tp) * m.head_dim / h  # tensor_parallel.replicated_kv
    q_frac = m.heads * m.head_dim / h  # 1 unless the model sets its head dimension
    drop = 1.0 if m.dropout else 0.0
    # Not split by tensor parallelism: two layernorm inputs (2 + 2), the
    # inputs of the attention and MLP blocks (2 + 2), two dropout masks.
    replicated = 4 + (2 - low) * sum(kept_inputs) + 2 * drop
    # Split by tensor parallelism: Q (2), K and V (2 each, scaled for GQA; one whole
    # head a rank under a tp above them), the output-projection input (2), the MLP's.
    attn_inner = 2 * q_frac + 4 * kv_frac + (2 - low) * q_frac
    mlp_inner = mlp_inner_bytes(m.gated_mlp, swiglu, low) * f / h
    if attn_bytes is None and mlp_bytes is None:
        sharded = attn_inner + mlp_inner
    else:
        sharded = (attn_inner if attn_bytes is None else 0.0) + (
            mlp_inner if mlp_bytes is None else 0.0)
    per_token_h = (replicated + sharded) / tp if sequence_parallel else replicated + sharded / tp
    total = s * b * h * per_token_h
    if attn_bytes is not None:
        total += attn_bytes
    if mlp_bytes is not None:
        total += mlp_bytes
    if not flash_attention:
        if cp > 1:
            raise ValueError("context parallelism needs flash (fused) attention")
        # softmax output (2), its dropout mask (1), dropout output (2) per score
        total += (2 + 3 * drop) * a * s * s * b / tp
    return total
