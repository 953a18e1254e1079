"""A simulated step split into its parts: what the step is made of, device by device.

The busiest pipeline rank (the one whose compute takes longest) sets the
step; its step is

    step = compute parts + exposed data-parallel traffic + exposed sends
           + optimizer step + bubble

- compute parts: the rank's ops over the step, by part (parts.py: GEMMs,
  attention, memory-bound ops, launches, each communication group inside the
  layers), ``m`` times each of its stages' layers, the recomputed layers'
  forward parts once more (memory.recomputed_layers, as with_recompute prices
  them);
- exposed data-parallel traffic (gradient reduction, sharded-state gathers)
  and exposed pipeline sends, as ``evaluate.explain`` finds them (the step
  re-simulated without each);
- the FP8 amax reductions delayed scaling waits on after each chunk pass
  (amax.py), as ``explain`` finds them exposed;
- the optimizer step after the last backward (``Plan.optimizer_s``,
  optimizer.py: HBM-bound over the rank's shard of the state);
- the bubble: the rest of the step, the rank waiting on the others.

The parts come from the cost table's layers and the simulated plan, so a
dimension the model prices (its ops, its exposed traffic) appears here as
its own part.

``exposed_cp_s`` reads one part on its own: the context-parallel K/V
exchange (context.py prices only what outlasts the attention it runs beside,
and nothing else hides it), over the step on the busiest rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pptune.costmodel.evaluate import Plan, PlanRequest, explain, exposed
from pptune.costmodel.memory import Recompute, recomputed_layers, stage_recomputed_layers
from pptune.costmodel.partition import stage_bounds
from pptune.costmodel.parts import PartTimes
from pptune.costmodel.schedules import stage_device
from pptune.costmodel.table import CostTable

DATA_PARALLEL = "data-parallel communication"
SENDS = "pipeline sends"
AMAX = "FP8 amax reductions"
OPTIMIZER = "optimizer step"
CONTEXT_PARALLEL = "cp communication"  # context.py's cp_kv ops (parts.part_of)
BUBBLE = "pipeline bubble"


@dataclass(frozen=True)
class StepParts:
    """One plan's step by part, seconds; the parts sum to ``step_s``."""

    step_s: float
    device: int  # the pipeline rank the split describes (the busiest)
    parts: tuple[tuple[str, float], ...]

    def seconds(self, part: str) -> float:
        return sum(s for p, s in self.parts if p == part)

    def share(self, part: str) -> float:
        return self.seconds(part) / self.step_s if self.step_s > 0 else 0.0


def device_parts(layer_parts: Sequence[Sequence[PartTimes]], stage_layers: Sequence[int],
                 device_of: Sequence[int], m: int,
                 recomputed: frozenset[int] = frozenset()) -> list[dict[str, float]]:
    """Per device: seconds by part over one step of ``m`` micro-batches."""
    out: list[dict[str, float]] = [{} for _ in range(max(device_of, default=-1) + 1)]
    for k, (s, e) in enumerate(stage_bounds(stage_layers)):
        acc = out[device_of[k]]
        for i in range(s, e):
            for pt in layer_parts[i]:
                again = pt.fwd_s if i in recomputed else 0.0
                acc[pt.part] = acc.get(pt.part, 0.0) + m * (pt.total_s + again)
    return out


def step_parts(table: CostTable, req: PlanRequest, plan: Plan,
               layer_parts: Sequence[Sequence[PartTimes]]) -> StepParts:
    """The plan's step split into parts (module docstring); ``layer_parts`` per layer of
    ``table`` at the plan's micro-batch size."""
    if len(layer_parts) != len(table.names):
        raise ValueError(f"{len(layer_parts)} layers of parts for a table of "
                         f"{len(table.names)} layers")
    n_stages = len(plan.stage_layers)
    device_of = [stage_device(plan.schedule, plan.pp, k) for k in range(n_stages)]
    redo = frozenset(recomputed_layers(table.names, plan.recompute, req.recompute_every))
    per_device = device_parts(layer_parts, plan.stage_layers, device_of,
                              plan.num_microbatches, redo)
    busy = [sum(d.values()) for d in per_device]
    d = max(range(len(busy)), key=busy.__getitem__)
    shown = plan if plan.exposed_p2p_s is not None else explain(table, req, plan)
    dp_s = shown.exposed_allreduce_s or 0.0
    p2p_s = shown.exposed_p2p_s or 0.0
    amax_s = shown.exposed_amax_s or 0.0
    opt_s = plan.optimizer_s
    bubble = exposed(plan.step_time_s, busy[d] + dp_s + p2p_s + amax_s + opt_s, plan.step_time_s)
    parts = [(p, s) for p, s in per_device[d].items() if s > 0]
    parts += [(DATA_PARALLEL, dp_s), (SENDS, p2p_s), *([(AMAX, amax_s)] if amax_s else []),
              (OPTIMIZER, opt_s), (BUBBLE, bubble)]
    return StepParts(busy[d] + dp_s + p2p_s + amax_s + opt_s + bubble, d, tuple(parts))


def exposed_cp_s(table: CostTable, req: PlanRequest, plan: Plan) -> float | None:
    """Seconds the plan's context-parallel K/V exchange adds to the step on its busiest
    pipeline rank: the exchange's exposed time in every layer it holds, ``m`` times,
    and again in the forwards it recomputes (the module-recomputed twin's layers for
    ``Recompute.MODULES``, each stage's own count for recomputation per stage). 0
    without context parallelism; None for costs not split by part (measured)."""
    if plan.cp == 1:
        return 0.0
    priced = table.modules_table if plan.recompute is Recompute.MODULES else None
    layers = ((priced or table).layer_parts or {}).get(plan.micro_batch_size)
    if layers is None:
        return None
    redo = (stage_recomputed_layers(table.names, plan.stage_layers, plan.recompute_layers)
            if plan.recompute_layers is not None
            else recomputed_layers(table.names, plan.recompute, req.recompute_every))
    device_of = [stage_device(plan.schedule, plan.pp, k) for k in range(len(plan.stage_layers))]
    per_device = device_parts(layers, plan.stage_layers, device_of, plan.num_microbatches,
                              frozenset(redo))
    busiest = max(per_device, key=lambda d: sum(d.values()))
    return busiest.get(CONTEXT_PARALLEL, 0.0)
