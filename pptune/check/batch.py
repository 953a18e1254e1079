"""The batch identity: global batch = micro-batch x GA steps x dp, and what breaks it.

Megatron-LM, DeepSpeed and torchtitan all hold a job to it. DeepSpeed's is the
plainest (deepspeed/runtime/config.py ``DeepSpeedConfig``): with all three of
``train_batch_size``, ``train_micro_batch_size_per_gpu`` and
``gradient_accumulation_steps`` stated, ``_set_batch_related_parameters``
derives nothing and ``_batch_assertion`` asserts ``train_batch == micro_batch
* grad_acc * self.world_size``, ``world_size`` being the data-parallel size
(``mpu.get_data_parallel_world_size()``).

A config that states no GPU count is checked at an assumed dp, and a mismatch
that depends on dp is a warning (verdicts.py): the run may have the GPUs that
make it right. Where no whole dp can (the global batch is not a multiple of
micro-batch x GA, or of the micro-batch when GA is derived), the mismatch is an
error at any dp, and says why.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.adapter import Add
from pptune.schemas import TrainingConfig


def batch_rules(cfg: TrainingConfig, dp: int | None, assumed: int | None,
                add: Add) -> int | None:
    """The findings of the batch identity at ``dp`` (``assumed``: the dp is assumed, not
    stated); returns the GA steps (stated, or derived from the global batch), None where
    unknown. ``add(..., every_dp=True)`` marks a finding that no dp would clear."""
    ga, gb, mbs = cfg.grad_accum_steps, cfg.global_batch, cfg.micro_batch_size
    if dp is None:
        return ga
    if gb is not None and ga is not None:
        if gb != mbs * ga * dp:
            per_dp = mbs * ga
            if assumed is not None and gb % per_dp:
                _nowhere(add, gb, mbs, ga, dp)
            else:
                add("batch-mismatch", "error",
                    f"global batch {gb} != micro-batch {mbs} x GA steps {ga} x dp {dp} = "
                    f"{per_dp * dp}; " + (
                        f"set GA to {gb // (mbs * dp)} or the global batch to {per_dp * dp}"
                        if gb % (mbs * dp) == 0 else
                        f"set the global batch to {per_dp * dp} (no whole GA gives {gb} over "
                        f"micro-batch x dp = {mbs * dp})"),
                    global_batch=gb, micro_batch_size=mbs, grad_accum_steps=ga, dp=dp)
    elif gb is not None:
        if gb % (mbs * dp):
            if assumed is not None and gb % mbs:
                _nowhere(add, gb, mbs, None, dp)
            else:
                add("batch-mismatch", "error",
                    f"global batch {gb} is not divisible by micro-batch {mbs} x dp {dp} = "
                    f"{mbs * dp}; choose a multiple of {mbs * dp}",
                    global_batch=gb, micro_batch_size=mbs, dp=dp)
        else:
            ga = gb // (mbs * dp)
    elif ga is None:
        add("batch-unknown", "error",
            "the config states neither the global batch nor the GA steps; set one "
            "(or pass --global-batch)")
    if gb is not None and ga is not None and ga < 1:
        ga = None
    return ga


def _nowhere(add: Add, gb: int, mbs: int, ga: int | None, dp: int) -> None:
    """The global batch is no whole multiple of what one data-parallel rank takes a step
    (micro-batch x GA; the micro-batch where GA is derived): no dp makes it hold."""
    per_dp = mbs * (ga or 1)
    what = f"micro-batch {mbs} x GA steps {ga}" if ga is not None else f"micro-batch {mbs}"
    lower, upper = gb // per_dp * per_dp, (gb // per_dp + 1) * per_dp
    nearest = f"{lower} or {upper} are the nearest" if lower else f"{upper} is the nearest"
    regroup = (f", or GA to a divisor of {gb // mbs}" if ga is not None and gb % mbs == 0
               else "")
    values: dict[str, Any] = {"global_batch": gb, "micro_batch_size": mbs, "dp": dp}
    if ga is not None:
        values["grad_accum_steps"] = ga
    add("batch-mismatch", "error",
        f"global batch {gb} != {what} x dp for any dp: {gb} is not a multiple of "
        f"{per_dp}, so no data-parallel size makes them agree and the framework refuses it "
        f"on any GPU count (the dp={dp} assumed is not the cause); set the global batch to "
        f"a multiple of {per_dp} ({nearest}){regroup}",
        every_dp=True, **values)
