"""Trials, the calibration they give, and predictions over a calibrated profile (no torch).

A ``Trial`` is what one measured run of a candidate leaves (the op medians
``pptune.validate`` stamps, the timed step times, the loss it timed alone,
the contention it measured). ``calibrate`` turns trials into a
``Calibration`` (``calibrate.py`` explains the arithmetic, ``latency.py`` the
range a fitted link latency must be in to be stored); ``calibrated_profile``
applies it to a profile (schema v1, the same file ``pptune probe`` writes, its
notes saying what was calibrated from what, and its warnings);
``predict`` prices a candidate over any profile with the corrections
``pptune validate`` documents (the loss on the last stage, torch's split
backward on stage 0) and, when given, its contention model: uncalibrated,
without loss or contention, that is the planner's own figure for one
pipeline; calibrated, with the trials' loss and median contention.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pptune.costmodel.schedules import SPLIT_BACKWARD, Schedule
from pptune.schemas import Profile
from pptune.tune import calibrate as cal
from pptune.tune import latency as lat
from pptune.validate import compare
from pptune.validate.spec import RunSpec


@dataclass(frozen=True)
class Trial:
    """One measured candidate."""

    key: str
    schedule: Schedule
    pp: int
    microbatches: int
    virtual_stages: int
    micro_batch_size: int
    stage_layers: tuple[int, ...]
    step_times_s: tuple[float, ...]
    op_medians_s: dict[tuple[str, int], float]
    loss_s: tuple[float, float] | None = None
    contention: float | None = None

    @property
    def measured_s(self) -> float:
        return statistics.median(self.step_times_s)

    @property
    def noise(self) -> float:
        """Half the relative range of the timed steps: how far their median may sit off."""
        if len(self.step_times_s) < 2:
            return 0.0
        return (max(self.step_times_s) - min(self.step_times_s)) / (2 * self.measured_s)

    def spec(self) -> RunSpec:
        return RunSpec(self.schedule, self.pp, self.microbatches, self.virtual_stages,
                       self.micro_batch_size, self.stage_layers)


@dataclass(frozen=True)
class Calibration:
    factors: dict[int, dict[cal.Cell, float]]  # per micro-batch size measured
    default_size: int  # the size measured most: its factors stand in for sizes not measured
    latency_s: float | None  # fitted p2p latency per message; None without a pp >= 2 trial
    losses_s: dict[int, tuple[float, float]]  # loss (forward, backward) timed per size
    contention: float | None  # median measured contention of the pp >= 2 trials
    sources: tuple[str, ...]  # the trials' keys
    residual: float  # worst |fitted - measured| / measured over the op medians
    notes: list[str] = field(default_factory=list)
    # what makes the fit doubtful: a latency outside its physical range (not stored), a
    # trial the others' latency does not predict (latency.py)
    warnings: list[str] = field(default_factory=list)

    def factors_for(self, b: int) -> dict[cal.Cell, float]:
        return self.factors.get(b) or self.factors[self.default_size]

    def loss_for(self, b: int) -> tuple[float, float] | None:
        """The loss timed at size ``b``, else scaled from the nearest size timed.

        Cross-entropy's work is proportional to the logits' elements (b x
        sequence x vocabulary), so linearly in b.
        """
        if b in self.losses_s:
            return self.losses_s[b]
        if not self.losses_s:
            return None
        near = min(self.losses_s, key=lambda x: (abs(x - b), x))
        f, w = self.losses_s[near]
        return f * b / near, w * b / near


def base_cells(profile: Profile, b: int) -> dict[cal.Cell, float]:
    out = {}
    for i, layer in enumerate(profile.layers):
        c = layer.cost(b)
        out.update({(i, "fwd"): c.fwd_s, (i, "bwd"): c.bwd_s, (i, "wgrad"): c.wgrad_s})
    return out


def alone_medians(profile: Profile, t: Trial) -> dict[tuple[str, int], float]:
    """The trial's op medians with its measured contention taken out.

    ``pptune validate``'s processor-sharing model (``compare.stretch``): an
    op that overlaps another rank's compute for a share o of its time runs
    ``1 / (1 - o + o / f)`` times as long as alone. The shares come from the
    trial simulated over ``profile``; one rank (pp=1) or no measured f: as is.
    """
    f = t.contention
    if f is None or t.pp < 2 or f <= 1.0:
        return dict(t.op_medians_s)
    result = compare.predict(profile, t.spec(), t.loss_s).result
    share = compare.overlap_fractions(result)
    out = {}
    for (kind, stage), x in t.op_medians_s.items():
        o = share.get((kind, stage), 0.0)
        out[(kind, stage)] = x * (1.0 - o + o / f)
    return out


def _observations(profile: Profile, trials: list[Trial]) -> list[cal.Observation]:
    obs = []
    for t in trials:
        split = t.schedule in SPLIT_BACKWARD
        obs += cal.observations(t.key, t.stage_layers, split, alone_medians(profile, t),
                                ops_per_kind=t.microbatches * len(t.step_times_s))
    return obs


def calibrate(profile: Profile, trials: list[Trial], by: str = "pptune tune") -> Calibration:
    """Factors per micro-batch size from the op medians, then the link latency from the steps;
    ``by``: the command the notes say calibrated it."""
    if not trials:
        raise ValueError("calibrate needs at least one trial")
    counts = Counter(t.micro_batch_size for t in trials)
    default = min(counts, key=lambda b: (-counts[b], b))
    factors: dict[int, dict[cal.Cell, float]] = {}
    residual = 0.0
    losses: dict[int, tuple[float, float]] = {}
    for b in sorted(counts):
        group = [t for t in trials if t.micro_batch_size == b]
        base = base_cells(profile, b)
        obs = _observations(profile, group)
        factors[b] = cal.fit_factors(base, obs)
        residual = max(residual, cal.fit_residual(obs, base, factors[b]))
        timed = [t.loss_s for t in group if t.loss_s is not None]
        if timed:
            losses[b] = (statistics.median(x[0] for x in timed),
                         statistics.median(x[1] for x in timed))
    contentions = [t.contention for t in trials if t.contention is not None and t.pp >= 2]
    contention = statistics.median(contentions) if contentions else None
    draft = Calibration(factors, default, None, losses, contention,
                        tuple(t.key for t in trials), residual)
    scaled = apply(profile, draft)
    piped = [t for t in trials if t.pp >= 2]
    fits = [_latency(scaled, t, draft) for t in piped]
    # a fit at the end of its range (0: the step is met with a free link; the top: not
    # met with any) measures no latency: the profile's own is kept
    measured = [(x, t) for x, t in zip(fits, piped, strict=True)
                if 0.0 < x < _latency_ceiling(t)]
    inside = [x for x, _ in measured]
    latency = statistics.median(inside) if inside else None
    warnings = []
    bound = lat.latency_range(profile)
    if latency is not None and bound is not None and not bound.holds(latency):
        warnings.append(lat.out_of_range(latency, bound, profile.links.intra_node.p2p.latency_s))
        latency = None
    notes = _notes(profile, draft, latency, by)
    if latency is not None and bound is None:
        notes.append("intra-node p2p latency not checked against a measurement: the profile "
                     "states a free link and keeps no probe timings of it")
    if fits and not inside:
        why = ("reach their measured steps with a free link (the calibrated ops already "
               "account for them)" if not any(fits) else
               "are not matched by any latency up to their step over 2m messages")
        notes.append(f"intra-node p2p latency not fitted: the {len(fits)} pipelined trial(s) "
                     f"{why}, so the profile's measured latency is kept")
    if latency is not None:
        kept = [t for _, t in measured]
        held = lat.held_out(inside, [_step_at(scaled, t, draft) for t in kept],
                            [t.measured_s for t in kept], [t.key for t in kept])
        warnings += [held] if held else []
    return replace(draft, latency_s=latency, notes=notes, warnings=warnings)


def _step_at(scaled: Profile, t: Trial, c: Calibration) -> Callable[[float], float]:
    """A trial's predicted step at a given p2p latency over the calibrated profile."""
    spec, loss = t.spec(), c.loss_for(t.micro_batch_size)
    return lambda latency_s: predict(with_latency(scaled, latency_s), spec, loss, t.contention)


def _latency(scaled: Profile, t: Trial, c: Calibration) -> float:
    """The p2p latency at which ``t``'s simulated step matches its measured one.

    Searched up to the measured step over 2m messages (each micro-batch
    sends at least its activation forward and its gradient back).
    """
    return cal.fit_latency(_step_at(scaled, t, c), t.measured_s, hi_s=_latency_ceiling(t))


def _latency_ceiling(t: Trial) -> float:
    """The most latency a trial's step can hold: all of it over 2m messages."""
    return t.measured_s / (2 * t.microbatches)


def _notes(profile: Profile, c: Calibration, latency: float | None, by: str) -> list[str]:
    names = [layer.name for layer in profile.layers]
    per_size = []
    for b, factors in sorted(c.factors.items()):
        base = base_cells(profile, b)  # a part the profile prices at nothing has no factor
        summary = cal.part_summary({k: f for k, f in factors.items() if base.get(k, 0.0) > 0},
                                   names)
        per_size.append(f"size {b}: " + "; ".join(
            f"{kind} " + ", ".join(f"{p} x{f:.2f}" for p, f in sorted(v.items()))
            for kind, v in summary.items()))
    notes = [
        f"calibrated by {by} from {len(c.sources)} measured trial(s) "
        f"({', '.join(c.sources)}): per-layer forward, input-gradient and weight-gradient "
        f"factors fitted to the measured op medians (worst op misfit {c.residual:.1%}); "
        f"median factors per micro-batch size, {' | '.join(per_size)}",
    ]
    if c.contention is not None:
        notes.append(
            f"contention between ranks: {c.contention:.2f}x (median of the trials' measured "
            "figures), taken out of the op times before fitting and applied when predicting "
            "(pptune validate's processor-sharing model)"
        )
    if latency is not None:
        notes.append(
            f"intra-node p2p latency fitted to the trials' step times: {latency * 1e6:.0f} us per "
            "message (link latency plus the framework's per-op work); bandwidth kept"
        )
    for b, (f, w) in sorted(c.losses_s.items()):
        notes.append(
            f"loss timed by the last rank at micro-batch size {b}: forward {f * 1e3:.2f} ms, "
            f"backward {w * 1e3:.2f} ms (added to the last stage when predicting; other sizes "
            "scaled linearly)"
        )
    return notes


def apply(profile: Profile, c: Calibration) -> Profile:
    """``profile`` with every micro-batch size's costs scaled by the factors."""
    doc: dict[str, Any] = profile.model_dump()
    for i, layer in enumerate(doc["layers"]):
        for size, cost in layer["per_micro_batch"].items():
            factors = c.factors_for(int(size))
            for part in cal.PARTS:
                cost[f"{part}_s"] *= factors.get((i, part), 1.0)
    return Profile.model_validate(doc)


def with_latency(profile: Profile, latency_s: float) -> Profile:
    links = profile.links.model_copy(deep=True)
    links.intra_node.p2p.latency_s = latency_s
    return profile.model_copy(update={"links": links})


def calibrated_profile(profile: Profile, c: Calibration) -> Profile:
    """The profile file ``tune`` writes: factors and latency applied, notes and warnings
    appended."""
    out = apply(profile, c)
    if c.latency_s is not None:
        out = with_latency(out, c.latency_s)
    unmeasured = [b for b in out.micro_batch_sizes() if b not in c.factors]
    extra = [f"micro-batch sizes {unmeasured} scaled by the factors measured at size "
             f"{c.default_size} (not measured themselves)"] if unmeasured else []
    warned = [f"warning: {w}" for w in c.warnings]
    return out.model_copy(update={"notes": [*profile.notes, *c.notes, *warned, *extra]})


def predict(profile: Profile, spec: RunSpec, loss_s: tuple[float, float] | None = None,
            contention: float | None = None) -> float:
    """Step time of one pipeline of ``spec`` over ``profile`` (module docstring)."""
    return compare.predict(profile, spec, loss_s, contention).result.step_time_s


def predict_stages(profile: Profile, spec: RunSpec, loss_s: tuple[float, float] | None = None) -> Any:
    """The stage costs ``predict`` simulates (for the lower bound)."""
    return compare.predict(profile, spec, loss_s).stages
