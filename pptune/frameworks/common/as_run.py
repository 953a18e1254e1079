"""A plan priced as its framework runs it (``Adapter.as_run``), where the framework runs
that plan itself: how check-config times the plans it compares a file with
(check/best.py) and how ``recommend --framework`` ranks its plans
(plan/framework_search.py), so both list the step ``--emit`` writes."""

from __future__ import annotations

from pptune.costmodel.search import Plan
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
