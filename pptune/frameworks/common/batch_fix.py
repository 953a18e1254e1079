"""A fix that names another micro-batch count, said in the settings the file states.

A framework's rule on the micro-batches of a pipeline run (m) is about a count
most files do not state: Megatron-LM derives it from ``--global-batch-size`` /
(micro-batch x dp), pptune's own format from ``global_batch`` (and
``grad_accum_steps``). A fix that names the count alone sends the user to edit
the global batch with it, where the count itself fails the batch's divisibility
(the user trial's ``--global-batch-size 126`` for 126 micro-batches on dp 4).
These say the global batch that gives the count: the samples one micro-batch
slot takes over the data-parallel ranks (global batch / (m x pipeline runs a
step)) times the new count.
"""

from __future__ import annotations

from collections.abc import Callable

from pptune.schemas import TrainingConfig


def global_batch_for(cfg: TrainingConfig, m: int, count: int) -> int | None:
    """The global batch whose pipeline runs take ``count`` micro-batches each, where the
    config's ``m`` divides its own (micro-batch x dp x runs a step); None where the
    config states no global batch or its numbers do not add up (another finding's)."""
    runs, total = cfg.pipeline_flushes, cfg.global_batch
    if total is None or m < 1 or total % (m * runs):
        return None
    return total // (m * runs) * count * runs


def count_words(cfg: TrainingConfig, m: int, count: int,
                settings: Callable[[int, int], str]) -> str | None:
    """``settings(global batch, micro-batches a step)`` for ``count`` micro-batches a
    pipeline run: the file's own words (None: no global batch to say it by)."""
    total = global_batch_for(cfg, m, count)
    if total is None:
        return None
    return settings(total, count * cfg.pipeline_flushes)


def megatron_settings(cfg: TrainingConfig, m: int, count: int) -> str | None:
    """``--global-batch-size G``: Megatron-LM's micro-batches are global / (micro-batch x
    dp), one pipeline run a step (validate_args)."""
    return count_words(cfg, m, count, lambda total, _: f"--global-batch-size {total}")


def megatron_count(cfg: TrainingConfig, m: int, count: int) -> str:
    """``--global-batch-size G (N micro-batches)`` (``megatron_settings``)."""
    said = megatron_settings(cfg, m, count)
    return f"{said} ({count} micro-batches)" if said else f"{count} micro-batches"


def pptune_settings(cfg: TrainingConfig, m: int, count: int) -> str | None:
    """``global_batch: G[, grad_accum_steps: A]``: grad_accum_steps where the file
    states it (its micro-batches a step, the pipeline runs a step taking them)."""
    stated = "grad_accum_steps" in cfg.model_fields_set
    return count_words(cfg, m, count, lambda total, steps: f"global_batch: {total}" + (
        f", grad_accum_steps: {steps}" if stated else ""))


def pptune_count(cfg: TrainingConfig, m: int, count: int) -> str:
    """``N (global_batch: G, ...)``, as torch's rules name a count
    (common/torch_schedules.py ``how``)."""
    said = pptune_settings(cfg, m, count)
    return f"{count} ({said})" if said else str(count)
