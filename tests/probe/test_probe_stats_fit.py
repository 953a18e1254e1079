"""Pure helpers of the probe: the alpha-beta fit and byte sizes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.errors import BadInput
from pptune.probe.fit import AlphaBeta, fit_alpha_beta
from pptune.probe.units import parse_bytes


def test_fit_recovers_exact_alpha_beta() -> None:
    truth = AlphaBeta(latency_s=150e-6, bytes_per_s=2.5e9)
    pts = [(s, truth.time_s(s)) for s in (1024 * 2**i for i in range(17))]
    got = fit_alpha_beta(pts)
    assert got.latency_s == pytest.approx(150e-6, rel=1e-9)
    assert got.bytes_per_s == pytest.approx(2.5e9, rel=1e-9)


def test_fit_weights_relative_error_so_small_messages_set_the_latency() -> None:
    # exact alpha-beta, except the largest message runs 30% slow: an ordinary
    # least-squares fit would be pulled far off by it; ours keeps the latency
    truth = AlphaBeta(latency_s=20e-6, bytes_per_s=100e9)
    pts = [(s, truth.time_s(s)) for s in (8 * 2**i for i in range(28))]
    pts[-1] = (pts[-1][0], pts[-1][1] * 1.3)
    got = fit_alpha_beta(pts)
    assert got.latency_s == pytest.approx(20e-6, rel=0.05)
    assert got.bytes_per_s == pytest.approx(100e9, rel=0.3)


def test_negative_intercept_is_clamped_and_bandwidth_refitted_through_origin() -> None:
    pts = [(1e6, 0.5e-3), (2e6, 1.5e-3), (4e6, 3.5e-3)]  # line through (0, -0.5 ms)
    got = fit_alpha_beta(pts)
    assert got.latency_s == 0.0
    assert got.bytes_per_s > 0
    # through the origin, relative weights: bw = sum(x/t) / n ... within the points' range
    assert 1e6 / 0.5e-3 >= got.bytes_per_s >= 4e6 / 3.5e-3


def test_single_point_gives_zero_latency() -> None:
    got = fit_alpha_beta([(1e6, 1e-3)])
    assert got == AlphaBeta(0.0, 1e9)


def test_noisy_small_messages_fall_back_to_the_plain_fit() -> None:
    # 1-2 MiB ran faster than 1 KiB (a burst on a loaded machine): the relative
    # fit tilts to a negative slope; the plain fit, led by 4 MiB, still finds one
    pts = [(1024.0, 100e-6), (2048.0, 100e-6), (2.0**20, 80e-6), (2.0**21, 90e-6), (2.0**22, 2e-3)]
    got = fit_alpha_beta(pts)
    assert got.bytes_per_s > 0
    assert got.latency_s >= 0


def test_flat_times_have_no_bandwidth() -> None:
    with pytest.raises(ValueError, match="does not grow"):
        fit_alpha_beta([(1e3, 1e-3), (1e6, 1e-3), (1e9, 0.9e-3)])
    with pytest.raises(ValueError):
        fit_alpha_beta([])


@settings(max_examples=60, deadline=None)
@given(
    alpha=st.floats(1e-7, 1e-2),
    bw=st.floats(1e7, 1e12),
    n=st.integers(2, 20),
)
def test_fit_inverts_any_exact_sweep(alpha: float, bw: float, n: int) -> None:
    truth = AlphaBeta(alpha, bw)
    pts = [(1024.0 * 2**i, truth.time_s(1024.0 * 2**i)) for i in range(n)]
    got = fit_alpha_beta(pts)
    for x, t in pts:
        assert got.time_s(x) == pytest.approx(t, rel=1e-6)
    assert got.latency_s >= 0


def test_parse_bytes() -> None:
    assert parse_bytes("4096") == 4096
    assert parse_bytes("64K") == 64 * 1024
    assert parse_bytes("64M") == parse_bytes("64MiB") == parse_bytes("64mb") == 64 * 1024**2
    assert parse_bytes("1.5G") == int(1.5 * 1024**3)
    with pytest.raises(BadInput, match=r"--max-bytes.*'12X'"):
        parse_bytes("12X")
