"""Per-op costs of a transformer block, its embedding and its LM head.

Each op is one kernel (or a few, ``kernels``) with the FLOPs it computes and
the bytes it moves through HBM; its time is a roofline:

    GEMM       max(FLOPs / (peak * gemm_efficiency(shape)), bytes / HBM)
    attention  flash: FLOPs / (peak * attention_fraction); eager: two
               batched GEMMs plus the softmax and dropout over HBM
    memory     bytes / HBM (norms, activations, residual adds, rotary,
               dropout, cross-entropy, embedding gather and scatter)

plus ``launch_s`` per kernel. HBM here is the *achieved* bandwidth, the
datasheet figure times the GPU's measured fraction (presets.py).

GEMM efficiency (NVIDIA, "Matrix Multiplication Background User's Guide",
sec. 3.1 tile quantization and 3.2 wave quantization): cuBLAS splits the
m x n output into tiles, one thread block each, and runs them in waves of
one tile per SM. A wave that is partly empty, or tiles that hang over the
matrix edge, compute nothing useful, so the useful share is

    m n / (waves * sm_count * tile_m * tile_n),  waves = ceil(tiles / sm_count)

taken at the best of the tile shapes in ``GEMM_TILES`` (cuBLAS picks among
several), times the fraction of peak the largest GEMMs reach when
quantization costs nothing (measured per GPU, presets.py).

FLOPs: a GEMM of m x k by k x n costs 2 m k n (Narayanan et al. 2021,
appendix). Flash attention, forward ``4 s^2 d`` per head and sample, halved
with a causal mask; backward 2.5x forward (Dao 2023, FlashAttention-2,
sec. 4.1: five matmuls against two, one of them the recomputation).

Split of backward (Qi et al. 2024, Zero Bubble, sec. 2): B computes the
input gradients: every GEMM's data gradient, attention's backward and every
elementwise op's backward; W computes the weight gradients, which are the
weight GEMMs only (norm and bias gradients are reductions fused into the
kernels of B or of the weight GEMMs). Forward, B and W each list exactly
their own ops.

Bytes per token of the elementwise ops, 2 bytes per bf16 element, h hidden,
f FFN width, t tensor-parallel size (everything under tensor parallelism is
split by t except the norms, residuals and dropouts, which sequence
parallelism splits too, Korthikanti et al. 2022 sec. 4.2.2):

    norm            F: read x, write y: 4h;  B: read x, dy, write dx: 6h
    residual add    F: 2 reads, 1 write: 6h; B: the gradient sum, 6h
    bias-dropout-add (GPT)  F: read x, bias, residual, write y, 1-byte
                    mask: 7h;  B: dropout's backward (read dy and the
                    mask, write dx: 5h) and the gradient sum (6h)
    rotary          F and B: read and write q and k: 4 (a d + g d) / t
    QK norm (Qwen3) F: read q and k, write them: 4 (a d + g d) / t;
                    B: read them and the gradient, write it: 6 (a d + g d) / t
    GeLU            F: read, write 4f/t;  B: read x, dy, write dx: 6f/t
    SwiGLU          F: read gate, up, write: 6f/t;  B: read gate, up, dy,
                    write two: 10f/t
    cross-entropy   F: read bf16 logits, write fp32 probabilities 6V/t;
                    B: read them, write the bf16 gradient 6V/t
    embedding       F: gather a row 4h (+ positions and dropout 7h, GPT);
                    W: read the gradient 2h, accumulate fp32 rows 8h
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from pptune.costmodel.presets import GpuSpec, ModelShape

BF16_BYTES = 2
# Tile shapes cuBLAS's bf16 kernels use on A100/H100 (the cuBLASLt
# MatmulTile enum lists 256x128, 128x256 and 128x128 among others).
GEMM_TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128))


class Attention(str, Enum):
    FLASH = "flash"  # fused kernel (FlashAttention-2, PyTorch SDPA)
    EAGER = "eager"  # score and value GEMMs, softmax and dropout over HBM


class Phase(str, Enum):
    F = "F"  # forward
    B = "B"  # input gradient
    W = "W"  # weight gradient


class Kind(str, Enum):
    GEMM = "gemm"
    ATTENTION = "attention"
    MEMORY = "memory"
    COMM = "comm"
    ALL_TO_ALL = "all_to_all"  # expert dispatch and combine: its own figure (moe.py)


@dataclass(frozen=True)
class OpCost:
    name: str
    phase: Phase
    kind: Kind
    flops: float
    hbm_bytes: float
    time_s: float  # without the launch
    kernels: int = 1


@dataclass(frozen=True)
class Rates:
    """What the ops run at: one GPU's peaks, achieved fractions and overrides."""

    peak_flops: float
    hbm_bytes_per_s: float  # achieved, not the datasheet figure
    sm_count: int
    gemm_fraction: float
    attention_fraction: float
    launch_s: float
    gemm_efficiency: float | None = None  # user override (--efficiency)

    @classmethod
    def of(cls, gpu: GpuSpec, efficiency: float | None = None) -> Rates:
        return cls(
            peak_flops=gpu.peak_flops, hbm_bytes_per_s=gpu.hbm_bytes_per_s * gpu.hbm_fraction,
            sm_count=gpu.sm_count, gemm_fraction=gpu.gemm_fraction,
            attention_fraction=gpu.attention_fraction, launch_s=gpu.launch_s,
            gemm_efficiency=efficiency,
        )


@dataclass(frozen=True)
class Parallel:
    """How the layer is split: tensor parallelism, sequence parallelism,
    attention kernel, and the tensor-parallel group's collective link."""

    tp: int = 1
    sequence_parallel: bool = False
    flash_attention: bool = True
    tp_latency_s: float = 20e-6
    tp_busbw_bytes_per_s: float = 450e9
    tp_comm_overlap: bool = False  # collectives pipelined with their GEMM (--tp-comm-overlap)


def wave_utilisation(m: int, n: int, sm_count: int, batch: int = 1) -> float:
    """Useful share of the tiles cuBLAS runs for an m x n output (best tile)."""
    best = 0.0
    for tm, tn in GEMM_TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        waves = math.ceil(tiles / sm_count)
        best = max(best, m * n * batch / (waves * sm_count * tm * tn))
    return best


def gemm_efficiency(m: int, n: int, rates: Rates, batch: int = 1) -> float:
    """Fraction of peak a GEMM with an m x n output reaches."""
    if rates.gemm_efficiency is not None:
        return rates.gemm_efficiency
    return rates.gemm_fraction * wave_utilisation(m, n, rates.sm_count, batch)


def gemm(name: str, phase: Phase, m: int, n: int, k: int, rates: Rates,
         batch: int = 1) -> OpCost:
    """(m x k) @ (k x n), ``batch`` times, as a roofline."""
    flops = 2.0 * m * n * k * batch
    nbytes = BF16_BYTES * float(m * k + k * n + m * n) * batch
    compute_s = flops / (rates.peak_flops * gemm_efficiency(m, n, rates, batch))
    return OpCost(name, phase, Kind.GEMM, flops, nbytes,
                  max(compute_s, nbytes / rates.hbm_bytes_per_s))


def linear(name: str, tokens: int, k: int, n: int, rates: Rates) -> tuple[OpCost, ...]:
    """A weight GEMM y = x W (x: tokens x k, W: k x n): forward, its data
    gradient (B: dx = dy W^T) and its weight gradient (W: dW = x^T dy)."""
    return (
        gemm(name, Phase.F, tokens, n, k, rates),
        gemm(name + ".dgrad", Phase.B, tokens, k, n, rates),
        gemm(name + ".wgrad", Phase.W, k, n, tokens, rates),
    )


def memory(name: str, phase: Phase, nbytes: float, rates: Rates, kernels: int = 1) -> OpCost:
    return OpCost(name, phase, Kind.MEMORY, 0.0, nbytes, nbytes / rates.hbm_bytes_per_s, kernels)


def tp_collective(name: str, phase: Phase, nbytes: float, par: Parallel,
                  gemm_op: OpCost | None = None) -> OpCost:
    """All-reduce of ``nbytes`` over the tensor-parallel group (ring, nccl-tests
    busbw); with sequence parallelism the same bytes move as a reduce-scatter
    and an all-gather, (t-1)/t each, so the time is the same plus one latency.

    Exposed in full, unless ``par.tp_comm_overlap``: then it runs in chunks
    pipelined with ``gemm_op``, the GEMM that produces its input (Megatron-LM
    / Transformer Engine ``--tp-comm-overlap``), and only what outlasts that
    GEMM is exposed."""
    t = par.tp
    if t == 1:
        return OpCost(name, phase, Kind.COMM, 0.0, 0.0, 0.0, 0)
    latency = par.tp_latency_s * (2 if par.sequence_parallel else 1)
    time_s = latency + 2 * (t - 1) / t * nbytes / par.tp_busbw_bytes_per_s
    if par.tp_comm_overlap and gemm_op is not None:
        time_s = max(0.0, time_s - gemm_op.time_s)
    return OpCost(name, phase, Kind.COMM, 0.0, nbytes, time_s, 0)


def attention_ops(m: ModelShape, b: int, rates: Rates, par: Parallel,
                  window: int = 0) -> list[OpCost]:
    """Core attention (scores, softmax, weighted sum) for the local heads.

    ``window`` > 0: each query attends to at most the last ``window`` keys
    (sliding-window attention); a flash kernel skips the tiles outside it, so
    the causal ``s^2 / 2`` query-key pairs become ``s w - w^2 / 2`` (w <= s).
    Eager attention computes the whole masked score matrix either way."""
    s, d, heads = m.seq_len, m.head_dim, m.heads // par.tp
    if par.flash_attention:
        if 0 < window < s:
            fwd_flops = 4.0 * d * heads * b * (s * window - window * window / 2)
        else:
            fwd_flops = 4.0 * s * s * d * heads * b / 2  # causal: half the tiles
        rate = rates.peak_flops * rates.attention_fraction
        return [
            OpCost("flash_attn", Phase.F, Kind.ATTENTION, fwd_flops, 0.0, fwd_flops / rate),
            OpCost("flash_attn.bwd", Phase.B, Kind.ATTENTION, 2.5 * fwd_flops, 0.0,
                   2.5 * fwd_flops / rate, kernels=3),
        ]
    bh = b * heads
    scores = float(s * s * bh)  # elements of the score matrix
    drop = m.dropout
    ops = [
        gemm("qk", Phase.F, s, s, d, rates, bh),
        memory("softmax", Phase.F, 2 * BF16_BYTES * scores, rates),  # scale+mask+softmax fused
        gemm("pv", Phase.F, s, d, s, rates, bh),
        gemm("pv.dgrad_p", Phase.B, s, s, d, rates, bh),
        gemm("pv.dgrad_v", Phase.B, s, d, s, rates, bh),
        memory("softmax.bwd", Phase.B, 3 * BF16_BYTES * scores, rates),
        gemm("qk.dgrad_q", Phase.B, s, d, s, rates, bh),
        gemm("qk.dgrad_k", Phase.B, s, d, s, rates, bh),
    ]
    if drop:
        ops.insert(2, memory("attn_dropout", Phase.F, (2 * BF16_BYTES + 1) * scores, rates))
        ops.insert(6, memory("attn_dropout.bwd", Phase.B, (2 * BF16_BYTES + 1) * scores, rates))
    return ops


def _split(n: int, t: int) -> int:
    """One rank's share of n columns (rounded up, as frameworks pad)."""
    return -(-n // t)


@dataclass(frozen=True)
class BlockPart:
    """One sub-layer of a block (attention, MLP or MoE): its ops by phase, in
    the order they run."""

    fwd: list[OpCost]
    bwd: list[OpCost]
    wgrad: list[OpCost]


def attention_part(m: ModelShape, b: int, rates: Rates, par: Parallel,
                   window: int = 0) -> BlockPart:
    """Grouped-query (or multi-head) attention: QKV and output projections,
    rotary, core attention and the tensor-parallel collective around them.
    Queries and outputs are ``heads x head_dim`` wide (the hidden size unless
    the model sets its head dimension, e.g. Qwen3 and GPT-OSS)."""
    t, h = par.tp, m.hidden
    tokens = b * m.seq_len
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    act = BF16_BYTES * tokens * h  # bytes of one hidden-state tensor
    qkv = linear("qkv", tokens, h, _split(q + 2 * kv, t), rates)
    proj = linear("attn_out", tokens, _split(q, t), h, rates)
    rotary = 4 * tokens * (q + kv) / t
    qk_norm = [memory("qk_norm", Phase.F, 4 * tokens * (q + kv) / t, rates)] if m.qk_norm else []
    qk_norm_b = ([memory("qk_norm.bwd", Phase.B, 6 * tokens * (q + kv) / t, rates)]
                 if m.qk_norm else [])
    core = attention_ops(m, b, rates, par, window)
    return BlockPart(
        fwd=[qkv[0], *qk_norm,
             *([memory("rotary", Phase.F, rotary, rates)] if m.rotary else []),
             *[o for o in core if o.phase is Phase.F],
             proj[0], tp_collective("tp_attn", Phase.F, act, par, proj[0])],
        bwd=[proj[1], *[o for o in core if o.phase is Phase.B],
             *([memory("rotary.bwd", Phase.B, rotary, rates)] if m.rotary else []),
             *qk_norm_b, qkv[1], tp_collective("tp_attn.bwd", Phase.B, act, par, qkv[1])],
        wgrad=[qkv[2], proj[2]],
    )


def mlp_part(m: ModelShape, b: int, rates: Rates, par: Parallel,
             ffn: int | None = None, name: str = "mlp") -> BlockPart:
    """A dense MLP of width ``ffn`` (default the model's): up (gate and up for
    SwiGLU), activation, down, and its tensor-parallel collective."""
    t, h, f = par.tp, m.hidden, m.ffn if ffn is None else ffn
    tokens = b * m.seq_len
    act = BF16_BYTES * tokens * h
    up = linear(f"{name}_up", tokens, h, _split(f * (2 if m.gated_mlp else 1), t), rates)
    down = linear(f"{name}_down", tokens, _split(f, t), h, rates)
    act_f, act_b = (6 * f, 10 * f) if m.gated_mlp else (4 * f, 6 * f)
    prefix = "" if name == "mlp" else f"{name}_"
    return BlockPart(
        fwd=[up[0], memory(f"{prefix}activation", Phase.F, act_f * tokens / t, rates), down[0],
             tp_collective(f"tp_{name}", Phase.F, act, par, down[0])],
        bwd=[down[1], memory(f"{prefix}activation.bwd", Phase.B, act_b * tokens / t, rates),
             up[1], tp_collective(f"tp_{name}.bwd", Phase.B, act, par, up[1])],
        wgrad=[up[2], down[2]],
    )


def block_ops(m: ModelShape, b: int, rates: Rates, par: Parallel,
              attn: BlockPart | None = None, mlp: BlockPart | None = None) -> list[OpCost]:
    """Every op of one transformer block's forward, B and W, in that order: the
    norms and residuals around its attention and its MLP (default: the model's
    attention and a dense MLP; analytic.py passes MLA, sliding-window and MoE
    parts for blocks of those types)."""
    h = m.hidden
    tokens = b * m.seq_len
    rep = tokens / par.tp if par.sequence_parallel else float(tokens)  # tokens of the unsplit parts
    attn = attn or attention_part(m, b, rates, par)
    mlp = mlp or mlp_part(m, b, rates, par)
    norm_f, norm_b = 4 * h * rep, 6 * h * rep
    res_f, res_b = (7 * h * rep, 11 * h * rep) if m.dropout else (6 * h * rep, 6 * h * rep)
    fwd = [
        memory("norm1", Phase.F, norm_f, rates), *attn.fwd,
        memory("residual1", Phase.F, res_f, rates), memory("norm2", Phase.F, norm_f, rates),
        *mlp.fwd, memory("residual2", Phase.F, res_f, rates),
    ]
    bwd = [
        memory("residual2.bwd", Phase.B, res_b, rates), *mlp.bwd,
        memory("norm2.bwd", Phase.B, norm_b, rates),
        memory("residual1.bwd", Phase.B, res_b, rates), *attn.bwd,
        memory("norm1.bwd", Phase.B, norm_b, rates),
    ]
    return fwd + bwd + attn.wgrad + mlp.wgrad


def embedding_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """Token (and, GPT-style, position) embedding: a gather, its scatter-add."""
    tokens, h = b * m.seq_len, m.hidden
    gather = (7 if m.dropout else 4) * h * tokens  # + position add and dropout
    return [
        memory("embed", Phase.F, gather, rates, kernels=3 if m.dropout else 1),
        tp_collective("tp_embed", Phase.F, BF16_BYTES * tokens * h, par),
        memory("embed.wgrad", Phase.W, (15 if m.dropout else 10) * h * tokens, rates,
               kernels=2 if m.dropout else 1),
    ]


def head_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """Final norm, LM head GEMM and the (vocabulary-parallel) cross-entropy."""
    t, h, v = par.tp, m.hidden, m.vocab
    tokens = b * m.seq_len
    rep = tokens / t if par.sequence_parallel else float(tokens)
    logits = tokens * v / t
    lm = linear("lm_head", tokens, h, _split(v, t), rates)
    return [
        memory("final_norm", Phase.F, 4 * h * rep, rates), lm[0],
        memory("cross_entropy", Phase.F, 6 * logits, rates, kernels=4),
        memory("cross_entropy.bwd", Phase.B, 6 * logits, rates, kernels=2), lm[1],
        tp_collective("tp_head.bwd", Phase.B, BF16_BYTES * tokens * h, par),
        memory("final_norm.bwd", Phase.B, 6 * h * rep, rates), lm[2],
    ]


def phase_s(ops: list[OpCost], phase: Phase, rates: Rates) -> float:
    """Time of one phase: its ops' roofline times plus a launch per kernel."""
    return sum(o.time_s + o.kernels * rates.launch_s for o in ops if o.phase is phase)
