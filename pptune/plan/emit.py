"""From plan to launch: write a recommended plan in the user's framework.

Each framework's adapter (pptune.frameworks.registry) states the plan or,
when its files cannot, the closest plan they can, says so in one line and
reports that plan's own predicted numbers — never a silently different
plan (each adapter's ``closest.py`` says what its files state). Every file
runs on exactly the plan's GPUs (``launch_shape``); where a file states the
node shape it launches, the plan is re-predicted on that shape.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from pptune.costmodel import presets
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.precision import problems as precision_problems
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import Plan, search
from pptune.errors import BadInput
from pptune.files import Written, write_all
from pptune.frameworks.common.adapter import Adapter, Job, Stated
from pptune.frameworks.common.as_run import as_itself
from pptune.frameworks.common.baseline import ratio, relative_to
from pptune.frameworks.common.express import (
    closest_or_refuse,
    fastest_on,
    fits,
    placed,
    price,
    stateable_fastest,
)
from pptune.frameworks.common.torch_schedules import refused_rounds
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.common.writing import plan_launch
from pptune.frameworks.registry import ADAPTERS, Framework
from pptune.plan.framework_search import check_moments, parse_framework
from pptune.plan.kept import changed, refuse_changed
from pptune.plan.recommend import RecommendRun
from pptune.report.fmt import blocks_text, fmt_pct, fmt_seconds, fmt_sizes


@dataclass
class Emitted:
    framework: Framework
    plan: Plan  # the plan written (the chosen one, or the closest expressible)
    files: dict[str, str]  # file name -> content
    notes: list[str] = field(default_factory=list)
    exact: bool = True
    # the layers the plan's split counts (Job.layer_names: embedding, blocks, any MTP
    # layers, head), which the summary's blocks per stage are counted from
    names: tuple[str, ...] = ()

    def summary(self) -> str:
        p = self.plan
        return (
            f"{self.framework.value}: {fmt_sizes(p.pp, p.dp, p.tp, p.cp, p.ep, p.etp)} "
            f"{p.schedule.value}"
            + (f" v={p.virtual_stages}" if p.virtual_stages > 1 else "")
            + f", {p.num_microbatches} x {p.micro_batch_size}, blocks/stage "
            f"{blocks_text(self.names, p.stage_layers)}"
            f"; predicted step {fmt_seconds(p.step_time_s)}, bubble {fmt_pct(p.bubble_rate)}"
        )


def job_of(run: RecommendRun, plan: Plan) -> Job:
    """The job of one plan as the adapters see them (its cost table, the request it was
    searched with for its one cost key: ``RecommendRun.jobs``)."""
    assert run.jobs is not None  # recommend builds them
    return run.jobs(run.table_for(plan.key),
                    replace(run.request_for(plan.key), cost_keys=(plan.key,), tp=plan.key.tp))


def listed_job(run: RecommendRun, plan: Plan) -> Job:
    """The job a listed plan was priced with: as its framework's files run it where the
    run ranked a framework's plans (``recommend --framework``: framework_search.py),
    else its job as searched (``job_of``)."""
    job = job_of(run, plan)
    if run.request.framework is None:
        return job
    ran = as_itself(ADAPTERS[parse_framework(run.request.framework)], job, plan)
    return job if ran is None else ran[0]


def emit(framework: Framework | str, run: RecommendRun, rank: int = 1,
         folder: Path | None = None, versions: Versions | None = None) -> Emitted:
    """Render plan ``rank`` (1-based) of a recommendation for ``framework``; ``folder``:
    where the files will be written (a path they name is written from there,
    ``as_written``); ``versions``: the releases they are written for
    (--framework-version; every job carries them, so the plan is stated and priced as
    that release runs it)."""
    if versions is not None and run.jobs is not None:
        run = replace(run, jobs=replace(run.jobs, versions=versions))
    fw = parse_framework(framework)
    adapter: Adapter = ADAPTERS[fw]
    plans = run.result.plans
    if not 1 <= rank <= len(plans):
        raise BadInput(f"--plan {rank} is not among the {len(plans)} ranked plans; give "
                       f"--plan 1 to {len(plans)} (or raise --top)")
    check_moments(fw, job_of(run, plans[rank - 1]).moments)
    asked = plans[rank - 1]
    with relative_to(rank, asked.step_time_s):  # every ratio of the notes: to plan N
        plan, notes = _stateable_layout(adapter, run, plans[rank - 1], rank)
        stated = _or_faster_stateable(adapter, run, plan, rank)
        chosen, notes = stated.plan, [*notes, *stated.notes]
        if adapter.states_node_shape:
            where = placed(stated.job, chosen)
            if where is not chosen:
                nodes, per_node = plan_launch(chosen, stated.job)
                notes.append(
                    f"launched as {nodes} nodes x {per_node} GPUs (the launcher runs the same number "
                    f"of ranks on every node); predicted for that placement: step "
                    f"{fmt_seconds(where.step_time_s)} ({ratio(where.step_time_s, chosen.step_time_s)}; "
                    f"unplaced: {fmt_seconds(chosen.step_time_s)})")
                chosen = where
                stated = replace(stated, plan=where)  # the files' header gives its prediction
        if not stated.exact and len(notes) > 1:  # several substitutions: where they ended
            notes.append(f"in all, plan {rank} ({fmt_seconds(asked.step_time_s)}) is written as "
                         f"{fmt_seconds(chosen.step_time_s)}, "
                         f"{ratio(chosen.step_time_s, asked.step_time_s)}")
    refuse_changed(stated.job.held, asked, chosen, notes, name=adapter.name,
                   title=adapter.title, ranked_by=run.request.framework)
    winner, forced = plans[0], run.forced  # recommend's note on the forced sizes: winner's
    if forced is not None and chosen is not winner and forced.note(winner) is None:
        notes += [n for n in [forced.note(chosen, "the plan written")] if n]
    if folder is not None and stated.job.hf_config is not None:
        stated = replace(stated, job=replace(stated.job, hf_config=as_written(
            stated.job.hf_config, folder)))
    files = adapter.write(stated)
    imbalance = stated.job.cost_options.moe_imbalance if stated.job.cost_options else 1.0
    checked = files.get(adapter.files[0], "")  # the file check-config reads (the first)
    if imbalance != 1.0 and stated.job.shape is not None and stated.job.shape.moe and not (
            f"imbalance={imbalance:g}" in checked or f"imbalance: {imbalance:g}" in checked):
        notes.append(f"{adapter.title}'s files state no routing imbalance: check-config "
                     f"prices the file with balanced routing, not the --moe-imbalance "
                     f"{imbalance:g} predicted here")
    return Emitted(fw, chosen, files, notes, stated.exact, stated.job.layer_names)


def as_written(path: str, folder: Path) -> str:
    """``path`` as a file in ``folder`` names it: check-config resolves a config's
    hf_config against the config's own folder (check/shape.py ``config_shape``), so
    relative to ``folder`` where the two share a folder below the filesystem's root,
    else absolute (nothing shared but the root, or another drive)."""
    target, base = Path(path).resolve(), folder.resolve()
    try:
        shared = Path(os.path.commonpath([target, base]))
    except ValueError:  # another drive
        return str(target)
    if shared == Path(shared.anchor):
        return str(target)
    return os.path.relpath(target, base)


# substitutions that cost more than this are checked against the fastest plans the
# framework's files state on the same GPUs (the plan's cost key and the search's others)
SLACK = 1.03
# how many of those are tried: the search's split need not be one the files can place
# (DeepSpeed's partition_method), so the next fastest may state better
TRIED = 4


def _or_faster_stateable(adapter: Adapter, run: RecommendRun, plan: Plan, rank: int
                         ) -> Stated:
    """The plan as the framework's files state it (``express``) or, where its
    substitutions cost more than ``SLACK``, the fastest of the ``TRIED`` fastest plans its
    files state on the same GPUs, expressed the same way, when that runs over 1% faster:
    on the plan's cost key, searched priced as the files run (stateable_fastest), and on
    the search's other keys the files state (another tp, cp or ep may suit the framework's
    substitutions better), each priced as the files run when expressed."""
    job = job_of(run, plan)
    try:
        stated: Stated | None = adapter.express(job, plan, rank)
    except BadInput as refused:  # no substitute on its ranks fits: another plan may
        stated, refusal = None, refused
    if stated is not None and (stated.exact
                               or stated.plan.step_time_s <= SLACK * plan.step_time_s):
        return stated
    # searched as the files run (stated.job: the framework's kernels, its sequence
    # parallelism or none), so the plans found fit and keep their time when expressed
    ran = stated.job if stated is not None else job
    tried: list[tuple[Plan, Stated]] = []
    for best in stateable_fastest(ran, plan, adapter.stateable(ran.request, ran.model,
                                                               ran.shape), TRIED):
        if best.spec == plan.spec:
            continue
        try:
            # found at the files' prices for plan N (``ran``: Megatron-FSDP's BF16 weight
            # gradients, say), expressed from its own (a ZeRO-1 plan's fused ones)
            tried.append((best, adapter.express(job, price(job, best.spec), rank)))
        except BadInput:
            continue
    seq = run.table.seq_len
    keys = tuple(k for k in run.plan_request.keys()
                 if k != plan.key and adapter.cannot_state(k, seq, model=job.model,
                                                           shape=job.shape) is None)
    for within in adapter.stateable_groups(run.plan_request, keys, ran.model, ran.shape,
                                           job.versions):
        for best in search(run.table_for, replace(within, top=TRIED,
                                                  with_best_pp1=False)).plans:
            try:
                tried.append((best, adapter.express(job_of(run, best), best, rank)))
            except BadInput:
                continue
    if not tried:
        if stated is None:
            raise refusal
        return stated
    held = run.plan_request.pp  # --pp: a substitute at another depth (DeepSpeed's AutoTP at
    # pp 1) only where none keeps it
    tried = [t for t in tried if held is None or t[1].plan.pp in held] or tried
    # one that keeps every size a flag held at one value, where one does (kept.py)
    tried = [t for t in tried if not changed(job.held, plan, t[1].plan)] or tried
    # a substitute that fits the GPU before a faster one that does not (a file stated anyway)
    best, second = min(tried, key=lambda t: (not fits(t[1].job, t[1].plan), t[1].plan.step_time_s))
    if stated is not None and second.plan.step_time_s >= 0.99 * stated.plan.step_time_s and (
            fits(stated.job, stated.plan) or not fits(second.job, second.plan)):
        return stated
    v = f" v={best.virtual_stages}" if best.virtual_stages > 1 else ""
    final = fmt_seconds(second.plan.step_time_s)
    priced = any(final in note for note in second.notes)  # its notes end at its step
    slower = (_without_advice(str(refusal)) if stated is None else
              f"those substitutions make plan {rank} slower, "
              f"{fmt_seconds(stated.plan.step_time_s)} "
              f"({ratio(stated.plan.step_time_s, plan.step_time_s)})")
    why = (f"{slower}; the fastest plan a "
           f"{adapter.title} file states on the same GPUs is written instead: "
           f"pp={best.pp} dp={best.dp}"
           + (f" ({best.key})" if best.key != plan.key else "")
           + f" {best.schedule.value}{v}, {best.num_microbatches} x "
           f"{best.micro_batch_size}, {best.sharding.value}/{best.recompute.value}"
           + (", priced as the files run it next" if priced else
              f", predicted step {final} ({ratio(second.plan.step_time_s, plan.step_time_s)})"))
    return replace(second, exact=False,
                   notes=(*(stated.notes if stated is not None else ()), why, *second.notes))


def _stateable_layout(adapter: Adapter, run: RecommendRun, plan: Plan,
                      rank: int) -> tuple[Plan, list[str]]:
    """The plan, or when the files cannot state its layout (context or expert
    parallelism, FP8, a sequence its tp and cp cannot split) the best plan of the same
    search whose layout they state."""
    seq = run.table.seq_len
    regrouped = (plan.schedule is Schedule.INTERLEAVED and plan.num_microbatches % plan.pp != 0
                 and not adapter.runs_microbatch_groups)
    job = job_of(run, plan)
    why = adapter.cannot_state(plan.key, seq, model=job.model, shape=job.shape)
    if why is None and regrouped:
        why = _torchs_order(plan)
        closest = _on_the_same_ranks(adapter, run, plan, rank, why)
        if closest is not None:
            return closest
    if why is None:
        return plan, []
    keys = tuple(k for k in run.plan_request.keys()
                 if adapter.cannot_state(k, seq, model=job.model, shape=job.shape) is None)
    if not keys:
        raise BadInput(f"{adapter.name} cannot express plan {rank}: {why}; plan with "
                       f"{_stated_flags(adapter, plan.key, seq, job)} (or emit another "
                       "framework)")
    within = adapter.in_its_order(run.plan_request)
    best = search(run.table_for, replace(within, cost_keys=keys, tp=keys[0].tp, top=1)).plans
    if not best:
        raise BadInput(f"{adapter.name} cannot express plan {rank} ({why}) and no plan it can "
                       "state fits")
    alt = best[0]
    return alt, [f"{adapter.name} cannot express plan {rank} ({why}): emitting the best plan "
                 f"it can state ({alt.key}, pp={alt.pp} dp={alt.dp}), predicted step "
                 f"{fmt_seconds(alt.step_time_s)} ({ratio(alt.step_time_s, plan.step_time_s)})"]


def _without_advice(refusal: str) -> str:
    """A refusal without its closing advice ("; choose ...", "; use ...", "; plan with
    ..."), which the plan written instead answers."""
    cut = max(refusal.rfind(m) for m in ("; choose ", "; use ", "; plan with "))
    return refusal[:cut] if cut > 0 else refusal


def _stated_flags(adapter: Adapter, key: CostKey, seq: int | None, job: Job) -> str:
    """The flags that give the search a cost key like ``key`` its files state: each size
    they refuse set back to its plain value (--cp 1, --ep 1, --etp 1, --precision bf16)."""
    plain = (("--cp 1", replace(key, cp=1)), ("--ep 1", replace(key, ep=1)),
             ("--etp 1", replace(key, etp=1)),
             ("--precision bf16", replace(key, precision=Precision.BF16)))
    flags = [flag for flag, other in plain if other != key]
    for flag, other in plain:
        if other != key and adapter.cannot_state(other, seq, model=job.model,
                                                 shape=job.shape) is None:
            return _precisions(adapter, key, seq, job) if flag.startswith("--precision") \
                else flag
    return " ".join(flags) or "other sizes"


def _precisions(adapter: Adapter, key: CostKey, seq: int | None, job: Job) -> str:
    """``--precision bf16, fp8 or mxfp8``: the precisions its files state for ``key`` that
    the job's GPU runs (bf16 first, which every file states)."""
    gpu = presets.GPUS.get(job.device or "")
    said = [p.value for p in (Precision.BF16, Precision.FP8, Precision.MXFP8)
            if p is not key.precision
            and adapter.cannot_state(replace(key, precision=p), seq, model=job.model,
                                     shape=job.shape) is None
            and (p is Precision.BF16 or (gpu is not None and not precision_problems(p, gpu)))]
    return "--precision " + (said[0] if len(said) == 1
                             else f"{', '.join(said[:-1])} or {said[-1]}")


def _torchs_order(plan: Plan) -> str:
    """What torch's ScheduleInterleaved1F1B makes of an interleaved plan whose micro-batch
    count is not a multiple of pp: it refuses the count (torch_schedules.refused_rounds),
    or runs it in an order of its own, not the micro-batch groups pptune simulates."""
    m, p = plan.num_microbatches, plan.pp
    rounds = refused_rounds(m, p)
    if rounds:
        return (f"torch's ScheduleInterleaved1F1B refuses {m} micro-batches on pp {p}: they must "
                f"be a multiple of its round count max(1, m // pp) = {rounds} (torch 2.13 "
                "torch/distributed/pipelining/schedules.py)")
    return (f"torch's ScheduleInterleaved1F1B runs {m} micro-batches on pp {p} in an order of "
            "its own, not the micro-batch groups pptune simulates")


def _on_the_same_ranks(adapter: Adapter, run: RecommendRun, plan: Plan, rank: int,
                       why: str) -> tuple[Plan, list[str]] | None:
    """The plan its files state on the plan's ranks (pp, sharding, recomputation and cost
    key) in torch's order that runs fastest as its files run it (``adapter.as_run``: a
    schedule that cannot compile the model runs its kernels eager): the search's fastest
    of each schedule its files state (express.fastest_on: another micro-batch size and
    count, interleaving only with m a multiple of pp), with the note saying why; None
    where none fits."""
    job = job_of(run, plan)
    job = replace(job, request=adapter.in_its_order(job.request))
    found = [p for s in adapter.stateable(job.request, job.model, job.shape).schedules
             if (p := fastest_on(job, plan, (s,))) is not None]
    ran = {p.spec: _as_run_s(adapter, job, p) for p in found}
    if not found or min(ran.values()) == math.inf:
        return None
    notes: list[str] = []
    return closest_or_refuse(job, plan, (), name=adapter.name, rank=rank, why=why, notes=notes,
                             found=min(found, key=lambda p: ran[p.spec])), notes


def _as_run_s(adapter: Adapter, job: Job, plan: Plan) -> float:
    """The plan's step as the framework's files run it; infinite where they cannot."""
    try:
        return adapter.as_run(job, plan)[1].step_time_s
    except BadInput:
        return math.inf


def file_names(framework: str, versions: Versions | None = None) -> list[str]:
    """The files ``--emit FRAMEWORK -o DIR`` writes (checked before the search) for
    ``versions`` (--framework-version)."""
    return list(ADAPTERS[parse_framework(framework)].files_for(versions or Versions()))


def write(emitted: Emitted, directory: Path, force: bool = False) -> list[Written]:
    """All files or none; existing ones only with ``force`` (``pptune.files.write_all``)."""
    modes = {name: 0o777 if name.endswith(".sh") else 0o666 for name in emitted.files}
    return write_all(directory, emitted.files, force, modes)
