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

The elasticity of a run to a group (``-d log step / d log factor``) says
how much of its step that group's rates explain.

``held_out`` checks the fit leave one out: each run's step predicted by the
factors the other runs alone give (one run left: one common factor).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pptune.costmodel.calibration import Factors, RateGroup

MIN_SINGULAR = 0.1  # module docstring
STEP = 1e-4  # log-factor step of the numeric Jacobian
MAX_ITERATIONS = 60
TOLERANCE = 1e-9  # stop when no log-factor moves by more than this
HALVINGS = 30
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


@dataclass(frozen=True)
class FitResult:
    factors: Factors
    fitted: tuple[tuple[RateGroup, ...], ...]  # the factors fitted; groups in one are tied
    predicted_s: tuple[float, ...]  # per run, at the factors
    residuals: tuple[float, ...]  # per run: predicted / measured - 1
    elasticity: tuple[dict[RateGroup, float], ...]  # per run, at the factors
    # the smallest singular value compared with MIN_SINGULAR: of the tie fitted when it
    # has several factors, else of the two-factor tie the runs fell short of (None: one run)
    smallest_singular: float | None


def _factors(theta: Sequence[float], tie: Sequence[Sequence[RateGroup]]) -> Factors:
    values = {g: math.exp(t) for t, groups in zip(theta, tie, strict=True) for g in groups}
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


def _gauss_newton(obs: Sequence[Observed], tie: Sequence[Sequence[RateGroup]],
                  theta: list[float]) -> list[float]:
    r = _residuals(obs, _factors(theta, tie))
    cost = sum(x * x for x in r)
    for _ in range(MAX_ITERATIONS):
        jac = _jacobian(obs, theta, tie, r)
        a = _normal(jac)
        damp = 1e-12 * max(1e-30, sum(a[i][i] for i in range(len(a))))
        for i in range(len(a)):
            a[i][i] += damp
        g = [-sum(jac[i][j] * r[i] for i in range(len(obs))) for j in range(len(theta))]
        try:
            delta = _solve(a, g)
        except ZeroDivisionError:
            break
        scale = 1.0
        for _ in range(HALVINGS):
            trial = [t + scale * d for t, d in zip(theta, delta, strict=True)]
            r_new = _residuals(obs, _factors(trial, tie))
            new_cost = sum(x * x for x in r_new)
            if new_cost <= cost:
                break
            scale /= 2
        else:
            break
        moved = max(abs(scale * d) for d in delta)
        theta, r, cost = trial, r_new, new_cost
        if moved < TOLERANCE:
            break
    return theta


def _elasticity(o: Observed, f: Factors) -> dict[RateGroup, float]:
    base = math.log(o.step_at(f))
    out = {}
    for g in RateGroup:
        moved = Factors.from_groups({**{h: f.of(h) for h in RateGroup},
                                     g: f.of(g) * math.exp(STEP)})
        out[g] = -(math.log(o.step_at(moved)) - base) / STEP
    return out


def fit(obs: Sequence[Observed]) -> FitResult:
    """The factors the runs determine (module docstring)."""
    if not obs:
        raise ValueError("no runs to fit")
    for o in obs:
        if not o.measured_s > 0 or not math.isfinite(o.measured_s):
            raise ValueError(f"{o.label}: measured step {o.measured_s!r} is not a positive time")
    common = TIES[-1]
    theta = _gauss_newton(obs, common, [0.0])
    chosen: tuple[tuple[RateGroup, ...], ...] = common
    singular: float | None = None
    if len(obs) > 1:
        base_f = _factors(theta, common)
        for tie in TIES:
            if len(tie) > len(obs):
                continue
            start = [theta[0]] * len(tie)
            jac = _jacobian(obs, start, tie, _residuals(obs, base_f))
            sv = math.sqrt(max(0.0, smallest_eigenvalue(_normal(jac))))
            if len(tie) > 1:
                singular = sv
            if len(tie) == 1 or sv >= MIN_SINGULAR:
                chosen = tie
                theta = _gauss_newton(obs, tie, start) if len(tie) > 1 else theta
                break
    f = _factors(theta, chosen)
    predicted = tuple(o.step_at(f) for o in obs)
    return FitResult(
        factors=f, fitted=chosen, predicted_s=predicted,
        residuals=tuple(p / o.measured_s - 1 for p, o in zip(predicted, obs, strict=True)),
        elasticity=tuple(_elasticity(o, f) for o in obs), smallest_singular=singular,
    )


def held_out(obs: Sequence[Observed]) -> tuple[float | None, ...]:
    """Per run: its step at the factors the other runs alone fit, over its measured step,
    minus 1 (leave one out); None with one run, or where the others' fit fails."""
    if len(obs) < 2:
        return (None,) * len(obs)
    out: list[float | None] = []
    for i, o in enumerate(obs):
        try:
            f = fit([x for j, x in enumerate(obs) if j != i]).factors
            out.append(o.step_at(f) / o.measured_s - 1)
        except (ValueError, ArithmeticError):
            out.append(None)
    return tuple(out)
