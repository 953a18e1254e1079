"""How check-config qualifies its findings.

- A config that states neither its GPU count nor its data-parallel size (a torchtitan
  file's ``data_parallel_shard_degree = -1``, a launch script that takes its node count
  from the scheduler) is checked at an assumed data-parallel size, and what depends on
  it is a warning, not an error: the run may have the GPUs that make it right.
  ``--gpus`` checks it for real.
- A bubble over its limit says what brings it under.
- Memory over the limit on several pipeline ranks is one finding: the ranks and the
  fullest.
- A framework's own refusal replaces check-config's generic finding of the same fault.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, TypeVar

from pptune.costmodel.refine import device_loads
from pptune.costmodel.search import Plan
from pptune.costmodel.table import CostTable, stage_costs
from pptune.frameworks.common.adapter import Add
from pptune.report.fmt import fmt_bytes, fmt_pct, fmt_ranges
from pptune.schemas import TrainingConfig

# the finding of a config checked at an assumed dp (calibrate refuses such a job)
DP_ASSUMED = "dp-assumed"

# findings whose verdict depends on the data-parallel size: the memory of sharded
# state, the expert layout's ranks, the batch arithmetic and the micro-batches it gives
DP_DEPENDENT = frozenset({
    "memory-overflow", "moe-world", "batch-mismatch", "1f1b-m-lt-pp",
    "interleaved-m-not-multiple", "dualpipe-microbatches", "megatron-microbatch-group",
    "flushes-mismatch",
})


def assumed_dp(cfg: TrainingConfig) -> int:
    """The smallest data-parallel size the config's own expert layout admits: ep x etp
    ranks must divide tp x cp x dp (1 for a dense model)."""
    experts = cfg.ep * cfg.etp
    return experts // math.gcd(experts, cfg.tp * cfg.cp)


def softened(severity: str, message: str, id_: str, dp: int | None) -> tuple[str, str]:
    """An error that depends on an assumed dp becomes a warning that says so."""
    if dp is None or severity != "error" or id_ not in DP_DEPENDENT:
        return severity, message
    return "warning", (f"{message} (at dp={dp}, assumed: the config states no GPU count; "
                       "pass --gpus N to check it)")


def unknown_dp(cfg: TrainingConfig, add: Add) -> tuple[int, int | None]:
    """The data-parallel size of a config that states neither gpus nor dp, and the dp
    assumed (None: inferred from the batch, which the config states in full)."""
    mbs, gb, ga = cfg.micro_batch_size, cfg.global_batch, cfg.grad_accum_steps
    if gb and ga and gb % (mbs * ga) == 0:
        dp = gb // (mbs * ga)
        add("dp-inferred", "info", f"dp inferred as {dp} = global batch {gb} / (micro-batch "
            f"{mbs} x GA {ga}); pass --gpus to check it", dp=dp)
        return dp, None
    dp = assumed_dp(cfg)
    add(DP_ASSUMED, "warning", f"the config states neither gpus nor dp; assumed dp={dp}, "
        "and what depends on it is a warning (pass --gpus N)", dp=dp)
    return dp, dp


def memory_overflow(peaks: list[float], cap: float, fixes: str, severity: str,
                    add: Add) -> bool:
    """One ``memory-overflow`` finding for the pipeline ranks whose ``peaks`` (bytes, by
    rank) exceed ``cap``: the ranks as runs and the fullest, whose rank and peak are its
    ``rank`` and ``peak_bytes`` (``ranks``: every rank over); ``fixes``: what to change.
    Whether any rank was over."""
    over = [d for d, b in enumerate(peaks) if b > cap]
    if not over:
        return False
    worst = max(over, key=lambda d: peaks[d])
    peak = peaks[worst]
    said = (f"pipeline rank {worst} needs {fmt_bytes(peak)}, over the {fmt_bytes(cap)} it may "
            f"use by {fmt_bytes(peak - cap)}" if len(over) == 1 else
            f"pipeline ranks {fmt_ranges(over)} ({len(over)} of {len(peaks)}) need up to "
            f"{fmt_bytes(peak)} (rank {worst}), over the {fmt_bytes(cap)} each may use by up "
            f"to {fmt_bytes(peak - cap)}")
    add("memory-overflow", severity, f"{said}; {fixes}", rank=worst, peak_bytes=peak,
        capacity_bytes=cap, ranks=over)
    return True


def balance(table: CostTable, plan: Plan) -> tuple[float, int]:
    """(mean over max of the devices' work a micro-batch, the busiest device): each
    device's work is its stages' layers (refine.device_loads)."""
    per_layer = [c.total_s for c in stage_costs(table, plan.micro_batch_size,
                                                (1,) * sum(plan.stage_layers))]
    loads = device_loads(per_layer, plan.stage_layers, plan.schedule, plan.pp)
    top = max(loads)
    return (sum(loads) / len(loads) / top if top > 0 else 1.0), loads.index(top)


def bubble_hint(p: int, m: int | None, bubble: float, limit: float, multiple: int,
                ratio: float = 1.0, busiest: int = 0) -> str:
    """What brings the bubble under ``limit``.

    Without a pipeline (p = 1) the idle time is data-parallel communication the step
    waits on. With one, it is the fill and drain, which do not grow with the
    micro-batches m, plus the lighter devices' wait on the busiest in every micro-batch,
    which does: with ``ratio`` the devices' mean work a micro-batch over the busiest's
    (``balance``; 1: balanced), the bubble falls towards the floor 1 - ratio as m grows.
    Taking the fill and drain F (in the busiest device's micro-batches) from the bubble b
    at m, 1 - b = m ratio / (F + m), the bubble is under L from
    m' >= (1 - L) F / (ratio - (1 - L)), rounded up to a ``multiple`` (pp for interleaved
    1F1B, as Megatron-LM and torch run it); with the floor at L or above no m brings it
    under, and the hint names the busiest pipeline rank."""
    if p == 1:
        return ("; with pp=1 there is no pipeline: the idle time is the data-parallel "
                "communication the step waits on (overlap it with the backward, or run more "
                "micro-batches a step)")
    if not m or limit <= 0 or bubble >= 1:
        return ""
    if 1 - ratio >= limit:
        return (f"; more micro-batches cannot: the stages are unbalanced, pipeline rank "
                f"{busiest} works {1 / ratio:.2f}x the mean a micro-batch, so the others wait "
                f"{fmt_pct(1 - ratio)} of the step at any m; move layers off it")
    fill = max(0.0, m * ratio / (1 - bubble) - m)
    need = math.ceil((1 - limit) * fill / (ratio - (1 - limit)) - 1e-9)
    need = math.ceil(need / multiple) * multiple
    return (f"; about m >= {need}" + (" (a multiple of pp)" if multiple > 1 else "")
            + " would bring it under the limit: the fill and drain stay, the work grows")


# a framework's own refusal and pptune's generic finding of the same fault: the
# framework's, which cites its rule, is kept
TWINS = {"megatron-layers-not-divisible": "layers-not-divisible",
         "torchtitan-global-batch": "batch-mismatch", "deepspeed-batch": "batch-mismatch",
         # torchtitan's expert mesh (ep x etp dividing dp_shard x cp x tp) is stricter than
         # the generic placement rule (ep x etp dividing tp x cp x dp)
         "torchtitan-ep-mesh": "moe-world"}


class _Found(Protocol):
    @property
    def id(self) -> str: ...


F = TypeVar("F", bound=_Found)


def without_twins(found: list[F]) -> list[F]:
    """The findings without a generic one whose framework twin is among them."""
    ids = {f.id for f in found}
    twins = {TWINS[i] for i in ids if i in TWINS}
    return [f for f in found if f.id not in twins]


def bubble_of_the_best(found: list[Any], best: Plan, limit: float, stated: bool) -> None:
    """The bubble-over-limit finding (in ``found``) made information where the limit is the
    default (not ``stated`` by flag or file) and ``best``, the best plan for the same GPUs
    and batch, is over it too: no plan escapes that bubble, so it is what the job costs,
    not a fault of the file (recommend's plan 1 of a large MoE on an NVL72 failed
    ``--strict`` on it)."""
    if stated or best.bubble_rate <= limit:
        return
    for f in found:
        if f.id == "bubble-over-limit":
            f.severity = "info"
            f.message += (f"; the best plan for these GPUs and batch (pp={best.pp} "
                          f"{best.schedule.value}) has {fmt_pct(best.bubble_rate)}: no plan "
                          "checked stays under the default limit (limits.max_bubble or "
                          "--max-bubble sets one to gate on)")
