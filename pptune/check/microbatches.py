"""check-config's findings on the micro-batches of a pipeline run (m): the config's
framework's refusals (framework.microbatch_rules), the DualPipes' and ZBV's shapes, and
gradient accumulation aligned to pipeline depth: information, not a warning, as the
predicted step and bubble simulate the schedule at the config's own m (no framework
pptune reads requires the alignment where its refusals above do not, and recommend ranks
an unaligned m where it runs faster, marked *).

A fix that names another m keeps the global batch where the config can: m' dividing the
micro-batches of an optimizer step (m x the pipeline runs a step), the runs taking up the
rest; else it says what the global batch becomes.
"""

from __future__ import annotations

import re

from pptune.check.framework import microbatch_rules
from pptune.costmodel.schedules import OVERLAPPED, Schedule, ScheduleError, validate
from pptune.frameworks.common.adapter import Add
from pptune.frameworks.common.batch_words import TokenBatch
from pptune.frameworks.common.fields import Semantics
from pptune.frameworks.common.torch_schedules import nearest_count
from pptune.frameworks.registry import adapter_of
from pptune.schemas import TrainingConfig


def microbatch_findings(cfg: TrainingConfig, m: int, dp: int | None, sem: Semantics,
                        add: Add, *, broken: bool) -> None:
    """Findings on ``m`` micro-batches a run; ``broken``: the batch arithmetic is already
    an error, so no warning is derived from its numbers."""
    p, schedule = cfg.pp, cfg.schedule
    microbatch_rules(cfg, m, sem, add)
    if schedule is Schedule.ZBV and m < p:
        add("zbv-m-lt-pp", "warning",
            f"zbv with fewer micro-batches than stages ({m} < {p}) leaves most of the V idle",
            microbatches=m, pp=p)
    if schedule in OVERLAPPED:
        try:  # torch's ScheduleDualPipeV and DeepSeek's DualPipe refuse these
            validate(schedule, p, m, 2)
        except ScheduleError as exc:
            said = (adapter_of(cfg.source_format).count_settings(cfg, m, exc.count, sem)
                    if exc.count is not None else None)
            add("dualpipe-microbatches", "error",
                str(exc) + (f"; in the file: {said}" if said else ""), microbatches=m, pp=p)
    if m % p and not broken:  # information: the simulated step already prices this m
        add("ga-not-aligned", "info", not_aligned(cfg, m, dp, sem.batch_words, sem),
            microbatches=m, pp=p)


def not_aligned(cfg: TrainingConfig, m: int, dp: int | None,
                words: TokenBatch | None = None, sem: Semantics | None = None) -> str:
    """The ga-not-aligned warning: m is not a multiple of pp; a multiple that divides the
    micro-batches of a step keeps the global batch (more or fewer pipeline runs a step),
    else the next multiple is named with the global batch it makes and the file's
    settings that give it (``Adapter.count_settings``; ``words``: in the file's keys and
    tokens, Semantics.batch_words)."""
    p, runs = cfg.pp, cfg.pipeline_flushes
    text = (words.not_multiple(m, p) if words else
            f"micro-batches per pipeline run ({m}) are not a multiple of pp ({p}); ")
    good = nearest_count(m, 0, lambda n: n % p == 0, m * runs)
    if good:
        return (text + f"{good} would align gradient accumulation to pipeline depth, run "
                f"{m * runs // good} time{'s' * (m * runs // good > 1)} a step (the global "
                "batch kept)")
    up = m + p - m % p
    if words is not None and dp is not None and cfg.global_batch is not None:
        return text + f"{up} would align gradient accumulation to pipeline depth" + (
            words.step_made(up, runs, dp))
    text += f"{up} would align gradient accumulation to pipeline depth"
    if dp is None or cfg.global_batch is None:
        return text
    total = up * runs * cfg.micro_batch_size * dp
    made = (f"micro-batch {cfg.micro_batch_size} x {up}" + f" x {runs} runs a step" * (runs > 1)
            + f" x dp {dp}")
    said = adapter_of(cfg.source_format).count_settings(cfg, m, up, sem)
    if said is None:
        return text + f", with the global batch {total} ({made})"
    # the file's settings name the global batch (--global-batch-size, global_batch: ...):
    # the sentence gives how it is made, not the number again
    named = str(total) in re.split(r"[\s,:]+", said)
    return (text + (f", with a global batch of {made}" if named else
                    f", with the global batch {total} ({made})") + f"; in the file: {said}")
