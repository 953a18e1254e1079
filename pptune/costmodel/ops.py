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
    rotary          F and B: read and write q and k: 4 (h + g d) / t
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

from pptune.costmodel import context, precision
from pptune.costmodel.context import AttentionRates, CpComm, CpLinks, CpShape
from pptune.costmodel.keys import Precision
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
    fp8_peak_flops: float | None = None  # dense FP8 (precision.py); None: no FP8
    fp8_gemm_fraction: float | None = None
    causal_attention: tuple[tuple[int, float], ...] = ()  # share of peak by kernel length
    full_attention: tuple[tuple[int, float], ...] = ()

    @classmethod
    def of(cls, gpu: GpuSpec, efficiency: float | None = None) -> Rates:
        return cls(
            peak_flops=gpu.peak_flops, hbm_bytes_per_s=gpu.hbm_bytes_per_s * gpu.hbm_fraction,
            sm_count=gpu.sm_count, gemm_fraction=gpu.gemm_fraction,
            attention_fraction=gpu.attention_fraction, launch_s=gpu.launch_s,
            gemm_efficiency=efficiency, fp8_peak_flops=gpu.fp8_peak_flops,
            fp8_gemm_fraction=gpu.fp8_gemm_fraction, causal_attention=gpu.causal_attention,
            full_attention=gpu.full_attention,
        )

    def attention(self) -> AttentionRates:
        return AttentionRates(self.peak_flops, self.attention_fraction,
                              self.causal_attention, self.full_attention)


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
    cp: int = 1  # context parallelism: the sequence over cp ranks (context.py)
    cp_comm: CpComm = CpComm.P2P  # how they exchange K/V (--cp-comm-type)
    cp_links: CpLinks | None = None  # where the cp group sits; None: nothing priced
    precision: Precision = Precision.BF16  # of the block's GEMMs (precision.py)

    @property
    def fp8(self) -> bool:
        return precision.is_low(self.precision)


def wave_utilisation(m: int, n: int, sm_count: int, batch: int = 1) -> float:
    """Useful share of the tiles cuBLAS runs for an m x n output (best tile)."""
    best = 0.0
    for tm, tn in GEMM_TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        waves = math.ceil(tiles / sm_count)
        best = max(best, m * n * batch / (waves * sm_count * tm * tn))
    return best


def gemm_efficiency(m: int, n: int, rates: Rates, batch: int = 1, fp8: bool = False) -> float:
    """Fraction of peak (the FP8 peak for an FP8 GEMM) an m x n output reaches."""
    if rates.gemm_efficiency is not None:
        return rates.gemm_efficiency
    fraction = rates.gemm_fraction
    if fp8:
        if rates.fp8_gemm_fraction is None:
            raise ValueError("an FP8 GEMM on a GPU without a measured FP8 matmul rate")
        fraction = rates.fp8_gemm_fraction
    return fraction * wave_utilisation(m, n, rates.sm_count, batch)


def gemm(name: str, phase: Phase, m: int, n: int, k: int, rates: Rates,
         batch: int = 1, fp8: bool = False) -> OpCost:
    """(m x k) @ (k x n), ``batch`` times, as a roofline; ``fp8``: at the FP8
    peak with 1-byte inputs and a BF16 output (precision.py)."""
    flops = 2.0 * m * n * k * batch
    inputs = 1.0 if fp8 else BF16_BYTES
    nbytes = (inputs * float(m * k + k * n) + BF16_BYTES * float(m * n)) * batch
    peak = rates.peak_flops
    if fp8:
        if rates.fp8_peak_flops is None:
            raise ValueError("an FP8 GEMM on a GPU without FP8 tensor cores")
        peak = rates.fp8_peak_flops
    compute_s = flops / (peak * gemm_efficiency(m, n, rates, batch, fp8))
    return OpCost(name, phase, Kind.GEMM, flops, nbytes,
                  max(compute_s, nbytes / rates.hbm_bytes_per_s))


def linear(name: str, tokens: int, k: int, n: int, rates: Rates,
           fp8: bool = False) -> tuple[OpCost, ...]:
    """A weight GEMM y = x W (x: tokens x k, W: k x n): forward, its data
    gradient (B: dx = dy W^T) and its weight gradient (W: dW = x^T dy)."""
    return (
        gemm(name, Phase.F, tokens, n, k, rates, fp8=fp8),
        gemm(name + ".dgrad", Phase.B, tokens, k, n, rates, fp8=fp8),
        gemm(name + ".wgrad", Phase.W, k, n, tokens, rates, fp8=fp8),
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


def attention_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """Core attention (scores, softmax, weighted sum) for the local heads; flash
    attention under ``par.cp``-way context parallelism with its K/V exchange
    (context.py), exposed traffic as comm ops."""
    s, d, heads = m.seq_len, m.head_dim, m.heads // par.tp
    if par.flash_attention:
        shape = CpShape(s, d, heads, max(1, m.kv_heads // par.tp), b)
        att = context.attention(shape, par.cp, par.cp_comm, rates.attention(), par.cp_links)
        ops = [
            OpCost("flash_attn", Phase.F, Kind.ATTENTION, att.fwd_flops, 0.0, att.fwd_compute_s,
                   kernels=att.steps),
            OpCost("flash_attn.bwd", Phase.B, Kind.ATTENTION, att.bwd_flops, 0.0,
                   att.bwd_compute_s, kernels=3 * att.steps),
        ]
        if par.cp > 1:
            ops.insert(1, OpCost("cp_kv", Phase.F, Kind.COMM, 0.0, att.fwd_bytes,
                                 att.fwd_comm_s, 0))
            ops.append(OpCost("cp_kv.bwd", Phase.B, Kind.COMM, 0.0, att.bwd_bytes,
                              att.bwd_comm_s, 0))
        return ops
    if par.cp > 1:
        raise ValueError("context parallelism needs flash (fused) attention")
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


def block_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """Every op of one transformer block's forward, B and W, in that order."""
    t, h, f = par.tp, m.hidden, m.ffn
    tokens = b * m.seq_len // par.cp  # this context-parallel rank's share
    kv = m.kv_heads * m.head_dim
    rep = tokens / t if par.sequence_parallel else float(tokens)  # tokens of the unsplit parts
    act = BF16_BYTES * tokens * h  # bytes of one hidden-state tensor
    fp8 = par.fp8
    qkv = linear("qkv", tokens, h, _split(h + 2 * kv, t), rates, fp8)
    proj = linear("attn_out", tokens, _split(h, t), h, rates, fp8)
    up = linear("mlp_up", tokens, h, _split(f * (2 if m.gated_mlp else 1), t), rates, fp8)
    down = linear("mlp_down", tokens, _split(f, t), h, rates, fp8)
    norm_f, norm_b = 4 * h * rep, 6 * h * rep
    res_f, res_b = (7 * h * rep, 11 * h * rep) if m.dropout else (6 * h * rep, 6 * h * rep)
    act_f, act_b = (6 * f, 10 * f) if m.gated_mlp else (4 * f, 6 * f)
    fwd = [
        memory("norm1", Phase.F, norm_f, rates), qkv[0],
        *([memory("rotary", Phase.F, 4 * tokens * (h + kv) / t, rates)] if m.rotary else []),
        *[o for o in attention_ops(m, b, rates, par) if o.phase is Phase.F],
        proj[0], tp_collective("tp_attn", Phase.F, act, par, proj[0]),
        memory("residual1", Phase.F, res_f, rates), memory("norm2", Phase.F, norm_f, rates),
        up[0], memory("activation", Phase.F, act_f * tokens / t, rates), down[0],
        tp_collective("tp_mlp", Phase.F, act, par, down[0]),
        memory("residual2", Phase.F, res_f, rates),
    ]
    if fp8:
        fwd += _fp8_casts(tokens, h, f, t, rates, Phase.F)
    bwd = [
        memory("residual2.bwd", Phase.B, res_b, rates), down[1],
        memory("activation.bwd", Phase.B, act_b * tokens / t, rates), up[1],
        tp_collective("tp_mlp.bwd", Phase.B, act, par, up[1]),
        memory("norm2.bwd", Phase.B, norm_b, rates),
        memory("residual1.bwd", Phase.B, res_b, rates), proj[1],
        *[o for o in attention_ops(m, b, rates, par) if o.phase is Phase.B],
        *([memory("rotary.bwd", Phase.B, 4 * tokens * (h + kv) / t, rates)] if m.rotary else []),
        qkv[1], tp_collective("tp_attn.bwd", Phase.B, act, par, qkv[1]),
        memory("norm1.bwd", Phase.B, norm_b, rates),
    ]
    if fp8:
        bwd += _fp8_casts(tokens, h, f, t, rates, Phase.B, qkv_out=h + 2 * kv,
                          up_out=f * (2 if m.gated_mlp else 1))
    return fwd + bwd + [qkv[2], proj[2], up[2], down[2]]


def _fp8_casts(tokens: int, h: int, f: int, t: int, rates: Rates, phase: Phase,
               qkv_out: int = 0, up_out: int = 0) -> list[OpCost]:
    """Transformer Engine's FP8 cast-transposes (precision.py): forward the
    attention-output and second MLP inputs (the norm writes the other two);
    backward the output gradient of all four GEMMs."""
    per = precision.CAST_BYTES_PER_ELEMENT * tokens
    if phase is Phase.F:
        return [memory("fp8_cast.attn_out", phase, per * _split(h, t), rates),
                memory("fp8_cast.mlp_down", phase, per * _split(f, t), rates)]
    return [memory("fp8_cast.bwd", phase,
                   per * (_split(qkv_out, t) + h + _split(up_out, t) + h), rates, kernels=4)]


def embedding_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """Token (and, GPT-style, position) embedding: a gather, its scatter-add."""
    tokens, h = b * m.seq_len // par.cp, m.hidden
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
    tokens = b * m.seq_len // par.cp  # the LM head stays BF16 (precision.py)
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
