"""The slowest of a job's GPUs: order statistics by hand and the rates it scales."""

from __future__ import annotations

import math

import pytest

from pptune.costmodel import presets
from pptune.costmodel.variation import (
    expected_max,
    sigma_of,
    slowdown,
    slowest_of,
)

H100 = presets.GPUS["h100-sxm"]


def test_expected_max_closed_forms() -> None:
    # E[max of 2] = 1/sqrt(pi), E[max of 3] = 3/(2 sqrt(pi)) (order statistics of N(0, 1))
    assert expected_max(1) == 0.0
    assert expected_max(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-9)


def test_expected_max_tabulated_and_growing() -> None:
    # Tabulated expected maxima of standard normals (Harter 1961, "Expected values of
    # normal order statistics"): 8: 1.42360, 50: 2.24907, 100: 2.50759
    assert expected_max(8) == pytest.approx(1.42360, abs=1e-5)
    assert expected_max(50) == pytest.approx(2.24907, abs=1e-5)
    assert expected_max(100) == pytest.approx(2.50759, abs=1e-5)
    values = [expected_max(n) for n in (1, 2, 8, 64, 512, 4096, 65536)]
    assert values == sorted(values)
    with pytest.raises(ValueError, match="at least 1"):
        expected_max(0)


def test_sigma_from_a_node_range() -> None:
    # a 5% range over 8 GPUs is 2 z(8) sigma: sigma = 0.05 / 2.8472
    assert sigma_of(0.05) == pytest.approx(0.05 / (2 * 1.42360), rel=1e-4)
    assert sigma_of(0.0) == 0.0
    for bad in (-0.01, 1.0):
        with pytest.raises(ValueError, match="spread"):
            sigma_of(bad)


def test_slowdown_by_hand() -> None:
    # one GPU is the median; on 8 the slowest is half the node's range behind
    assert slowdown(1, 0.05) == 1.0
    assert slowdown(8, 0.05) == pytest.approx(1.025, abs=1e-12)
    # on 2: sigma z(2) = 0.05 / (2 x 1.42360) / sqrt(pi)
    assert slowdown(2, 0.05) == pytest.approx(1 + 0.05 / (2 * 1.42360) / math.sqrt(math.pi),
                                              rel=1e-5)
    assert slowdown(2048, 0.0) == 1.0


def test_slowest_of_scales_compute_only() -> None:
    slow = slowest_of(H100, 8)
    assert slow.gemm_fraction == pytest.approx(H100.gemm_fraction / 1.025)
    assert slow.fp8_gemm_fraction == pytest.approx(H100.fp8_gemm_fraction / 1.025)
    assert slow.attention_fraction == pytest.approx(H100.attention_fraction / 1.025)
    assert slow.causal_attention[0][1] == pytest.approx(H100.causal_attention[0][1] / 1.025)
    # memory and links do not follow the SM clock; peaks are datasheet figures
    assert slow.hbm_fraction == H100.hbm_fraction
    assert slow.fabric == H100.fabric
    assert slow.peak_flops == H100.peak_flops
    # one GPU, or no spread: the preset itself
    assert slowest_of(H100, 1) is H100
    assert slowest_of(H100, 4096, spread=0.0) is H100
    # more GPUs, a slower slowest one
    assert slowest_of(H100, 4096).gemm_fraction < slow.gemm_fraction
