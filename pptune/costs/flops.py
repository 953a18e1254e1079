"""The model FLOPs a token costs: the count the MFU column reports."""

from __future__ import annotations

from pptune.costmodel.analytic import model_params
from pptune.costmodel.presets import ModelShape
from pptune.schemas import Profile


def matmul_params(shape: ModelShape) -> float:
    """The parameters a token's weight matmuls use: its active ones (a mixture of experts'
    top_k routed experts), the embedding table left out (a lookup, no matmul)."""
    return model_params(shape, active=True) - shape.vocab * shape.hidden


def shape_flops_per_token(shape: ModelShape, seq_len: int, attention: bool = True) -> float:
    """``model_flops_per_token`` of a shape at ``seq_len``: 6 x its matmul parameters, plus
    causal attention's (``attention_flops_per_token``) unless ``attention`` is False (a
    lower bound)."""
    return 6 * matmul_params(shape) + (attention_flops_per_token(shape, seq_len)
                                       if attention else 0)


def attention_flops_per_token(shape: ModelShape, seq_len: int) -> float:
    """Causal attention's training FLOPs a token: the scores (Q x K^T, head width d_qk) and
    their product with V (width d_v), 2 FLOPs a multiply-add, three times for forward and
    backward, over the keys a query sees: s / 2 on average under a causal mask, w - w^2 /
    2s in a sliding window of w keys (as ops.attention_ops counts the tiles a flash
    kernel runs). With d_qk = d_v = d and heads x d = h this is PaLM's 12 x L x h x s
    (Chowdhery et al. 2022, appendix B) halved for the mask; the widths are the heads'
    (Qwen3: 64 heads x 128 = 8,192 on a hidden size of 4,096), and multi-head latent
    attention's query/key heads are nope + rope wide, its values v_head_dim (DeepSeek-V3,
    arXiv 2412.19437, sec. 2.1.1)."""
    d_qk = shape.qk_nope_head_dim + shape.qk_rope_head_dim if shape.mla else shape.head_dim
    d_v = shape.v_head_dim if shape.mla else shape.head_dim
    total = 0.0
    for i in range(shape.num_blocks):
        w = shape.sliding_window if shape.sliding_block(i) else 0
        keys = w - w * w / (2 * seq_len) if 0 < w < seq_len else seq_len / 2
        total += 6 * shape.heads * (d_qk + d_v) * keys
    return total


def counted_flops_per_token(shape: ModelShape, seq_len: int, *, causal: bool) -> float:
    """The model FLOPs a token as a framework's throughput line counts them: 6 x the
    matmul parameters (``matmul_params``: the LM head counted, the embedding table not)
    plus the attention products over ``seq_len`` keys a query in every layer (``causal``:
    half of them), sliding windows not discounted. torchtitan counts the full square
    (0.2.2 ``torchtitan/models/utils.py``, ``get_dense_model_nparams_and_flops`` and
    ``get_moe_model_nparams_and_flops``: ``6 * n_layers * n_heads * head_dims * seq_len``
    with head_dims the query/key plus value widths, "we ... do not account for sparsity
    in causal attention"); Megatron-LM halves it from core_r0.12.0 on
    (``megatron/training/training.py``, ``num_floating_point_operations``: "causal mask
    (only half of the mask is non-zero)") and counted the full square before."""
    d_qk = shape.qk_nope_head_dim + shape.qk_rope_head_dim if shape.mla else shape.head_dim
    d_v = shape.v_head_dim if shape.mla else shape.head_dim
    keys = seq_len / 2 if causal else seq_len
    return (6 * matmul_params(shape)
            + 6 * shape.num_blocks * shape.heads * (d_qk + d_v) * keys)


def model_flops_per_token(profile: Profile, tp_in_costs: int = 1,
                          shape: ModelShape | None = None) -> float | None:
    """Training FLOPs per token of the model (forward + backward, no recomputation).

    6 x N for the weight matmuls (2 forward, 4 backward; Kaplan et al. 2020,
    "Scaling Laws for Neural Language Models", sec. 2.1) plus the attention
    scores and their product with V: 12 x L x h x s for the full square
    (Chowdhery et al. 2022, PaLM, appendix B), halved for causal masking as
    the analytic cost model counts it, so 6 x L x h x s, with a shape's own head
    widths and windows (``attention_flops_per_token``). N counts every
    parameter but the embedding table's (a lookup, no matmul); the LM head is
    counted. None when the profile has no parameters.

    A mixture of experts counts its active parameters: a token passes through
    top_k of the E routed experts, so their parameters count top_k / E
    (analytic.model_params ``active=True`` for a shape; for a profile, its
    layers' ``expert_param_bytes`` times the model's ``top_k / experts``), as
    NVIDIA's MoE benchmarks count model FLOPs (dgxc-benchmarking
    grok1/README_314b.md: 20.6 GFLOP a token for its 2-layer Grok-1 row).
    """
    layers = profile.layers[1:] if profile.layers[0].name == "embedding" else profile.layers
    if shape is not None and shape.moe:
        params = matmul_params(shape)
    else:
        info = profile.model
        idle = 1 - info.top_k / info.experts if info.experts and info.top_k else 0.0
        params = sum(layer.param_bytes - idle * layer.expert_param_bytes
                     for layer in layers) / profile.param_dtype_bytes * tp_in_costs
    if params <= 0:
        return None
    m = profile.model
    if shape is not None:
        return 6 * params + attention_flops_per_token(shape, m.seq_len)
    # a measured profile records no heads: their widths taken as the hidden size
    attention = 6 * m.num_blocks * m.hidden_size * m.seq_len if m.num_blocks and m.hidden_size else 0
    return 6 * params + attention
