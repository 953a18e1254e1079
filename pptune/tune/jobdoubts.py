"""What makes calibrate's factors doubtful or unphysical, said in terms of the jobs' steps.

Every message here reads the same decomposition calibrate prints: each job's
step split into parts at the fitted factors (pptune.costmodel.breakdown) and
its sensitivity to each rate group (``fit.FitResult.elasticity``, ``-d log
step / d log factor``).

- ``refusal``: factors outside the physical range (calibration.problems),
  each out-of-range group named, then the part that dominates the step and
  what the factor says of it ("the expert all-to-all, 82% of the step, ran
  faster than its priced NIC bandwidth allows"); where that part's own group
  is in range but tied to one that is not (one run fits one factor), the line
  says that the tie, not the part, is what is refused. With several runs the
  step described is that of the run whose own factor, fitted to it alone, is
  out of range (each run's is listed), and the question asked is about that
  run's own description (its GPUs, batch, sequence). Only a common factor
  reaches the refusal: a split of the factors out of range falls back to it
  (pptune.costmodel.fit, said in a note: ``jobnotes``).
- ``doubts``: warnings stored in the profile: residuals and held-out errors
  beyond ``RESIDUAL_WARN``, each naming inter-node communication where the
  runs on more nodes are the under-priced ones (``_missing_term``); a job
  pptune predicts cannot fit; a GPU nobody named; a log whose own FLOPs a
  step are not its framework's count for the job the config describes
  (``pptune.tune.jobflops``); one part over
  ``DOMINANT_SHARE`` of a step whose factor is tied to groups the step hardly
  holds (the fit is that part's, carried to plans made of the others); a
  reserve beyond what fragmentation and the CUDA context and NCCL buffers
  account for (``reserve_bound``);
- ``near_floor``: a note for a factor within ``NEAR_FLOOR`` x of the floor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from pptune.costmodel import presets
from pptune.costmodel.breakdown import (
    AMAX,
    BUBBLE,
    CONTEXT_PARALLEL,
    DATA_PARALLEL,
    OPTIMIZER,
    SENDS,
    StepParts,
)
from pptune.costmodel.calibration import (
    CEILING_NAMES,
    RATE_NAMES,
    SANITY_FLOOR,
    Factors,
    RateGroup,
    problems,
)
from pptune.costmodel.calibration import said as said_factor
from pptune.costmodel.fit import FitResult
from pptune.costmodel.memory import DEFAULT_RESERVE_BYTES
from pptune.costmodel.parts import EXPERT_A2A, rate_group
from pptune.report.fmt import run_labels
from pptune.tune.jobgpu import assumed_warning
from pptune.tune.jobs import Job, another_job

GIB = 1024**3
# |residual| or |held-out error| beyond which calibrate warns: the worst error its
# benchmark accepts (bench/calibrate.py WORST_TARGET, docs/accuracy.md), over the
# 2-8% that timed steps move between launches (docs/measured.md)
RESIDUAL_WARN = 0.10
# one part above this share of a step leaves the rest under a fifth of it: a factor
# tied across groups is then that part's alone (module docstring)
DOMINANT_SHARE = 0.8
# The caching allocator's fragmentation: GMLake (Guo et al., ASPLOS 2024, arXiv
# 2401.08156) measured it on eight LLMs trained on A100-80GB at 15% of the reserved
# memory on average and up to 33% (9.2 GB on average, up to 25 GB), so up to a third of
# a log's reserved peak may hold no tensor.
FRAGMENTATION_SHARE = 1 / 3
# A factor under NEAR_FLOOR x SANITY_FLOOR gets a note. Only the floor: the ceilings sit
# a few per cent above the best-case rates the model prices (compute 1.04), so every
# factor a tuned job reaches (0.5-1, calibration.py) is within 2x of them.
NEAR_FLOOR = 2
# What each group's parts are, as a warning names them.
PARTS_OF = {RateGroup.COMPUTE: ("GEMMs", "attention"), RateGroup.MEMORY: ("memory-bound ops",),
            RateGroup.COMMUNICATION: ("communication (tensor-parallel, expert all-to-all, "
                                      "data-parallel, pipeline sends)",)}


def part_group(part: str) -> RateGroup | None:
    """The rate group that scales a part of breakdown.step_parts (None: no rate)."""
    if part in (DATA_PARALLEL, SENDS, AMAX, CONTEXT_PARALLEL):
        return RateGroup.COMMUNICATION
    if part == OPTIMIZER:  # HBM-bound over the rank's state (optimizer.py)
        return RateGroup.MEMORY
    if part == BUBBLE:
        return None
    return rate_group(part)


def _top(p: StepParts) -> tuple[str, float]:
    """The largest part of a step and its share."""
    part, s = max(p.parts, key=lambda kv: kv[1])
    return part, (s / p.step_s if p.step_s > 0 else 0.0)


def _sensitivity(el: dict[RateGroup, float]) -> str:
    ranked = sorted(RateGroup, key=lambda g: -el.get(g, 0.0))
    return ", ".join(f"{g.value} {el.get(g, 0.0):.2g}" for g in ranked)


def _names(groups: Sequence[RateGroup]) -> str:
    return listed([g.value for g in groups])


def listed(v: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return v[0] if len(v) == 1 else f"{', '.join(v[:-1])} and {v[-1]}"


def _priced_at(job: Job, node: int, part: str, group: RateGroup) -> str:
    """What a part's time is priced at, as "ran faster than ... allows" names it (``node``:
    the GPUs of an NVLink domain the job was priced with)."""
    if part == EXPERT_A2A:
        c = job.read.config
        span = c.ep * c.etp
        if span > node:
            return (f"its priced NIC bandwidth (the ep group of {span} spans nodes of {node} "
                    "GPUs)")
        return "its priced NVLink bandwidth"
    return CEILING_NAMES[group]


def refusal(gpu: presets.GpuSpec, res: FitResult, jobs: Sequence[Job],
            parts: Sequence[StepParts], node: int,
            alone: Callable[[], Sequence[Factors | None]] | None = None) -> str | None:
    """Why the factors are out of the physical range, in the steps' terms (module
    docstring); None when they are in it. ``node``: the GPUs of an NVLink domain the
    first job was priced with; ``alone``: each run's own factor, fitted to it alone (None
    where it cannot be), asked for only with several runs to name the one(s) that put
    the factors out of range (``_culprit``)."""
    f = res.factors
    wrong = {g: problems(gpu, f, (g,), res.clamped) for g in RateGroup}
    wrong = {g: w for g, w in wrong.items() if w}
    if not wrong:
        return None
    names = run_labels([j.config.name for j in jobs], [j.size.gpus for j in jobs])
    i, runs_said = _culprit(gpu, res, names, alone() if alone and len(jobs) > 1 else (),
                            tuple(wrong))
    job, el = jobs[i], res.elasticity[i]
    top, share = _top(parts[i])
    g_top = part_group(top)
    order = sorted(wrong, key=lambda g: g is not g_top)
    tie = next(t for t in res.fitted if order[0] in t)
    head = ""
    if len(tie) > 1:
        who = "one run fits" if len(jobs) == 1 else f"the {len(jobs)} runs fit"
        head = f"{who} one factor common to {_names(tie)}, and "
    said = "; ".join(_clauses(gpu, res, wrong, order, tie)) + runs_said
    step = (f"{names[i]}'s step is {share:.0%} {top} (its sensitivity to the rates: "
            f"{_sensitivity(el)})")
    if g_top in wrong:
        meaning = (f", so its {top} ran faster than {_priced_at(job, node, top, g_top)} allows"
                   if f.of(g_top) > 1 else f", so its {top} ran over ten times slower than "
                                           "pptune prices it")
    elif g_top is not None and g_top in tie:
        others = [g for g in order if g in tie]
        runs = "this run" if len(jobs) == 1 else "these runs"
        meaning = (f": its {g_top.value} factor, {f.of(g_top):.3g}, is in range, but the one "
                   f"factor carries it to {listed([RATE_NAMES[g] for g in others])}, which "
                   f"{runs} hardly measured, into every plan priced from the profile; a "
                   f"second run whose step holds more {listed(PARTS_OF[others[0]])} "
                   "(another tp, ep, dp or batch) fits them apart")
    else:
        meaning = ""
    others_job = [q for q in (another_job(j) for j in jobs) if q]
    if max(f.of(g) for g in wrong) > 1:
        size = job.size
        hint = ("the job ran faster than pptune can price it at the GPU's best rates: "
                + ", or ".join([*others_job, f"does {names[i]} run on more GPUs than the "
                                f"{size.gpus} it is priced on, a smaller batch than "
                                f"{size.global_batch} sequences, a shorter sequence than "
                                f"{size.seq_len} tokens or without the recomputation its config "
                                f"states, or on another GPU than {job.gpu}?"]))
    else:
        slower = "" if meaning.startswith(", so") else "the job ran over ten times slower "
        hint = ((f"{slower}than pptune prices it: " if slower else "")
                + ", or ".join([*others_job, "is the step in seconds (not milliseconds) and "
                                "the GPU the one named, and does the config state the job's "
                                "GPU count and batch?"]))
    return f"{head}{said}: {step}{meaning}; {hint}"


def _clauses(gpu: presets.GpuSpec, res: FitResult, wrong: dict[RateGroup, list[str]],
             order: Sequence[RateGroup], tie: Sequence[RateGroup]) -> list[str]:
    """Each out-of-range group's clause, those of one factor below the floor they share
    said once: ``a factor of 1e-06 or less puts the GEMM and attention rates and the HBM
    bandwidth below a tenth of ...``."""
    low = [g for g in order if g in tie and res.factors.of(g) < SANITY_FLOOR]
    if len(low) < 2:
        return [wrong[g][0] for g in order]
    f = res.factors.of(low[0])
    one = (f"a factor of {said_factor(f, low[0] in res.clamped)} puts "
           f"{listed([RATE_NAMES[g] for g in low])} below a tenth of what pptune prices on "
           f"{gpu.name} (at least {SANITY_FLOOR:g})")
    return [one, *(wrong[g][0] for g in order if g not in low)]


def _culprit(gpu: presets.GpuSpec, res: FitResult, names: Sequence[str],
             alone: Sequence[Factors | None], wrong: tuple[RateGroup, ...]) -> tuple[int, str]:
    """The run a refusal describes, and what each run fits alone (a clause, "" with one
    run): the run whose own factor is out of range (the farthest out where several are).
    Only a common factor is refused (a split out of range falls back to it, fit.py), and
    it lies between the runs' own factors, so one of them is out of range too; were none,
    the run whose step holds most of the groups out of range (``wrong``) is described."""
    if not alone or any(a is None for a in alone):
        return 0, ""
    own = [a.compute for a in alone if a is not None]  # one run: one factor common to all
    out = [k for k, a in enumerate(alone) if a is not None and problems(gpu, a)]
    each = ", ".join(f"{n} x{x:.3g}" + (" (out of range)" if k in out else "")
                     for k, (n, x) in enumerate(zip(names, own, strict=True)))
    if out:
        worst = max(out, key=lambda k: abs(math.log(own[k])))
    else:
        worst = max(range(len(own)), key=lambda k: sum(res.elasticity[k].get(g, 0.0)
                                                        for g in wrong))
    return worst, f"; fitted alone, each run's one factor: {each}"


def near_floor(res: FitResult) -> list[str]:
    """A note for each fitted factor within NEAR_FLOOR x of the floor calibrate refuses
    under."""
    out = []
    for tie in res.fitted:
        f = res.factors.of(tie[0])
        if f < NEAR_FLOOR * SANITY_FLOOR:
            out.append(f"the {_names(tie)} factor {f:.3g} is within {NEAR_FLOOR}x of the "
                       f"{SANITY_FLOOR:g} below which calibrate refuses (a job that slow is "
                       "more often described wrongly): check the run's GPU count, batch and "
                       "step units before trusting it")
    return out


def doubts(jobs: Sequence[Job], res: FitResult, held: tuple[float | None, ...],
           parts: Sequence[StepParts], reserves: Sequence[tuple[Job, float]],
           reserve: float | None) -> list[str]:
    """The profile's warnings (module docstring)."""
    out = [assumed_warning(j.config, j.gpu) for j in jobs if j.gpu_assumed][:1]
    out += [j.throughput_warning for j in jobs if j.throughput_warning]
    limit = f"beyond the +-{RESIDUAL_WARN:.0%} pptune's calibration benchmark accepts"
    term = _missing_term(list(zip(jobs, res.residuals, strict=True)))
    names = run_labels([j.config.name for j in jobs], [j.size.gpus for j in jobs])
    said = ""
    if any(abs(r) > RESIDUAL_WARN for r in res.residuals):
        shown = ", ".join(f"{n} {r:+.1%}" for n, r in zip(names, res.residuals, strict=True))
        out.append(f"the fit leaves residuals of {shown}, {limit}: no one set of factors gives "
                   f"every run's step; {term}")
        said = term
    known = [(n, j, h) for n, j, h in zip(names, jobs, held, strict=True) if h is not None]
    if any(abs(h) > RESIDUAL_WARN for _, _, h in known):
        shown = ", ".join(f"{n} {h:+.1%}" for n, _, h in known)
        held_term = _missing_term([(j, h) for _, j, h in known])
        out.append(f"leave one out, each run predicted from the others alone misses by "
                   f"{shown}, {limit}: the factors may not carry to other configurations"
                   + (f"; {held_term}" if held_term != said else ""))
    out += [_unstated(j) for j in jobs if j.overflow]
    out += _dominated(jobs, res, parts)
    out += [_reserve(j, r, reserve) for j, r in reserves
            if reserve is not None and r > reserve_bound(j)]
    return out


def _dominated(jobs: Sequence[Job], res: FitResult, parts: Sequence[StepParts]) -> list[str]:
    """A part over DOMINANT_SHARE of a step whose group's factor is tied to others."""
    out = []
    for j, p, el in zip(jobs, parts, res.elasticity, strict=True):
        top, share = _top(p)
        g = part_group(top)
        tie = next((t for t in res.fitted if g in t), ())
        if share <= DOMINANT_SHARE or g is None or len(tie) < 2:
            continue
        others = [h for h in tie if h is not g]
        out.append(
            f"{j.config}: the {top} is {share:.0%} of the step at the calibration (its "
            f"sensitivity to the rates: {_sensitivity(el)}), so the one factor fitted, "
            f"{res.factors.of(g):.3g}, is the {top}'s; it is carried to "
            f"{listed([RATE_NAMES[h] for h in others])} too, into plans whose step is "
            f"made of {listed([p for h in others for p in PARTS_OF[h]])}, which this run hardly "
            "measured; a run whose step holds more of them (another tp, ep, dp or batch) "
            "fits them apart")
    return out


def reserve_bound(job: Job) -> float:
    """The most a job's log may hold beyond pptune's tensors before the tensors are
    taken to miss something: fragmentation's share of its peak and pptune's default
    reserve for the CUDA context and NCCL buffers (an assumption, memory.py)."""
    peak = job.peak_memory_bytes or 0.0
    return FRAGMENTATION_SHARE * peak + DEFAULT_RESERVE_BYTES


def _reserve(job: Job, r: float, reserve: float) -> str:
    peak = job.peak_memory_bytes or 0.0
    what = f" ({job.memory_what})" if job.memory_what else ""
    return (f"{job.config}: its log's peak, {peak / GIB:.2f} GiB{what}, is {r / GIB:.2f} GiB "
            f"beyond pptune's tensors, over the {reserve_bound(job) / GIB:.2f} GiB that the "
            "allocator's fragmentation (up to a third of what a caching allocator reserves: "
            "GMLake, Guo et al., ASPLOS 2024) and pptune's "
            f"{DEFAULT_RESERVE_BYTES / GIB:g} GiB for the CUDA context and NCCL buffers (its "
            "default reserve, an assumption) account for: pptune's tensors likely miss "
            "something this run holds (an op's activations it does not price, a larger "
            "micro-batch or sequence than the config states), "
            f"and the reserve, {reserve / GIB:.2f} GiB a GPU, is carried into every plan "
            "recommend --profile ranks (--reserve-gib overrides)")


def _unstated(job: Job) -> str:
    """A job pptune predicts cannot fit, yet ran: its config likely leaves out something
    the job does, which the step priced (and so the factor fitted) lacks or adds."""
    logged = (f"; its log's peak is {job.peak_memory_bytes / GIB:.1f} GiB "
              f"({job.memory_what or 'as printed'})" if job.peak_memory_bytes is not None else "")
    return (f"{job.config}: pptune predicts this job cannot fit ({job.overflow.split(';')[0]})"
            f", yet it ran{logged}: its config likely does not state something the job does "
            "(activation recomputation, a ZeRO stage or offload, a smaller micro-batch or "
            "sequence), so the step priced is another job's and the time factor fitted to it "
            "may be distorted; state it in the config (Megatron-LM's or torchtitan's "
            "recomputation settings; a DeepSpeed or HF Trainer JSON, which cannot, its "
            "\"pptune\": {\"recompute\": \"full\"} key) and calibrate again")


def _missing_term(errors: Sequence[tuple[Job, float]]) -> str:
    """Inter-node communication, when the runs on more nodes are the ones under-priced
    (a lower error, residual or held out: predicted faster than they ran); else what to
    check."""
    nodes = [math.ceil(j.size.gpus / (j.read.config.gpus_per_node
                                      or presets.GPUS[j.gpu].gpus_per_node)) for j, _ in errors]
    few = [r for n, (_, r) in zip(nodes, errors, strict=True) if n == min(nodes)]
    many = [r for n, (_, r) in zip(nodes, errors, strict=True) if n > min(nodes)]
    if many and max(many) < min(few):
        return (f"the runs on more nodes ({max(nodes)} against {min(nodes)}) ran slower than "
                "pptune prices them next to the others: inter-node communication (the NIC's "
                "rate, or traffic the model does not count) is the likely missing term, "
                "unless the runs differ in what their configs do not state")
    return ("a cost that differs between the runs is missing or mispriced, or a run is "
            "described wrongly: check each run's GPUs, batch, sequence length, recomputation "
            "and precision")
