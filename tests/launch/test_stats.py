"""The one median of the package, quantiles and the spread (pure Python)."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pptune.launch.stats import median, quantile, spread


def test_quantiles_interpolate_like_numpy_linear() -> None:
    xs = [4.0, 1.0, 3.0, 2.0]
    assert median(xs) == 2.5
    assert quantile(xs, 0.25) == pytest.approx(1.75)
    assert quantile(xs, 0.75) == pytest.approx(3.25)
    assert quantile([7.0], 0.9) == 7.0


def test_spread_is_iqr_over_median_and_ignores_one_outlier_in_the_median() -> None:
    xs = [10.0, 10.0, 10.0, 10.0, 1000.0]
    assert median(xs) == 10.0
    assert spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((4 - 2) / 3)
    assert spread([0.0, 0.0, 0.0]) == 0.0


def test_quantile_rejects_empty_and_bad_q() -> None:
    with pytest.raises(ValueError):
        quantile([], 0.5)
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)


def test_median_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="median of an empty sequence"):
        median([])


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30))
def test_median_is_the_standard_librarys(xs: list[float]) -> None:
    assert median(xs) == statistics.median(xs)
