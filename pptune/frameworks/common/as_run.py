"""A plan priced as its framework runs it (``Adapter.as_run``), where the framework runs
that plan itself: how check-config times the plans it compares a file with
(check/best.py) and how ``recommend --framework`` ranks its plans
(plan/framework_search.py), so both list the step ``--emit`` writes."""

from __future__ import annotations

from collections.abc import Callable

from pptune.costmodel.keys import CostKey
from pptune.costmodel.listing import Faster
from pptune.costmodel.search import Plan, PlanSpec, RankOrder, Sharding
from pptune.errors import BadInput
from pptune.frameworks.common.adapter import Adapter, Job
from pptune.frameworks.common.express import fits


def as_itself(adapter: Adapter, job: Job, plan: Plan) -> tuple[Job, Plan] | None:
    """The job and plan priced as the framework runs the plan (``Adapter.as_run``: its
    kernels for the plan's schedule, ...); None where it cannot run it (BadInput) or the
    plan so priced outgrows the GPU (``as_run`` then puts no other in its place). A framework that builds the model with
    other layers (torchtitan: no MTP layer) runs another model: the plan is priced as
    searched there (``--emit`` says what it writes instead)."""
    try:
        ran_job, ran = adapter.as_run(job, plan, substitute=False)
    except BadInput:
        return None
    if ran_job.layer_names != job.layer_names:
        return job, plan
    return (ran_job, ran) if ran.spec == plan.spec and fits(ran_job, ran) else None


def as_run_faster(adapter: Adapter, job_of: Callable[[CostKey], Job]) -> Faster | None:
    """The search's allowance for plans the adapter prices as run faster than the search
    (m times ``Adapter.as_run_saving_s`` plus ``Adapter.as_run_step_saving_s`` of the job
    ``job_of`` gives a cost key), kept by key, sharding, depth and micro-batch size (what
    the adapters' savings depend on: the step's by the depth itself and the rank order);
    None where it never runs a plan faster than priced (the default's)."""
    mine = type(adapter)
    if (mine.as_run_saving_s, mine.as_run_step_saving_s) == (
            Adapter.as_run_saving_s, Adapter.as_run_step_saving_s):
        return None
    kept: dict[tuple[CostKey, Sharding, bool, int], float] = {}
    once: dict[tuple[CostKey, Sharding, int, RankOrder], float] = {}

    def faster_s(key: CostKey, spec: PlanSpec) -> float:
        at = (key, spec.sharding, spec.pp > 1, spec.micro_batch_size)
        if at not in kept:
            kept[at] = adapter.as_run_saving_s(job_of(key), spec)
        step = (key, spec.sharding, spec.pp, spec.rank_order)
        if step not in once:
            once[step] = adapter.as_run_step_saving_s(job_of(key), spec)
        return spec.num_microbatches * kept[at] + once[step]
    return faster_s
