"""Why no plan of ``recommend`` fits, after a search that found nothing: the counts and
what to change (a reserve the GPU cannot hold is refused before the search:
``reserve.check_reserve``).

The hints name only what the search did not try: a tensor-parallel size, a sharding,
full recomputation or a smaller micro-batch it searched already is no advice.
"""

from __future__ import annotations

from pptune import limits
from pptune.costmodel.keys import CostKey
from pptune.costmodel.memory import Recompute
from pptune.costmodel.search import PlanRequest, Sharding
from pptune.costmodel.sharding import FP32_MOMENT_BYTES
from pptune.costs.dims import DEFAULT_TP, tp_problem
from pptune.plan.recommend import RecommendRun
from pptune.report.plans import reason_counts

GIB = 1024**3


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
    node = req.gpus_per_node  # whole nodes of them, where they are more than one node
    nodes = f" ({-(-fewest // node):,} nodes of {node})" if fewest > node > 1 else ""
    return f"{state}: at least {fewest:,} GPUs of {t.memory_bytes / GIB:,.0f} GiB{nodes}"


def memory_hints(run: RecommendRun) -> list[str]:
    """What saves memory that the search left out: tensor-parallel sizes (those the
    default search takes: inside a node, dividing the GPUs and the model's heads),
    sharding the state, full recomputation, a smaller micro-batch, Adam's moments in BF16."""
    req: PlanRequest = run.plan_request
    gpus = req.gpus
    shape = run.costs.shape if run.costs is not None else run.shape
    searched = {k.tp for k in req.keys()}
    tps = [t for t in DEFAULT_TP if t > 1 and t not in searched and t <= req.gpus_per_node
           and gpus % t == 0 and (shape is None or tp_problem(shape, t, gpus) is None)]
    shardings = set(req.shardings)
    more = [s.value for s, covered in (
        (Sharding.ZERO1, {Sharding.ZERO1, Sharding.ZERO2, Sharding.ZERO3, Sharding.FSDP}),
        (Sharding.FSDP, {Sharding.ZERO3, Sharding.FSDP})) if not shardings & covered]
    sizes = req.micro_batch_sizes or ()
    # Megatron-LM's precision-aware optimizer: 4 of Adam's 8 bytes a parameter, sharded
    # (DeepSeek-V3 kept its moments in BF16); it needs the distributed optimizer
    # (where the state alone outgrows the GPUs, only more GPUs help: state_floor)
    narrow = (req.moment_bytes == FP32_MOMENT_BYTES and gpus > 1
              and shardings != {Sharding.NONE} and state_floor(run) is None)
    return [*([f"--tp {'/'.join(map(str, tps))}"] if tps else []),
            *([f"--sharding {','.join(more)}"] if more and gpus > 1 else []),
            *(["--recompute full"] if Recompute.FULL not in req.recomputes else []),
            *(["smaller --micro-batch-sizes"] if sizes and min(sizes) > 1 else []),
            *(["--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"] if narrow else [])]


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
        floor = state_floor(run)
        *some, last = ["more GPUs" + (f" ({floor})" if floor else ""), *memory_hints(run)]
        hints.append(f"{', '.join(some)} or {last}" if some else last)
    if rej.get("batch_not_divisible"):
        hints.append(
            f"a --global-batch divisible by micro-batch size x dp (now {run.global_batch})"
        )
    if rej.get("too_large_to_simulate"):
        hints.append("a smaller --global-batch or larger --micro-batch-sizes (over "
                     "2,000,000 ops per step are not simulated)")
    if rej.get("experts_do_not_divide_ranks"):
        hints.append("--ep x --etp dividing a stage's ranks (tp x cp x dp, the GPUs over pp: "
                     "megatron-core's expert groups live inside a pipeline stage), so a "
                     "smaller --ep or a shallower --pp")
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
