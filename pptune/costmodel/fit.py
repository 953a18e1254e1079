"""Fit calibration factors to measured step times: least squares in log space.

Each observation is a run: its measured seconds per step and ``step_at``,
the simulated step of the same configuration for given factors
(calibration.py). The fit minimises ``sum_i (log step_at_i(f) - log
measured_i)^2`` over the log-factors, by Gauss-Newton with a numeric
Jacobian (the simulated step is piecewise smooth in the rates: sums and
maxima of op times) and step halving.

What the runs can separate decides how many factors are fitted:

- one run gives one equation: one factor common to every rate group, the
  split between compute, memory and communication taken from the model;
- several runs: the groups are tried three apart (compute, memory,
  communication), then two (compute with memory, communication), then one
  common factor, and the first the runs can tell apart is fitted. They can
  when every direction of the factors moves the runs' steps: the smallest
  singular value of the Jacobian (d log step / d log factor, one row per
  run) is at least ``MIN_SINGULAR``. At the run-to-run noise of timed steps
  (medians move 2-8% between launches, docs/measured.md) a direction that
  moves the steps by less than 0.1x the factor's change cannot be pinned to
  better than about +-20-80%, so it is not fitted apart.

A fit of several factors the runs determine is kept only within the physical
range ``limits`` (calibration.physical_range: no rate above what the hardware
can do, none under a tenth of the model's): the least squares of runs whose
steps the model cannot give all at once may lie outside it, even at an
infinitely fast link (a run that communicates more measured closer to one
that communicates less than the model makes them at any link rate). Such a fit is set aside (kept in
``FitResult.set_aside``, with its factors, for the note that says so) and
the next tie is tried, down to one common factor; the common factor itself is
never set aside: out of range, calibrate refuses it (jobfit.py).

The solver cannot overflow: every log-factor it tries stays within ``GUARD``,
a millionth to a million times the model's rates (a numerical guard, five
decades and more beyond the physical range, 0.1 to about 1.1; the rates it
scales stay positive and finite in every preset). A least-squares optimum beyond it (an
infinitely fast link, a step of 1e308 s) stops at the guard, and the groups
there are named (``clamped``): their true optimum lies farther out. Each
Gauss-Newton step holds the log-factors at the guard that it would push
beyond it, and solves for the others (an active set).

The elasticity of a run to a group (``-d log step / d log factor``) says
how much of its step that group's rates explain.

``held_out`` checks the fit leave one out: each run's step predicted by the
factors the other runs alone give (one run left: one common factor), with the
same fallback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pptune.costmodel.calibration import Factors, RateGroup

MIN_SINGULAR = 0.1  # module docstring
STEP = 1e-4  # log-factor step of the numeric Jacobian
MAX_ITERATIONS = 60
TOLERANCE = 1e-9  # stop when no log-factor moves by more than this
HALVINGS = 30
GUARD = (1e-6, 1e6)  # the factors the solver may try (module docstring): numerical only
LOG_GUARD = (math.log(GUARD[0]), math.log(GUARD[1]))
C, M, K = RateGroup.COMPUTE, RateGroup.MEMORY, RateGroup.COMMUNICATION
# the ways of tying groups together, most factors first
TIES: tuple[tuple[tuple[RateGroup, ...], ...], ...] = (
    ((C,), (M,), (K,)),
    ((C, M), (K,)),
    ((C, M, K),),
)


@dataclass(frozen=True)
class Observed:
    """One run: what it measured and how its step depends on the factors."""

    label: str
    measured_s: float
    step_at: Callable[[Factors], float]


# a group's physical range of factors: (lowest, highest)
Limits = Mapping[RateGroup, tuple[float, float]]


@dataclass(frozen=True)
class SetAside:
    """A fit of several factors the runs determined, outside the physical range."""

    fitted: tuple[tuple[RateGroup, ...], ...]
    factors: Factors
    clamped: tuple[RateGroup, ...]  # the groups whose factor stopped at GUARD
    singular: float  # its smallest singular value (at least MIN_SINGULAR)


@dataclass(frozen=True)
class FitResult:
    factors: Factors
    fitted: tuple[tuple[RateGroup, ...], ...]  # the factors fitted; groups in one are tied
    predicted_s: tuple[float, ...]  # per run, at the factors
    residuals: tuple[float, ...]  # per run: predicted / measured - 1
    elasticity: tuple[dict[RateGroup, float], ...]  # per run, at the factors
    # the smallest singular value compared with MIN_SINGULAR: of the tie fitted when it
    # has several factors, else of the last tie of several tried (None: one run)
    smallest_singular: float | None
    # the groups whose factor stopped at GUARD: the least squares lie beyond it
    clamped: tuple[RateGroup, ...] = ()
    # the fits of more factors outside the physical range, most factors first
    set_aside: tuple[SetAside, ...] = ()


def _exp(t: float) -> float:
    """A factor from its log, the guard's edges exactly."""
    return GUARD[0] if t <= LOG_GUARD[0] else GUARD[1] if t >= LOG_GUARD[1] else math.exp(t)


def _factors(theta: Sequence[float], tie: Sequence[Sequence[RateGroup]]) -> Factors:
    values = {g: _exp(t) for t, groups in zip(theta, tie, strict=True) for g in groups}
    return Factors.from_groups(values)


def _residuals(obs: Sequence[Observed], f: Factors) -> list[float]:
    out = []
    for o in obs:
        t = o.step_at(f)
        if not t > 0 or not math.isfinite(t):
            raise ValueError(f"{o.label}: the simulated step is {t!r} at {f}")
        out.append(math.log(t) - math.log(o.measured_s))
    return out


def _jacobian(obs: Sequence[Observed], theta: list[float],
              tie: Sequence[Sequence[RateGroup]], base: list[float]) -> list[list[float]]:
    cols = []
    for j in range(len(theta)):
        moved = list(theta)
        moved[j] += STEP
        r = _residuals(obs, _factors(moved, tie))
        cols.append([(a - b) / STEP for a, b in zip(r, base, strict=True)])
    return [[cols[j][i] for j in range(len(theta))] for i in range(len(obs))]


def _normal(jac: list[list[float]]) -> list[list[float]]:
    k = len(jac[0])
    return [[sum(row[a] * row[b] for row in jac) for b in range(k)] for a in range(k)]


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (k <= 3)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        if m[c][c] == 0:
            raise ZeroDivisionError("singular system")
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            for x in range(c, n + 1):
                m[r][x] -= f * m[c][x]
    out = [0.0] * n
    for r in reversed(range(n)):
        out[r] = (m[r][n] - sum(m[r][x] * out[x] for x in range(r + 1, n))) / m[r][r]
    return out


def smallest_eigenvalue(a: list[list[float]]) -> float:
    """Of a small symmetric matrix, by cyclic Jacobi rotations."""
    n = len(a)
    m = [list(row) for row in a]
    for _ in range(100):
        off = sum(m[i][j] ** 2 for i in range(n) for j in range(n) if i != j)
        if off < 1e-30:
            break
        for p in range(n):
            for q in range(p + 1, n):
                if abs(m[p][q]) < 1e-300:
                    continue
                theta = (m[q][q] - m[p][p]) / (2 * m[p][q])
                t = math.copysign(1.0, theta) / (abs(theta) + math.sqrt(theta * theta + 1))
                c = 1 / math.sqrt(t * t + 1)
                s = t * c
                for k in range(n):
                    mkp, mkq = m[k][p], m[k][q]
                    m[k][p], m[k][q] = c * mkp - s * mkq, s * mkp + c * mkq
                for k in range(n):
                    mpk, mqk = m[p][k], m[q][k]
                    m[p][k], m[q][k] = c * mpk - s * mqk, s * mpk + c * mqk
    return min(m[i][i] for i in range(n))


def _guarded(t: float) -> float:
    return min(max(t, LOG_GUARD[0]), LOG_GUARD[1])


def _step(jac: list[list[float]], r: list[float], theta: list[float]) -> list[float] | None:
    """The Gauss-Newton step, the log-factors at the guard that it would push beyond
    it held where they are (module docstring); None when there is none."""
    free = list(range(len(theta)))
    while free:
        sub = [[row[j] for j in free] for row in jac]
        a = _normal(sub)
        damp = 1e-12 * max(1e-30, sum(a[i][i] for i in range(len(a))))
        for i in range(len(a)):
            a[i][i] += damp
        g = [-sum(sub[i][c] * r[i] for i in range(len(r))) for c in range(len(free))]
        try:
            d = _solve(a, g)
        except ZeroDivisionError:
            return None
        out = [0.0] * len(theta)
        for c, j in enumerate(free):
            out[j] = d[c]
        held = {j for j in free if (theta[j] <= LOG_GUARD[0] and out[j] < 0)
                or (theta[j] >= LOG_GUARD[1] and out[j] > 0)}
        if not held:
            return out
        free = [j for j in free if j not in held]
    return None


def _gauss_newton(obs: Sequence[Observed], tie: Sequence[Sequence[RateGroup]],
                  theta: list[float]) -> list[float]:
    theta = [_guarded(t) for t in theta]
    r = _residuals(obs, _factors(theta, tie))
    cost = sum(x * x for x in r)
    for _ in range(MAX_ITERATIONS):
        delta = _step(_jacobian(obs, theta, tie, r), r, theta)
        if delta is None:
            break
        scale = 1.0
        for _ in range(HALVINGS):
            trial = [_guarded(t + scale * d) for t, d in zip(theta, delta, strict=True)]
            r_new = _residuals(obs, _factors(trial, tie))
            new_cost = sum(x * x for x in r_new)
            if new_cost <= cost:
                break
            scale /= 2
        else:
            break
        moved = max(abs(a - b) for a, b in zip(trial, theta, strict=True))
        theta, r, cost = trial, r_new, new_cost
        if moved < TOLERANCE:
            break
    return theta


def _clamped(theta: Sequence[float], tie: Sequence[Sequence[RateGroup]]) -> tuple[RateGroup, ...]:
    at = {g for t, groups in zip(theta, tie, strict=True) for g in groups
          if t <= LOG_GUARD[0] or t >= LOG_GUARD[1]}
    return tuple(g for g in RateGroup if g in at)


def _within(f: Factors, limits: Limits) -> bool:
    return all(lo <= f.of(g) <= hi for g, (lo, hi) in limits.items())


def _elasticity(o: Observed, f: Factors) -> dict[RateGroup, float]:
    base = math.log(o.step_at(f))
    out = {}
    for g in RateGroup:
        moved = Factors.from_groups({**{h: f.of(h) for h in RateGroup},
                                     g: f.of(g) * math.exp(STEP)})
        out[g] = -(math.log(o.step_at(moved)) - base) / STEP
    return out


def fit(obs: Sequence[Observed], limits: Limits | None = None) -> FitResult:
    """The factors the runs determine within ``limits`` (module docstring; None: any
    factor the guard allows)."""
    if not obs:
        raise ValueError("no runs to fit")
    for o in obs:
        if not o.measured_s > 0 or not math.isfinite(o.measured_s):
            raise ValueError(f"{o.label}: measured step {o.measured_s!r} is not a positive time")
    common = TIES[-1]
    theta = _gauss_newton(obs, common, [0.0])
    chosen: tuple[tuple[RateGroup, ...], ...] = common
    singular: float | None = None
    aside: list[SetAside] = []
    if len(obs) > 1:
        base = _residuals(obs, _factors(theta, common))
        for tie in TIES[:-1]:
            if len(tie) > len(obs):
                continue
            start = [theta[0]] * len(tie)
            jac = _jacobian(obs, start, tie, base)
            singular = math.sqrt(max(0.0, smallest_eigenvalue(_normal(jac))))
            if singular < MIN_SINGULAR:
                continue
            apart = _gauss_newton(obs, tie, start)
            if limits is not None and not _within(_factors(apart, tie), limits):
                aside.append(SetAside(tie, _factors(apart, tie), _clamped(apart, tie), singular))
                continue
            chosen, theta = tie, apart
            break
    f = _factors(theta, chosen)
    predicted = tuple(o.step_at(f) for o in obs)
    return FitResult(
        factors=f, fitted=chosen, predicted_s=predicted,
        residuals=tuple(p / o.measured_s - 1 for p, o in zip(predicted, obs, strict=True)),
        elasticity=tuple(_elasticity(o, f) for o in obs), smallest_singular=singular,
        clamped=_clamped(theta, chosen), set_aside=tuple(aside),
    )


def held_out(obs: Sequence[Observed], limits: Limits | None = None) -> tuple[float | None, ...]:
    """Per run: its step at the factors the other runs alone fit, over its measured step,
    minus 1 (leave one out); None with one run, or where the others' fit fails."""
    if len(obs) < 2:
        return (None,) * len(obs)
    out: list[float | None] = []
    for i, o in enumerate(obs):
        try:
            f = fit([x for j, x in enumerate(obs) if j != i], limits).factors
            out.append(o.step_at(f) / o.measured_s - 1)
        except (ValueError, ArithmeticError):
            out.append(None)
    return tuple(out)
