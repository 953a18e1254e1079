"""The NVFP4 casts as ops (nvfp4.py's module docstring: what they read, write and
compute)."""

from __future__ import annotations

from pptune.costmodel import nvfp4
from pptune.costmodel.kernels import Kind, OpCost, Phase
from pptune.costmodel.rates import Rates


def cast(name: str, phase: Phase, elements: float, tensors: int, rates: Rates) -> OpCost:
    """Transformer Engine's NVFP4 casts of ``tensors`` tensors of ``elements`` in all:
    ``nvfp4.CAST_BYTES`` an element over HBM, the RHT's FLOPs on the tensor cores at the
    BF16 GEMM rate, whichever is longer."""
    flops, nbytes = nvfp4.RHT_FLOPS * elements, nvfp4.CAST_BYTES * elements
    time_s = max(nbytes / rates.hbm_bytes_per_s, flops / (rates.peak_flops * rates.gemm_fraction))
    return OpCost(f"fp4_cast.{name}" + (".bwd" if phase is Phase.B else ""), phase,
                  Kind.MEMORY, flops, nbytes, time_s, kernels=nvfp4.CAST_KERNELS * tensors)


def linear_casts(name: str, tokens: int, linears: list[tuple[int, int]],
                 rates: Rates) -> tuple[list[OpCost], list[OpCost]]:
    """(forward, backward) NVFP4 casts of a sub-layer's linears, ``linears`` their (input,
    output) widths on the rank: every input forward (no norm writes it quantised), every
    output gradient backward."""
    return ([cast(name, Phase.F, tokens * sum(k for k, _ in linears), len(linears), rates)],
            [cast(name, Phase.B, tokens * sum(n for _, n in linears), len(linears), rates)])
