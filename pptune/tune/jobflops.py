"""A job's log against its config: the FLOPs a step its throughput lines state, held
against the FLOPs its framework counts for the job the config describes.

A Megatron-LM or torchtitan line prints the model TFLOP/s a GPU as the framework
counts them, so its TFLOP/s times the job's GPUs and the line's seconds is the
framework's own FLOPs a step, the same on every line of one job. That figure is
taken over the lines the step's median is taken over (their median, as the step's),
and compared with what the framework counts for the config's model, batch and
sequence (``Adapter.log_flops``, ``pptune.costs.flops.counted_flops_per_token``):
torchtitan counts attention's full square, Megatron-LM half of it since
core_r0.12.0 and the full square before (either is its count). A log beyond
``THROUGHPUT_SLACK`` of every count its framework has is taken to be another job's:
calibrate warns (the warning is stored with the factors), and a refusal asks. A log
that matches an older release's count only (a Megatron-LM log at 131k tokens whose
TFLOP/s count the full square) is noted as likely of such a release.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from pptune.costmodel.presets import ModelShape
from pptune.costs.flops import counted_flops_per_token
from pptune.frameworks.common.joblog import JobLog, JobSize, LogFlops, seconds_of

# The log's FLOPs a step over its framework's count beyond which the log is taken to be
# of another job than the config describes. The count is the framework's own formula on
# the config's shape; what it may still miss is what the shape leaves out (Megatron-LM's
# vocabulary padded to a multiple of 128 x tp, +0.6% for Llama 3's 128,256 at tp 8;
# norms and biases), a few per cent, so only a gross difference (another sequence, batch
# or model) is said.
THROUGHPUT_SLACK = 1.5


@dataclass(frozen=True)
class LoggedFlops:
    """The log's FLOPs a step against its framework's count for the config's job."""

    logged: float  # FLOPs a step: TFLOP/s a GPU x GPUs x seconds, median over the lines
    counted: float  # the framework's count of the config's job, the nearest of its counts
    count: LogFlops  # which of the framework's counts
    first: int  # the iterations of the lines taken
    last: int
    latest: float  # the count of the framework's latest releases (its first)

    @property
    def ratio(self) -> float:
        return self.logged / self.counted

    @property
    def agrees(self) -> bool:
        return _within(self.ratio)

    @property
    def older(self) -> bool:
        """The log agrees with an older release's count only."""
        return self.agrees and not _within(self.logged / self.latest)


def _within(ratio: float) -> bool:
    return 1 / THROUGHPUT_SLACK <= ratio <= THROUGHPUT_SLACK


def logged_flops(log: JobLog, used: tuple[int, ...], size: JobSize, shape: ModelShape,
                 counts: tuple[LogFlops, ...]) -> LoggedFlops | None:
    """The log's FLOPs a step over the lines ``used`` (those the step's median is taken
    over) against the nearest of the framework's ``counts``; None where the lines print
    no TFLOP/s or the framework has no count."""
    per_line = []
    wanted = set(used)  # a long log's lines: a tuple's lookups made this quadratic
    for s in log.steps:
        seconds = seconds_of(s, size)
        if s.iteration in wanted and s.tflops_per_gpu and seconds:
            per_line.append((s.iteration, s.tflops_per_gpu * 1e12 * size.gpus * seconds))
    if not per_line or not counts:
        return None
    logged = statistics.median(f for _, f in per_line)
    tokens = size.global_batch * size.seq_len

    def counted(c: LogFlops) -> float:
        return counted_flops_per_token(shape, size.seq_len, causal=c.causal) * tokens

    count = min(counts, key=lambda c: abs(math.log(logged / counted(c))))
    its = [i for i, _ in per_line]
    return LoggedFlops(logged, counted(count), count, min(its), max(its), counted(counts[0]))


def disagreement(log_path: Path, lf: LoggedFlops | None, shape: ModelShape, size: JobSize,
                 title: str, unit: str = "iteration") -> str:
    """The warning when the log's FLOPs a step are not its framework's count for the
    config's job ("" when they are, or the log prints no TFLOP/s)."""
    if lf is None or lf.agrees:
        return ""
    lines = (f"{unit} {lf.first}" if lf.first == lf.last
             else f"{unit}s {lf.first}-{lf.last}")
    return (f"--log {log_path}: its TFLOP/s a GPU times {size.gpus} GPUs and each line's "
            f"seconds make {lf.logged:.3g} FLOPs a step (median over {lines}, the lines the "
            f"step is the median of), {_times(lf.ratio, '.2f')} the {lf.counted:.3g} FLOPs {title} "
            f"counts for the job the config describes ({shape.name}, {size.global_batch} x "
            f"{size.seq_len} tokens; 6 per active parameter and token plus the attention "
            f"products, as {lf.count.counts}): the log may be of "
            "another sequence length, batch or model; check them before trusting the factors")


def _times(ratio: float, spec: str = ".3g") -> str:
    """``2.5x``, or ``far more than`` where a log's absurd step overflowed the product."""
    return f"{ratio:{spec}}x" if math.isfinite(ratio) else "far more than"


def another_job(ratio: float | None, config: Path) -> str:
    """The question a refusal asks when the log's own FLOPs are not the config's job's
    (beyond THROUGHPUT_SLACK either way); "" when they are, or the log prints none."""
    if ratio is None or _within(ratio):
        return ""
    return (f"is the log of another model or batch (its own TFLOP/s a GPU make {_times(ratio)} "
            f"the model FLOPs of the job {config} describes)")
