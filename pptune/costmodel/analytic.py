"""Per-layer costs from a model shape and a GPU spec, without hardware.

Layers: ``embedding``, ``block0`` .. ``block{n-1}``, ``head`` (final norm,
LM head and loss). The same structure ``pptune probe`` writes from
measurements.

Compute: FLOPs over ``peak_flops * efficiency``, plus a fixed per-op
overhead (``presets.DEFAULT_OP_OVERHEAD_S``). FLOPs per token of a block's
forward pass, for hidden h, heads a, KV heads g, head dim d = h/a, FFN f,
sequence s (Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters", appendix: each GEMM of m x k by k x n costs
2mkn; the attention score and value products cost 2 * 2 s h per token):

    gemm  = 2 h (h + 2 g d) + 2 h h + 2 h f * (3 if gated else 2)
    attn  = 4 s h, halved for a causal mask under flash attention

(FlashAttention-2, Dao 2023, skips the tiles above the causal diagonal, so
the score and value products do about half the work of the full square that
Narayanan et al. count; the MFU convention keeps the full count, the time
does not.)

Backward costs twice the forward (Narayanan et al. 2021): its input-
gradient half (B) is ``gemm + 2 attn`` (the score products have no weights,
so both their gradients are input-gradients) and the weight-gradient half
(W) is ``gemm``, the split zero-bubble schedules use (Qi et al. 2023).
Tensor parallelism t divides FLOPs by t and adds two all-reduces of the
block's activations in forward and two in backward (Shoeybi et al. 2019,
Megatron-LM, sec. 3).

Activation memory kept for backward, in bytes, per block and micro-batch
of b samples, follows Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", sec. 4.1, eq. 1-2), which for a
GPT block without parallelism gives ``s b h (34 + 5 a s / h)`` and with
t-way tensor parallelism ``s b h (10 + 24 / t + 5 a s / (h t))``. Their
term-by-term accounting is generalised here to grouped-query attention, any
FFN width, gated MLPs and models without dropout; with flash attention
(Dao et al. 2022) the ``5 a s / h`` score term is not stored. The LM head
keeps the fp32 logits for the loss, ``4 s b V / t`` (Korthikanti et al.
2022, sec. 4.3).
"""

from __future__ import annotations

from dataclasses import dataclass

from pptune.costmodel.presets import (
    DEFAULT_EFFICIENCY,
    DEFAULT_OP_OVERHEAD_S,
    GpuSpec,
    ModelShape,
)

BF16_BYTES = 2


@dataclass(frozen=True)
class LayerSpec:
    """One layer's analytic costs at one micro-batch size."""

    fwd_s: float
    bwd_s: float
    wgrad_s: float
    act_bytes: float
    out_bytes: float


@dataclass(frozen=True)
class AnalyticLayer:
    name: str
    param_bytes: float
    per_micro_batch: dict[int, LayerSpec]


def block_flops_per_token(m: ModelShape, causal_skip: bool = False) -> tuple[float, float]:
    """(GEMM FLOPs, attention-product FLOPs) of one block's forward, per token.

    ``causal_skip``: count only the causal half of the attention products, as
    a flash-attention kernel with a causal mask computes them.
    """
    h, f, d = m.hidden, m.ffn, m.head_dim
    gemm = 2 * h * (h + 2 * m.kv_heads * d) + 2 * h * h + 2 * h * f * (3 if m.gated_mlp else 2)
    attn = 4 * m.seq_len * h * (0.5 if causal_skip else 1.0)
    return float(gemm), float(attn)


def block_params(m: ModelShape) -> float:
    h, f, d = m.hidden, m.ffn, m.head_dim
    attn = h * (h + 2 * m.kv_heads * d) + h * h
    mlp = h * f * (3 if m.gated_mlp else 2)
    norms = 2 * h * (2 if m.dropout else 1)  # GPT layernorms have a bias, RMSNorm none
    return float(attn + mlp + norms)


def block_act_bytes(
    m: ModelShape, b: int, tp: int = 1, flash_attention: bool = True,
    sequence_parallel: bool = False,
) -> float:
    """Bytes one block keeps for backward, per micro-batch (Korthikanti et al. 2022).

    With sequence parallelism the parts tensor parallelism leaves whole
    (layernorms, dropout, block inputs) are split along the sequence too:
    ``s b h (34/t + 5 a s / (h t))`` for a GPT block (their eq. 4).
    """
    s, h, f, a = m.seq_len, m.hidden, m.ffn, m.heads
    kv_frac = m.kv_heads * m.head_dim / h
    drop = 1.0 if m.dropout else 0.0
    # Not split by tensor parallelism: two layernorm inputs (2 + 2), the
    # inputs of the attention and MLP blocks (2 + 2), two dropout masks.
    replicated = 4 + 2 + 2 + 2 * drop
    # Split by tensor parallelism: Q (2), K and V (2 each, scaled for GQA),
    # the output-projection input (2), the MLP's inner tensors.
    attn_inner = 2 + 4 * kv_frac + 2
    if m.gated_mlp:
        mlp_inner = 8 * f / h  # gate, up, activation output, product (2 bytes each)
    else:
        mlp_inner = 4 * f / h  # GeLU input and output (2 bytes each)
    sharded = attn_inner + mlp_inner
    per_token_h = (replicated + sharded) / tp if sequence_parallel else replicated + sharded / tp
    total = s * b * h * per_token_h
    if not flash_attention:
        # softmax output (2), its dropout mask (1), dropout output (2) per score
        total += (2 + 3 * drop) * a * s * s * b / tp
    return total


def analytic_layers(
    m: ModelShape,
    gpu: GpuSpec,
    micro_batch_sizes: list[int],
    tp: int = 1,
    efficiency: float = DEFAULT_EFFICIENCY,
    op_overhead_s: float = DEFAULT_OP_OVERHEAD_S,
    flash_attention: bool = True,
    tp_allreduce: tuple[float, float] = (20e-6, 450e9),
    sequence_parallel: bool = False,
) -> list[AnalyticLayer]:
    """Embedding, blocks and head with costs for each micro-batch size.

    ``tp_allreduce`` is (latency_s, bus bytes/s) of the tensor-parallel group.
    """
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
    rate = gpu.peak_flops * efficiency
    s, h, v = m.seq_len, m.hidden, m.vocab
    gemm, attn = block_flops_per_token(m, causal_skip=flash_attention)

    def tp_allreduce_s(nbytes: float) -> float:
        if tp == 1:
            return 0.0
        latency, busbw = tp_allreduce
        return latency + nbytes * 2 * (tp - 1) / tp / busbw

    emb: dict[int, LayerSpec] = {}
    blocks: dict[int, LayerSpec] = {}
    head: dict[int, LayerSpec] = {}
    for b in micro_batch_sizes:
        tokens = b * s
        hidden_bytes = tokens * h * BF16_BYTES
        send_bytes = hidden_bytes / tp  # scatter/gather optimisation, Narayanan et al. sec. 4.1
        ar = tp_allreduce_s(hidden_bytes)
        # Embedding: a memory-bound gather (read rows, write activations);
        # its backward is a scatter-add into the weight gradient.
        emb_fwd = 2 * hidden_bytes / gpu.hbm_bytes_per_s + op_overhead_s + ar
        emb_w = 3 * hidden_bytes / gpu.hbm_bytes_per_s + op_overhead_s
        emb[b] = LayerSpec(emb_fwd, 0.0, emb_w, 0.0, send_bytes)
        fwd = tokens * (gemm + attn) / tp / rate
        blocks[b] = LayerSpec(
            fwd_s=fwd + op_overhead_s + 2 * ar,
            bwd_s=tokens * (gemm + 2 * attn) / tp / rate + op_overhead_s + 2 * ar,
            wgrad_s=tokens * gemm / tp / rate + op_overhead_s,
            act_bytes=block_act_bytes(m, b, tp, flash_attention, sequence_parallel),
            out_bytes=send_bytes,
        )
        head_gemm = tokens * 2 * h * v / tp / rate
        head[b] = LayerSpec(
            fwd_s=head_gemm + op_overhead_s,
            bwd_s=head_gemm + op_overhead_s + ar,
            wgrad_s=head_gemm + op_overhead_s,
            act_bytes=2 * hidden_bytes + 4 * tokens * v / tp,
            out_bytes=4.0,  # the loss scalar
        )
    emb_params = (v * h + (s * h if m.dropout else 0)) / tp  # GPT adds learned positions
    layers = [AnalyticLayer("embedding", emb_params * BF16_BYTES, emb)]
    layers += [
        AnalyticLayer(f"block{i}", block_params(m) / tp * BF16_BYTES, blocks)
        for i in range(m.num_blocks)
    ]
    layers.append(AnalyticLayer("head", (v * h / tp + h) * BF16_BYTES, head))
    return layers
