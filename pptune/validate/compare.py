"""The simulator's prediction for a plan, and how it compares with the run.

Prediction: ``pptune.costmodel.simulate.simulate`` over the profile's
per-layer costs for this split (``cost_table`` then ``stage_costs``), the
profile's intra-node point-to-point link between every pair of ranks, no
data-parallel all-reduce (validate runs one pipeline). Three corrections make
the model describe what torch.distributed.pipelining actually runs:

- the loss: the probe's head cost excludes it, torch computes it on the last
  stage after each forward (cross-entropy over a (b, s, V) logits tensor:
  ~2 ms forward and ~2-4 ms backward for gpt-small at b=1 on this CPU, a few
  per cent of the last stage). Its forward and backward, timed once by the
  last rank on a tensor shaped like its output, are added to that stage's F
  and B;
- torch's split backward on the first stage: ``backward_one_chunk(
  full_backward=False)`` does nothing on stage 0 and
  ``backward_weight_one_chunk`` runs the whole backward there (torch 2.13
  ``stage.py``: "Skip the backward for the first stage ..."). For zb-h1 and
  zbv the prediction moves stage 0's input-gradient time into its W;
- the host's speed now (``speed``), when the run measured it: the profile
  times each layer alone, in a loop that keeps its weights in cache, on a
  host whose load drifts between the probe and the run. Each rank times its
  training work (its stages' forward and backward, one micro-batch) alone
  in the run (``timing.contention``); that time over the profile's F + B + W
  of the same stages (``profile_speed``) scales the rank's stage costs, so
  the profile gives the split between ops and the run the pace they run at;
- contention between ranks (``stretch``), when the run measured it: in the
  run the ranks compute at the same time and, on a CPU host, share cores,
  caches, memory bandwidth and the host's other load. Each rank times the
  same training work alone and then with all ranks at once
  (``timing.contention``); the ratio f is applied as processor sharing: an
  op runs at rate 1 alone and 1/f while another rank computes, so an op that
  overlaps others for a share o of its time takes ``work / (1 - o + o/f)``,
  iterated to a fixed point over the simulated timeline. On this 2-core
  machine f was 1.0-2.2 across launches (it follows the host's load); the
  plain simulation under-predicted 2-rank step times by ~25-35% where f was
  ~1.5-2 (bench/results/prediction_accuracy.json has both figures). On
  GPUs, one per rank, f stays near 1.

What dominates the remaining error on a CPU box (2 cores, gloo):

- compute noise: op times carry 5-15% noise with bursts past 100%
  (docs/measured.md), the quick profile has 5 repeats per layer, and f is
  measured once per launch while the host's load changes. ``op_rows`` puts
  the measured median of every (kind, stage) op beside its predicted
  duration, so this part of the error reads apart from the schedule's;
- gloo point-to-point latency (~100-240 us one way, CV ~100%, docs/measured.md)
  and the framework's own per-op work (flattening arguments, the p2p
  bookkeeping between ops): small next to 5-70 ms ops, but they sit on the
  critical path every micro-batch; the waiting they cause shows as idle;
- step-to-step noise of 2-10% and medians that move 2-8% between launches:
  the error of one run is only known to within that."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from pptune.costmodel.schedules import SPLIT_BACKWARD, Schedule, stage_device
from pptune.costmodel.search import stage_costs
from pptune.costmodel.simulate import SimResult, StageCost, simulate
from pptune.costs.profiles import cost_table
from pptune.errors import BadInput
from pptune.launch.stats import median
from pptune.schemas import Profile
from pptune.validate.measure import Measured
from pptune.validate.runtime import per_action_s, with_overhead
from pptune.validate.spec import RunSpec

CONTENTION_ITERATIONS = 8


@dataclass
class Prediction:
    result: SimResult
    stages: list[StageCost]  # the profile's costs, corrected (loss, torch's split backward)
    notes: list[str] = field(default_factory=list)
    plain: SimResult | None = None  # without the contention model, when one was applied
    contention: float | None = None
    speed: dict[int, float] = field(default_factory=dict)  # per rank, when applied
    profile_only: SimResult | None = None  # the profile as probed: no speed, no contention
    per_action_s: float | None = None  # the runtime's own time per action, when measured


def check_profile(profile: Profile, spec: RunSpec, layer_names: list[str]) -> list[str]:
    """BadInput when the profile cannot price this plan; notes for lesser mismatches."""
    names = [layer.name for layer in profile.layers]
    if len(names) != len(layer_names):
        raise BadInput(
            f"the profile has {len(names)} layers but model {spec.source.label} has "
            f"{len(layer_names)}; probe this model (pptune probe) or give its --profile"
        )
    sizes = profile.micro_batch_sizes()
    if spec.micro_batch_size not in sizes:
        raise BadInput(
            f"the profile has no costs for micro-batch size {spec.micro_batch_size}; it has "
            f"{sizes}: pick one of those with --micro-batch-size, or probe with "
            f"--micro-batch-sizes {spec.micro_batch_size}"
        )
    notes = []
    if names != layer_names:
        notes.append(
            f"the profile's layer names ({names[0]} .. {names[-1]}) differ from the model's "
            f"({layer_names[0]} .. {layer_names[-1]}); costs are matched by position"
        )
    settings = (profile.raw or {}).get("settings") or {}
    threads = settings.get("threads")
    if spec.device == "cpu" and threads not in (None, spec.threads):
        notes.append(
            f"the profile was measured with {threads} torch thread(s), the ranks run with "
            f"{spec.threads}: expect the prediction off by that (1 vs 2 threads is ~1.7x, "
            "docs/measured.md)"
        )
    if profile.source == "analytic":
        notes.append("the profile is analytic (a GPU preset): its costs do not describe this machine")
    return notes


def predict(
    profile: Profile,
    spec: RunSpec,
    loss_s: tuple[float, float] | None = None,
    contention: float | None = None,
    speed: dict[int, float] | None = None,
    tiny_step_s: float | None = None,
    accum_s: dict[int, tuple[float, float]] | None = None,
) -> Prediction:
    """Simulate ``spec`` over ``profile`` with the corrections of the module docstring.

    ``tiny_step_s``: the schedule's step over tiny stages in the run
    (runtime.py): the runtime's time per action is added to every op.
    ``accum_s``: per stage, how much longer its whole backward and its split W
    take into held gradients (``timing.time_accumulation``): every micro-batch
    but a step's first pays it, so (m - 1) / m of it goes to each one's W.

    ``contention``: the measured slowdown of a rank's work while all ranks
    compute at once (``timing.contention``); ``speed``: per rank, its work
    alone now over the profile's (``profile_speed``); None leaves each out.
    """
    table = cost_table(profile)
    probed = stage_costs(table, spec.micro_batch_size, list(spec.stage_layers))
    stages = list(probed)
    notes = []
    if speed:
        for k, st in enumerate(stages):
            f = speed.get(stage_device(spec.schedule, spec.pp, k), 1.0)
            stages[k] = st.scaled(f, f, f)
        whose = "(rank 0, 1, ...)" if len(speed) > 1 else f"(rank {next(iter(speed))})"
        notes.append("host speed: each rank's training work ran alone in " + ", ".join(
            f"{speed[r]:.2f}x" for r in sorted(speed)) + f" the profile's time {whose}; its "
            "stage costs are scaled by that")
    if loss_s is not None:
        notes.append(
            f"loss (timed alone by the last rank) added to the last stage: forward "
            f"{loss_s[0] * 1e3:.2f} ms, backward {loss_s[1] * 1e3:.2f} ms"
        )
    if spec.schedule in SPLIT_BACKWARD:
        notes.append("torch runs stage 0's whole backward in W (its B is empty): predicted so")
    if accum_s:
        stages = _accumulating(stages, accum_s, spec.microbatches)
        notes.append("gradient accumulation (a backward into held gradients, timed in the run) "
                     "adds to W on " + ", ".join(f"stage {k} {w * 1e3:.2f} ms (split {v * 1e3:.2f})"
                                                 for k, (w, v) in sorted(accum_s.items()))
                     + f", for {spec.microbatches - 1} of {spec.microbatches} micro-batches")
    stages = _as_torch_runs(stages, loss_s, spec.schedule)
    link = table.p2p_intra
    action = None if tiny_step_s is None else per_action_s(spec, link, tiny_step_s)
    if action is not None and tiny_step_s is not None:
        notes.append(f"the pipelining runtime's own work: {action * 1e3:.3f} ms per action "
                     f"(the schedule over tiny stages took {tiny_step_s * 1e3:.1f} ms a step), "
                     "added to every op")

    def run(costs: list[StageCost], extra: float | None = action) -> SimResult:
        return simulate(
            spec.schedule, spec.pp, spec.microbatches, with_overhead(costs, extra or 0.0),
            v=spec.sim_v, link=lambda a, z: link, keep_events=True,
        )

    plain = run(stages)
    only = run(_as_torch_runs(probed, loss_s, spec.schedule), None) if speed else None
    if contention is None or spec.pp < 2:
        return Prediction(plain, stages, notes, profile_only=only, speed=dict(speed or {}),
                          per_action_s=action)
    f = max(1.0, contention)
    result = plain
    for _ in range(CONTENTION_ITERATIONS):
        result = run(stretch(stages, overlap_fractions(result), f, spec.schedule in SPLIT_BACKWARD))
    notes.append(
        f"contention: a rank's reference work ran {contention:.2f}x as long with all ranks "
        f"computing at once as alone; ops are stretched by the share of their time another "
        f"rank computes (without this: step {plain.step_time_s * 1e3:.1f} ms)"
    )
    return Prediction(result, stages, notes, plain, contention, dict(speed or {}), only, action)


def _accumulating(stages: list[StageCost], accum_s: dict[int, tuple[float, float]],
                  m: int) -> list[StageCost]:
    """Each stage's W (whole and split) with its measured extra into held gradients, for
    the m - 1 of its m micro-batches that find them (``predict``)."""
    share, out = (m - 1) / m, list(stages)
    for k, (whole, split_w) in accum_s.items():
        st = out[k]
        out[k] = replace(st, wgrad_s=st.wgrad_s + share * whole,
                         split_wgrad_s=st.split_w_s + share * split_w)
    return out


def _as_torch_runs(stages: list[StageCost], loss_s: tuple[float, float] | None,
                   schedule: Schedule) -> list[StageCost]:
    """The loss on the last stage; stage 0's whole backward in W where backward is split."""
    out = list(stages)
    if loss_s is not None:
        last = out[-1]
        split_b = None if last.split_bwd_s is None else last.split_bwd_s + loss_s[1]
        out[-1] = replace(last, fwd_s=last.fwd_s + loss_s[0], bwd_s=last.bwd_s + loss_s[1],
                          split_bwd_s=split_b)
    if schedule in SPLIT_BACKWARD:
        first = out[0]
        whole = first.bwd_s + first.wgrad_s  # stage_backward: one fused backward
        out[0] = replace(first, bwd_s=0.0, wgrad_s=whole, split_bwd_s=0.0, split_wgrad_s=whole)
    return out


def profile_speed(profile: Profile, spec: RunSpec, alone_s: dict[int, float]) -> float | None:
    """Median over ranks of ``rank_speeds``: far from 1, the machine runs at another
    speed than when it was probed (other load then or now, another machine)."""
    ratios = list(rank_speeds(profile, spec, alone_s).values())
    return median(ratios) if ratios else None


def rank_speeds(profile: Profile, spec: RunSpec, alone_s: dict[int, float]) -> dict[int, float]:
    """Per rank: its training work timed alone in the run (``timing.contention``: each
    of its stages' forward and full backward, one micro-batch) over the profile's
    F + B + W of the same stages."""
    table = cost_table(profile)
    stages = stage_costs(table, spec.micro_batch_size, list(spec.stage_layers))
    out = {}
    for rank, t in alone_s.items():
        work = sum(stages[k].fwd_s + stages[k].bwd_s + stages[k].wgrad_s
                   for k in spec.stages_of(rank))
        if work > 0 and t > 0:
            out[rank] = t / work
    return out


def overlap_fractions(result: SimResult) -> dict[tuple[str, int], float]:
    """Per (kind, stage): the share of its ops' time during which another device computes.

    A whole backward (BW) counts for its stage's B and W, an F&B pair for its
    forward's F and its backward's B and W: those are the costs ``stretch`` scales."""
    by_dev: dict[int, list[tuple[float, float]]] = {}
    for e in result.events:
        by_dev.setdefault(e.device, []).append((e.start_s, e.end_s))
    others = {d: _merge([iv for o, ivs in by_dev.items() if o != d for iv in ivs]) for d in by_dev}
    over: dict[tuple[str, int], float] = {}
    total: dict[tuple[str, int], float] = {}
    for e in result.events:
        kind = str(getattr(e.op.kind, "value", e.op.kind))
        shared = _overlap(others[e.device], e.start_s, e.end_s)
        for key in _cost_keys(kind, e.op):
            total[key] = total.get(key, 0.0) + (e.end_s - e.start_s)
            over[key] = over.get(key, 0.0) + shared
    return {k: over[k] / total[k] if total[k] > 0 else 0.0 for k in total}


def _cost_keys(kind: str, op: Any) -> list[tuple[str, int]]:
    """The (kind, stage) costs an op of ``kind`` runs."""
    if kind == "BW":
        return [("B", op.stage), ("W", op.stage)]
    if kind == "F&B":
        return [("F", op.stage), ("B", op.b_stage), ("W", op.b_stage)]
    return [(kind, op.stage)]


def stretch(
    stages: list[StageCost], frac: dict[tuple[str, int], float], f: float, split: bool
) -> list[StageCost]:
    """Processor sharing: work at rate 1 alone and 1/f while another rank computes.

    An op that overlaps others for a share ``o`` of its time takes
    ``work / (1 - o + o / f)``. Where backward is not split the simulator's B
    carries the weight-gradient too, so W is stretched as B.
    """

    def k(kind: str, stage: int) -> float:
        o = frac.get((kind, stage), 0.0)
        return 1.0 / (1.0 - o + o / f)

    return [st.scaled(k("F", i), k("B", i), k("W" if split else "B", i))
            for i, st in enumerate(stages)]


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _overlap(merged: list[tuple[float, float]], a: float, b: float) -> float:
    total = 0.0
    for x, y in merged:  # small lists (one step of one pipeline): a scan is enough
        if y <= a:
            continue
        if x >= b:
            break
        total += min(b, y) - max(a, x)
    return total


def rel_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured; nan when nothing was measured."""
    if measured <= 0 or not math.isfinite(measured):
        return math.nan
    return (predicted - measured) / measured


def op_rows(pred: Prediction, meas: Measured) -> list[dict[str, Any]]:
    """Measured median vs predicted duration of every (kind, stage) op: the simulated op's
    (the corrections above, stretched for contention) less the runtime's per-action work,
    which runs between the stamped calls (zbv's empty stage-0 B stamps ~30 us beside 1-2 ms
    an action): it counts in the step, not in an op's row."""
    action = pred.per_action_s or 0.0
    simulated: dict[tuple[str, int], list[float]] = {}
    for e in pred.result.events:
        kind = str(getattr(e.op.kind, "value", e.op.kind))
        extra = action * (2 if kind == "F&B" else 1)  # an F&B pair is two actions
        simulated.setdefault((kind, e.op.stage), []).append(max(0.0, e.end_s - e.start_s - extra))
    rows = []
    for key, measured in meas.op_medians_s.items():
        if key not in simulated:
            continue
        predicted = median(simulated[key])
        rows.append({
            "kind": key[0],
            "stage": key[1],
            "predicted_s": predicted,
            "measured_s": measured,
            "error": rel_error(predicted, measured),
        })
    return rows


def _side(step_s: float, bubble: float, busy: list[float]) -> dict[str, Any]:
    return {
        "step_time_s": step_s,
        "bubble_rate": bubble,
        "devices": [
            {"device": d, "busy_s": b, "idle_s": max(0.0, step_s - b)} for d, b in enumerate(busy)
        ],
    }


def comparison(
    spec: RunSpec, pred: Prediction, meas: Measured,
    measured_saved_bytes: list[float | None] | None = None,
) -> dict[str, Any]:
    """The JSON-ready comparison (``pptune validate --json``).

    Per device, ``peak_activation_bytes``: predicted, the simulator's peak of
    the profile's saved-activation bytes in the schedule's op order; measured,
    the most bytes saved for backward alive at once on that rank (saved.py).
    """
    sim = pred.result
    p_busy = [d.busy_s for d in sim.devices]
    m_busy = [d.busy_s for d in meas.devices]
    predicted = _side(sim.step_time_s, sim.bubble_rate, p_busy)
    measured = _side(meas.step_time_s, meas.bubble_rate, m_busy)
    saved = measured_saved_bytes or [None] * len(measured["devices"])
    for d, (p_dev, m_dev) in enumerate(zip(predicted["devices"], measured["devices"],
                                           strict=True)):
        p_dev["peak_activation_bytes"] = sim.devices[d].peak_activation_bytes
        m_dev["peak_activation_bytes"] = saved[d] if d < len(saved) else None
    measured["step_times_s"] = meas.step_times_s
    measured["spread"] = meas.spread
    return {
        "predicted": predicted,
        "measured": measured,
        "step_time_error": rel_error(sim.step_time_s, meas.step_time_s),
        "bubble_rate_error": sim.bubble_rate - meas.bubble_rate,
        "busy_error": rel_error(sum(p_busy), sum(m_busy)),
        "contention": pred.contention,
        "speed": {str(r): f for r, f in sorted(pred.speed.items())} or None,
        "runtime_per_action_s": pred.per_action_s,
        "predicted_from_profile": None if pred.profile_only is None else {
            "step_time_s": pred.profile_only.step_time_s,
            "step_time_error": rel_error(pred.profile_only.step_time_s, meas.step_time_s),
        },
        "predicted_without_contention": None if pred.plain is None else {
            "step_time_s": pred.plain.step_time_s,
            "bubble_rate": pred.plain.bubble_rate,
            "step_time_error": rel_error(pred.plain.step_time_s, meas.step_time_s),
        },
        "ops": op_rows(pred, meas),
    }
