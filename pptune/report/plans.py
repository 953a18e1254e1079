"""Rendering and export of ``recommend`` results: the explanation lines, the
rejected counts and the JSON records (the ranked table: ``plan_table``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pptune.costmodel.memory import (
    TORCHTITAN_SELECTIVE_EVERY,
    DeviceMemory,
    recomputed_layers,
    recomputed_per_stage,
)
from pptune.costmodel.partition import stage_bounds
from pptune.costmodel.precision import copies_format
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import DP_INNER, Plan, SearchResult
from pptune.costmodel.sharding import BF16_BYTES, gradient_wire_bytes
from pptune.options.record import PlanFileRequest
from pptune.report.fmt import (
    compact_split,
    fmt_bytes,
    fmt_microbatches,
    fmt_pct,
    fmt_seconds,
    fmt_sizes,
)
from pptune.report.plan_table import Peaks, fmt_rate, mfu, plans_table, training_cost
from pptune.schemas import MemoryParts, PlanFile, PlanRecord

__all__ = ["compact_split", "fmt_rate", "plans_table", "training_cost"]

REASON_TEXT = {
    "batch_not_divisible": "global batch does not divide",
    "microbatches_less_than_pp": "m < pp (1f1b, interleaved)",
    "microbatches_not_multiple_of_pp": "m not a multiple of pp (interleaved)",
    "schedule_needs_pp_2": "schedule needs pp >= 2",
    "too_few_layers": "more stages than layers",
    "out_of_memory": "out of memory",
    "too_large_to_simulate": "too many micro-batches to simulate",
    "sharding_without_pipeline_only": "zero2/zero3 need pp = 1",
    "experts_do_not_divide_ranks": "ep x etp does not divide the stage",
    "microbatches_less_than_stages": "m < 2 pp (the DualPipes)",
    "dualpipe_needs_even_pp_and_microbatches": "odd pp or m (dualpipe)",
    "modules_fit_without_recomputation": "fits without recomputing modules",
    "recompute_modules_not_modelled": "modules recomputation on a dense model",
}


@dataclass
class Window:
    """A time window of a timeline, shifted to start at 0 (duck-types report.Timeline)."""

    p: int
    step_time_s: float
    events: list[Any]
    start_s: float = 0.0  # where the window starts in the step: the axis reads in step time


def timeline_windows(sim: Any, p: int, m: int) -> list[tuple[str, Window]]:
    """The whole timeline, or for long runs its warm-up and cool-down windows.

    With m much larger than p the steady state fills the picture and the
    bubble (at the edges) is invisible, so show the first and last
    ``3p`` micro-batch slots instead; without a pipeline (one device, no bubble) the
    first three micro-batches, so that each forward and backward is wide enough to see.
    """
    span = sim.step_time_s
    if m <= 3 * p or span <= 0:
        return [("", Window(p, span, list(sim.events)))]
    width = span * min(1.0, 3 * p / (m + p - 1))
    out = []
    ends = (("warm-up", 0.0), ("cool-down", span - width)) if p > 1 else (
        (f"first 3 of {m} micro-batches", 0.0),)
    for label, t0 in ends:
        evs = []
        for e in sim.events:
            s, t = max(e.start_s, t0), min(e.end_s, t0 + width)
            if t > s:
                evs.append(e._replace(start_s=s - t0, end_s=t - t0))
        out.append((f"{label}, {fmt_seconds(t0)} to {fmt_seconds(t0 + width)}",
                    Window(p, width, evs, t0)))
    return out


def _rival(result: SearchResult, winner: Plan) -> Plan | None:
    """Without a pipeline: the best pipeline plan listed (or, where --top lists none, the
    one --pipeline-margin ranked below it). Else the best plan of another schedule: 1f1b
    when the winner is not 1f1b."""
    if winner.pp == 1:
        piped = [p for p in result.plans if p.pp > 1]
        return piped[0] if piped else result.passed_over
    best = result.best_by_schedule
    if winner.schedule is not Schedule.ONE_F_ONE_B and Schedule.ONE_F_ONE_B in best:
        return best[Schedule.ONE_F_ONE_B]
    others = [p for s, p in best.items() if s is not winner.schedule]
    return min(others, key=lambda p: p.step_time_s) if others else None


def why_lines(result: SearchResult, grad_factor: float = 1.0) -> list[str]:
    """One or two lines on why the winner wins, with the numbers (``grad_factor``: the
    gradient bytes factor the winner was priced with: no hint
    suggests a compression that would not narrow its gradients)."""
    if not result.plans:
        return []
    w = result.plans[0]
    head = (
        f"winner: {fmt_sizes(w.pp, w.dp, w.tp, w.cp, w.ep, w.etp)}"
        + (f" {w.precision.value}" if w.precision.value != "bf16" else "")
        + (f" (rank order {w.rank_order.value})" if w.rank_order != DP_INNER else "")
        + f" {w.schedule.value}"
        + (f" v={w.virtual_stages}" if w.virtual_stages > 1 else "")
        + (" with the all-to-all overlapped" if w.a2a_overlap else "")
        + ", " + fmt_microbatches(w.num_microbatches, w.micro_batch_size)
    )
    rival = _rival(result, w)
    if rival is not None:
        what = ("pipeline plan" if w.pp == 1 else "plan without a pipeline" if rival.pp == 1
                else f"{rival.schedule.value} plan")
        if rival.step_time_s >= w.step_time_s:
            gap = f"{_share(rival.step_time_s / w.step_time_s - 1)} slower"
        else:  # ranked below the winner by --pipeline-margin
            gap = f"{_share(w.step_time_s / rival.step_time_s - 1)} faster" + (
                ", within --pipeline-margin" if w.pp == 1 else "")
        head += (
            f": step {fmt_seconds(w.step_time_s)} vs {fmt_seconds(rival.step_time_s)} ({gap}) "
            f"for the best {what} ({rival.schedule.value + ', ' if w.pp == 1 else ''}"
            f"pp={rival.pp}, m={rival.num_microbatches}); bubble {fmt_pct(w.bubble_rate)} vs "
            f"{fmt_pct(rival.bubble_rate)}"
        )
    comm = []
    step_s = w.step_time_s
    if w.exposed_p2p_s is not None and w.pp > 1:  # without a pipeline nothing is sent
        comm.append(exposure("p2p", w.exposed_p2p_s, step_s, "compute",
                             "adds {s} ({pct}) to the step"))
    if w.exposed_allreduce_s is not None and w.dp * w.cp > 1:  # cp ranks reduce gradients too
        what = "all-reduce" if w.sharding.value == "none" else f"{w.sharding.value} traffic"
        what += f" (over the {w.cp} cp ranks)" if w.dp == 1 else ""
        comm.append(exposure(f"DP {what}", w.exposed_allreduce_s, step_s, "compute",
                             "exposes {s} ({pct})"))
    if w.exposed_cp_s is not None and w.cp > 1:
        comm.append(exposure("CP K/V exchange", w.exposed_cp_s, step_s, "attention",
                             "adds {s} ({pct})"))
    amax_share = (w.exposed_amax_s or 0.0) / w.step_time_s if w.step_time_s else 0.0
    if amax_share >= MOSTLY_HIDDEN_SHARE:  # below it: only in the JSON
        comm.append(f"FP8 amax all-reduces add {fmt_seconds(w.exposed_amax_s or 0.0)} "
                    f"({fmt_pct(amax_share)})")
    comm.append(
        f"peak memory {fmt_bytes(max(w.peak_memory_bytes))} of "
        f"{fmt_bytes(w.memory_capacity_bytes)} on the fullest GPU" + _memory_parts(w)
    )
    lines = [head, "; ".join(comm)]
    flat = [p for p in result.plans if p.pp == 1]
    if w.pp > 1 and flat and (rival is None or rival.pp > 1):  # else the winner line names it
        f = flat[0]
        lines.append(
            f"without a pipeline: best pp=1 plan (dp={f.dp}, sharding {f.sharding.value}, "
            f"recompute {f.recompute.value}) steps {fmt_seconds(f.step_time_s)}, "
            f"{_share(f.step_time_s / w.step_time_s - 1)} slower than the winner"
        )
    step = w.step_time_s or 1.0
    if (w.exposed_allreduce_s or 0.0) / step > 0.05 \
            and gradient_wire_bytes(w.sharding, grad_factor) > BF16_BYTES:
        lines.append(
            "hint: the data-parallel traffic is exposed; --grad-compression fp16 sends "
            f"2-byte gradients where {gradient_wire_bytes(w.sharding, grad_factor):g}-byte "
            "ones are reduced (up to half the traffic; top-k sparsification cuts more)"
        )
    if (w.exposed_p2p_s or 0.0) / step > 0.05:
        lines.append(
            "hint: stage-to-stage sends sit on the critical path; fewer stages or larger "
            "micro-batches amortise their latency"
        )
    return lines


# Exposed communication under this share of the step is "mostly hidden" (its time and
# share still said); at or above it, what it adds. A display rule, not a cost.
MOSTLY_HIDDEN_SHARE = 0.005


def exposure(what: str, exposed_s: float, step_s: float, behind: str, adds: str) -> str:
    """One rule for every exposed part of the winner's step (p2p, DP, CP): "hidden" only
    where none is exposed (the JSON's 0), else its time, "mostly hidden" below
    ``MOSTLY_HIDDEN_SHARE`` of the step, else ``adds`` ("{s}", "{pct}" filled in)."""
    if exposed_s <= 0:
        return f"{what} hidden behind {behind}"
    share = exposed_s / step_s if step_s else 0.0
    if share < MOSTLY_HIDDEN_SHARE:
        return (f"{what} mostly hidden behind {behind} ({fmt_seconds(exposed_s)} exposed a "
                f"step, {_share(share)})")
    return f"{what} " + adds.format(s=fmt_seconds(exposed_s), pct=fmt_pct(share))


def _share(x: float) -> str:
    """A step-time gap, or a share of the step, as a percentage: two decimals below 1%."""
    return f"{x:.1%}" if x >= 0.01 else f"{x:.2%}"


def fullest(plan: Plan) -> DeviceMemory | None:
    """The peak, by part, of the plan's fullest GPU (the pipeline rank whose peak is the
    plan's, which the winner's memory line itemizes); None where not itemized."""
    return max(plan.memory, key=lambda m: m.total_bytes) if plan.memory else None


def _memory_parts(plan: Plan) -> str:
    m = fullest(plan)
    if m is None:
        return ""
    copies = (f" with {fmt_bytes(m.fp8_copies_bytes)} of "
              f"{copies_format(plan.key.precision)} weight copies"
              if m.fp8_copies_bytes else "")
    return (f" (state {fmt_bytes(m.state_bytes)}{copies}, working copies "
            f"{fmt_bytes(m.working_bytes)}, "
            f"activations {fmt_bytes(m.activation_bytes)}, p2p {fmt_bytes(m.p2p_bytes)}, "
            + (f"dispatch buffers {fmt_bytes(m.dispatch_buffer_bytes)}, "
               if m.dispatch_buffer_bytes else "")
            + f"reserve {fmt_bytes(m.reserve_bytes)})")


def memory_parts(plan: Plan) -> list[MemoryParts] | None:
    """The plan file's ``peak_memory_parts``: each pipeline rank's peak by part (the
    parts the winner's line names), None where the plan's memory is not itemized."""
    if not plan.memory:
        return None
    return [MemoryParts(state_bytes=m.state_bytes, working_copies_bytes=m.working_bytes,
                        activation_bytes=m.activation_bytes, p2p_bytes=m.p2p_bytes,
                        reserve_bytes=m.reserve_bytes) for m in plan.memory]


def reason_counts(rejected: Mapping[str, int]) -> str:
    """"global batch does not divide: 12, out of memory: 3": each reason's words
    (``REASON_TEXT``; its JSON key where it has none) and count, most first."""
    return ", ".join(f"{REASON_TEXT.get(k, k)}: {n}"
                     for k, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])) if n)


def rejected_line(result: SearchResult) -> str:
    total = sum(result.rejected.values())
    if not total:
        return f"searched {result.candidates} candidates, simulated {result.simulated}, none rejected"
    return (
        f"searched {result.candidates} candidates, simulated {result.simulated}; "
        f"rejected {total} ({reason_counts(result.rejected)})"
    )


def plan_record(
    plan: Plan, rank: int, names: Sequence[str], global_batch: int,
    tokens_per_step: float = 0.0, train_tokens: float | None = None,
    model_flops_per_step: float | None = None, peak_flops: Peaks = None,
    recompute_every: int | None = TORCHTITAN_SELECTIVE_EVERY,
) -> PlanRecord:
    days, gpu_hours = (
        training_cost(plan, tokens_per_step, train_tokens) if train_tokens else (None, None)
    )
    return PlanRecord(
        training_days=days, gpu_hours=gpu_hours,
        rank=rank, pp=plan.pp, dp=plan.dp, tp=plan.tp, cp=plan.cp, ep=plan.ep, etp=plan.etp,
        precision=plan.precision, schedule=plan.schedule,
        virtual_stages=plan.virtual_stages, micro_batch_size=plan.micro_batch_size,
        num_microbatches=plan.num_microbatches, grad_accum_steps=plan.grad_accum_steps,
        global_batch=global_batch, stage_layers=plan.stage_layers,
        stage_layer_names=[[names[s], names[e - 1]] for s, e in stage_bounds(plan.stage_layers)],
        bubble_rate=plan.bubble_rate, step_time_s=plan.step_time_s,
        tokens_per_s=plan.tokens_per_s, peak_memory_bytes=plan.peak_memory_bytes,
        memory_capacity_bytes=plan.memory_capacity_bytes, headroom_bytes=plan.headroom_bytes,
        ideal_step_s=plan.ideal_step_s, efficiency=plan.efficiency,
        gradient_accumulation_aligned=plan.aligned,
        exposed_p2p_s=plan.exposed_p2p_s, exposed_allreduce_s=plan.exposed_allreduce_s,
        exposed_amax_s=plan.exposed_amax_s, exposed_cp_s=plan.exposed_cp_s,
        peak_memory_parts=memory_parts(plan),
        rank_order=plan.rank_order.value, sharding=plan.sharding.value,
        recompute=plan.recompute.value, mfu=mfu(plan, model_flops_per_step, peak_flops),
        recompute_layers_per_stage=recomputed_blocks(plan, names, recompute_every),
        recompute_modules=list(plan.recompute_modules) or None,
        a2a_overlap=plan.a2a_overlap,
    )


def recomputed_blocks(plan: Plan, names: Sequence[str], every: int | None) -> list[int]:
    """Blocks recomputed in full on each stage: the plan's per-stage counts, or what
    its uniform recomputation reruns (``every``: the selective every-Nth block)."""
    if plan.recompute_layers is not None:
        return list(plan.recompute_layers)
    layers = recomputed_layers(names, plan.recompute, every)
    return recomputed_per_stage(names, plan.stage_layers, layers)


def plan_file(
    result: SearchResult, names: Sequence[str], global_batch: int, source: str,
    request: PlanFileRequest, train_tokens: float | None = None,
    model_flops_per_step: float | None = None, peak_flops: Peaks = None,
    cost_notes: Sequence[str] = (),
) -> PlanFile:
    """The plan file of a search; its notes are the costs' (what the model's config left
    unread or assumed: Costs.notes, also said on stderr) and then the search's."""
    tokens_per_step = global_batch * float(request.costs.seq_len or 0)
    return PlanFile(
        plans=[plan_record(p, i, names, global_batch, tokens_per_step, train_tokens,
                           model_flops_per_step, peak_flops,
                           request.space.recompute_every if request.space
                           else TORCHTITAN_SELECTIVE_EVERY)
               for i, p in enumerate(result.plans, 1)],
        rejected=dict(sorted(result.rejected.items())),
        source=source,
        request=request,
        notes=[*cost_notes, *result.notes],
    )
