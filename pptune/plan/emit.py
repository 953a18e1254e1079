"""From plan to launch: write a recommended plan in the user's framework.

Each framework can express only some plans. When it cannot express the one
pptune chose (a schedule it lacks, an uneven split it has no knob for),
``emit`` picks the fastest plan it *can* express with the same pp, dp, tp,
micro-batch size and count, says so in one line, and reports that plan's
own predicted numbers — never a silently different plan.

- Megatron-LM: 1f1b and interleaved-1f1b; layers per stage even, except that
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  may set the first and last stage (non-interleaved), the middle stages
  sharing the rest evenly.
- DeepSpeed: its PipelineEngine runs 1F1B only (TrainSchedule); partitions
  come from ``partition_method`` ("uniform" layer counts or "parameters");
  pptune's boundaries are printed beside it for a custom ``_partition_layers``.
- torchtitan: GPipe, 1F1B, Interleaved1F1B, ZBVZeroBubble and, with at least
  two stages per rank, InterleavedZeroBubble; any split through
  ``module_fqns_per_model_part``. ZB-H1 with one stage per rank is not
  expressible there.
- pptune: everything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from pptune.costmodel import presets
from pptune.costmodel.partition import add_ends, deepspeed_split, stage_bounds, strip_ends
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import (
    DP_INNER,
    PP_INNER,
    Plan,
    RankOrder,
    Recompute,
    Sharding,
    evaluate,
)
from pptune.errors import BadInput
from pptune.files import write_all
from pptune.plan.recommend import RecommendRun
from pptune.report.fmt import fmt_pct, fmt_seconds


class Framework(str, Enum):
    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    TORCHTITAN = "torchtitan"
    PPTUNE = "pptune"


DEEPSPEED_ZERO_STAGE = {Sharding.NONE: 0, Sharding.ZERO1: 1, Sharding.ZERO2: 2, Sharding.ZERO3: 3}
SHARDING_NOTES = {
    Framework.MEGATRON: {
        Sharding.ZERO2: "ZeRO-2", Sharding.ZERO3: "ZeRO-3", Sharding.FSDP: "FSDP"},
    Framework.DEEPSPEED: {Sharding.FSDP: "torch FSDP (written as ZeRO stage 3, its equivalent)"},
    Framework.TORCHTITAN: {
        Sharding.ZERO1: "ZeRO-1", Sharding.ZERO2: "ZeRO-2", Sharding.ZERO3: "ZeRO-3"},
}

TORCHTITAN_SCHEDULES = {
    Schedule.GPIPE: "GPipe",
    Schedule.ONE_F_ONE_B: "1F1B",
    Schedule.INTERLEAVED: "Interleaved1F1B",
    Schedule.ZBV: "ZBVZeroBubble",
}


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


def _megatron_ok(plan: Plan) -> bool:
    blocks = strip_ends(plan.stage_layers)
    p = plan.pp
    if plan.schedule is Schedule.INTERLEAVED:
        return len(set(blocks)) == 1
    if plan.schedule is not Schedule.ONE_F_ONE_B:
        return False
    middle = blocks[1:-1]
    return len(set(middle)) <= 1 or p <= 2


def _megatron_options(plan: Plan, n_blocks: int) -> list[tuple[Schedule, int, list[int]]]:
    """Splits Megatron-LM can express near the plan's first and last stages (+-6 blocks)."""
    p = plan.pp
    blocks = strip_ends(plan.stage_layers)
    near = range(-6, 7)
    opts: list[tuple[Schedule, int, list[int]]] = []
    if plan.schedule is Schedule.INTERLEAVED and n_blocks % (p * plan.virtual_stages) == 0:
        n = p * plan.virtual_stages
        opts.append((Schedule.INTERLEAVED, plan.virtual_stages, add_ends([n_blocks // n] * n)))
    if p == 1:
        return [*opts, (Schedule.ONE_F_ONE_B, 1, [n_blocks + 2])]
    firsts = sorted({blocks[0] + d for d in near if 1 <= blocks[0] + d < n_blocks})
    lasts = sorted({blocks[-1] + d for d in near if 1 <= blocks[-1] + d < n_blocks})
    if n_blocks % p == 0:
        opts.append((Schedule.ONE_F_ONE_B, 1, add_ends([n_blocks // p] * p)))
    for first in firsts:
        for last in lasts:
            rest = n_blocks - first - last
            if rest < 0:
                continue
            if p == 2:
                if rest == 0:
                    opts.append((Schedule.ONE_F_ONE_B, 1, add_ends([first, last])))
                continue
            if rest >= p - 2 and rest % (p - 2) == 0:
                mid = [rest // (p - 2)] * (p - 2)
                opts.append((Schedule.ONE_F_ONE_B, 1, add_ends([first, *mid, last])))
    return opts


def _model_shape(run: RecommendRun) -> presets.ModelShape | None:
    return run.shape or presets.MODELS.get(str(run.request.get("model")))


def _header(plan: Plan, run: RecommendRun, comment: str) -> list[str]:
    return [
        f"{comment} generated by pptune recommend from {run.origin}",
        f"{comment} plan: pp={plan.pp} dp={plan.dp} tp={plan.tp} {plan.schedule.value}"
        + (f" v={plan.virtual_stages}" if plan.virtual_stages > 1 else "")
        + f", {plan.num_microbatches} micro-batches of {plan.micro_batch_size}, "
        f"global batch {run.global_batch}",
        f"{comment} predicted: step {fmt_seconds(plan.step_time_s)}, bubble "
        f"{fmt_pct(plan.bubble_rate)}, {plan.tokens_per_s:.0f} tokens/s",
    ]


def _megatron(run: RecommendRun, plan: Plan) -> dict[str, str]:
    shape = _model_shape(run)
    gpus = plan.pp * plan.dp * plan.tp
    gpn = int(run.request.get("gpus_per_node", 8))
    nodes = max(1, -(-gpus // gpn))
    per_node = min(gpus, gpn)
    blocks = strip_ends(plan.stage_layers)
    lines = ["#!/usr/bin/env bash", *_header(plan, run, "#"), "set -euo pipefail", ""]
    args = [
        f"--tensor-model-parallel-size {plan.tp}",
        f"--pipeline-model-parallel-size {plan.pp}",
    ]
    if plan.schedule is Schedule.INTERLEAVED:
        args.append(f"--num-layers-per-virtual-pipeline-stage {blocks[0]}")
    elif plan.pp > 1 and len(set(blocks)) > 1:
        args.append(f"--decoder-first-pipeline-num-layers {blocks[0]}")
        args.append(f"--decoder-last-pipeline-num-layers {blocks[-1]}")
    if shape is not None:
        args += [
            f"--num-layers {shape.num_blocks}",
            f"--hidden-size {shape.hidden}",
            f"--num-attention-heads {shape.heads}",
            f"--ffn-hidden-size {shape.ffn}",
            f"--seq-length {shape.seq_len}",
            f"--max-position-embeddings {shape.seq_len}",
        ]
        if shape.kv_heads != shape.heads:
            args += ["--group-query-attention", f"--num-query-groups {shape.kv_heads}"]
        if shape.gated_mlp:
            args += ["--swiglu", "--normalization RMSNorm", "--position-embedding-type rope",
                     "--untie-embeddings-and-output-weights", "--disable-bias-linear"]
    else:  # a comment inside the continued command would end it: say it above
        lines.append("# the profile names no model shape: add --hidden-size, "
                     "--num-attention-heads etc. for your model")
        args.append(f"--num-layers {sum(blocks)}")
    args += [
        f"--micro-batch-size {plan.micro_batch_size}",
        f"--global-batch-size {run.global_batch}",
        "--bf16",
    ]
    if plan.sharding is Sharding.ZERO1:
        args.append("--use-distributed-optimizer")
    blocks_per_stage = min(blocks)
    if plan.recompute is Recompute.FULL:
        args += ["--recompute-granularity full", "--recompute-method uniform",
                 "--recompute-num-layers 1"]
    elif plan.recompute is Recompute.SELECTIVE and run.plan_request.recompute_every:
        # every N-th block as Megatron-LM expresses it: the first blocks/N of each stage
        args += ["--recompute-granularity full", "--recompute-method block",
                 f"--recompute-num-layers {blocks_per_stage // run.plan_request.recompute_every}"]
    if plan.rank_order == PP_INNER:
        args.append("--use-tp-pp-dp-mapping")
    lines.append(
        f"torchrun --nnodes {nodes} --nproc_per_node {per_node} "
        "--rdzv_backend c10d --rdzv_endpoint \"${MASTER_ADDR:-localhost}:${MASTER_PORT:-29500}\" \\"
    )
    lines.append("    pretrain_gpt.py \\")
    lines += [f"    {a} \\" for a in args[:-1]] + [f"    {args[-1]} \\", '    "$@"', ""]
    return {"pretrain_megatron.sh": "\n".join(lines)}


def _deepspeed(run: RecommendRun, plan: Plan, method: str) -> dict[str, str]:
    ds = {
        "train_batch_size": run.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.num_microbatches,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": DEEPSPEED_ZERO_STAGE.get(plan.sharding, 3)},
        "pipeline": {"stages": plan.pp, "partition": method},
    }
    if plan.recompute is not Recompute.NONE:
        every = 1 if plan.recompute is Recompute.FULL else run.plan_request.recompute_every or 1
        ds["pipeline"]["activation_checkpoint_interval"] = every
    bounds = [0] + [e for _s, e in stage_bounds(plan.stage_layers)]
    names = run.names
    side = [
        *_header(plan, run, "#"),
        f"# PipelineModule(layers=..., num_stages={plan.pp}, partition_method=\"{method}\")",
        f"# stage boundaries over the {len(names)} layers (embedding, blocks, head): {bounds}",
    ] + [
        f"#   stage {i}: {names[s]} .. {names[e - 1]} ({e - s} layers)"
        for i, (s, e) in enumerate(stage_bounds(plan.stage_layers))
    ] + [
        f"# launch: deepspeed --num_gpus {min(plan.pp * plan.dp * plan.tp, 8)} train.py "
        "--deepspeed_config ds_config.json",
        "",
    ]
    return {"ds_config.json": json.dumps(ds, indent=2) + "\n", "ds_partition.txt": "\n".join(side)}


def _torchtitan(run: RecommendRun, plan: Plan) -> dict[str, str]:
    shape = _model_shape(run)
    names = []
    for s, e in stage_bounds(plan.stage_layers):
        part = []
        for i in range(s, e):
            if i == 0:
                part.append("tok_embeddings")
            elif i == len(run.names) - 1:
                part += ["norm", "output"]
            else:
                part.append(f"layers.{i - 1}")
        names.append(part)
    flavor = {"llama3-8b": ("llama3", "8B"), "llama3-70b": ("llama3", "70B")}.get(
        str(run.request.get("model")), (str(run.request.get("model")), "custom"))
    # with pp > 1 torchtitan splits local_batch_size into pipeline micro-batches; with
    # pp = 1 there is no pipeline, so the micro-batches are gradient-accumulation
    # steps: global_batch_size / (local_batch_size x dp)
    local = plan.micro_batch_size * (plan.num_microbatches if plan.pp > 1 else 1)
    fsdp = plan.sharding is Sharding.FSDP
    lines = [
        *_header(plan, run, "#"),
        "",
        "[model]",
        f'name = "{flavor[0]}"',
        f'flavor = "{flavor[1]}"',
        "",
        "[training]",
        f"local_batch_size = {local}",
        f"global_batch_size = {run.global_batch}",
        f"seq_len = {shape.seq_len if shape else run.table.seq_len}",
        "",
        "[parallelism]",
        f"data_parallel_replicate_degree = {1 if fsdp else plan.dp}",
        f"data_parallel_shard_degree = {plan.dp if fsdp else 1}",
        f"tensor_parallel_degree = {plan.tp}",
        f"pipeline_parallel_degree = {plan.pp}",
        f'pipeline_parallel_schedule = "{TORCHTITAN_SCHEDULES[plan.schedule]}"',
        f"pipeline_parallel_microbatch_size = {plan.micro_batch_size}",
        "module_fqns_per_model_part = [",
    ]
    lines += [f"    {json.dumps(part)}," for part in names] + ["]", ""]
    lines += ["[activation_checkpoint]", f'mode = "{plan.recompute.value}"']
    if plan.recompute is Recompute.SELECTIVE:
        lines.append(f'selective_ac_option = "{run.plan_request.recompute_every or "op"}"')
    lines.append("")
    return {"torchtitan.toml": "\n".join(lines)}


def _pptune(run: RecommendRun, plan: Plan) -> dict[str, str]:
    model = run.request.get("model")
    lines = [
        *_header(plan, run, "#"),
        f"gpus: {plan.pp * plan.dp * plan.tp}",
        f"gpus_per_node: {run.request.get('gpus_per_node', 8)}",
        f"tp: {plan.tp}",
        f"pp: {plan.pp}",
        f"dp: {plan.dp}",
        f"schedule: {plan.schedule.value}",
        f"virtual_stages: {plan.virtual_stages}",
        f"micro_batch_size: {plan.micro_batch_size}",
        f"global_batch: {run.global_batch}",
        f"grad_accum_steps: {plan.num_microbatches}",
        f"stage_layers: [{', '.join(map(str, strip_ends(plan.stage_layers)))}]",
        f"sharded_optimizer: {'true' if plan.sharding is Sharding.ZERO1 else 'false'}",
        f"sharding: {plan.sharding.value}",
        f"recompute: {plan.recompute.value}",
        *([f"recompute_every: {run.plan_request.recompute_every}"]
          if plan.recompute is Recompute.SELECTIVE and run.plan_request.recompute_every else []),
        f"rank_order: {plan.rank_order.value}",
    ]
    if model in presets.MODELS:
        lines.append(f"model: {model}")
    if str(run.request.get("device")) in presets.GPUS:
        lines.append(f"gpu: {run.request.get('device')}")
    if run.origin.startswith("profile "):
        lines.append(f"profile: {run.origin.split()[1]}")
    return {"pptune.yaml": "\n".join(lines) + "\n"}


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
    chosen = plan
    exact = True

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
        if not _megatron_ok(plan):
            why = (f"Megatron-LM has no {plan.schedule.value} schedule"
                   if plan.schedule not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)
                   else "its split is uneven in the middle stages")
            fallback(_megatron_options(plan, n_blocks), why)
        files = _megatron(run, chosen)
    elif fw is Framework.DEEPSPEED:
        params = [b / run.table.param_dtype_bytes for b in run.table.param_bytes]
        methods = {m: deepspeed_split(m, params, plan.pp) for m in ("uniform", "parameters")}
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
        files = _deepspeed(run, chosen, method)
    elif fw is Framework.TORCHTITAN:
        if plan.schedule is Schedule.ZB_H1 or plan.rank_order != DP_INNER:
            why = ("torchtitan's InterleavedZeroBubble needs >= 2 stages per rank"
                   if plan.schedule is Schedule.ZB_H1
                   else "its device mesh keeps pipeline ranks outermost")
            sched = Schedule.ONE_F_ONE_B if plan.schedule is Schedule.ZB_H1 else plan.schedule
            fallback([(sched, plan.virtual_stages if sched is Schedule.INTERLEAVED else 1,
                       plan.stage_layers)], why, DP_INNER)
        files = _torchtitan(run, chosen)
    else:
        files = _pptune(run, chosen)
    unexpressed = SHARDING_NOTES.get(fw, {}).get(chosen.sharding)
    if unexpressed:
        notes.append(f"{fw.value}: the plan's sharding is {unexpressed}; these files do not set "
                     f"it, configure it by hand (pptune predicted it as {chosen.sharding.value})")
    return Emitted(fw, chosen, files, notes, exact)


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
