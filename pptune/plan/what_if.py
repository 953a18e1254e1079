"""What recommend says beside its ranking: why a plan without a pipeline ranks first, what
a sharding or recomputation it was told to skip would give, what a nearby global batch
would give, and what the analytic MoE step leaves out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import TableSource
from pptune.costmodel.precision import Fp8Kernels, copies_format, is_low
from pptune.costmodel.search import (
    CostTable,
    PlanRequest,
    Recompute,
    SearchResult,
    Sharding,
    evaluate,
    search,
)
from pptune.costs.resolve import Costs, resolve
from pptune.options import CostOptions
from pptune.report.fmt import fmt_bytes
from pptune.report.plans import fullest

# the shardings Megatron-LM runs --fp8-param-gather with: its distributed optimizer
# (zero1) or Megatron-FSDP (zero2, zero3, fsdp), not plain DDP (training/arguments.py
# validate_args: "--fp8-param-gather only supported with distributed optimizer, torch
# fsdp2, megatron fsdp, or inference mode")
FP8_GATHER_SHARDINGS = (Sharding.ZERO1, Sharding.ZERO2, Sharding.ZERO3, Sharding.FSDP)

# how a what-if searches again: the search, or recommend --framework's over what the
# framework's files state (plan/framework_search.py), so that its plans are ones they state
Search = Callable[[TableSource, PlanRequest], SearchResult]


def margin_note(result: SearchResult, margin: float) -> str:
    """Why a plan without a pipeline ranks before a faster pipelined one. One line."""
    w, fast = result.plans[0], result.passed_over
    assert fast is not None
    where = next((i for i, p in enumerate(result.plans, 1) if p is fast), None)
    gain = w.step_time_s / fast.step_time_s - 1
    return (f"ranked first without a pipeline: the fastest plan"
            f"{f' (#{where})' if where else ''}, pp={fast.pp} {fast.schedule.value}"
            + (f" v={fast.virtual_stages}" if fast.virtual_stages > 1 else "")
            + f" at {fast.step_time_s:.5g} s, is {gain:.2%} faster, within --pipeline-margin "
            f"{margin:g} (a gain below what the cost model resolves, for a bubble and "
            "stages to balance); --pipeline-margin 0 ranks by step time alone")


def memory_what_if(table: TableSource, req: PlanRequest, result: SearchResult,
                   searching: Search = search) -> str | None:
    """When memory rejected candidates: would a sharding or a recomputation the
    search was told to skip give a faster plan (or any plan)? One line, with the figures."""
    best = result.plans[0].step_time_s if result.plans else None
    options = []
    if set(req.shardings) != set(Sharding):
        options.append(("every --sharding", replace(req, shardings=tuple(Sharding), top=1,
                                                    with_best_1f1b=False)))
    if Recompute.FULL not in req.recomputes and not result.plans:
        options.append(("--recompute full", replace(req, recomputes=(Recompute.FULL,), top=1,
                                                         with_best_1f1b=False)))
    for flag, alt_req in options:
        alt = searching(table, alt_req)
        if not alt.plans:
            continue
        a = alt.plans[0]
        desc = (f"pp={a.pp} dp={a.dp} tp={a.tp} {a.schedule.value}, {a.num_microbatches} x "
                f"{a.micro_batch_size}, sharding {a.sharding.value}, recompute "
                f"{a.recompute.value}, step {a.step_time_s:.3g} s")
        if best is None:
            return f"with {flag} a plan fits: {desc}"
        if a.step_time_s < best * 0.97:
            return f"with {flag} the best plan would be {desc} ({best / a.step_time_s:.2f}x faster)"
    return None


# what the analytic MoE step leaves out (docs/limits.md, "Fine-grained MoE on H100")
MOE_HOST_NOTE = (
    "not priced: the host (Python and framework) time of the MoE layers' many small "
    "kernels, and the host-device synchronisation a dropless layer makes to size its "
    "all-to-all; published runs of models with many narrow experts stepped well above "
    "pptune's price unless their framework captured whole iterations in CUDA graphs "
    "(docs/limits.md). pptune calibrate --run on a short run of the job fits it")


def fp8_gather_what_if(opts: CostOptions, req: PlanRequest, result: SearchResult,
                       priced: Callable[[CostOptions], TableSource],
                       searching: Search = search) -> str | None:
    """When FP8 plans of Transformer Engine's kernels were searched and
    --fp8-param-gather was left unsaid: the best plan with it, which the search does not
    try (its costs are another table a key: ``priced``, the options' tables). One line,
    with the FP8 weight copies the winner holds, which FP8 parameters do without."""
    keys = tuple(k for k in req.keys() if is_low(k.precision))
    shardings = tuple(s for s in req.shardings if s in FP8_GATHER_SHARDINGS)
    if (opts.fp8_param_gather is not None or opts.fp8_linears() is not Fp8Kernels.TE
            or not result.plans or not keys or not shardings):
        return None
    alt = searching(priced(replace(opts, fp8_param_gather=True)), replace(
        req, cost_keys=keys, tp=keys[0].tp, shardings=shardings, fp8_param_gather=True,
        top=1, with_best_pp1=False, with_best_1f1b=False)).plans
    if not alt:
        return None
    a, win = alt[0], result.plans[0]
    full = fullest(win)  # the GPU whose peak the winner's memory line itemizes
    copies = full.fp8_copies_bytes if full is not None else 0.0
    speed = win.step_time_s / a.step_time_s
    v = f" v={a.virtual_stages}" if a.virtual_stages > 1 else ""
    fmt = copies_format(win.key.precision)
    flag = " --fp4-param-gather" if fmt == "NVFP4" else ""
    return (f"not searched: --fp8-param-gather (Megatron-LM{flag}: {fmt} weights "
            f"all-gathered in {fmt} by the distributed optimizer or Megatron-FSDP, "
            f"{'about a quarter of' if fmt == 'NVFP4' else 'half'} the bytes, and no {fmt} copy "
            "of them cached for the step); with it the best plan would be "
            f"pp={a.pp} dp={a.dp} tp={a.tp}" + (f" cp={a.cp}" if a.cp > 1 else "")
            + f" {a.key.precision.value} {a.schedule.value}{v}, {a.num_microbatches} x "
            f"{a.micro_batch_size}, sharding {a.sharding.value}, recompute "
            f"{a.recompute.value}, step {a.step_time_s:.4g} s ("
            + ("the winner's step" if round(speed, 3) == 1.0 else f"{speed:.3f}x faster"
               if speed > 1 else f"{1 / speed:.3f}x slower")
            + f"), peak {fmt_bytes(max(m.total_bytes for m in a.memory))} a GPU"
            + (f" (the winner's fullest GPU holds {fmt_bytes(copies)} of {fmt} weight copies)"
               if copies else "")
            + "; rerun with --fp8-param-gather to rank its plans")


def nearby_batch(tables: TableSource, table: CostTable, req: PlanRequest,
                 searching: Search = search) -> tuple[PlanRequest, SearchResult] | None:
    """The closest global batch (within 25%) for which the search finds a plan."""
    gb = req.global_batch
    sizes = req.micro_batch_sizes or sorted(table.by_mb)
    ranks = sorted({req.gpus // (k.tp * k.cp) for k in req.keys()})

    def could(g: int) -> bool:
        for n in ranks:
            for p in (p for p in range(1, n + 1) if n % p == 0):
                dp = n // p
                for b in sizes:
                    if g % (b * dp) == 0 and g // (b * dp) >= p:
                        return True
        return False

    tried = 0
    for delta in range(1, max(2, gb // 4) + 1):
        for g in (gb + delta, gb - delta):
            if g < 1 or not could(g):
                continue
            alt = replace(req, global_batch=g)
            res = searching(tables, alt)
            tried += 1
            if res.plans:
                return alt, res
            if tried >= 8:
                return None
    return None


def batch_what_if(tables: TableSource, req: PlanRequest, result: SearchResult,
                  chosen: bool, searching: Search = search) -> str | None:
    """When every plan pipelines because no plan without a pipeline divides the default
    global batch over the GPUs (24 GPUs, 512 samples): the fastest plan without one at
    the nearest larger batch that a data-parallel-only plan divides, when it processes
    samples at least 3% faster. ``chosen``: the user named the batch (nothing said)."""
    if (chosen or not result.plans or any(p.pp == 1 for p in result.plans)
            or (req.pp and 1 not in req.pp) or not result.rejected.get("batch_not_divisible")):
        return None
    gb, win = req.global_batch, result.plans[0]
    batches = sorted({-(-gb // n) * n for n in {req.gpus // (k.tp * k.cp) for k in req.keys()}})
    found = []  # (samples a second, batch, plan) at each batch a dp-only plan divides
    for g in (b for b in batches if gb < b <= gb * 1.25):
        alt = searching(tables, replace(req, global_batch=g, pp=(1,), top=1,
                                              with_best_1f1b=False)).plans
        if alt:
            found.append((g / alt[0].step_time_s, g, alt[0]))
    if not found:
        return None
    rate, g, a = max(found, key=lambda f: f[0])
    if rate < 1.03 * gb / win.step_time_s:
        return None
    return (f"no plan without a pipeline divides {gb} samples over {req.gpus} GPUs; with "
            f"--global-batch {g} one runs (dp={a.dp} tp={a.tp}"
            + (f" cp={a.cp}" if a.cp > 1 else "") + f", {a.num_microbatches} x "
            f"{a.micro_batch_size}, sharding {a.sharding.value}, step {a.step_time_s:.3g} s): "
            f"{g * win.step_time_s / (gb * a.step_time_s) - 1:.0%} more samples a second "
            "than the winner (the learning rate may need rescaling with the batch)")


def batch_tokens_note(model: str, batch: int, seq_len: int, default_seq: int) -> str | None:
    """--seq-len without --global-batch: the model's batch, in sequences, at another length.
    One line with the tokens a step, or None at the model's own length."""
    if seq_len == default_seq or default_seq <= 0:
        return None
    keep = batch * default_seq // seq_len
    return (f"global batch {batch} sequences of {seq_len:,} tokens = {_tokens(batch * seq_len)} "
            f"tokens a step ({model}'s default batch, set for {default_seq:,}-token sequences); "
            "--global-batch N sets the sequences a step"
            + (f" (--global-batch {keep} keeps the default's {_tokens(batch * default_seq)} "
               "tokens)" if keep >= 1 and keep * seq_len == batch * default_seq else ""))


def _tokens(n: float) -> str:
    for factor, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= factor:
            return f"{n / factor:.1f}{unit}"
    return f"{n:.0f}"


def dispatch_what_if(opts: CostOptions, gpus: int, costs: Costs, req: PlanRequest,
                     result: SearchResult) -> str | None:
    """When the winner spreads its experts over ranks and is priced with NCCL's
    all-to-all: its step with DeepEP's dispatch (costmodel/dispatch.py), when that is
    at least 3% faster. One line. ``opts``: the costs asked for, ``gpus``: the job's."""
    if (not result.plans or costs.measured or costs.shape is None or not costs.shape.moe
            or opts.dispatcher is not Dispatcher.ALLTOALL):
        return None
    best = result.plans[0]
    if best.ep * best.etp <= 1:
        return None
    deepep = resolve(replace(opts, moe_dispatcher=Dispatcher.DEEPEP),
                     sizes=(best.micro_batch_size,), search=True,
                     gpus_per_node=req.gpus_per_node, gpus=gpus)
    alt = evaluate(deepep.table_for(best.key), req, best.spec)
    if alt.step_time_s >= best.step_time_s * 0.97:
        return None
    return (f"with DeepEP's dispatch (--moe-dispatcher deepep: a token sent once a node and "
            f"rank, not once an expert) the winner would step {alt.step_time_s:.3g} s "
            f"({best.step_time_s / alt.step_time_s:.2f}x faster)")
