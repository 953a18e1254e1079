"""One transformer layer, predicted op by op against a measured layer time.

Korthikanti et al. 2022, Table 4: forward and backward milliseconds of one
layer of their 22B GPT model (h 6144, 64 heads, s 2048, micro-batch 4,
8-way tensor parallelism, Table 3) on A100, with and without sequence
parallelism and activation recomputation. It is the most direct check of
the per-op model (pptune/costmodel/ops.py): no pipeline, no data
parallelism, just the block's kernels and its tensor-parallel collectives.

As the paper ran it (Sec. 5, 6.1): unfused attention (2022 Megatron-LM,
before flash attention), GPT blocks (LayerNorm, GeLU MLP of 4h, dropout).
Backward is B + W (the paper does not split it). Full recomputation runs
the layer's forward again before its backward; selective recomputation
runs again only the core attention, the ops after the QKV GEMM and before
the output projection: QK^T, softmax, its dropout and the product with V
(Sec. 5).
"""

from __future__ import annotations

from typing import Any

from bench.published_data import (
    KORTHIKANTI_CONFIGS,
    KORTHIKANTI_LAYER_TIMES,
    KORTHIKANTI_SEQ_LEN,
    KORTHIKANTI_VOCAB,
)
from pptune.costmodel.ops import OpCost, Parallel, Phase, Rates, block_ops, phase_s
from pptune.costmodel.presets import ALLREDUCE_LATENCY_INTRA_S, GPUS, ModelShape
from pptune.costmodel.variation import slowest_of

CORE_ATTENTION_F = ("qk", "softmax", "attn_dropout", "pv")
# Table 4 row -> (sequence parallel, recomputation: none, full or selective)
EXPERIMENTS = {
    "Baseline no recompute": (False, "none"),
    "Sequence Parallelism": (True, "none"),
    "Baseline with recompute": (False, "full"),
    "Selective Recompute": (False, "selective"),
    "Selective + Sequence": (True, "selective"),
}


def _layer_ops(gpu: str, sequence_parallel: bool) -> tuple[list[OpCost], Rates]:
    cfg = next(c for c in KORTHIKANTI_CONFIGS if c.model == "22B")
    h = cfg.hidden_size
    shape = ModelShape("korthikanti-22b", cfg.layers, h, cfg.attention_heads,
                       cfg.attention_heads, 4 * h, KORTHIKANTI_VOCAB, KORTHIKANTI_SEQ_LEN,
                       cfg.global_batch_size, False, True, "Korthikanti et al. 2022 Table 3")
    spec = slowest_of(GPUS[gpu], cfg.tensor_parallel)  # the layer's t GPUs wait on the slowest
    rates = Rates.of(spec)
    # the tensor-parallel all-reduce at what NCCL's ring reaches on the node (presets.py)
    par = Parallel(cfg.tensor_parallel, sequence_parallel, flash_attention=False,
                   tp_latency_s=ALLREDUCE_LATENCY_INTRA_S,
                   tp_busbw_bytes_per_s=spec.fabric_or_line().ring_busbw_bytes_per_s)
    return block_ops(shape, cfg.micro_batch_size, rates, par), rates


def layer_rows(gpu: str) -> list[dict[str, Any]]:
    """Predicted forward and backward ms of one 22B layer, per Table 4 row."""
    rows = []
    for t in KORTHIKANTI_LAYER_TIMES:
        sp, recompute = EXPERIMENTS[t.experiment]
        ops, rates = _layer_ops(gpu, sp)
        fwd_s = phase_s(ops, Phase.F, rates)
        bwd_s = phase_s(ops, Phase.B, rates) + phase_s(ops, Phase.W, rates)
        if recompute == "full":
            bwd_s += fwd_s
        elif recompute == "selective":
            core = [o for o in ops if o.phase is Phase.F and o.name in CORE_ATTENTION_F]
            bwd_s += phase_s(core, Phase.F, rates)
        fwd_ms, bwd_ms = fwd_s * 1e3, bwd_s * 1e3
        rows.append({
            "experiment": t.experiment, "sequence_parallel": sp, "recompute": recompute,
            "forward_ms_published": t.forward_ms, "forward_ms_predicted": round(fwd_ms, 2),
            "backward_ms_published": t.backward_ms, "backward_ms_predicted": round(bwd_ms, 2),
            "combined_ms_published": t.combined_ms,
            "combined_ms_predicted": round(fwd_ms + bwd_ms, 2),
            "ratio": round((fwd_ms + bwd_ms) / t.combined_ms, 3),
        })
    return rows


def layer_breakdown(gpu: str) -> dict[str, float]:
    """Milliseconds of the baseline layer by phase and kind of op (what the
    misses above are made of)."""
    ops, rates = _layer_ops(gpu, False)
    out: dict[str, float] = {}
    for o in ops:
        key = f"{o.phase.value}.{o.kind.value}"
        out[key] = out.get(key, 0.0) + (o.time_s + o.kernels * rates.launch_s) * 1e3
    return {k: round(v, 3) for k, v in sorted(out.items())}
