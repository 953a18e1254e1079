"""From plan to launch: write a recommended plan in the user's framework.

Each framework can express only some plans. When it cannot express the one
pptune chose (a schedule it lacks, an uneven split it has no knob for),
``emit`` picks the fastest plan it *can* express with the same pp, dp, tp,
micro-batch size and count, says so in one line, and reports that plan's
own predicted numbers — never a silently different plan.

- Megatron-LM: 1f1b and interleaved-1f1b; the splits megatron-core builds
  (megatron/core/transformer/transformer_config.py): even, uneven
  ``--decoder-first/last-pipeline-num-layers`` (also with
  ``--num-virtual-stages-per-pipeline-rank``), or the embedding / loss
  counted as a layer (``--account-for-embedding/loss-in-pipeline-split``).
- DeepSpeed: its PipelineEngine runs 1F1B only (TrainSchedule); partitions
  are exactly DeepSpeed's ``partition_uniform`` / ``partition_balanced``
  (deepspeed/runtime/utils.py) for ``partition_method`` "uniform" /
  "parameters".
- torchtitan: GPipe, 1F1B (micro-batches >= stages, torch's Schedule1F1B),
  Interleaved1F1B, ZBVZeroBubble; any split through
  ``module_fqns_per_model_part``. ZB-H1 with one stage per rank is not
  expressible there.
- pptune: everything.

Every file runs on exactly the plan's GPUs (writers.launch_shape).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from pptune.configs.frameworks import FrameworkRefusal, MegatronSplit, ds_split, megatron_blocks
from pptune.costmodel import presets
from pptune.costmodel.partition import add_ends, strip_ends
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import (
    DP_INNER,
    Plan,
    RankOrder,
    Recompute,
    Sharding,
    evaluate,
    search,
)
from pptune.costs.resolve import analytic_costs
from pptune.errors import BadInput
from pptune.files import write_all
from pptune.plan import writers
from pptune.plan.recommend import RecommendRun
from pptune.report.fmt import fmt_pct, fmt_seconds


class Framework(str, Enum):
    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    TORCHTITAN = "torchtitan"
    PPTUNE = "pptune"


SHARDING_NOTES = {
    Framework.MEGATRON: {
        Sharding.ZERO2: "ZeRO-2", Sharding.ZERO3: "ZeRO-3", Sharding.FSDP: "FSDP"},
    Framework.DEEPSPEED: {Sharding.FSDP: "torch FSDP (written as ZeRO stage 3, its equivalent)"},
    Framework.TORCHTITAN: {
        Sharding.ZERO1: "ZeRO-1", Sharding.ZERO2: "ZeRO-2", Sharding.ZERO3: "ZeRO-3"},
}

TORCHTITAN_SCHEDULES = writers.TORCHTITAN_SCHEDULES


@dataclass
class Emitted:
    framework: Framework
    plan: Plan  # the plan written (the chosen one, or the closest expressible)
    files: dict[str, str]  # file name -> content
    notes: list[str] = field(default_factory=list)
    exact: bool = True

    def summary(self) -> str:
        p = self.plan
        return (
            f"{self.framework.value}: pp={p.pp} dp={p.dp} tp={p.tp} {p.schedule.value}"
            + (f" v={p.virtual_stages}" if p.virtual_stages > 1 else "")
            + f", {p.num_microbatches} x {p.micro_batch_size}, layers/stage "
            f"{','.join(map(str, strip_ends(p.stage_layers)))} (+ embedding first, head last)"
            f"; predicted step {fmt_seconds(p.step_time_s)}, bubble {fmt_pct(p.bubble_rate)}"
        )


def _reevaluate(
    run: RecommendRun, plan: Plan, schedule: Schedule, split: list[int], v: int,
    rank_order: str | None = None,
) -> Plan:
    spec = replace(plan.spec, schedule=schedule, stage_layers=tuple(split), virtual_stages=v,
                   rank_order=plan.rank_order if rank_order is None else RankOrder(rank_order))
    return evaluate(run.table, run.plan_request, spec)


def _fits(run: RecommendRun, plan: Plan) -> bool:
    return max(plan.peak_memory_bytes) <= run.table.memory_bytes


def _closest(
    run: RecommendRun, plan: Plan, options: list[tuple[Schedule, int, list[int]]],
    rank_order: str | None = None,
) -> Plan | None:
    best: Plan | None = None
    for schedule, v, split in options:
        if any(n < 1 for n in split):
            continue
        cand = _reevaluate(run, plan, schedule, split, v, rank_order)
        if _fits(run, cand) and (best is None or cand.step_time_s < best.step_time_s):
            best = cand
    return best


def _megatron_candidates(blocks_total: int, p: int, v: int, firsts: list[int],
                         lasts: list[int]) -> list[MegatronSplit]:
    """Megatron-LM splits to try: even, account-for embedding/loss, uneven first/last."""
    out = [MegatronSplit(blocks_total, p, v, account_embedding=e, account_loss=lo)
           for e in (False, True) for lo in (False, True)]
    if p >= 2:
        out += [MegatronSplit(blocks_total, p, v, first, last)
                for first in [*firsts, None] for last in [*lasts, None]
                if first is not None or last is not None]
    return out


def megatron_split(plan: Plan) -> MegatronSplit | None:
    """The Megatron-LM flags whose split (as megatron-core builds it) is the plan's."""
    if plan.schedule not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
        return None
    blocks = strip_ends(plan.stage_layers)
    p, v = plan.pp, plan.virtual_stages if plan.schedule is Schedule.INTERLEAVED else 1
    first, last = sum(blocks[0::p]), sum(blocks[p - 1::p])
    for cand in _megatron_candidates(sum(blocks), p, v, [first], [last]):
        try:
            if megatron_blocks(cand) == blocks:
                return cand
        except FrameworkRefusal:
            continue
    return None


def _megatron_options(plan: Plan, n_blocks: int) -> list[tuple[Schedule, int, list[int]]]:
    """Splits Megatron-LM builds near the plan's first and last ranks (+-6 blocks): with
    the plan's virtual stages when interleaved, and without (1F1B)."""
    p = plan.pp
    blocks = strip_ends(plan.stage_layers)
    shapes = [(Schedule.ONE_F_ONE_B, 1)]
    if plan.schedule is Schedule.INTERLEAVED:
        shapes.insert(0, (Schedule.INTERLEAVED, plan.virtual_stages))
    near = range(-6, 7)
    opts: list[tuple[Schedule, int, list[int]]] = []
    for schedule, v in shapes:
        firsts = sorted({sum(blocks[0::p]) + d for d in near} & set(range(v, n_blocks, v)))
        lasts = sorted({sum(blocks[p - 1::p]) + d for d in near} & set(range(v, n_blocks, v)))
        for cand in _megatron_candidates(n_blocks, p, v, firsts, lasts):
            try:
                opts.append((schedule, v, add_ends(megatron_blocks(cand))))
            except FrameworkRefusal:
                continue
    return opts


def parse_framework(framework: Framework | str) -> Framework:
    try:
        return Framework(framework)
    except ValueError:
        raise BadInput(
            f"unknown --emit {framework!r}; choose {', '.join(f.value for f in Framework)}"
        ) from None


def emit(framework: Framework | str, run: RecommendRun, rank: int = 1) -> Emitted:
    """Render plan ``rank`` (1-based) of a recommendation for ``framework``."""
    fw = parse_framework(framework)
    plans = run.result.plans
    if not 1 <= rank <= len(plans):
        raise BadInput(f"--plan {rank} is not among the {len(plans)} ranked plans")
    plan = plans[rank - 1]
    n_blocks = len(run.names) - 2
    notes: list[str] = []
    as_run = _framework_run(run, fw)
    if as_run is not run:
        run, plan = as_run, evaluate(as_run.table, as_run.plan_request, plan.spec)
        runs = ("flash attention (SDPA) and sequence parallelism with tensor parallelism"
                if fw is Framework.TORCHTITAN
                else "tensor parallelism (AutoTP) without sequence parallelism")
        notes.append(f"{fw.value} runs {runs}: predicted that way, step "
                     f"{fmt_seconds(plan.step_time_s)}")
    plan, exact = _stateable_sharding(run, plan, fw, notes)
    if fw in (Framework.MEGATRON, Framework.DEEPSPEED) and plan.recompute is Recompute.SELECTIVE:
        plan, exact = _full_recompute(run, plan, fw, notes), False
    chosen = plan

    def fallback(
        options: list[tuple[Schedule, int, list[int]]], why: str, order: str | None = None
    ) -> None:
        nonlocal chosen, exact
        alt = _closest(run, plan, options, order)
        if alt is None:
            raise BadInput(f"{fw.value} cannot express plan {rank} ({why}) and no close plan fits")
        chosen, exact = alt, False
        notes.append(
            f"{fw.value} cannot express plan {rank} ({why}); emitting the closest plan it can run: "
            f"{alt.schedule.value}, layers/stage {','.join(map(str, strip_ends(alt.stage_layers)))}"
            + (f", rank order {alt.rank_order.value}" if alt.rank_order != plan.rank_order else "")
            + f", predicted step {fmt_seconds(alt.step_time_s)} ({alt.step_time_s / plan.step_time_s:.3f}x)"
            f", bubble {fmt_pct(alt.bubble_rate)}"
        )

    files: dict[str, str]
    if fw is Framework.MEGATRON:
        if megatron_split(plan) is None:
            why = (f"Megatron-LM has no {plan.schedule.value} schedule"
                   if plan.schedule not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)
                   else "megatron-core builds no such split")
            fallback(_megatron_options(plan, n_blocks), why)
        split = megatron_split(chosen)
        if split is None:  # every option is a split megatron-core builds
            raise BadInput(f"megatron cannot express plan {rank}")
        files = writers.megatron(run, chosen, split)
    elif fw is Framework.DEEPSPEED:
        params = [b / run.table.param_dtype_bytes for b in run.table.param_bytes]
        methods = {m: sp for m in ("uniform", "parameters")
                   if (sp := ds_split(m, params, plan.pp)) is not None}
        same = [name for name, sp in methods.items() if sp == plan.stage_layers]
        if (plan.schedule is Schedule.ONE_F_ONE_B and plan.virtual_stages == 1 and same
                and plan.rank_order == DP_INNER):
            method = same[0]
        else:
            why = ("DeepSpeed's pipeline engine runs 1F1B only"
                   if plan.schedule is not Schedule.ONE_F_ONE_B
                   else "partition_method cannot place these boundaries"
                   if not same else "its topology keeps data-parallel ranks innermost")
            options = [(Schedule.ONE_F_ONE_B, 1, sp) for sp in methods.values()]
            fallback(options, why, DP_INNER)
            method = next(n for n, sp in methods.items() if sp == chosen.stage_layers)
        if chosen.pp > 1 and chosen.sharding not in (Sharding.NONE, Sharding.ZERO1):
            # PipelineEngine: 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'
            alt = evaluate(run.table, run.plan_request, replace(chosen.spec, sharding=Sharding.ZERO1))
            if not _fits(run, alt):
                raise BadInput(f"deepspeed cannot express plan {rank}: its pipeline engine runs "
                               f"ZeRO-0/1 only and the plan does not fit with ZeRO-1")
            notes.append(f"deepspeed's pipeline engine runs ZeRO stage 0 or 1 only: emitting the "
                         f"plan with ZeRO-1 instead of {chosen.sharding.value}, predicted step "
                         f"{fmt_seconds(alt.step_time_s)}")
            chosen, exact = alt, False
        files = writers.deepspeed(run, chosen, method)
    elif fw is Framework.TORCHTITAN:
        few = plan.schedule is Schedule.ONE_F_ONE_B and plan.num_microbatches < plan.pp
        if plan.schedule is Schedule.ZB_H1 or plan.rank_order != DP_INNER or few:
            why = ("torchtitan's InterleavedZeroBubble needs >= 2 stages per rank"
                   if plan.schedule is Schedule.ZB_H1
                   else "torch's Schedule1F1B needs micro-batches >= stages" if few
                   else "its device mesh keeps pipeline ranks outermost")
            sched = (Schedule.GPIPE if few else Schedule.ONE_F_ONE_B
                     if plan.schedule is Schedule.ZB_H1 else plan.schedule)
            fallback([(sched, plan.virtual_stages if sched is Schedule.INTERLEAVED else 1,
                       plan.stage_layers)], why, DP_INNER)
        files = writers.torchtitan(run, chosen)
    else:
        files = writers.pptune(run, chosen)
    unexpressed = SHARDING_NOTES.get(fw, {}).get(chosen.sharding)
    if unexpressed:
        notes.append(f"{fw.value}: the plan's sharding is {unexpressed}; these files do not set "
                     f"it, configure it by hand (pptune predicted it as {chosen.sharding.value})")
    placed = _placed(run, chosen, fw)
    if placed is not chosen:
        nodes, per_node = writers.launch_shape(chosen.pp * chosen.dp * chosen.tp,
                                               run.plan_request.gpus_per_node)
        notes.append(
            f"launched as {nodes} nodes x {per_node} GPUs (torchrun runs the same number of "
            f"ranks on every node); predicted for that placement: step "
            f"{fmt_seconds(placed.step_time_s)} (plan: {fmt_seconds(chosen.step_time_s)})")
        chosen = placed
    return Emitted(fw, chosen, files, notes, exact)


def _framework_run(run: RecommendRun, fw: Framework) -> RecommendRun:
    """The run with the costs the framework's file can state: torchtitan always runs a
    fused attention kernel (SDPA or flex attention) and sequence parallelism with its
    tensor parallelism; DeepSpeed's AutoTP has no sequence parallelism. The run as it
    is for other frameworks, measured costs, or when it already plans that way."""
    shape, gpu, tp = writers.model_shape(run), str(run.request.costs.gpu), run.plan_request.tp
    attention = run.request.costs.attention.value if run.request.costs.attention else None
    sp = run.request.costs.sequence_parallel
    if fw is Framework.TORCHTITAN:
        want_attention, want_sp = "flash", tp > 1
    elif fw is Framework.DEEPSPEED:
        want_attention, want_sp = attention, False
    else:
        return run
    if (attention, sp) == (want_attention, want_sp) or shape is None \
            or gpu not in presets.GPUS or attention is None:
        return run
    table, _ = analytic_costs(
        shape, gpu, sorted(run.table.by_mb), tp=tp, sequence_parallel=want_sp,
        attention=str(want_attention), tp_comm_overlap=run.request.costs.tp_comm_overlap)
    return replace(run, table=table)


def _full_recompute(run: RecommendRun, plan: Plan, fw: Framework, notes: list[str]) -> Plan:
    """The plan with full recomputation of every block. The planner's selective
    recomputation checkpoints every Nth block of each stage; neither Megatron-LM (its
    selective is core attention only; its block method one count for every stage) nor
    DeepSpeed (activation_checkpoint_interval N checkpoints every layer, N at a time)
    states that."""
    alt = evaluate(run.table, run.plan_request, replace(plan.spec, recompute=Recompute.FULL))
    notes.append(f"{fw.value} states no every-Nth-block selective recomputation: emitting the "
                 f"plan with full recomputation, predicted step {fmt_seconds(alt.step_time_s)} "
                 f"({alt.step_time_s / plan.step_time_s:.3f}x)")
    return alt


_NAMES = {Sharding.NONE: "no sharding", Sharding.ZERO1: "ZeRO-1", Sharding.ZERO2: "ZeRO-2",
          Sharding.ZERO3: "ZeRO-3", Sharding.FSDP: "FSDP"}
# shardings each framework's emitted file states, best first as a substitute
STATEABLE = {Framework.MEGATRON: (Sharding.ZERO1, Sharding.NONE),
             Framework.TORCHTITAN: (Sharding.FSDP, Sharding.NONE)}


def _stateable_sharding(run: RecommendRun, plan: Plan, fw: Framework,
                        notes: list[str]) -> tuple[Plan, bool]:
    """The plan with a sharding the file can state (Megatron-LM: the distributed
    optimizer; torchtitan: FSDP), when one fits; otherwise the plan as it is (a note
    then says to configure the sharding by hand)."""
    options = STATEABLE.get(fw)
    if options is None or plan.sharding in options:
        return plan, True
    for sharding in options:
        alt = evaluate(run.table, run.plan_request, replace(plan.spec, sharding=sharding))
        if _fits(run, alt):
            notes.append(f"{fw.value} files state no {_NAMES[plan.sharding]}: emitting the plan "
                         f"with {_NAMES[sharding]}, predicted step {fmt_seconds(alt.step_time_s)} "
                         f"({alt.step_time_s / plan.step_time_s:.3f}x)")
            return alt, False
    # Same spec, other sharding: none fits. The best plan the file can state instead.
    best = search(run.table, replace(run.plan_request, shardings=options, top=1)).plans
    if best:
        alt = best[0]
        notes.append(f"{fw.value} files state no {_NAMES[plan.sharding]} and the plan does not "
                     f"fit with what they state: emitting the best plan with "
                     f"{' or '.join(_NAMES[o] for o in options)} instead (pp={alt.pp} "
                     f"dp={alt.dp} {alt.sharding.value}/{alt.recompute.value}), predicted step "
                     f"{fmt_seconds(alt.step_time_s)} ({alt.step_time_s / plan.step_time_s:.3f}x)")
        return alt, False
    return plan, True


def _placed(run: RecommendRun, plan: Plan, fw: Framework) -> Plan:
    """The plan re-predicted on the node shape the file launches, where the file states
    it (Megatron-LM's torchrun line, pptune's gpus_per_node); DeepSpeed JSON and
    torchtitan TOML do not carry the node shape."""
    gpn = run.plan_request.gpus_per_node
    nodes, per_node = writers.launch_shape(plan.pp * plan.dp * plan.tp, gpn)
    if nodes == 1 or per_node == gpn or fw not in (Framework.MEGATRON, Framework.PPTUNE):
        return plan
    return evaluate(run.table, replace(run.plan_request, gpus_per_node=per_node), plan.spec)


FILES: dict[Framework, tuple[str, ...]] = {
    Framework.MEGATRON: ("pretrain_megatron.sh",),
    Framework.DEEPSPEED: ("ds_config.json", "ds_partition.txt"),
    Framework.TORCHTITAN: ("torchtitan.toml",),
    Framework.PPTUNE: ("pptune.yaml",),
}


def file_names(framework: str) -> list[str]:
    """The files ``--emit FRAMEWORK -o DIR`` writes (checked before the search)."""
    return list(FILES[parse_framework(framework)])


def write(emitted: Emitted, directory: Path, force: bool = False) -> list[Path]:
    """All files or none; existing ones only with ``force`` (``pptune.files.write_all``)."""
    modes = {name: 0o777 if name.endswith(".sh") else 0o666 for name in emitted.files}
    return write_all(directory, emitted.files, force, modes)
