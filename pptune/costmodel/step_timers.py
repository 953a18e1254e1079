"""A job's step as its framework's own timers split it, beside pptune's parts.

Megatron-LM's ``training_log`` prints, with ``--timing-log-level`` 1 or more,
each timer's time an iteration (frameworks/megatron/log.py reads the slowest
rank's). Its step is (megatron/training/training.py ``train_step``):

- ``forward-backward``: the pipeline schedule's forward and backward passes,
  their sends, the bubble and the batch loading (``batch-generator`` runs
  inside it);
- the gradient synchronisation after it: ``all-grads-sync`` (the
  data-parallel reduction's unhidden rest, ``finish_grad_sync``),
  ``layernorm-grads-all-reduce`` and ``embedding-grads-all-reduce``
  (``grads-all-reduce`` / ``grads-reduce-scatter`` in releases before
  ``all-grads-sync``);
- ``optimizer``: the whole optimizer step, the distributed optimizer's
  unoverlapped ``params-all-gather`` and its ``optimizer-*`` sub-timers
  included (they are not counted again);
- the rest: the step less those (the learning-rate scheduler, logging).

pptune's parts of the step (costmodel/breakdown.py) go into the same groups:
its data-parallel communication as the gradient sync, its optimizer step as
the optimizer, everything else (compute, sends, bubble, amax waits) as
forward-backward. The distributed optimizer's exposed parameter gather is in
pptune's data-parallel part but in Megatron-LM's optimizer timer: the two
groups are compared together where it matters.
"""

from __future__ import annotations

from collections.abc import Mapping

from pptune.costmodel.breakdown import DATA_PARALLEL
from pptune.costmodel.breakdown import OPTIMIZER as OPTIMIZER_PART

FORWARD_BACKWARD = "forward-backward"
GRADIENT_SYNC = "gradient sync"
OPTIMIZER = "optimizer"
REST = "rest of the step"
# Megatron-LM's timers (training.py's timers_to_log) by the group of the step they time
MEGATRON_GROUPS = {
    "forward-backward": FORWARD_BACKWARD,
    "all-grads-sync": GRADIENT_SYNC,
    "grads-all-reduce": GRADIENT_SYNC,
    "grads-reduce-scatter": GRADIENT_SYNC,
    "layernorm-grads-all-reduce": GRADIENT_SYNC,
    "embedding-grads-all-reduce": GRADIENT_SYNC,
    "optimizer": OPTIMIZER,
}


def measured_parts(timers_ms: Mapping[str, float], step_s: float) -> dict[str, float]:
    """The step by group, seconds, from the timers (ms an iteration) and the measured
    step; {} without the forward-backward timer (the log's --timing-log-level 0)."""
    if "forward-backward" not in timers_ms:
        return {}
    out: dict[str, float] = {}
    for name, group in MEGATRON_GROUPS.items():
        if name in timers_ms:
            out[group] = out.get(group, 0.0) + timers_ms[name] / 1e3
    out[REST] = step_s - sum(out.values())
    return out


def model_parts(parts: Mapping[str, float]) -> dict[str, float]:
    """pptune's parts of a step (breakdown.step_parts, seconds) in the timers' groups."""
    out = {FORWARD_BACKWARD: 0.0, GRADIENT_SYNC: 0.0, OPTIMIZER: 0.0}
    for part, s in parts.items():
        group = (GRADIENT_SYNC if part == DATA_PARALLEL else OPTIMIZER if part == OPTIMIZER_PART
                 else FORWARD_BACKWARD)
        out[group] += s
    return out
