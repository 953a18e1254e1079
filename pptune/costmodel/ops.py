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


def attention_ops(m: ModelShape, b: int, rates: Rates, par: Parallel,
                  window: int = 0) -> list[OpCost]:
    """Core attention (scores, softmax, weighted sum) for the local heads.

    ``window`` > 0: each query attends to at most the last ``window`` keys
    (sliding-window attention); a flash kernel skips the tiles outside it, so
    the causal ``s^2 / 2`` query-key pairs become ``s w - w^2 / 2`` (w <= s).
    Eager attention computes the whole masked score matrix either way."""
    s, d, heads = m.seq_len, m.head_dim, m.heads // par.tp
    if par.flash_attention and 0 < window < s:
        if par.cp > 1:
            raise ValueError("context parallelism with sliding-window attention is not modelled")
        fwd_flops = 4.0 * d * heads * b * (s * window - window * window / 2)
        rate = rates.attention().rate(window, causal=True)  # each query's keys: one window
        return [
            OpCost("flash_attn", Phase.F, Kind.ATTENTION, fwd_flops, 0.0, fwd_flops / rate),
            OpCost("flash_attn.bwd", Phase.B, Kind.ATTENTION, 2.5 * fwd_flops, 0.0,
                   2.5 * fwd_flops / rate, kernels=3),
        ]
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
    t, h, fp8 = par.tp, m.hidden, par.fp8
    tokens = b * m.seq_len // par.cp  # this context-parallel rank's share
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    act = BF16_BYTES * tokens * h  # bytes of one hidden-state tensor
    qkv = linear("qkv", tokens, h, _split(q + 2 * kv, t), rates, fp8)
    proj = linear("attn_out", tokens, _split(q, t), h, rates, fp8)
    rotary = 4 * tokens * (q + kv) / t
    qk_norm = [memory("qk_norm", Phase.F, 4 * tokens * (q + kv) / t, rates)] if m.qk_norm else []
    qk_norm_b = ([memory("qk_norm.bwd", Phase.B, 6 * tokens * (q + kv) / t, rates)]
                 if m.qk_norm else [])
    core = attention_ops(m, b, rates, par, window)
    return BlockPart(
        fwd=[qkv[0], *qk_norm,
             *([memory("rotary", Phase.F, rotary, rates)] if m.rotary else []),
             *[o for o in core if o.phase is Phase.F],
             *fp8_casts("attn_out", Phase.F, tokens, [_split(q, t)], rates, fp8),
             proj[0], tp_collective("tp_attn", Phase.F, act, par, proj[0])],
        bwd=[*fp8_casts("attn", Phase.B, tokens, [h, _split(q + 2 * kv, t)], rates, fp8),
             proj[1], *[o for o in core if o.phase is Phase.B],
             *([memory("rotary.bwd", Phase.B, rotary, rates)] if m.rotary else []),
             *qk_norm_b, qkv[1], tp_collective("tp_attn.bwd", Phase.B, act, par, qkv[1])],
        wgrad=[qkv[2], proj[2]],
    )


def mlp_part(m: ModelShape, b: int, rates: Rates, par: Parallel,
             ffn: int | None = None, name: str = "mlp") -> BlockPart:
    """A dense MLP of width ``ffn`` (default the model's): up (gate and up for
    SwiGLU), activation, down, and its tensor-parallel collective."""
    t, h, f, fp8 = par.tp, m.hidden, m.ffn if ffn is None else ffn, par.fp8
    tokens = b * m.seq_len // par.cp  # this context-parallel rank's share
    act = BF16_BYTES * tokens * h
    up_n = f * (2 if m.gated_mlp else 1)
    up = linear(f"{name}_up", tokens, h, _split(up_n, t), rates, fp8)
    down = linear(f"{name}_down", tokens, _split(f, t), h, rates, fp8)
    act_f, act_b = (6 * f, 10 * f) if m.gated_mlp else (4 * f, 6 * f)
    prefix = "" if name == "mlp" else f"{name}_"
    return BlockPart(
        fwd=[up[0], memory(f"{prefix}activation", Phase.F, act_f * tokens / t, rates),
             *fp8_casts(f"{name}_down", Phase.F, tokens, [_split(f, t)], rates, fp8), down[0],
             tp_collective(f"tp_{name}", Phase.F, act, par, down[0])],
        bwd=[*fp8_casts(name, Phase.B, tokens, [h, _split(up_n, t)], rates, fp8),
             down[1], memory(f"{prefix}activation.bwd", Phase.B, act_b * tokens / t, rates),
             up[1], tp_collective(f"tp_{name}.bwd", Phase.B, act, par, up[1])],
        wgrad=[up[2], down[2]],
    )


def fp8_casts(name: str, phase: Phase, tokens: int, widths: list[int], rates: Rates,
              fp8: bool) -> list[OpCost]:
    """Transformer Engine's FP8 cast-transposes (precision.py): forward, the inputs no norm
    writes in FP8 (attention output, second MLP GEMM); backward, every GEMM's output grad."""
    if not fp8:
        return []
    per = precision.CAST_BYTES_PER_ELEMENT * tokens
    return [memory(f"fp8_cast.{name}" + (".bwd" if phase is Phase.B else ""), phase,
                   per * sum(widths), rates, kernels=len(widths))]


def block_ops(m: ModelShape, b: int, rates: Rates, par: Parallel,
              attn: BlockPart | None = None, mlp: BlockPart | None = None) -> list[OpCost]:
    """Every op of one transformer block's forward, B and W, in that order: the
    norms and residuals around its attention and its MLP (default: the model's
    attention and a dense MLP; analytic.py passes MLA, sliding-window and MoE
    parts for blocks of those types)."""
    h = m.hidden
    tokens = b * m.seq_len // par.cp
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


def phase_s(ops: list[OpCost], phase: Phase, rates: Rates) -> float:
    """Time of one phase: its ops' roofline times plus a launch per kernel."""
    return sum(o.time_s + o.kernels * rates.launch_s for o in ops if o.phase is phase)
