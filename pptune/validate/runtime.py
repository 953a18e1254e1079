"""The pipelining runtime's own work per action, measured in the run.

torch.distributed.pipelining runs each action of a schedule (a forward, a
backward or its halves, an overlapped pair's two halves) through Python: the
action's lookup, its sends and receives posted with ``batch_isend_irecv`` and
waited on, argument flattening, the stage's bookkeeping. None of that is in a
profile, which times each layer alone. Schedules differ in how many actions a
step has: on 2 gloo ranks of this CPU a step of Linear(8, 8) stages took 4.6
ms under 1F1B with m = 4 and 17.6-18.9 ms under ZBV and DualPipeV (docs/
measured.md), a few per cent of a gpt-small step, more of it for the V
schedules.

validate measures it beside the real steps: each rank runs the same schedule
on the same stage indices and micro-batch count with tiny stages (one
Linear(8, 8) each, micro-batches of one row), so that compute and transfers
cost next to nothing, and times the step (``tiny_step_s``). What the
simulator gives that step from the profile's link alone (no compute) is taken
off; the rest, over the busiest rank's actions (an overlapped pair counts
two), is the runtime's time per action (``per_action_s``), added to every
op of the prediction (``with_overhead``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from pptune.costmodel.schedule_ops import OpKind
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.simulate import Link, StageCost, simulate
from pptune.launch.stats import median
from pptune.validate.spec import RunSpec

TINY_WIDTH = 8  # the tiny stages' Linear width and a micro-batch's elements
TINY_WARMUP = 2
TINY_STEPS = 5


def per_action_s(spec: RunSpec, link: Link, measured_s: float) -> float:
    """The runtime's seconds per action: the tiny step measured, less what the
    profile's link alone gives it, over the busiest rank's actions (module docstring)."""
    idle = [StageCost(0.0, 0.0, 0.0, out_bytes=TINY_WIDTH * 4.0)] * spec.n_stages
    sim = simulate(spec.schedule, spec.pp, spec.microbatches, idle, v=spec.sim_v,
                   link=lambda a, z: link, keep_events=True)
    actions = [0] * spec.pp
    for e in sim.events:
        actions[e.device] += 2 if e.op.kind is OpKind.FB else 1
    busiest = max(actions)
    if busiest == 0:
        return 0.0
    return max(0.0, measured_s - sim.step_time_s) / busiest


def with_overhead(stages: Sequence[StageCost], per_action: float) -> list[StageCost]:
    """Each op ``per_action`` longer: F, B (whole or split), W and each half of an F&B
    pair; a whole backward (BW) is one action."""
    if per_action <= 0:
        return list(stages)
    return [dataclasses.replace(
        st, fwd_s=st.fwd_s + per_action, bwd_s=st.bwd_s + per_action,
        split_bwd_s=st.split_b_s + per_action, split_wgrad_s=st.split_w_s + per_action)
        for st in stages]


def tiny_step_s(torch: Any, dist: Any, pl: Any, schedule_class: Any, spec: RunSpec,
                stage_ids: Sequence[int], device: str, cuda: bool) -> float:
    """This rank's median step of ``spec``'s schedule over tiny stages (module
    docstring), between barriers, so every rank times the same steps."""
    dev = torch.device(device)
    stages = [pl.PipelineStage(torch.nn.Linear(TINY_WIDTH, TINY_WIDTH).to(dev), k,
                               spec.n_stages, dev) for k in stage_ids]

    def loss(out: Any, target: Any) -> Any:
        return ((out - target) ** 2).mean()

    single = spec.schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B)  # as runner builds it
    schedule = schedule_class(stages[0] if single else stages, spec.microbatches, loss_fn=loss)
    x = torch.randn(spec.microbatches, TINY_WIDTH, device=dev)
    args = (x,) if 0 in stage_ids else ()
    kwargs = {"target": torch.randn_like(x)} if spec.n_stages - 1 in stage_ids else {}
    sync: Callable[[], None] = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    times = []
    for i in range(TINY_WARMUP + TINY_STEPS):
        dist.barrier()
        sync()
        start = time.perf_counter()
        schedule.step(*args, **kwargs)
        sync()
        dist.barrier()
        if i >= TINY_WARMUP:
            times.append(time.perf_counter() - start)
    return median(times)
