"""A synchronous job runs at the pace of its slowest GPU.

GPUs of one SKU do not run equally fast. Under the same power cap, each die's
voltage-frequency curve and its place in the chassis' airflow set its own
sustained clock (the "silicon lottery"): stas00/ml-engineering
(compute/accelerator/README.md, commit 744d01e1) reports "5% and higher
differences" in matmul throughput between the GPUs of one 8-GPU node that pass
the same binning, and advises timing every GPU and taking the slowest, because
"that slowest accelerator will set the speed for all other accelerators".
Every step of a data-, tensor-, pipeline-, context- or expert-parallel job
waits on all of its GPUs (a tensor-parallel collective every layer, the
pipeline's sends, the gradient reduction every step), so it runs at the pace
of the slowest of them.

The model: each GPU's sustained compute throughput is normal around the median
with relative standard deviation ``sigma``; the presets' compute rates are one
GPU's measurement, a median draw. The slowest of ``n`` GPUs is then expected
``sigma z(n)`` below the median, where ``z(n)`` is the expected maximum of ``n``
standard normal variables (order statistics: ``z(n) = integral of x n phi(x)
Phi(x)^(n-1) dx``; ``z(2) = 1/sqrt(pi)``, ``z(3) = 3 / (2 sqrt(pi))``). The
cited spread is a range over the 8 GPUs of a node, whose expectation is
``2 z(8) sigma = 2.847 sigma``, so a 5% range gives ``sigma = 1.76%``. A job on
``n`` GPUs prices its GEMM and attention rates divided by ``1 + sigma z(n)``:
x 1/1.025 on 8 GPUs (half the node's range, by construction), 1/1.041 on 64,
1/1.060 on 2,048. HBM bandwidth and the links do not follow the SM clock and
keep their rates.

Left out: a host far outside the spread (MegaScale, arXiv 2402.15627, sec. 6.3,
found hosts 10% slower and removed them), and thermal swings over the day
(Llama 3, arXiv 2407.21783, sec. 3.3.4: 1-2%).
"""

from __future__ import annotations

import functools
import math

from pptune.costmodel.calibration import Factors, scaled_gpu
from pptune.costmodel.presets import GpuSpec

NODE_GPUS = 8  # the population the cited spread is a range over
_LIMIT = 12.0  # the integrand is below 1e-30 beyond +-12 for every n pptune plans
_STEPS = 6000  # Simpson intervals over [-_LIMIT, _LIMIT] (exact to ~1e-10)


@functools.lru_cache(maxsize=256)
def expected_max(n: int) -> float:
    """E[max of n independent standard normal variables] (0 for one)."""
    if n < 1:
        raise ValueError(f"the number of GPUs must be at least 1, got {n}")
    if n == 1:
        return 0.0
    h = 2 * _LIMIT / _STEPS
    total = 0.0
    for i in range(_STEPS + 1):
        x = -_LIMIT + i * h
        cdf = 0.5 * math.erfc(-x / math.sqrt(2))
        density = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        weight = 1 if i in (0, _STEPS) else (4 if i % 2 else 2)
        total += weight * x * n * density * cdf ** (n - 1)
    return total * h / 3


def sigma_of(spread: float) -> float:
    """The relative standard deviation whose expected range over a node's 8 GPUs
    is ``spread``."""
    if not 0 <= spread < 1:
        raise ValueError(f"the GPU spread must be in [0, 1), got {spread}")
    return spread / (2 * expected_max(NODE_GPUS))


def slowdown(gpus: int, spread: float) -> float:
    """How much longer the slowest of ``gpus`` GPUs takes over the median one on
    compute-bound work: ``1 + sigma z(gpus)``."""
    return 1 + sigma_of(spread) * expected_max(gpus)


def slowest_of(gpu: GpuSpec, gpus: int, spread: float | None = None) -> GpuSpec:
    """The preset as the slowest of ``gpus`` of its kind runs: its compute rates
    (``calibration.RateGroup.COMPUTE``) divided by ``slowdown``; ``spread`` None:
    the preset's own."""
    s = gpu.matmul_spread if spread is None else spread
    factor = slowdown(gpus, s)
    if factor == 1:
        return gpu
    return scaled_gpu(gpu, Factors(compute=1 / factor))


def pace_note(gpu: GpuSpec, gpus: int, spread: float | None = None) -> str:
    """How a cost origin line says its compute rates are the slowest GPU's ("" when
    they are the preset's)."""
    factor = slowdown(gpus, gpu.matmul_spread if spread is None else spread)
    if factor == 1:
        return ""
    return f", compute at the slowest of {gpus:,} GPUs' pace (-{1 - 1 / factor:.1%})"
