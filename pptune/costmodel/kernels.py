"""One kernel's cost: the GEMM roofline with its tile and wave quantisation, a
memory-bound op, the tensor-parallel collective, and a phase's total.

    GEMM       max(FLOPs / (peak * gemm_efficiency(shape)), bytes / HBM)
    memory     bytes / HBM

plus ``launch_s`` per kernel (phase_s); HBM is the achieved bandwidth (presets.py).

GEMM efficiency (NVIDIA, "Matrix Multiplication Background User's Guide",
sec. 3.1 tile quantization and 3.2 wave quantization): cuBLAS splits the
m x n output into tiles, one thread block each, and runs them in waves of
one tile per SM. A wave that is partly empty, or tiles that hang over the
matrix edge, compute nothing useful, so the useful share is

    m n / (waves * sm_count * tile_m * tile_n),  waves = ceil(tiles / sm_count)

taken at the best of the tile shapes in ``GEMM_TILES`` (cuBLAS picks among
several), times the fraction of peak the largest GEMMs reach when
quantization costs nothing (measured per GPU, presets.py).

Split-K (cuBLAS's split-K reduction; the same guide, sec. 3.2: "launching
fewer, larger waves"): an output with fewer tiles than SMs leaves most SMs idle
for the whole reduction, so cuBLAS cuts the reduction dimension k into ``s``
slices, runs ``tiles x s`` thread blocks, and sums the ``s`` FP32 partial
tiles afterwards: the useful share becomes ``m n s / (waves(tiles s) sm_count
tile_m tile_n)`` and each output element costs ``8 s`` more bytes of HBM
(an FP32 partial written and read back per slice). The model takes the best
of ``s`` in ``SPLIT_K`` with at least ``SPLIT_K_MIN_DEPTH`` of k per slice
(four 64-deep k-tiles, a Hopper TMA pipeline's stages), as cuBLAS's heuristic
picks one.

The last wave's epilogue: the roofline overlaps a GEMM's HBM traffic with its
compute, but the tiles of the last wave write their outputs only after their
own mainloop ends, when nothing is left to overlap: one wave's share of the
output, ``2 m n / waves`` bytes, is added at the HBM rate.

A weight gradient's output (rates.Accumulation): BF16 (2 bytes an element) unless it is
accumulated into Megatron-LM's ``main_grad`` by the GEMM (read and written: 8 for an
FP32 ``main_grad``, 4 for a BF16 one under ``--grad-reduce-in-bf16``), in both the
roofline floor and the last wave's epilogue; unfused, a kernel of its own then adds the
BF16 gradient into ``main_grad`` (``grad_add``: 2 + 4 + 4 bytes a weight element, 2 + 2
+ 2 into a BF16 one).

Both are checked against XLA's measured H100 matmul table (bench/published_gemm.py,
nothing fitted to it): without split-K 256 x 256 x 4096 is predicted at 4.3x the
measured time (1.29x with it); without the last wave's epilogue the outputs of
2048 x 2048 and more with K = 256-512 are 17-26% fast (11-18% with it).

FLOPs: a GEMM of m x k by k x n costs 2 m k n (Narayanan et al. 2021, appendix).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum

from pptune.costmodel.rates import Accumulation, Parallel, Rates

BF16_BYTES = 2
# Tile shapes cuBLAS's bf16 kernels use on A100/H100 (the cuBLASLt
# MatmulTile enum lists 256x128, 128x256 and 128x128 among others).
GEMM_TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128))
SPLIT_K: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)
SPLIT_K_MIN_DEPTH = 256  # k per slice: four 64-deep k-tiles
SPLIT_K_BYTES = 8.0  # per output element and slice: an FP32 partial written and read


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


def wave_utilisation(m: int, n: int, sm_count: int, batch: int = 1) -> float:
    """Useful share of the tiles cuBLAS runs for an m x n output (best tile)."""
    best = 0.0
    for tm, tn in GEMM_TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        waves = math.ceil(tiles / sm_count)
        best = max(best, m * n * batch / (waves * sm_count * tm * tn))
    return best


def gemm_fraction(rates: Rates, fp8: bool = False) -> float:
    """The share of peak (the FP8 peak for an FP8 GEMM) the largest GEMMs reach."""
    if rates.gemm_efficiency is not None:
        return rates.gemm_efficiency
    if fp8:
        if rates.fp8_gemm_fraction is None:
            raise ValueError("an FP8 GEMM on a GPU without a measured FP8 matmul rate")
        return rates.fp8_gemm_fraction
    return rates.gemm_fraction


def gemm_efficiency(m: int, n: int, rates: Rates, batch: int = 1, fp8: bool = False) -> float:
    """Fraction of peak an m x n output reaches without split-K (best tile)."""
    if rates.gemm_efficiency is not None:
        return rates.gemm_efficiency
    return gemm_fraction(rates, fp8) * wave_utilisation(m, n, rates.sm_count, batch)


def _split_k_s(m: int, n: int, k: int, rates: Rates, batch: int, flops: float, peak: float,
               floor_s: float, fraction: float, split_k: bool, last_wave: bool,
               out_bytes: float = BF16_BYTES) -> float:
    """The fastest tile and split-K choice: compute (or the input/output
    roofline floor) plus the FP32 partials' HBM traffic (module docstring)."""
    return _best_tiling(m, n, k, rates.sm_count, batch, flops, peak * fraction, floor_s,
                        rates.hbm_bytes_per_s, split_k, last_wave, out_bytes)


@functools.lru_cache(maxsize=65536)
def _best_tiling(m: int, n: int, k: int, sms: int, batch: int, flops: float, rate: float,
                 floor_s: float, hbm: float, split_k: bool, last_wave: bool,
                 out_bytes: float = BF16_BYTES) -> float:
    """``_split_k_s`` on plain numbers, cached: a model's layers repeat their shapes."""
    best = math.inf
    for tm, tn in GEMM_TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        for s in SPLIT_K:
            if s > 1 and (not split_k or k < s * SPLIT_K_MIN_DEPTH):
                break
            waves = math.ceil(tiles * s / sms)
            useful = m * n * batch * s / (waves * sms * tm * tn)
            t = max(flops / (rate * useful), floor_s)
            if s > 1:
                t += SPLIT_K_BYTES * s * m * n * batch / hbm
            if last_wave:  # its output tiles are written after its mainloop: nothing hides it
                t += out_bytes * m * n * batch / waves / hbm
            best = min(best, t)
    return best


def gemm(name: str, phase: Phase, m: int, n: int, k: int, rates: Rates,
         batch: int = 1, fp8: bool = False, *, split_k: bool = True,
         last_wave: bool = True, out_bytes: float = BF16_BYTES) -> OpCost:
    """(m x k) @ (k x n), ``batch`` times, as a roofline with tile, wave and
    split-K quantisation and the last wave's epilogue; ``fp8``: at the low-precision
    peak with its inputs' bytes (FP8's 1, NVFP4's: Rates.of) and a BF16 output. ``--efficiency``
    (``rates.gemm_efficiency``): that one fraction of peak, no shape model.
    ``split_k`` / ``last_wave`` False: without that term (bench/published_gemm.py
    shows what each contributes). ``out_bytes``: what the epilogue moves an output
    element (8: accumulated into an FP32 ``main_grad``, rates.Accumulation)."""
    flops = 2.0 * m * n * k * batch
    inputs = rates.low_input_bytes if fp8 else BF16_BYTES
    nbytes = (inputs * float(m * k + k * n) + out_bytes * float(m * n)) * batch
    peak = rates.peak_flops
    if fp8:
        if rates.fp8_peak_flops is None:
            raise ValueError("an FP8 GEMM on a GPU without FP8 tensor cores")
        peak = rates.fp8_peak_flops
    floor_s = nbytes / rates.hbm_bytes_per_s
    if rates.gemm_efficiency is not None:
        time_s = max(flops / (peak * rates.gemm_efficiency), floor_s)
    else:
        time_s = _split_k_s(m, n, k, rates, batch, flops, peak, floor_s,
                            gemm_fraction(rates, fp8), split_k, last_wave, out_bytes)
    return OpCost(name, phase, Kind.GEMM, flops, nbytes, time_s)


def linear(name: str, tokens: int, k: int, n: int, rates: Rates,
           fp8: bool = False, accum: Accumulation = Accumulation(),
           fp8_wgrad: bool | None = None) -> tuple[OpCost, OpCost, OpCost]:
    """A weight GEMM y = x W (x: tokens x k, W: k x n): forward, its data
    gradient (B: dx = dy W^T) and its weight gradient (W: dW = x^T dy), whose
    output ``accum`` says (rates.Accumulation; its unfused addition: ``grad_add``), in
    FP8 where ``fp8_wgrad`` (None: as ``fp8``) says (Parallel.fp8_wgrad)."""
    return (
        gemm(name, Phase.F, tokens, n, k, rates, fp8=fp8),
        gemm(name + ".dgrad", Phase.B, tokens, k, n, rates, fp8=fp8),
        gemm(name + ".wgrad", Phase.W, k, n, tokens, rates,
             fp8=fp8 if fp8_wgrad is None else fp8_wgrad, out_bytes=accum.out_bytes),
    )


def grad_add(name: str, weights: float, rates: Rates, accum: Accumulation,
             kernels: int = 1) -> list[OpCost]:
    """The kernel that adds ``weights`` elements of BF16 weight gradients into the
    ``main_grad`` (W, one a weight parameter: ``kernels``), where ``accum`` leaves them
    unfused (rates.Accumulation.add_bytes, at the ``main_grad``'s width); none otherwise."""
    if not accum.add_bytes:
        return []
    return [memory(name + ".main_grad", Phase.W, accum.add_bytes * weights, rates, kernels)]


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


def phase_s(ops: list[OpCost], phase: Phase, rates: Rates) -> float:
    """Time of one phase: its ops' roofline times plus a launch per kernel."""
    return sum(o.time_s + o.kernels * rates.launch_s for o in ops if o.phase is phase)
