"""Simulator: closed forms where theory is exact, invariants everywhere else."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.costmodel.schedules import SPLIT_BACKWARD, Schedule, chunks_per_device, stage_device
from pptune.costmodel.simulate import Link, StageCost, simulate, uniform_stages

PM = [(p, m) for p in (1, 2, 3, 4, 8) for m in (1, 2, 3, 4, 8, 16, 32)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", PM)
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(schedule: str, p: int, m: int) -> None:
    r = simulate(schedule, p, m, uniform_stages(p, 1.0, 2.0))
    assert r.bubble_rate == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
    # step = (m + p - 1) * (t_f + t_b) with equal stages and free links
    assert r.step_time_s == pytest.approx((m + p - 1) * 3.0)


def test_worked_examples_from_product_brief() -> None:
    # p=3, m=4: 33%; m=8: 20%
    assert simulate("1f1b", 3, 4, uniform_stages(3, 1, 2)).bubble_rate == pytest.approx(1 / 3)
    assert simulate("1f1b", 3, 8, uniform_stages(3, 1, 2)).bubble_rate == pytest.approx(0.2)
    # depth 4, 8 micro-batches: 27%; depth 8, 16: 30%
    assert round(simulate("1f1b", 4, 8, uniform_stages(4, 1, 2)).bubble_rate, 2) == 0.27
    assert round(simulate("1f1b", 8, 16, uniform_stages(8, 1, 2)).bubble_rate, 2) == 0.30


@pytest.mark.parametrize("v", [2, 3, 4])
@pytest.mark.parametrize("p,mult", [(2, 1), (2, 4), (4, 1), (4, 2), (4, 4), (8, 2)])
def test_interleaved_bubble_is_p_minus_1_over_vm_plus_p_minus_1(v: int, p: int, mult: int) -> None:
    m = p * mult
    # each chunk holds 1/v of a device's layers
    r = simulate("interleaved-1f1b", p, m, uniform_stages(p * v, 1.0 / v, 2.0 / v), v=v)
    assert r.bubble_rate == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-12)


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("m_over_p", [1, 2, 4])
@pytest.mark.parametrize("tf,tb,tw", [(1, 1, 1), (2, 2, 1), (1, 1.5, 1), (3, 2, 2)])
def test_zb_h1_bubble_time_is_p_minus_1_times_f_plus_b_minus_w(
    p: int, m_over_p: int, tf: float, tb: float, tw: float
) -> None:
    # Qi et al. 2023, ZB-H1: bubble (p-1)(T_F + T_B - T_W) per device, m >= p,
    # for T_W <= T_F, T_B (the W passes fill (p-1) T_W of 1F1B's bubble).
    m = p * m_over_p
    r = simulate("zb-h1", p, m, uniform_stages(p, tf, tb, tw))
    for dev in r.devices:
        assert dev.idle_s == pytest.approx((p - 1) * (tf + tb - tw))
    # against 1F1B with the same stages: (p-1)(T_F + T_B + T_W)
    r1 = simulate("1f1b", p, m, uniform_stages(p, tf, tb, tw))
    assert r1.devices[0].idle_s == pytest.approx((p - 1) * (tf + tb + tw))


@pytest.mark.parametrize("p,m", [(2, 4), (4, 4), (4, 8), (8, 8), (8, 32)])
def test_zb_h1_unit_costs_bubble_rate(p: int, m: int) -> None:
    # docs/measured.md: torch's ZB1P order with F=I=W=1 gives (p-1)/(3m+p-1)
    r = simulate("zb-h1", p, m, uniform_stages(p, 1, 1, 1))
    assert Fraction(r.bubble_rate).limit_denominator(10_000) == Fraction(p - 1, 3 * m + p - 1)


@pytest.mark.parametrize("p,m", [(2, 1), (3, 2), (4, 4), (4, 9), (8, 16)])
def test_1f1b_in_flight_is_min_m_p_minus_s_and_gpipe_keeps_m(p: int, m: int) -> None:
    act = 10.0
    r = simulate("1f1b", p, m, uniform_stages(p, 1, 2, act_bytes=act))
    assert [d.peak_inflight for d in r.devices] == [min(m, p - s) for s in range(p)]
    assert [d.peak_activation_bytes for d in r.devices] == [act * min(m, p - s) for s in range(p)]
    g = simulate("gpipe", p, m, uniform_stages(p, 1, 2, act_bytes=act))
    assert [d.peak_inflight for d in g.devices] == [m] * p


def test_p2p_hidden_behind_compute_under_gpipe_costs_fill_and_drain_only() -> None:
    # 2 stages, F=1 B=2, a 0.5 s send each way. GPipe: dev1's forwards start
    # 0.5 late and its gradients reach dev0 0.5 late, once each: 27 + 1 = 28.
    stages = uniform_stages(2, 1, 2, out_bytes=1.0)
    slow = lambda a, b: Link(0.5, float("inf"))
    assert simulate("gpipe", 2, 8, stages).step_time_s == pytest.approx(27.0)
    assert simulate("gpipe", 2, 8, stages, link=slow).step_time_s == pytest.approx(28.0)


def test_p2p_round_trip_exposed_in_1f1b_with_two_stages() -> None:
    # 1F1B with p=2 has one warm-up forward, so dev0 has only one F to hide
    # the round trip F-send (0.5) + dev1 F+B (3) + B-send (0.5) behind: it
    # waits 1 s per steady cycle. Worked by hand: dev0 ends B7 at t=31.
    stages = uniform_stages(2, 1, 2, out_bytes=1.0)
    slow = lambda a, b: Link(0.5, float("inf"))
    assert simulate("1f1b", 2, 8, stages, link=slow).step_time_s == pytest.approx(31.0)


def test_blocking_send_stalls_the_sender() -> None:
    stages = uniform_stages(2, 1, 2, out_bytes=1.0)
    overlap = simulate("1f1b", 2, 8, stages, link=lambda a, b: Link(0.5, float("inf")))
    blocking = simulate(
        "1f1b", 2, 8, stages, link=lambda a, b: Link(0.5, float("inf")), blocking_send=True
    )
    assert blocking.step_time_s > overlap.step_time_s


def test_alpha_beta_link_time() -> None:
    assert Link(1e-5, 1e9).time_s(1e6) == pytest.approx(1e-5 + 1e-3)


def test_allreduce_tail_is_exposed_only_after_last_backward() -> None:
    stages = uniform_stages(2, 1, 2)
    base = simulate("1f1b", 2, 4, stages)
    # device 1 (last stage) finishes backward 3 s before device 0: a 2 s
    # all-reduce there hides; on device 0 it adds its full length.
    hidden = simulate("1f1b", 2, 4, stages, dp_allreduce_s=[0.0, 2.0])
    assert hidden.step_time_s == pytest.approx(base.step_time_s)
    exposed = simulate("1f1b", 2, 4, stages, dp_allreduce_s=[2.0, 0.0])
    assert exposed.step_time_s == pytest.approx(base.step_time_s + 2.0)


def test_1f1b_p64_m512_is_feasible_in_memory_and_order() -> None:
    r = simulate("1f1b", 64, 512, uniform_stages(64, 1, 2), keep_events=False)
    assert r.bubble_rate == pytest.approx(63 / (512 + 63))


# --- property tests over random costs ----------------------------------------

schedules = st.sampled_from(list(Schedule))


@st.composite
def cases(draw: st.DrawFn) -> tuple[Schedule, int, int, int, list[StageCost], float]:
    schedule = draw(schedules)
    p = draw(st.integers(1, 5))
    v = 1
    if schedule is Schedule.INTERLEAVED:
        v = draw(st.integers(2, 3))
        m = p * draw(st.integers(1, 3))
    else:
        m = draw(st.integers(1, 10))
        if schedule is Schedule.ZBV:
            v = 2
    n = p * chunks_per_device(schedule, v)
    cost = st.floats(0.01, 5.0, allow_nan=False)
    stages = [
        StageCost(draw(cost), draw(cost), draw(cost), draw(st.floats(0, 100)), draw(st.floats(0, 10)))
        for _ in range(n)
    ]
    alpha = draw(st.sampled_from([0.0, 0.05, 1.0]))
    return schedule, p, m, v, stages, alpha


@settings(max_examples=150, deadline=None)
@given(cases(), st.booleans())
def test_simulation_invariants(case: tuple, blocking: bool) -> None:
    schedule, p, m, v, stages, alpha = case
    r = simulate(
        schedule, p, m, stages, v=v, link=lambda a, b: Link(alpha, 10.0), blocking_send=blocking
    )
    split = schedule in SPLIT_BACKWARD
    by_dev: dict[int, list] = {}
    end_of = {}
    for e in r.events:
        by_dev.setdefault(e.device, []).append(e)
        end_of[(e.op.kind.value, e.op.mb, e.op.stage)] = e
        assert e.device == stage_device(schedule, p, e.op.stage)
    # a device never runs two ops at once
    for evs in by_dev.values():
        evs.sort(key=lambda e: e.start_s)
        for a, b in itertools.pairwise(evs):
            assert b.start_s >= a.end_s - 1e-9
    # every dependency honoured (transfers take time across devices)
    last = len(stages) - 1
    for (kind, mb, k), e in end_of.items():
        if kind == "F" and k > 0:
            assert e.start_s >= end_of[("F", mb, k - 1)].end_s - 1e-9
        if kind == "B":
            dep = end_of[("F", mb, k)] if k == last else end_of[("B", mb, k + 1)]
            assert e.start_s >= dep.end_s - 1e-9
        if kind == "W":
            assert e.start_s >= end_of[("B", mb, k)].end_s - 1e-9
    # busy time equals the sum of op costs
    for d, dev in enumerate(r.devices):
        mine = [s for k, s in enumerate(stages) if stage_device(schedule, p, k) == d]
        want = m * sum(s.fwd_s + s.bwd_s + s.wgrad_s for s in mine)
        assert dev.busy_s == pytest.approx(want)
        assert dev.idle_s >= -1e-9
    # makespan is at least the busiest device's work
    assert r.step_time_s >= r.busiest_s - 1e-9
    assert 0.0 <= r.bubble_rate < 1.0
    assert split == any(e.op.kind.value == "W" for e in r.events)


@pytest.mark.parametrize("schedule", list(Schedule))
def test_steady_state_extrapolation_matches_the_full_run(
    schedule: Schedule, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    from pptune.costmodel import simulate as sim_mod

    rng = random.Random(5)
    p, m = 3, 60
    v = chunks_per_device(schedule, 2)
    n = p * v
    stages = [StageCost(rng.uniform(1, 2), rng.uniform(1, 3), rng.uniform(0, 1), 10.0, 1.0)
              for _ in range(n)]
    link = Link(0.1, 10.0)
    full = simulate(schedule, p, m, stages, v=v, link=lambda a, b: link, keep_events=False)
    runs: list[int] = []

    def counted(*args: object, **kwargs: object) -> object:
        runs.append(int(args[2]))  # type: ignore[call-overload]
        return simulate(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sim_mod, "simulate", counted)
    fast = sim_mod.simulate_steady(schedule, p, m, stages, v=v, link=lambda a, b: link)
    assert runs == [12, 15, 18]  # three short runs, extrapolated (no fallback to m = 60)
    assert fast.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)
    assert fast.bubble_rate == pytest.approx(full.bubble_rate, rel=1e-9, abs=1e-12)
    for a, b in zip(fast.devices, full.devices, strict=True):
        assert a.busy_s == pytest.approx(b.busy_s, rel=1e-9)
        assert a.peak_activation_bytes == pytest.approx(b.peak_activation_bytes, rel=1e-9)
        assert a.peak_inflight == b.peak_inflight
