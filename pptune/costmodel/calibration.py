"""Calibration factors: the analytic model's rates, scaled to what a real job reached.

The analytic clock prices a best-case software stack: every GEMM at the
GPU's measured matmul peak times its tile and wave utilisation, attention at
FlashAttention-2's measured share of peak, the elementwise ops at the HBM
bandwidth STREAM reaches, collectives at the link's line rate (presets.py).
A real job differs by tens of per cent (other kernels, overlap it does not
get, a slower network stack). A calibration multiplies the *rates* the model
prices with, grouped by what they measure:

- ``compute``: the achieved GEMM and attention rates (``gemm_fraction``,
  ``attention_fraction``);
- ``memory``: the achieved HBM bandwidth of the elementwise ops
  (``hbm_fraction``);
- ``communication``: the link bandwidths (NVLink, the NIC).

Latencies and kernel launches are fixed costs and stay as they are. Because
the factors scale rates, not one configuration's step, a calibrated GPU
prices every other configuration of the same model and GPU (other tp, pp,
batch, schedule): ``scaled_gpu`` is the GPU preset with its rates scaled, and
every table pptune builds from it carries the calibration.

Which preset field is which rate is ``GPU_RATES``; the other fields are
``GPU_FIXED`` (a test checks that every field of ``GpuSpec`` is one or the
other, so a field added to the preset is classified where it is added).

Physical range (``problems``): no factor may put a rate above what the
hardware can do, nor below ``SANITY_FLOOR``:

- compute: the presets' GEMM fraction is the *maximum achievable* matmul
  rate measured on that GPU (mamf-finder), so a factor above 1 puts the
  job's largest GEMMs above it. The same GH100 die measured 792.1 TFLOP/s in
  an H100 SXM and 821.0 in a GH200 (stas00/ml-engineering,
  compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison
  table"), 3.6% apart: ``COMPUTE_CEILING`` = 1.04 allows that spread between
  units and no more;
- memory: at most the datasheet bandwidth (``1 / hbm_fraction``);
- communication: at most the line rate the preset states for each link:
  the achieved figures of its fabric (what NCCL reaches) may grow to the
  NVLink and NIC line rates, no further (without a fabric the links are at
  line rate: ceiling 1);
- every factor: at least ``SANITY_FLOOR`` = 0.1. Published runs of tuned
  stacks reach 41-62% MFU on H100 (Megatron-LM's README table of
  Megatron-Core r0.8; NVIDIA's 2025 DGX Cloud benchmarks) and 44-52% on A100
  (Narayanan et al. 2021, Table 1), where the model prices 55-80%: factors
  of 0.5-1. A job at a tenth of the model's rates is more likely described
  wrongly (a GPU count, a batch, milliseconds for seconds) than that slow.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pptune.costmodel.presets import GpuSpec


class RateGroup(str, Enum):
    """What a calibration factor scales."""

    COMPUTE = "compute"  # achieved GEMM and attention rates
    MEMORY = "memory"  # achieved HBM bandwidth (elementwise ops)
    COMMUNICATION = "communication"  # link bandwidths


# GpuSpec fields that are rates, and the group that scales each. A field may
# be a number, None (not known: left None), a table of (size, share) pairs
# (the shares scaled) or a record of rates (presets' ``Fabric``: its float
# fields scaled, its counts and switches left as they are).
GPU_RATES: dict[str, RateGroup] = {
    "gemm_fraction": RateGroup.COMPUTE,
    "fp8_gemm_fraction": RateGroup.COMPUTE,
    "attention_fraction": RateGroup.COMPUTE,
    "causal_attention": RateGroup.COMPUTE,
    "full_attention": RateGroup.COMPUTE,
    "cudnn_causal_attention": RateGroup.COMPUTE,
    "cudnn_full_attention": RateGroup.COMPUTE,
    "hbm_fraction": RateGroup.MEMORY,
    "nvlink_bytes_per_s": RateGroup.COMMUNICATION,
    "ib_bytes_per_s": RateGroup.COMMUNICATION,
    "fabric": RateGroup.COMMUNICATION,  # what NCCL achieves (collectives.Fabric)
}
# GpuSpec fields a calibration leaves alone: names, sizes, datasheet peaks,
# fixed per-kernel costs, what the hardware supports, the node's size.
GPU_FIXED = frozenset({
    "name", "source", "peak_flops", "memory_bytes", "hbm_bytes_per_s", "sm_count", "launch_s",
    "fp8_peak_flops", "fp4_peak_flops", "mxfp8", "gpus_per_node", "gpus_per_host",
    "matmul_spread", "attention_rates_of",
})
# Of the fabric's achieved bandwidths, the line rate each is bounded by (the
# NVLink-SHARP all-reduce reduces in the switch and may exceed the per-GPU line)
FABRIC_LINES = {"ring_busbw_bytes_per_s": "nvlink_bytes_per_s",
                "p2p_bytes_per_s": "nvlink_bytes_per_s",
                "nic_busbw_bytes_per_s": "ib_bytes_per_s"}

COMPUTE_CEILING = 1.04  # module docstring: one die's measured matmul peak, two systems
SANITY_FLOOR = 0.1  # module docstring


@dataclass(frozen=True)
class Factors:
    """One multiplier per rate group (1: the analytic model as it stands)."""

    compute: float = 1.0
    memory: float = 1.0
    communication: float = 1.0

    def of(self, group: RateGroup) -> float:
        return float(getattr(self, group.value))

    @classmethod
    def from_groups(cls, values: dict[RateGroup, float]) -> Factors:
        return cls(**{g.value: v for g, v in values.items()})

    @classmethod
    def common(cls, f: float) -> Factors:
        """The same factor on every rate (what one run can fit)."""
        return cls(f, f, f)

    def as_dict(self) -> dict[str, float]:
        return {g.value: self.of(g) for g in RateGroup}


def _scaled(value: Any, f: float) -> Any:
    """A rate field times ``f`` (the forms GPU_RATES describes)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value * f
    if isinstance(value, tuple):
        return tuple((size, share * f) for size, share in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{
            k.name: getattr(value, k.name) * f for k in dataclasses.fields(value)
            if type(getattr(value, k.name)) is float})
    raise TypeError(f"cannot scale a rate of type {type(value).__name__}")


def scaled_gpu(gpu: GpuSpec, factors: Factors) -> GpuSpec:
    """The preset with each rate of ``GPU_RATES`` multiplied by its group's factor."""
    if factors == Factors():
        return gpu
    return dataclasses.replace(gpu, **{name: _scaled(getattr(gpu, name), factors.of(group))
                                       for name, group in GPU_RATES.items()})


def ceiling(gpu: GpuSpec, group: RateGroup) -> float:
    """The largest physical factor of ``group`` on ``gpu`` (module docstring): for
    communication, the least headroom any link has to its line rate."""
    if group is RateGroup.COMPUTE:
        return COMPUTE_CEILING
    if group is RateGroup.MEMORY:
        return 1.0 / gpu.hbm_fraction
    fabric = getattr(gpu, "fabric", None)
    if fabric is None:  # the links are the line rates themselves
        return 1.0
    headroom = [getattr(gpu, line) / getattr(fabric, name)
                for name, line in FABRIC_LINES.items() if getattr(fabric, name, None)]
    return min(headroom) if headroom else 1.0


# What each group's rate is, as a sentence names it.
RATE_NAMES = {
    RateGroup.COMPUTE: "the GEMM and attention rates",
    RateGroup.MEMORY: "the HBM bandwidth",
    RateGroup.COMMUNICATION: "the link bandwidths",
}
CEILING_NAMES = {
    RateGroup.COMPUTE: "the GPU's measured matmul peak",
    RateGroup.MEMORY: "the datasheet HBM bandwidth",
    RateGroup.COMMUNICATION: "the links' line rate",
}


def physical_range(gpu: GpuSpec) -> dict[RateGroup, tuple[float, float]]:
    """Each group's factors within the physical range on ``gpu`` (module docstring)."""
    return {g: (SANITY_FLOOR, ceiling(gpu, g)) for g in RateGroup}


def said(f: float, clamped: bool) -> str:
    """A factor as a message gives it; ``clamped``: the fit stopped there, at its numerical
    guard, and the least squares lie farther out (fit.py)."""
    return f"{f:.3g}" + ((" or less" if f < 1 else " or more") if clamped else "")


def problems(gpu: GpuSpec, factors: Factors,
             groups: tuple[RateGroup, ...] = tuple(RateGroup),
             clamped: tuple[RateGroup, ...] = ()) -> list[str]:
    """Why ``factors`` are not physical on ``gpu``, one clause per group out of range
    (``clamped``: the groups whose factor the fit stopped at its guard)."""
    out = []
    for g in groups:
        f = factors.of(g)
        lo, top = physical_range(gpu)[g]
        if f > top:
            out.append(f"a {g.value} factor of {said(f, g in clamped)} puts {RATE_NAMES[g]} "
                       f"above {CEILING_NAMES[g]} on {gpu.name} (at most {top:.3g})")
        elif f < lo:
            out.append(f"a {g.value} factor of {said(f, g in clamped)} puts {RATE_NAMES[g]} "
                       f"below a tenth of what pptune prices on {gpu.name} (at least {lo:g})")
    return out
