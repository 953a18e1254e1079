"""The fit's numerical safety and its fallback: a least-squares optimum at an infinite
factor, factors outside the physical range, a measured step no factor can reach.

The runs are two-term steps, ``a / compute + b / communication`` seconds (no fixed
cost), so every figure below follows by hand: one common factor ``f`` gives the run
``(a + b) / f``, and its log-least-squares value is the geometric mean of each run's
``(a + b) / measured``.
"""

from __future__ import annotations

import math

import pytest

from pptune.costmodel.calibration import Factors, RateGroup
from pptune.costmodel.fit import GUARD, Observed, fit, held_out

C, M, K = RateGroup.COMPUTE, RateGroup.MEMORY, RateGroup.COMMUNICATION
SPLIT = ((C, M), (K,))  # compute with memory, against communication
COMMON = ((C, M, K),)
# the physical range of an H100's factors, as calibration.ceiling gives it for
# communication (1.06) and the floor for all
PHYSICAL = {C: (0.1, 1.04), M: (0.1, 1.25), K: (0.1, 1.06)}


def _run(label: str, measured_s: float, a: float, b: float) -> Observed:
    return Observed(label, measured_s, lambda f: a / f.compute + b / f.communication)


def _diverging() -> list[Observed]:
    # 4x + y = 10 and 2x + 2y = 4.8 (x = 1 / compute, y = 1 / communication) have
    # x = 2.533, y = -0.133: no positive solution; the least squares lie at y -> 0, an
    # infinitely fast link. The runs differ in their communication share (0.2, 0.5 at a
    # common factor), so the split is fitted (smallest singular value 0.286, below).
    return [_run("a", 10.0, 4.0, 1.0), _run("b", 4.8, 2.0, 2.0)]


def test_an_optimum_at_an_infinite_factor_stops_at_the_guard() -> None:
    # (it overflowed math.exp at a log-factor of ~1300)
    res = fit(_diverging())
    assert res.fitted == SPLIT
    assert res.factors.communication == GUARD[1]
    assert res.clamped == (K,)
    # communication free: compute alone, 4x = 10 and 2x = 4.8 in log least squares,
    # x = sqrt(2.5 x 2.4) = sqrt(6)
    assert res.factors.compute == pytest.approx(1 / math.sqrt(6), rel=1e-5)
    assert all(math.isfinite(p) for p in res.predicted_s)


def test_a_split_outside_the_physical_range_falls_back_to_one_common_factor() -> None:
    res = fit(_diverging(), PHYSICAL)
    assert res.fitted == COMMON
    # sqrt(5 / 10 x 4 / 4.8) = sqrt(5 / 12)
    f = math.sqrt(5 / 12)
    assert res.factors.compute == pytest.approx(f)
    assert res.factors == Factors.common(res.factors.compute)
    assert res.residuals == pytest.approx((5 / f / 10 - 1, 4 / f / 4.8 - 1))
    assert res.residuals == pytest.approx((-0.2254033, 0.2909944), rel=1e-6)
    # what was set aside, with its factors: the split, communication at the guard
    (aside,) = res.set_aside
    assert aside.fitted == SPLIT
    assert aside.factors.communication == GUARD[1] and aside.clamped == (K,)
    assert aside.factors.compute == pytest.approx(1 / math.sqrt(6), rel=1e-5)
    # the split was well conditioned (it was fitted, then set aside): elasticities
    # (-0.8, -0.2) and (-0.5, -0.5), J'J = [[0.89, 0.41], [0.41, 0.29]], whose smallest
    # eigenvalue is (1.18 - sqrt(0.6^2 + 4 x 0.41^2)) / 2 = 0.0819646
    assert res.smallest_singular == pytest.approx(math.sqrt(0.0819646), rel=1e-3)
    assert aside.singular == pytest.approx(math.sqrt(0.0819646), rel=1e-3)


def test_a_split_just_above_a_ceiling_falls_back_and_one_within_it_is_kept() -> None:
    # made at compute 0.6, communication 1.2: 4 / 0.6 + 1 / 1.2 = 7.5, 2 / 0.6 + 2 / 1.2 = 5
    runs = [_run("a", 7.5, 4.0, 1.0), _run("b", 5.0, 2.0, 2.0)]
    res = fit(runs, PHYSICAL)  # communication at most 1.06
    assert res.fitted == COMMON
    assert res.factors.compute == pytest.approx(math.sqrt(5 / 7.5 * 4 / 5))  # 0.7303
    (aside,) = res.set_aside
    assert aside.factors.compute == pytest.approx(0.6, rel=1e-6)
    assert aside.factors.communication == pytest.approx(1.2, rel=1e-6)
    assert aside.clamped == ()
    wider = {**PHYSICAL, K: (0.1, 1.5)}
    kept = fit(runs, wider)
    assert kept.fitted == SPLIT and kept.set_aside == ()
    assert kept.factors.compute == pytest.approx(0.6, rel=1e-6)
    assert kept.factors.communication == pytest.approx(1.2, rel=1e-6)


@pytest.mark.parametrize(("measured_s", "edge"), [(1e308, 0), (1e-300, 1)])
def test_a_step_no_factor_reaches_is_fitted_at_the_guard(measured_s: float, edge: int) -> None:
    # 5 / f = 1e308 needs f = 5e-308 (underflowing the rates to 0), 5 / f = 1e-300 an
    # f of 5e300: the common factor stops at the guard, every group there
    res = fit([_run("x", measured_s, 4.0, 1.0)], PHYSICAL)
    assert res.factors == Factors.common(GUARD[edge])
    assert res.clamped == (C, M, K)
    assert res.predicted_s == pytest.approx((5 / GUARD[edge],))


def test_leave_one_out_falls_back_as_the_fit_does() -> None:
    # a third run alike "a": left out, "a" and "b" predict it; apart they put the link
    # at the guard (compute 1 / sqrt(6): 4 sqrt(6) / 10 - 1), within the physical range
    # they fall back to sqrt(5 / 12) (5 / sqrt(5 / 12) / 10 - 1)
    runs = [*_diverging(), _run("a2", 10.0, 4.0, 1.0)]
    assert held_out(runs)[2] == pytest.approx(4 * math.sqrt(6) / 10 - 1, rel=1e-4)
    assert held_out(runs, PHYSICAL)[2] == pytest.approx(5 / math.sqrt(5 / 12) / 10 - 1,
                                                        rel=1e-6)


def test_the_guard_is_far_outside_every_physical_range() -> None:
    assert GUARD[0] < min(lo for lo, _ in PHYSICAL.values()) / 1000
    assert GUARD[1] > max(hi for _, hi in PHYSICAL.values()) * 1000
