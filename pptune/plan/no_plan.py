"""What recommend says when no plan fits: the counts that say why and what to change.

``no_plan_message`` is the one line of ``NoFeasiblePlan`` (recommend, tune's
trials); ``state_floor`` the fewest GPUs that could hold the training state at
all, where the GPUs asked for cannot.
"""

from __future__ import annotations

from pptune import limits
from pptune.costmodel.keys import CostKey
from pptune.costmodel.search import Sharding
from pptune.plan.recommend import GIB, RecommendRun
from pptune.report.plans import reason_counts


def state_floor(run: RecommendRun) -> str | None:
    """When the training state alone outgrows the GPUs asked for: its size on one GPU and
    the fewest GPUs that hold it sharded over all of them (ZeRO-3 or FSDP, before any
    activation: a lower bound on the GPUs a plan needs). None when the GPUs asked for
    could hold it."""
    t, req = run.table, run.plan_request
    key = run.costs.key if run.costs is not None else CostKey(tp=req.tp)
    n = len(t.names)
    experts = t.expert_params(0, n)
    params = (t.params(0, n) - experts) * key.tp + experts * key.ep * key.etp

    def per_gpu(g: int) -> float:
        return params * min(req.state_per_param(s, g) for s in Sharding)

    if per_gpu(req.gpus) <= t.memory_bytes:
        return None
    fewest = req.gpus
    while per_gpu(fewest) > t.memory_bytes and fewest < limits.MAX_GPUS:
        fewest *= 2
    state = (f"the weights, gradients and optimizer state alone are {per_gpu(1) / GIB:,.0f} "
             "GiB at their smallest (fully sharded)")
    if per_gpu(fewest) > t.memory_bytes:
        return f"{state}: more than {limits.MAX_GPUS:,} GPUs"
    low = fewest // 2
    while fewest - low > 1:  # per_gpu(low) is over memory, per_gpu(fewest) not
        mid = (low + fewest) // 2
        low, fewest = (low, mid) if per_gpu(mid) <= t.memory_bytes else (mid, fewest)
    return f"{state}: at least {fewest:,} GPUs of {t.memory_bytes / GIB:,.0f} GiB"


def no_plan_message(run: RecommendRun) -> str:
    """What to change when nothing fits, with the counts that say why."""
    rej = run.result.rejected
    counts = reason_counts(rej)
    hints = []
    if rej.get("recompute_modules_not_modelled"):
        hints.append("--recompute selective or full: recomputing named modules (Megatron-LM "
                     "--recompute-modules) is priced for mixture-of-experts and MLA models, "
                     "and this model has neither")
    if rej.get("out_of_memory"):
        gpus = run.plan_request.gpus
        tps = "/".join(str(t) for t in (2, 4, 8) if t <= gpus and gpus % t == 0)
        floor = state_floor(run)
        hints.append("more GPUs" + (f" ({floor})" if floor else "") + ", "
                     + (f"--tp {tps}, " if tps else "")
                     + ("--sharding zero1,fsdp, " if gpus > 1 else "")
                     + "--recompute full or smaller --micro-batch-sizes")
    if rej.get("batch_not_divisible"):
        hints.append(
            f"a --global-batch divisible by micro-batch size x dp (now {run.global_batch})"
        )
    if rej.get("too_large_to_simulate"):
        hints.append("a smaller --global-batch or larger --micro-batch-sizes (over "
                     "2,000,000 ops per step are not simulated)")
    if rej.get("microbatches_less_than_pp") or rej.get("microbatches_not_multiple_of_pp"):
        hints.append("a larger --global-batch so that micro-batches >= pipeline depth")
    framework = run.request.framework
    if framework is not None:  # recommend --framework: only the plans its files state
        hints.append(f"without --framework {framework}, every plan pptune prices")
    return (
        f"no feasible plan for {run.plan_request.gpus} GPU"
        f"{'s' if run.plan_request.gpus != 1 else ''} ({counts or 'no candidates'}); "
        f"try {'; or '.join(hints) or 'different flags'}"
    )
