"""Calibration arithmetic: hand-derived factors, latency and profiles (no torch)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tune_helpers import MS, profile, trial

from pptune.tune import calibrate as cal
from pptune.tune import model


def test_op_cells_follow_torchs_backward_split() -> None:
    split = [2, 1]
    assert cal.op_cells("F", 1, split, False) == ((2, "fwd"),)
    # one full backward where it is not split
    assert cal.op_cells("B", 0, split, False) == (
        (0, "bwd"), (0, "wgrad"), (1, "bwd"), (1, "wgrad"))
    # split: B is the input gradient, W the weight gradient ...
    assert cal.op_cells("B", 1, split, True) == ((2, "bwd"),)
    assert cal.op_cells("W", 1, split, True) == ((2, "wgrad"),)
    # ... except on stage 0, where torch runs the whole backward in W
    assert cal.op_cells("B", 0, split, True) == ()
    assert cal.op_cells("W", 0, split, True) == (
        (0, "bwd"), (0, "wgrad"), (1, "bwd"), (1, "wgrad"))
    with pytest.raises(ValueError, match="unknown op kind 'X'"):
        cal.op_cells("X", 0, split, True)


def test_one_trial_gives_each_stage_its_ratio_exactly() -> None:
    base = {(i, "fwd"): 1.0 for i in range(4)}
    obs = [cal.Observation("F0", ((0, "fwd"), (1, "fwd")), 4.0),
           cal.Observation("F1", ((2, "fwd"), (3, "fwd")), 3.0)]
    f = cal.fit_factors(base, obs)
    assert f == {(0, "fwd"): 2.0, (1, "fwd"): 2.0, (2, "fwd"): 1.5, (3, "fwd"): 1.5}
    assert cal.fit_residual(obs, base, f) == 0.0


def test_a_second_split_separates_layers_inside_a_stage() -> None:
    # truth: factors 2, 2, 1, 1. Split 2+2 sees 4 and 2; split 1+3 sees 2 and 4.
    base = {(i, "fwd"): 1.0 for i in range(4)}
    obs = [cal.Observation("a0", ((0, "fwd"), (1, "fwd")), 4.0),
           cal.Observation("a1", ((2, "fwd"), (3, "fwd")), 2.0),
           cal.Observation("b0", ((0, "fwd"),), 2.0),
           cal.Observation("b1", ((1, "fwd"), (2, "fwd"), (3, "fwd")), 4.0)]
    f = cal.fit_factors(base, obs)
    assert f[(0, "fwd")] == pytest.approx(2.0, rel=1e-6)
    assert f[(1, "fwd")] == pytest.approx(2.0, rel=1e-6)
    assert f[(2, "fwd")] + f[(3, "fwd")] == pytest.approx(2.0, rel=1e-6)
    assert cal.fit_residual(obs, base, f) < 1e-6


def test_uncovered_cells_take_the_median_of_their_part() -> None:
    base = {(0, "fwd"): 1.0, (1, "fwd"): 1.0, (2, "fwd"): 1.0, (0, "bwd"): 1.0, (0, "wgrad"): 1.0}
    obs = [cal.Observation("F0", ((0, "fwd"),), 2.0), cal.Observation("F1", ((1, "fwd"),), 4.0)]
    f = cal.fit_factors(base, obs)
    assert f[(2, "fwd")] == 3.0  # median of 2 and 4
    assert f[(0, "bwd")] == 3.0 and f[(0, "wgrad")] == 3.0  # no bwd seen: median of all


def test_fit_latency_bisects_a_monotone_step() -> None:
    def step(lat: float) -> float:
        return 1.0 + 10 * lat

    assert cal.fit_latency(step, 1.5, hi_s=1.0) == pytest.approx(0.05, abs=1e-9)
    assert cal.fit_latency(step, 0.5, hi_s=1.0) == 0.0  # a free link already over-predicts
    assert cal.fit_latency(step, 99.0, hi_s=1.0) == 1.0


def test_layer_kind_and_part_summary() -> None:
    assert cal.layer_kind("block.12") == "block"
    assert cal.layer_kind("embed") == "embed"
    f = {(0, "fwd"): 2.0, (1, "fwd"): 4.0, (2, "fwd"): 1.0}
    assert cal.part_summary(f, ["embed", "block.0", "block.1"]) == {
        "embed": {"fwd": 2.0}, "block": {"fwd": 2.5}}


def test_calibrate_a_one_rank_gpipe_trial_by_hand() -> None:
    # two layers, F 1 + 1 ms, B 2 + 2 ms; measured F 4 ms and B 6 ms per micro-batch
    base = profile([1.0, 1.0], [2.0, 2.0])
    t = trial("t1", "gpipe", 1, 2, (2,), {"F0": 4.0, "B0": 6.0}, steps_ms=(20.0, 22.0))
    c = model.calibrate(base, [t])
    assert c.factors[1][(0, "fwd")] == pytest.approx(2.0)
    assert c.factors[1][(1, "bwd")] == pytest.approx(1.5)
    assert c.latency_s is None  # one rank: no link to fit
    assert c.residual == pytest.approx(0.0, abs=1e-12)
    out = model.calibrated_profile(base, c)
    assert out.schema_version == 1
    assert out.layers[0].cost(1).fwd_s == pytest.approx(2 * MS)
    assert out.layers[1].cost(1).bwd_s == pytest.approx(3 * MS)
    assert "calibrated by pptune tune from 1 measured trial(s) (t1)" in out.notes[0]
    # the profile has no W cost to fit: W takes the median of every factor (2, 2, 1.5, 1.5),
    # which the note leaves out (a factor on nothing)
    assert c.factors[1][(0, "wgrad")] == pytest.approx(1.75)
    assert out.notes[0].endswith("size 1: block bwd x1.50, fwd x2.00")
    # gpipe, one rank, m = 2: (4 + 6) ms per micro-batch
    assert model.predict(out, t.spec()) == pytest.approx(20 * MS)


def test_link_latency_fits_the_step_residual() -> None:
    # gpipe pp=2 m=1, one layer per stage, F 1 ms and B 1 ms each, measured as profiled:
    # the chain is F0 -> send -> F1 -> B1 -> send -> B0 = 4 ms + 2 hops.
    base = profile([1.0, 1.0], [1.0, 1.0])
    t = trial("t", "gpipe", 2, 1, (1, 1), {"F0": 1.0, "F1": 1.0, "B0": 1.0, "B1": 1.0},
              steps_ms=(5.0,))
    c = model.calibrate(base, [t])
    assert c.factors[1][(0, "fwd")] == pytest.approx(1.0)
    assert c.latency_s == pytest.approx(0.5 * MS, rel=1e-6)  # 1 ms over 2 hops


def test_a_step_met_with_a_free_link_fits_no_latency() -> None:
    # the same chain measured at 3.5 ms: under the 4 ms of compute it already takes, so
    # no latency is measured (0 would claim a free link): the profile's is kept
    base = profile([1.0, 1.0], [1.0, 1.0])
    t = trial("t", "gpipe", 2, 1, (1, 1), {"F0": 1.0, "F1": 1.0, "B0": 1.0, "B1": 1.0},
              steps_ms=(3.5,))
    c = model.calibrate(base, [t])
    assert c.latency_s is None
    assert any(n.startswith("intra-node p2p latency not fitted") for n in c.notes)


def test_contention_is_taken_out_before_fitting() -> None:
    base = profile([1.0, 1.0], [1.0, 1.0])
    ops = {"F0": 1.0, "F1": 1.0, "B0": 1.0, "B1": 1.0}
    # one rank, or contention 1: the medians stand as measured
    assert model.alone_medians(base, trial("a", "gpipe", 1, 2, (2,), {"F0": 2.0}, contention=2.0)) \
        == {("F", 0): 2 * MS}
    t = trial("b", "gpipe", 2, 1, (1, 1), ops, contention=1.0)
    assert model.alone_medians(base, t) == t.op_medians_s
    # gpipe m=1 never overlaps the two ranks: nothing to take out even at f = 2
    t2 = trial("c", "gpipe", 2, 1, (1, 1), ops, contention=2.0)
    assert model.alone_medians(base, t2) == pytest.approx(t2.op_medians_s)


def test_each_micro_batch_size_gets_its_own_factors_and_loss() -> None:
    base = profile([1.0, 1.0], [2.0, 2.0])
    doc = base.model_dump()
    for layer in doc["layers"]:
        layer["per_micro_batch"]["4"] = dict(layer["per_micro_batch"]["1"])
    two_sizes = type(base).model_validate(doc)
    t1 = trial("b1", "gpipe", 1, 2, (2,), {"F0": 4.0, "B0": 4.0})  # F x2, B x1
    t4 = trial("b4", "gpipe", 1, 2, (2,), {"F0": 3.0, "B0": 8.0})  # F x1.5, B x2
    t4 = replace(t4, micro_batch_size=4, loss_s=(0.004, 0.008))
    c = model.calibrate(two_sizes, [t1, t4])
    assert c.factors[1][(0, "fwd")] == pytest.approx(2.0)
    assert c.factors[4][(0, "fwd")] == pytest.approx(1.5)
    assert c.factors_for(2) == c.factors[1]  # a tie: the smaller size stands in
    # the loss was timed at size 4 only: size 1 gets a quarter of it
    assert c.loss_for(4) == (0.004, 0.008)
    assert c.loss_for(1) == pytest.approx((0.001, 0.002))


def test_trial_noise_is_half_the_relative_range() -> None:
    t = trial("t", "gpipe", 1, 1, (2,), {"F0": 1.0}, steps_ms=(9.0, 10.0, 11.0))
    assert t.measured_s == pytest.approx(10 * MS)
    assert t.noise == pytest.approx(0.1)
