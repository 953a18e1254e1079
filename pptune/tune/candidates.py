"""Which planned candidates tune can run here, and the rule that drops the rest (no torch).

Every plan ``pptune recommend`` prints becomes a ``Candidate``: one pipeline
of the plan as a ``RunSpec`` (what ``pptune validate`` runs), and either a
note (data parallelism: one pipeline is measured, its all-reduce is not) or
the reason it is skipped (tensor parallelism, more pipeline ranks than local
devices, a plan torch's schedule classes refuse).

The pruning rule: after each trial, every remaining candidate is priced over
the calibrated profile, and one whose *lower bound* (the planner's: the
busiest device's work, and the pipeline's fill in front of the bottleneck
stage) exceeds the best measured step by more than the measured noise cannot
win and is dropped without being run. The noise is that trial's own (half
the range of its timed steps) plus the error the calibrated predictions have
shown so far on trials they had not seen: on a host whose speed drifts
between launches the second is the larger, and the rule then measures more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pptune.costmodel.bounds import lower_bound as planner_lower_bound
from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput
from pptune.report.fmt import fmt_seconds
from pptune.schemas import Profile
from pptune.tune import model
from pptune.validate import spec as spec_mod
from pptune.validate.spec import ModelSource, RunSpec


@dataclass(frozen=True)
class Candidate:
    key: str
    rank: int  # its place in the planner's ranking (1 = predicted fastest)
    plan: Any  # the planner's Plan
    spec: RunSpec  # one pipeline of it
    skip: str | None = None  # why tune cannot run it here
    note: str | None = None  # what of the plan is not measured
    shares_host: bool = False  # its dp replicas would share this host's CPU cores


def plan_key(schedule: Schedule, pp: int, dp: int, v: int, b: int, m: int,
             stage_layers: list[int] | tuple[int, ...]) -> str:
    """A stable name for a plan, e.g. ``1f1b pp2 dp1 b1 m4 split 4,4`` (journal key)."""
    vs = f" v{v}" if schedule is Schedule.INTERLEAVED else ""
    return (f"{schedule.value} pp{pp} dp{dp}{vs} b{b} m{m} "
            f"split {','.join(map(str, stage_layers))}")


@dataclass(frozen=True)
class RunSettings:
    """How every trial runs (``pptune validate``'s settings)."""

    source: ModelSource
    warmup: int
    steps: int
    timeout_s: float
    device: str  # cpu or cuda
    threads: int = 1


def candidate(plan: Any, rank: int, n_layers: int, local_devices: int,
              run: RunSettings) -> Candidate:
    """``plan`` as one pipeline on this machine."""
    key = plan_key(plan.schedule, plan.pp, plan.dp, plan.virtual_stages,
                   plan.micro_batch_size, plan.num_microbatches, plan.stage_layers)
    sharding = str(getattr(getattr(plan, "sharding", None), "value", "none"))
    recompute = str(getattr(getattr(plan, "recompute", None), "value", "none"))
    key += "".join(f" {name}" for name in (sharding, f"recompute-{recompute}")
                   if name not in ("none", "recompute-none"))
    spec = RunSpec(
        plan.schedule, plan.pp, plan.num_microbatches, plan.virtual_stages,
        plan.micro_batch_size, tuple(plan.stage_layers), run.source, run.warmup,
        run.steps, run.timeout_s, run.device, run.threads,
    )
    if plan.tp > 1:
        skip = (f"tp={plan.tp}: tune runs no tensor parallelism, and the stages at tp=1 "
                "would be another plan")
        return Candidate(key, rank, plan, spec, skip=skip)
    if recompute != "none":
        skip = (f"recompute={recompute}: the trials run without activation recomputation; "
                "the same plan without it is its own candidate")
        return Candidate(key, rank, plan, spec, skip=skip)
    if plan.pp > local_devices:
        skip = (f"pp={plan.pp} needs {plan.pp} local devices, one rank each; this machine "
                f"offers {local_devices}")
        return Candidate(key, rank, plan, spec, skip=skip)
    try:
        spec_mod.check(spec, n_layers)
    except BadInput as exc:
        return Candidate(key, rank, plan, spec, skip=f"torch cannot run it: {exc}")
    if plan.dp == 1:
        return Candidate(key, rank, plan, spec)
    note = (f"dp={plan.dp}: one pipeline measured (dp=1); its data-parallel all-reduce "
            + (f"and {sharding} gathers " if sharding != "none" else "")
            + "predicted, not measured")
    shares = run.device == "cpu"
    if shares:
        note += ("; its replicas would share this host's cores, so the pipeline's step is "
                 "stretched by the calibrated contention when plans are compared")
    return Candidate(key, rank, plan, spec, note=note, shares_host=shares)


def lower_bound_s(profile: Profile, spec: RunSpec, loss_s: tuple[float, float] | None) -> float:
    """The planner's lower bound on one pipeline's step over ``profile`` (with the loss)."""
    stages = model.predict_stages(profile, spec, loss_s)
    return float(planner_lower_bound(spec.schedule, spec.pp, spec.microbatches, stages))


@dataclass(frozen=True)
class Verdict:
    key: str
    lower_bound_s: float
    best_s: float
    noise: float  # the best trial's own step noise
    prediction_error: float  # the calibrated predictions' measured error so far

    @property
    def threshold_s(self) -> float:
        return self.best_s * (1.0 + self.noise + self.prediction_error)

    @property
    def dropped(self) -> bool:
        return self.lower_bound_s > self.threshold_s

    def reason(self) -> str:
        return (f"calibrated lower bound {fmt_seconds(self.lower_bound_s)} > best measured "
                f"plan {fmt_seconds(self.best_s)} + {self.noise:.1%} noise + "
                f"{self.prediction_error:.1%} prediction error: cannot win")


def prune(bounds: dict[str, float], best_s: float, noise: float,
          prediction_error: float = 0.0) -> list[Verdict]:
    """One verdict per candidate: dropped when its lower bound exceeds the best
    measured step by more than that trial's noise plus the prediction error
    measured so far (the median |error| of the calibrated predictions of the
    trials run since: how far a calibrated figure may be off on this host)."""
    return [Verdict(k, lb, best_s, noise, prediction_error) for k, lb in bounds.items()]
