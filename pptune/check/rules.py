"""`pptune check-config`: every finding about a training config, at once.

Findings have a stable ``id``, a ``severity`` (error, warning, info), a
one-line ``message`` that gives the values and the knob, and the ``values``
themselves. Exit codes are decided by the CLI: 1 when any finding is an
error (or a warning under --strict), else 0.

Layer counts in a config (``num_layers``, ``stage_layers``) count
transformer blocks, as Megatron-LM and torchtitan do; the embedding sits on
the first stage and the LM head on the last, as both frameworks place them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pptune.check.batch import batch_rules
from pptune.check.best import best_plan, slower_than_best
from pptune.check.costs import costs, model_of
from pptune.check.domain import with_nvlink_domain
from pptune.check.experts import expert_rules
from pptune.check.framework import (
    config_rules,
    config_sharding,
    memory_fixes,
    unsimulated_order,
)
from pptune.check.job import ConfigCosts
from pptune.check.microbatches import microbatch_findings
from pptune.check.split import (
    StageRecomputeError,
    layout_fits,
    recompute_layers,
    table_blocks,
    table_split,
)
from pptune.check.verdicts import (
    balance,
    bubble_hint,
    bubble_of_the_best,
    memory_overflow,
    softened,
    unknown_dp,
    without_twins,
)
from pptune.check.widths import optimizer_widths
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import LayoutError as PlacementError
from pptune.costmodel.layout_grammar import LayoutError, parse_layout
from pptune.costmodel.precision import Fp8Recipe, reduces_amax
from pptune.costmodel.schedules import (
    OVERLAPPED,
    Schedule,
    ScheduleError,
    chunks_per_device,
    model_chunks,
)
from pptune.costmodel.search import (
    MAX_SIMULATED_OPS,
    CostTable,
    Plan,
    PlanRequest,
    PlanSpec,
    RankOrder,
    Recompute,
    evaluate,
)
from pptune.costmodel.stage_recompute import summary_blocks
from pptune.frameworks.common.fields import Semantics
from pptune.options import CostOptions
from pptune.report.fmt import fmt_bytes, fmt_pct, fmt_seconds
from pptune.schemas import Profile, TrainingConfig

GIB = 1024**3


@dataclass
class Finding:
    id: str
    severity: str  # "error" | "warning" | "info"
    message: str
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckOptions:
    max_bubble: float | None = None  # None: the config's limits, else 0.25
    max_slowdown: float | None = None
    max_memory: float | None = None  # None: the config's limits.memory_fraction
    # the command line's --profile, --model and --gpu (they override the file's)
    costs: CostOptions = field(default_factory=CostOptions)
    compare_best: bool = True
    strict: bool = False  # bubble and slowdown over their limits are errors
    profile: Profile | None = None  # a profile object that beats costs.profile (calibrate's)


@dataclass
class CheckReport:
    findings: list[Finding]
    plan: Plan | None = None
    best: Plan | None = None
    derived: dict[str, Any] = field(default_factory=dict)
    table: CostTable | None = None  # the costs the plan was priced with
    request: PlanRequest | None = None  # the request it was simulated under

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]


def check(cfg: TrainingConfig, base_dir: Path, opts: CheckOptions | None = None,
          semantics: Semantics | None = None) -> CheckReport:
    """All findings about ``cfg``; ``semantics`` carries what the reader learnt of
    the framework (its findings, version and schedule knobs)."""
    opts = opts or CheckOptions()
    sem = semantics or Semantics()
    out: list[Finding] = [Finding(f.id, f.severity, f.message) for f in sem.findings]

    assumed: int | None = None  # the dp assumed when the config states none (verdicts.py)

    def add(id_: str, severity: str, message: str, every_dp: bool = False,
            **values: Any) -> None:
        if not every_dp:  # a finding no dp would clear keeps its severity
            severity, message = softened(severity, message, id_, assumed)
        out.append(Finding(id_, severity, message, values))

    cfg = with_nvlink_domain(cfg, opts.costs, add, sem.gpus_per_node_flag, opts.profile,
                             base_dir)

    p, tp, cp, v = cfg.pp, cfg.tp, cfg.cp, cfg.virtual_stages
    schedule = cfg.schedule
    chunks = chunks_per_device(schedule, v)

    # --- arithmetic: gpus = tp * pp * cp * dp -------------------------------
    dp = cfg.dp
    said = f" ({sem.gpus_from})" if sem.gpus_from else ""  # a launch comment's count
    if dp is None and cfg.gpus is not None:
        if cfg.gpus % (tp * p * cp):
            add("gpus-mismatch", "error",
                f"gpus {cfg.gpus}{said} is not a multiple of tp*pp*cp = {tp}*{p}*{cp} = "
                f"{tp * p * cp}; change gpus or the parallel sizes", gpus=cfg.gpus, tp=tp,
                pp=p, cp=cp)
        else:
            dp = cfg.gpus // (tp * p * cp)
    elif dp is not None and cfg.gpus is not None and cfg.gpus != tp * p * cp * dp:
        add("gpus-mismatch", "error",
            f"gpus {cfg.gpus}{said} != tp*pp*cp*dp = {tp}*{p}*{cp}*{dp} = {tp * p * cp * dp}; "
            "make them agree", gpus=cfg.gpus, tp=tp, pp=p, cp=cp, dp=dp)
    if dp is None and cfg.gpus is None:
        dp, assumed = unknown_dp(cfg, add)

    # --- global batch = micro-batch * GA * dp (batch.py) ---------------------
    ga = batch_rules(cfg, dp, assumed, add)
    m = ga // cfg.pipeline_flushes if ga is not None and not sem.batch_refused else None
    if ga is not None and ga % cfg.pipeline_flushes:
        add("flushes-mismatch", "error",
            f"GA steps {ga} do not split evenly into {cfg.pipeline_flushes} pipeline runs",
            grad_accum_steps=ga, pipeline_flushes=cfg.pipeline_flushes)
        m = None

    # --- layers -------------------------------------------------------------
    n_stages = model_chunks(schedule, p, v)  # dualpipe: pp chunks, each on two ranks
    dual = " (one per model chunk: dualpipe runs each on two ranks)" if (
        schedule is Schedule.DUALPIPE) else ""
    blocks = cfg.num_layers
    if cfg.pipeline_layout is not None:
        try:
            layout = parse_layout(cfg.pipeline_layout, p, chunks, num_layers=blocks,
                                  mtp_layers=cfg.mtp_layers or 0)
        except LayoutError as exc:
            add("pipeline-layout", "error", f"{exc}; pipeline_layout must place the model's "
                f"layers on pp x chunks = {p} x {chunks} stages", stages=n_stages)
        else:
            if cfg.stage_layers is not None and cfg.stage_layers != layout.layers_per_stage():
                add("split-mismatch", "error",
                    f"stage_layers {cfg.stage_layers[:16]} are not the layout's "
                    f"{layout.layers_per_stage()[:16]}; give one of them",
                    stage_layers=cfg.stage_layers)
    elif cfg.stage_layers is not None:
        if len(cfg.stage_layers) != n_stages:
            add("split-mismatch", "error",
                f"stage_layers has {len(cfg.stage_layers)} entries; {schedule.value} with pp={p} "
                f"and {chunks} chunk(s) per device needs {n_stages}{dual}",
                stage_layers=cfg.stage_layers, stages=n_stages)
        elif blocks is not None and sum(cfg.stage_layers) != blocks:
            add("split-mismatch", "error",
                f"stage_layers sum to {sum(cfg.stage_layers)}, not the {blocks} layers",
                stage_layers=cfg.stage_layers, num_layers=blocks)
    elif blocks is not None and blocks % n_stages and not sem.split_rules:
        add("layers-not-divisible", "error",
            f"{blocks} layers do not divide into "
            + (f"pp = {n_stages} chunks{dual}" if dual else
               f"pp*v = {p}*{chunks} = {n_stages} stages") + "; "
            "change pp or virtual stages, or give an explicit stage_layers split "
            "(Megatron-LM: --decoder-first/last-pipeline-num-layers)",
            num_layers=blocks, pp=p, virtual_stages=chunks)

    # --- framework schedule rules (the config's framework and version) --------
    if m is not None:  # broken: no alignment warning from a batch already in error
        microbatch_findings(cfg, m, dp, sem, add, broken=any(
            f.id == "batch-mismatch" for f in out))
    if schedule is Schedule.INTERLEAVED and v < 2:
        add("interleaved-v", "error",
            f"interleaved-1f1b needs >= 2 virtual stages per device (got {v})", virtual_stages=v)
    if schedule is Schedule.ZBV and v not in (1, 2):
        add("zbv-chunks", "error",
            f"zbv runs exactly two chunks per device (got virtual stages {v}): torch's "
            "ScheduleZBVZeroBubble raises 'ZBV requires exactly 2 stages per rank'",
            virtual_stages=v)
    if schedule in OVERLAPPED and v not in (1, 2):
        add("zbv-chunks", "error",
            f"{schedule.value} runs exactly two chunks per device (got virtual stages {v})",
            virtual_stages=v)
    if schedule not in {Schedule.INTERLEAVED, Schedule.ZBV} | OVERLAPPED and v > 1:
        add("virtual-stages-ignored", "error",
            f"{schedule.value} runs one chunk per device but virtual stages is {v}; "
            "use interleaved-1f1b or set virtual stages to 1", virtual_stages=v)
    shape = model_of(cfg, base_dir, opts.costs, opts.profile)
    expert_rules(cfg, dp, add, shape)
    # the GPU --gpu names, where the file names none: some refusals depend on it
    config_rules(cfg if cfg.gpu or not opts.costs.gpu else cfg.model_copy(
        update={"gpu": opts.costs.gpu}), sem, add)
    out[:] = without_twins(out)
    report = CheckReport(out, derived={"dp": dp, "grad_accum_steps": ga, "microbatches": m})
    structural = any(f.severity == "error" for f in out)
    # the GPUs the file launches (the pace of the slowest: costs.resolve), where it says
    priced = costs(cfg, base_dir, opts.costs, add, opts.profile, refused=structural,
                   gpus=cfg.gpus or tp * p * cp * (dp or 1))
    table, key, reserve = priced.table, priced.key, priced.reserve_bytes
    report.derived["cost_source"] = priced.origin
    if table is not None:  # the layout priced: tp, cp, ep, etp and the GEMM precision
        report.derived["cost_key"] = str(key)
    report.table = table
    if table is None or structural or dp is None or m is None:
        if table is not None and structural:
            add("prediction-skipped", "info",
                "memory, bubble and step time not predicted until the errors above are fixed")
        return report
    _predict(cfg, priced, opts, report, add, dp=dp, m=m, schedule=schedule, chunks=chunks,
             sem=sem, reserve_bytes=2 * GIB if reserve is None else reserve)
    return report


def _predict(
    cfg: TrainingConfig, priced: ConfigCosts, opts: CheckOptions, report: CheckReport,
    add: Any, *, dp: int, m: int, schedule: Schedule, chunks: int, sem: Semantics,
    reserve_bytes: float = 2 * GIB,
) -> None:
    assert priced.table is not None
    table, key, p = priced.table, priced.key, cfg.pp
    n_stages = model_chunks(schedule, p, cfg.virtual_stages)
    n_blocks, _ = table_blocks(table)
    if not layout_fits(cfg, table, add):
        return
    # a layout or a stated split may leave a stage its embedding or head alone
    if cfg.pipeline_layout is None and cfg.stage_layers is None and n_blocks < n_stages:
        add("too-few-layers", "error",
            f"{n_blocks} layers cannot fill {n_stages} stages", stages=n_stages)
        return
    if (cfg.pipeline_layout is None and cfg.stage_layers is not None
            and sum(cfg.stage_layers) != n_blocks):
        add("split-mismatch", "error",
            f"stage_layers sum to {sum(cfg.stage_layers)}, not the model's {n_blocks} layers",
            stage_layers=cfg.stage_layers, num_layers=n_blocks)
        return
    ops = n_stages * m * 3
    if ops > MAX_SIMULATED_OPS:
        add("too-large-to-simulate", "warning",
            f"{n_stages} stages x {m} micro-batches is {ops:,} ops, over the {MAX_SIMULATED_OPS:,} "
            "pptune simulates in a check; memory, bubble and step time not predicted",
            ops=ops)
        return
    unsimulated = unsimulated_order(cfg, m, sem)
    if unsimulated is not None:
        add("schedule-not-modelled", "warning",
            f"pptune cannot simulate this schedule ({unsimulated}); memory, bubble and step "
            "time not predicted", schedule=schedule.value, microbatches=m, pp=p)
        return
    split = table_split(cfg, table, n_stages, key)
    gpus = p * key.tp * key.cp * dp  # a profile folds cp into its per-layer costs (key cp 1)
    global_batch = cfg.micro_batch_size * m * cfg.pipeline_flushes * dp
    sharding, recompute = config_sharding(cfg), Recompute(cfg.recompute or "none")
    req = PlanRequest(
        gpus=gpus, global_batch=global_batch, tp=key.tp, gpus_per_node=cfg.gpus_per_node,
        cost_keys=(key,), overlap_param_gather=cfg.overlap_param_gather,
        fp8_param_gather=bool(cfg.fp8_param_gather
                              and cfg.precision in ("fp8", "mxfp8", "nvfp4")),
        fp8_amax_reduction=reduces_amax(cfg.fp8_recipe),
        overlap_grad_reduce=cfg.overlap_grad_reduce is not False,
        shardings=(sharding,), recomputes=(recompute,), recompute_every=cfg.recompute_every,
        recompute_group=cfg.recompute_uniform_layers or 1,
        fsdp_reshard_after_forward=cfg.fsdp_reshard_after_forward, dp_replicate=cfg.dp_replicate or 1,
        reserve_bytes=reserve_bytes, micro_batch_sizes=(cfg.micro_batch_size,),
        **optimizer_widths(cfg),
    )
    v = cfg.virtual_stages if schedule is Schedule.INTERLEAVED else 1
    try:
        per_stage = recompute_layers(cfg, table, split)
    except StageRecomputeError as exc:
        add("recompute-layers", "error", str(exc))
        return
    spec = PlanSpec(schedule, p, cfg.micro_batch_size, m, tuple(split), v,
                    RankOrder(cfg.rank_order), sharding, recompute, key,
                    a2a_overlap=bool(cfg.a2a_overlap), recompute_layers=per_stage)
    try:
        plan = evaluate(table, req, spec)
    except PlacementError as exc:  # an expert placement the rank layout cannot hold
        add("moe-not-predicted", "warning",
            f"the expert placement ep {key.ep}, etp {key.etp} cannot be priced on this "
            f"layout ({exc}); memory, bubble and step time not predicted", ep=cfg.ep, cp=cfg.cp)
        return
    except ScheduleError as exc:  # the framework runs it; pptune's simulator cannot
        add("schedule-not-modelled", "warning",
            f"pptune cannot simulate this schedule ({exc}); memory, bubble and step time not "
            "predicted", schedule=schedule.value, microbatches=m, pp=p)
        return
    report.plan = plan
    report.request = req
    step = plan.step_time_s * cfg.pipeline_flushes
    report.derived.update(step_time_s=step, bubble_rate=plan.bubble_rate,
                          peak_memory_bytes=plan.peak_memory_bytes, stage_layers=split,
                          recompute_layers_per_stage=summary_blocks(table, plan,
                                                                    cfg.recompute_every))
    share = opts.max_memory if opts.max_memory is not None else cfg.limits.memory_fraction
    cap = table.memory_bytes * share
    fixes = memory_fixes(cfg, sem.memory_fixes)
    over = memory_overflow(list(plan.peak_memory_bytes), cap, fixes,
                           "warning" if cfg.memory_budget_ac else "error", add)
    if not over:
        add("memory-ok", "info",
            f"peak memory {fmt_bytes(max(plan.peak_memory_bytes))} of {fmt_bytes(cap)} "
            f"(rank {plan.peak_memory_bytes.index(max(plan.peak_memory_bytes))})",
            peak_bytes=max(plan.peak_memory_bytes), capacity_bytes=cap)
    max_bubble = opts.max_bubble if opts.max_bubble is not None else cfg.limits.max_bubble
    if plan.bubble_rate > max_bubble:
        hint = bubble_hint(p, m, plan.bubble_rate, max_bubble,
                           p if schedule is Schedule.INTERLEAVED else 1, *balance(table, plan))
        add("bubble-over-limit", _limit_severity(opts, cfg, opts.max_bubble, "max_bubble"),
            f"predicted bubble {fmt_pct(plan.bubble_rate)} exceeds the limit "
            f"{fmt_pct(max_bubble)} (pp={p}, m={m}, {schedule.value}){hint}",
            bubble_rate=plan.bubble_rate, max_bubble=max_bubble)
    else:
        add("bubble-ok", "info",
            f"predicted bubble {fmt_pct(plan.bubble_rate)} (limit {fmt_pct(max_bubble)}), "
            f"step {fmt_seconds(step)}{_gemms(key, cfg)}", bubble_rate=plan.bubble_rate,
            step_time_s=step)
    if not opts.compare_best:
        return
    max_slow = opts.max_slowdown if opts.max_slowdown is not None else cfg.limits.max_slowdown
    found = best_plan(cfg, replace(priced, versions=sem.versions), req, plan)
    if found is None:
        return
    report.best = found.plan
    report.derived["slowdown_vs_best"] = plan.step_time_s / found.plan.step_time_s
    bubble_of_the_best(report.findings, found.plan, max_bubble, stated=(
        opts.max_bubble is not None or "max_bubble" in cfg.limits.model_fields_set))
    slower_than_best(table, plan, found.plan, gpus=gpus, limit=max_slow, add=add,
                     severity=_limit_severity(opts, cfg, opts.max_slowdown, "max_slowdown"),
                     every=req.recompute_every, modules=tuple(
                         cfg.recompute_modules or () if cfg.recompute == "selective" else ()),
                     runs=found.runs, words=sem.batch_words)


def _limit_severity(opts: CheckOptions, cfg: TrainingConfig, flag: float | None,
                    key: str) -> str:
    """A predicted bubble or slowdown is not a framework rule: a warning, unless the
    user set that limit (the flag or ``limits`` in the file) or asked for --strict."""
    stated = flag is not None or key in cfg.limits.model_fields_set
    return "error" if stated or opts.strict else "warning"


def _gemms(key: CostKey, cfg: TrainingConfig) -> str:
    """The GEMM precision the step was priced at, where it is not BF16 (the JSON's
    ``cost_key`` says it too): a reader of the text sees the file's FP8 was read."""
    if key.precision is Precision.BF16:
        return ""
    recipe = (f", {cfg.fp8_recipe or Fp8Recipe.DELAYED.value} scaling"
              if key.precision is Precision.FP8 else "")  # Megatron-LM's default recipe
    return f", {key.precision.value.upper()} GEMMs{recipe}"
