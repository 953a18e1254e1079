"""Per-layer costs from a model shape and a GPU spec, without hardware.

Layers: ``embedding``, ``block0`` .. ``block{n-1}``, ``head`` (final norm,
LM head and loss). The same structure ``pptune probe`` writes from
measurements.

Compute: per-op costs (ops.py): every GEMM by a roofline with a
shape-dependent efficiency, attention by the flash-attention cost (or the
unfused GEMMs and softmax with ``flash_attention=False``), the elementwise
ops by the bytes they move, a launch cost per kernel, and the tensor-
parallel collectives inside the layer (two per block in forward and two in
B, Shoeybi et al. 2019 sec. 3). F, B and W are each the sum of their own
ops; W is the weight GEMMs only.

FLOPs per token of a block's forward pass, for hidden h, heads a, KV heads
g, head dim d = h/a, FFN f, sequence s (Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters", appendix: each GEMM
of m x k by k x n costs 2mkn; the attention score and value products cost
2 * 2 s h per token):

    gemm  = 2 h (h + 2 g d) + 2 h h + 2 h f * (3 if gated else 2)
    attn  = 4 s h, halved for a causal mask under flash attention

(the model-FLOPs count used to report TFLOP/s; the times come from ops.py).

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

from pptune.costmodel import precision
from pptune.costmodel.context import CpComm, CpLinks
from pptune.costmodel.keys import Precision
from pptune.costmodel.ops import (
    OpCost,
    Parallel,
    Phase,
    Rates,
    block_ops,
    embedding_ops,
    head_ops,
    phase_s,
)
from pptune.costmodel.presets import GpuSpec, ModelShape

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
    sequence_parallel: bool = False, cp: int = 1, gemm_input_bytes: float = 2.0,
) -> float:
    """Bytes one block keeps for backward, per micro-batch (Korthikanti et al. 2022).

    With sequence parallelism the parts tensor parallelism leaves whole
    (layernorms, dropout, block inputs) are split along the sequence too:
    ``s b h (34/t + 5 a s / (h t))`` for a GPT block (their eq. 4). Context
    parallelism keeps ``s / cp`` tokens a rank (context.py). Under FP8 the four
    GEMM inputs (QKV, attention output, both MLP inputs) are saved at
    ``gemm_input_bytes`` instead of 2 (precision.py).
    """
    s, h, f, a = m.seq_len // cp, m.hidden, m.ffn, m.heads
    low = 2.0 - gemm_input_bytes  # saved per GEMM-input element by FP8
    kv_frac = m.kv_heads * m.head_dim / h
    drop = 1.0 if m.dropout else 0.0
    # Not split by tensor parallelism: two layernorm inputs (2 + 2), the
    # inputs of the attention and MLP blocks (2 + 2), two dropout masks.
    replicated = 4 + (2 - low) + (2 - low) + 2 * drop
    # Split by tensor parallelism: Q (2), K and V (2 each, scaled for GQA),
    # the output-projection input (2), the MLP's inner tensors.
    attn_inner = 2 + 4 * kv_frac + (2 - low)
    if m.gated_mlp:
        # gate, up, activation output, product (2 bytes each; the product feeds a GEMM)
        mlp_inner = (8 - low) * f / h
    else:
        mlp_inner = (4 - low) * f / h  # GeLU input and output (the output feeds a GEMM)
    sharded = attn_inner + mlp_inner
    per_token_h = (replicated + sharded) / tp if sequence_parallel else replicated + sharded / tp
    total = s * b * h * per_token_h
    if not flash_attention:
        if cp > 1:
            raise ValueError("context parallelism needs flash (fused) attention")
        # softmax output (2), its dropout mask (1), dropout output (2) per score
        total += (2 + 3 * drop) * a * s * s * b / tp
    return total


def analytic_layers(
    m: ModelShape,
    gpu: GpuSpec,
    micro_batch_sizes: list[int],
    tp: int = 1,
    efficiency: float | None = None,
    flash_attention: bool = True,
    tp_allreduce: tuple[float, float] = (20e-6, 450e9),
    sequence_parallel: bool = False,
    tp_comm_overlap: bool = False,
    cp: int = 1,
    cp_comm: CpComm = CpComm.P2P,
    cp_links: CpLinks | None = None,
    gemm_precision: Precision = Precision.BF16,
) -> list[AnalyticLayer]:
    """Embedding, blocks and head with costs for each micro-batch size.

    ``efficiency``: one fraction of peak for every GEMM instead of the
    shape-dependent one. ``tp_allreduce`` is (latency_s, bus bytes/s) of the
    tensor-parallel group; ``tp_comm_overlap`` hides its collectives behind
    their GEMMs (ops.tp_collective). ``cp``: context parallelism over ``cp``
    ranks exchanging K/V by ``cp_comm`` over ``cp_links`` (context.py);
    ``gemm_precision``: the block GEMMs' precision (precision.py).
    """
    if efficiency is not None and not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
    rates = Rates.of(gpu, efficiency)
    par = Parallel(tp, sequence_parallel, flash_attention, *tp_allreduce, tp_comm_overlap,
                   cp, cp_comm, cp_links, gemm_precision)
    s, h, v = m.seq_len // cp, m.hidden, m.vocab
    saved = precision.gemm_input_bytes(gemm_precision)

    def spec(ops: list[OpCost], act_bytes: float, out_bytes: float) -> LayerSpec:
        return LayerSpec(phase_s(ops, Phase.F, rates), phase_s(ops, Phase.B, rates),
                         phase_s(ops, Phase.W, rates), act_bytes, out_bytes)

    emb: dict[int, LayerSpec] = {}
    blocks: dict[int, LayerSpec] = {}
    head: dict[int, LayerSpec] = {}
    for b in micro_batch_sizes:
        tokens = b * s
        hidden_bytes = tokens * h * BF16_BYTES
        send_bytes = hidden_bytes / tp  # scatter/gather optimisation, Narayanan et al. sec. 4.1
        emb[b] = spec(embedding_ops(m, b, rates, par), 0.0, send_bytes)
        blocks[b] = spec(block_ops(m, b, rates, par),
                         block_act_bytes(m, b, tp, flash_attention, sequence_parallel, cp, saved),
                         send_bytes)
        # the loss scalar leaves the head; it keeps its input and fp32 logits
        head[b] = spec(head_ops(m, b, rates, par), 2 * hidden_bytes + 4 * tokens * v / tp, 4.0)
    emb_params = (v * h + (m.seq_len * h if m.dropout else 0)) / tp  # GPT adds learned positions
    layers = [AnalyticLayer("embedding", emb_params * BF16_BYTES, emb)]
    layers += [
        AnalyticLayer(f"block{i}", block_params(m) / tp * BF16_BYTES, blocks)
        for i in range(m.num_blocks)
    ]
    layers.append(AnalyticLayer("head", (v * h / tp + h) * BF16_BYTES, head))
    return layers
