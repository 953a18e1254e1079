"""`pptune simulate`: turn flags into stage costs, run the simulator, export."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pptune import limits
from pptune.costmodel.keys import CostKey
from pptune.costmodel.layout_grammar import LayoutError, parse_layout
from pptune.costmodel.partition import SplitError, add_ends, even_split, mtp_count
from pptune.costmodel.schedule_orders import microbatch_group
from pptune.costmodel.schedules import (
    COMBINABLE,
    Schedule,
    ScheduleError,
    chunks_per_device,
    model_chunks,
    stage_chunk_map,
    validate,
)
from pptune.costmodel.search import MAX_SIMULATED_OPS, CostTable, stage_costs
from pptune.costmodel.simulate import Link, SimResult, simulate, uniform_stages
from pptune.costs.dims import fp8_flags_problem, single_key
from pptune.costs.resolve import resolve
from pptune.errors import BadInput
from pptune.options import CostOptions, fields_of
from pptune.options.groups import SCHEDULE
from pptune.report.fmt import fmt_bytes


@dataclass
class SimSpec:
    schedule: str = "1f1b"
    pp: int = 4
    microbatches: int = 8
    virtual_stages: int | None = None  # None: 2 for interleaved-1f1b and the V schedules
    fwd_ms: float | None = None
    bwd_ms: float | None = None
    wgrad_ms: float = 0.0
    p2p_ms: float = 0.0
    a2a_ms: float = 0.0  # textbook: expert all-to-all per device per micro-batch, F and B each
    a2a_overlap: bool = False  # 1f1b / interleaved-1f1b: Megatron-LM's combined order
    costs: CostOptions = field(default_factory=CostOptions)  # per-layer costs (not textbook)
    micro_batch_size: int = 1
    split: list[int] | None = None
    # --split as Megatron-LM's --pipeline-model-parallel-layout ("Et|(tt|)*30mL"): each
    # stage's layers as check-config counts them (check/split.py table_split)
    layout: str | None = None
    blocking_send: bool = False
    # the job's GPUs, whose slowest sets the compute pace (costmodel/variation.py), as
    # recommend --gpus prices it; None: the one pipeline's pp x tp x cp
    gpus: int | None = None


@dataclass
class SimRun:
    spec: SimSpec
    schedule: Schedule
    result: SimResult
    notes: list[str] = field(default_factory=list)
    stage_layers: list[int] | None = None
    origin: str = "textbook"
    gpus: int | None = None  # the GPUs whose slowest set the pace (None: textbook times)
    table: CostTable | None = None  # the per-layer costs simulated (None: textbook times)


def parse_schedule(name: str) -> Schedule:
    schedule = SCHEDULE.parse(name, "--schedule")
    if schedule is None:
        raise BadInput("--schedule is empty")
    return schedule


def run(spec: SimSpec) -> SimRun:
    schedule = parse_schedule(spec.schedule)
    p, m = spec.pp, spec.microbatches
    v = spec.virtual_stages if spec.virtual_stages is not None else (
        2 if schedule is Schedule.INTERLEAVED else 1)
    if chunks_per_device(schedule, 1) == 2 and v == 1:  # zbv and the DualPipes: always 2
        v = 2
    problems = limits.problems(
        limits.problem("--pp", p, 1, limits.MAX_SIMULATED_PP),
        limits.problem("--microbatches", m, 1, limits.MAX_GLOBAL_BATCH),
        limits.problem("--virtual-stages", v, 1, limits.MAX_LAYERS),
        limits.problem("--micro-batch-size", spec.micro_batch_size, 1, limits.MAX_MICRO_BATCH),
        None if spec.gpus is None else limits.problem("--gpus", spec.gpus, 1, limits.MAX_GPUS),
        *(limits.problem(flag, val, 0, limits.MAX_MS) for flag, val in (
            ("--fwd-ms", spec.fwd_ms), ("--bwd-ms", spec.bwd_ms), ("--wgrad-ms", spec.wgrad_ms),
            ("--p2p-ms", spec.p2p_ms), ("--a2a-ms", spec.a2a_ms)) if val is not None),
    )
    problems += [f"{flag} must be 0 or at least 1e-06 ms, a nanosecond (got {val:g})"
                 for flag, val in (("--fwd-ms", spec.fwd_ms), ("--bwd-ms", spec.bwd_ms),
                                   ("--wgrad-ms", spec.wgrad_ms), ("--p2p-ms", spec.p2p_ms),
                                   ("--a2a-ms", spec.a2a_ms))
                 if val is not None and 0 < val < 1e-6]
    if spec.fwd_ms == 0 and spec.bwd_ms == 0 and not spec.wgrad_ms:
        problems.append("--fwd-ms and --bwd-ms are both 0: there is no work to schedule")
    if problems:
        raise BadInput("; ".join(problems))
    if spec.a2a_overlap and schedule not in COMBINABLE:
        raise BadInput(
            f"--a2a-overlap runs Megatron-LM's combined order, which only "
            f"{' and '.join(s.value for s in Schedule if s in COMBINABLE)} have (got --schedule "
            f"{schedule.value}; the DualPipes overlap their F&B pairs always)"
        )
    if spec.a2a_overlap and p > 1 and schedule is Schedule.ONE_F_ONE_B:
        # megatron-core 0.16 schedules.py runs combined_1f1b without a pipeline or
        # interleaved only, and TransformerConfig.__post_init__ asserts it
        # (transformer_config.py; check-config's megatron-a2a-overlap rule)
        raise BadInput(
            f"--a2a-overlap with 1f1b at pp {p}: megatron-core 0.16 runs its combined order "
            "with a pipeline only interleaved (TransformerConfig asserts 'If enabling EP A2A "
            "overlap, virtual_pipeline_model_parallel_size must be specified when "
            "pipeline_model_parallel_size > 1'); use -s interleaved-1f1b, or --pp 1"
        )
    try:
        validate(schedule, p, m, v, spec.a2a_overlap)
    except ScheduleError as exc:
        raise BadInput(str(exc)) from None
    notes = []
    if schedule is Schedule.ONE_F_ONE_B and m < p:
        notes.append(
            f"1f1b with fewer micro-batches than stages ({m} < {p}) is simulated with a "
            "shorter warm-up, as Megatron-LM runs it; torch's Schedule1F1B (2.7 on) refuses it"
        )
    if schedule is Schedule.INTERLEAVED and m % p:
        notes.append(
            f"interleaved-1f1b with {m} micro-batches on pp {p} runs Megatron-LM's micro-batch "
            f"groups of {microbatch_group(p, m)} (--microbatch-group-size-per-virtual-"
            "pipeline-stage); torch's ScheduleInterleaved1F1B orders them its own way"
        )
    chunks = chunks_per_device(schedule, v)
    ops = p * chunks * m * 3
    if ops > MAX_SIMULATED_OPS:
        raise BadInput(
            f"pp={p} x {chunks} chunk(s) x {m} micro-batches is {ops:,} ops; pptune simulates up "
            f"to {MAX_SIMULATED_OPS:,} per step: use fewer micro-batches or a shallower "
            "pipeline"
        )
    textbook = spec.fwd_ms is not None or spec.bwd_ms is not None
    if not textbook and spec.a2a_ms:
        raise BadInput("--a2a-ms is a textbook-mode time (with --fwd-ms/--bwd-ms); per-layer "
                       "costs carry their own all-to-alls")
    if textbook:
        if spec.fwd_ms is None or spec.bwd_ms is None:
            raise BadInput("textbook mode needs both --fwd-ms and --bwd-ms")
        cost_flags = [f.flag.name for f in fields_of(CostOptions)
                      if getattr(spec.costs, f.name) != f.default]
        cost_flags += [flag for flag, given in (
            ("--split", spec.split or spec.layout), ("--micro-batch-size", spec.micro_batch_size != 1),
            ("--gpus", spec.gpus is not None)) if given]
        if cost_flags:
            raise BadInput("--fwd-ms/--bwd-ms simulate equal stages from times per device; "
                           f"drop {'/'.join(cost_flags)} (they describe per-layer costs)")
        # times per device per micro-batch: a micro-batch passes each device
        # model_chunks / p times (dualpipe once, on one of its two chunks)
        visits = model_chunks(schedule, p, v) // p
        a2a_s = spec.a2a_ms / 1e3 / visits
        stages = uniform_stages(
            p * chunks, spec.fwd_ms / 1e3 / visits, spec.bwd_ms / 1e3 / visits,
            spec.wgrad_ms / 1e3 / visits, act_bytes=0.0, out_bytes=1.0,
            fwd_comm_s=a2a_s, bwd_comm_s=a2a_s,
        )
        link = Link(spec.p2p_ms / 1e3, float("inf"))
        result = simulate(
            schedule, p, m, stages, v=v, link=lambda a, b: link, blocking_send=spec.blocking_send,
            combined=spec.a2a_overlap,
        )
        return SimRun(spec, schedule, result, notes)
    key = single_key(spec.costs)
    unused = fp8_flags_problem(spec.costs, (key,))
    if unused:
        raise BadInput(unused)
    pipeline = p * key.tp * key.cp
    gpus = pipeline if spec.gpus is None else spec.gpus  # the job's, whose slowest paces it
    bad = None if spec.gpus is None else _gpus_problem(gpus, p, key)  # one replica: a note
    if bad:
        raise BadInput(bad)
    costs = resolve(spec.costs, sizes=(spec.micro_batch_size,), gpus=gpus)
    notes += [*costs.notes, f"costs: {costs.origin}", *_borrowed_expert_ranks(key)]
    table = costs.table
    n_layers = len(table.names)
    n_stages = model_chunks(schedule, p, v)  # the split's entries (dualpipe: p chunks)
    if spec.layout is not None:
        split = layout_split(spec.layout, table, schedule, p, v)
    elif spec.split is not None:
        ends = table.names[0] == "embedding" and table.names[-1] == "head"
        if len(spec.split) == n_stages and sum(spec.split) == n_layers:
            split = spec.split
        elif ends and len(spec.split) == n_stages and sum(spec.split) == n_layers - 2:
            # transformer blocks per stage (Megatron's counting): the embedding
            # joins the first stage and the LM head the last
            split = add_ends(spec.split)
            notes.append(
                f"--split counts the {n_layers - 2} transformer blocks; the embedding joins "
                f"stage 0 and the head stage {n_stages - 1}: layers per stage "
                f"{','.join(map(str, split))}"
            )
        else:
            blocks = f" or the {n_layers - 2} blocks" if ends else ""
            raise BadInput(
                f"--split {','.join(map(str, spec.split))} must have {n_stages} entries "
                f"({_entries(schedule)}) summing to the {n_layers} layers (embedding + "
                f"{n_layers - 2} "
                f"blocks + head){blocks}; it has {len(spec.split)} summing to {sum(spec.split)}"
            )
    else:
        try:
            split = even_split(n_layers, n_stages)
        except SplitError as exc:
            raise BadInput(str(exc)) from None
    result = simulate_table(table, schedule, p, m, v, spec.micro_batch_size, split,
                            spec.blocking_send, spec.a2a_overlap)
    on = (f"{pipeline} GPU{'s' * (pipeline > 1)}" if gpus == pipeline
          else f"{pipeline} of the job's {gpus} GPUs")
    notes.append(f"the step is one pipeline's schedule on {on}: no "
                 "data-parallel gradient traffic and no optimizer step, which recommend "
                 "adds to the plans it ranks")
    peak = max((d.peak_activation_bytes for d in result.devices), default=0.0)
    if table.memory_bytes and peak > table.memory_bytes:
        notes.append(f"the activations alone peak at {fmt_bytes(peak)} a device, over the "
                     f"{fmt_bytes(table.memory_bytes)} a GPU may use (weights and optimizer "
                     "state not counted): this plan does not fit; recommend searches the ones "
                     "that do")
    return SimRun(spec, schedule, result, notes, split, costs.origin, gpus, table)


def _gpus_problem(gpus: int, p: int, key: CostKey) -> str | None:
    """Why ``gpus`` cannot be a job of whole pipelines of ``p`` stages at ``key``'s tp x cp
    (recommend's rule: each of its plans runs ``gpus / (pp x tp x cp)`` replicas), in
    recommend's words for ``--gpus``; None when it can."""
    pipeline = p * key.tp * key.cp
    said = f"--pp {p} x --tp {key.tp} x --cp {key.cp} = {pipeline} GPUs"
    if gpus < pipeline:
        return f"{limits.problem('--gpus', gpus, pipeline, limits.MAX_GPUS)}: one pipeline is {said}"
    if gpus % pipeline:
        below = gpus // pipeline * pipeline
        return (f"one pipeline's {said} must divide --gpus {gpus} (the job runs whole "
                f"pipelines): e.g. --gpus {below} or {below + pipeline}")
    dp = gpus // pipeline
    if (key.tp * key.cp * dp) % (key.ep * key.etp):  # costmodel/layout.py's rule
        return (f"--gpus {gpus}: ep x etp = {key.ep} x {key.etp} must divide tp x cp x dp = "
                f"{key.tp} x {key.cp} x {dp} (the ranks of one pipeline stage)")
    return None


def _borrowed_expert_ranks(key: CostKey) -> list[str]:
    """Where the expert groups of a stage come from when ep x etp does not divide its tp x
    cp ranks: other pipeline replicas (megatron-core's ``ep x etp`` divides ``tp x cp x
    dp``, the rule check-config holds configs to), which simulate does not time. Not
    refused: ep beyond tp x cp is the usual layout (DeepSeek-V3: tp 1, ep 64)."""
    ranks, stage = key.ep * key.etp, key.tp * key.cp
    if stage % ranks == 0:
        return []
    return [f"ep {key.ep} x etp {key.etp} = {ranks} ranks do not fit a stage's tp {key.tp} x "
            f"cp {key.cp} = {stage}: the expert groups take ranks of other pipeline replicas "
            f"(megatron-core: ep x etp divides tp x cp x dp, here dp a multiple of "
            f"{ranks // math.gcd(ranks, stage)}); simulate times one replica"]


def layout_split(text: str, table: CostTable, schedule: Schedule, p: int, v: int
                 ) -> list[int]:
    """The table's layers per stage a Megatron-LM layout states: each stage's symbols (E,
    t, m, L: the table's embedding, blocks, MTP layers and head, in its order), as
    check-config reads a script's layout (check/split.py table_split); BadInput in one
    line where the layout is not the table's model, or not a split of the schedule's model
    chunks in Megatron-LM's order (stage i on rank i % pp: one stage a rank, or
    interleaved-1f1b's virtual stages)."""
    chunks = model_chunks(schedule, p, v)
    if schedule is Schedule.DUALPIPE or (chunks != p and schedule is not Schedule.INTERLEAVED):
        raise BadInput(f"--split takes a Megatron-LM layout for one stage a rank or "
                       f"interleaved-1f1b, whose stage order it states; {schedule.value} "
                       f"places its {chunks} model chunks otherwise: give layers per stage")
    mtp = mtp_count(table.names)
    try:
        layout = parse_layout(text, p, num_layers=len(table.names) - 2 - mtp, mtp_layers=mtp)
    except LayoutError as exc:
        raise BadInput(f"--split: {exc.problem} (column {exc.column} of {text})") from None
    stages = len(layout.stages)
    if stages != chunks:
        fits = (f" (-v {stages // p} runs {stages})" if schedule is Schedule.INTERLEAVED
                else f" (--schedule interleaved-1f1b -v {stages // p} runs {stages})")
        raise BadInput(f"--split {text} has {stages} stages; {schedule.value} at --pp {p}"
                       + (f" -v {v}" if schedule is Schedule.INTERLEAVED else "")
                       + f" runs {chunks} model chunks{fits}")
    return [len(stage) for stage in layout.stages]


def _entries(schedule: Schedule) -> str:
    return ("pp: dualpipe's chunks, each run by two ranks" if schedule is Schedule.DUALPIPE
            else "pp x chunks")


def simulate_table(
    table: CostTable, schedule: Schedule, p: int, m: int, v: int, b: int, split: list[int],
    blocking_send: bool = False, combined: bool = False,
) -> SimResult:
    """Simulate one pipeline with per-layer costs (one entry of ``split`` per model
    chunk); links inside one node. The MoE all-to-alls run on each stage's
    communication stream: the DualPipes' F&B pairs hide them."""
    chunks = stage_costs(table, b, split)
    stages = [chunks[c] for c in stage_chunk_map(schedule, p, v)]
    return simulate(
        schedule, p, m, stages, v=v, link=lambda a, z: table.p2p_intra,
        blocking_send=blocking_send, combined=combined,
    )


def result_json(run: SimRun) -> dict[str, Any]:
    r = run.result
    return {
        "schedule": run.schedule.value,
        "pp": r.p,
        "num_microbatches": r.m,
        "virtual_stages": r.v,
        "micro_batch_size": None if run.spec.fwd_ms is not None else run.spec.micro_batch_size,
        "stage_layers": run.stage_layers,
        "gpus": run.gpus,  # the job's GPUs whose slowest sets the pace (None: textbook)
        "source": run.origin,
        "step_time_s": r.step_time_s,
        "bubble_rate": r.bubble_rate,
        "devices": [
            {
                "device": d,
                "busy_s": dev.busy_s,
                "idle_s": dev.idle_s,
                "peak_inflight_microbatches": dev.peak_inflight,
                "peak_activation_bytes": dev.peak_activation_bytes,
            }
            for d, dev in enumerate(r.devices)
        ],
        "notes": list(run.notes),  # what stderr said: assumptions of the costs and the schedule
    }
