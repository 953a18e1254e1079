"""GPU utilisation and memory over a sampling run: collect, aggregate, flag.

The sampler is any callable returning one ``GpuReading`` per GPU (the same
GPUs in the same order each call); ``pptune.observe.nvml`` supplies the NVML
one, tests a fake. Nothing here touches NVML or prints.

NVML's utilisation (``nvmlDeviceGetUtilizationRates().gpu``) is "percent of
time over the past sample period during which one or more kernels was
executing" (NVML API reference, nvmlUtilization_t), the sample period being
between 1/6 s and 1 s depending on the product; so a sample every 0.5 s sees
nearly all of the time, and the mean over samples estimates the kernel-busy
share. A GPU averaging under ``min_util`` is flagged (default 0.6: a practitioners'
rule of thumb that a GPU busy less than ~60% of a training step loses the
rest to the pipeline bubble; ``--min-util`` sets it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_MIN_UTIL = 0.6


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one instant: utilisation as a fraction (0..1) and memory used."""

    util_share: float
    mem_used_bytes: int


Sample = Sequence[GpuReading]  # one reading per GPU


@dataclass(frozen=True)
class GpuSummary:
    index: int
    name: str
    samples: int
    avg_util_share: float
    min_util_share: float
    peak_mem_bytes: int
    mem_total_bytes: int | None
    flagged: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "samples": self.samples,
            "avg_util_share": self.avg_util_share,
            "min_util_share": self.min_util_share,
            "peak_mem_bytes": self.peak_mem_bytes,
            "mem_total_bytes": self.mem_total_bytes,
        }


@dataclass(frozen=True)
class MonitorReport:
    gpus: list[GpuSummary]
    interval_s: float
    elapsed_s: float
    min_util: float
    stopped_early: bool = False

    @property
    def flagged(self) -> list[int]:
        return [g.index for g in self.gpus if g.flagged]

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": [g.to_json() for g in self.gpus],
            "interval_s": self.interval_s,
            "elapsed_s": round(self.elapsed_s, 6),
            "stopped_early": self.stopped_early,
            "min_util": self.min_util,
            "flagged": self.flagged,
        }


def n_samples(interval_s: float, duration_s: float) -> int:
    """Samples to take: one per interval over the duration, at least one."""
    return max(1, round(duration_s / interval_s))


def collect(
    read_sample: Callable[[], Sample],
    interval_s: float,
    duration_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[Sample], float, bool]:
    """``(samples, elapsed_s, stopped_early)``: ``read_sample()`` every ``interval_s``.

    Samples are taken at ``t0, t0 + interval_s, ...`` on ``clock`` (no drift
    from the time a read takes), ``n_samples(interval_s, duration_s)`` of them.
    Ctrl-C stops early and keeps what was gathered.
    """
    if interval_s <= 0 or duration_s <= 0:
        raise ValueError(f"interval_s and duration_s must be > 0 ({interval_s}, {duration_s})")
    samples: list[Sample] = []
    t0 = clock()
    stopped = False
    try:
        for k in range(n_samples(interval_s, duration_s)):
            wait = t0 + k * interval_s - clock()
            if wait > 0:
                sleep(wait)
            samples.append(list(read_sample()))
    except KeyboardInterrupt:
        stopped = True
    return samples, clock() - t0, stopped


def summarize(
    samples: Sequence[Sample],
    names: Sequence[str],
    *,
    mem_total_bytes: Sequence[int | None] | None = None,
    min_util: float = DEFAULT_MIN_UTIL,
    interval_s: float = 0.0,
    elapsed_s: float = 0.0,
    stopped_early: bool = False,
) -> MonitorReport:
    """Mean and minimum utilisation and peak memory per GPU; GPUs averaging under
    ``min_util`` flagged. ``samples`` must be non-empty, each one reading per name."""
    if not samples:
        raise ValueError("no samples to summarize")
    for i, s in enumerate(samples):
        if len(s) != len(names):
            raise ValueError(f"sample {i} has {len(s)} readings for {len(names)} GPUs")
    totals = list(mem_total_bytes) if mem_total_bytes is not None else [None] * len(names)
    gpus = []
    for g, name in enumerate(names):
        utils = [s[g].util_share for s in samples]
        avg = sum(utils) / len(utils)
        gpus.append(
            GpuSummary(
                index=g,
                name=name,
                samples=len(utils),
                avg_util_share=avg,
                min_util_share=min(utils),
                peak_mem_bytes=max(s[g].mem_used_bytes for s in samples),
                mem_total_bytes=totals[g],
                flagged=avg < min_util,
            )
        )
    return MonitorReport(
        gpus=gpus,
        interval_s=interval_s,
        elapsed_s=elapsed_s,
        min_util=min_util,
        stopped_early=stopped_early,
    )
