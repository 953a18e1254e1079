"""The search's step-time bounds and its memory test before simulation: by hand, and
never above what the simulator finds (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pptune.costmodel.bounds import last_ops, lower_bound
from pptune.costmodel.inflight import activation_peaks, releases
from pptune.costmodel.schedule_ops import RAW_B, RAW_BW, RAW_F, RAW_FB
from pptune.costmodel.schedules import (
    COMBINABLE,
    Schedule,
    ScheduleError,
    chunks_per_device,
    raw_orders,
    validate,
)
from pptune.costmodel.simulate import StageCost, simulate, with_allreduce


def test_interleaved_fill_bound_by_hand() -> None:
    # interleaved p 2, v 2, m 2, every stage F 1, B 2, W 0: device 1 holds stages 1 and 3;
    # it cannot start stage 1 before micro-batch 0's F on stage 0 (1), then runs both
    # micro-batches' F of stages 1 and 3 and B of both: 1 + 2 x (1 + 1 + 2 + 2) = 13
    # (its work alone is 2 x 2 x 3 = 12); its last op is micro-batch 1's B on stage 1,
    # after which that B still runs on stage 0 (2): 15, the simulated step itself
    stages = [StageCost(1.0, 2.0) for _ in range(4)]
    assert last_ops(Schedule.INTERLEAVED, 2, 2, 2) == ((0, True), (1, True))
    assert lower_bound(Schedule.INTERLEAVED, 2, 2, stages) == 15.0
    assert simulate(Schedule.INTERLEAVED, 2, 2, stages, v=2).step_time_s == 15.0


def test_orders_end_as_at_saturation() -> None:
    # last_ops reads an order of at most inflight_saturation micro-batches: the full
    # orders end with the same ops, on the same stages
    for schedule in Schedule:
        for combined in (False, True) if schedule in COMBINABLE else (False,):
            for p in (1, 2, 3, 4):
                for v in (2, 3) if schedule is Schedule.INTERLEAVED else (1,):
                    for m in range(1, 5 * p * max(v, 2) + 1):
                        try:
                            validate(schedule, p, m, v, combined)
                        except ScheduleError:
                            continue
                        full = raw_orders(schedule, p, m, v, combined)
                        want = [(op[4] if op[0] == RAW_FB else op[2],
                                 op[0] in (RAW_B, RAW_BW) and op[0] != RAW_FB)
                                if op[0] == RAW_FB or releases(schedule, op[0]) else (-1, False)
                                for op in (ops[-1] for ops in full)]
                        got = last_ops(schedule, p, m, v if schedule is Schedule.INTERLEAVED
                                       else chunks_per_device(schedule, v), combined)
                        assert list(got) == want, (schedule, p, m, v, combined)


def test_data_parallel_tail_after_the_last_backward_by_hand() -> None:
    # 1f1b p 2, m 2, stages F 1, B 2: device 1 starts at 1, works 2 x 3 = 6 and its last
    # B finishes stage 1's gradients at 7; a 5 s reduction of stage 1 then runs: 12
    stages = [StageCost(1.0, 2.0) for _ in range(2)]
    assert lower_bound(Schedule.ONE_F_ONE_B, 2, 2, stages) == 9.0  # 1 + 6 + stage 0's B
    assert lower_bound(Schedule.ONE_F_ONE_B, 2, 2, stages, tail_s=(0.0, 5.0)) == 12.0
    sim = simulate(Schedule.ONE_F_ONE_B, 2, 2, stages)
    assert with_allreduce(sim, [0.0, 5.0]).step_time_s == 12.0


def test_v_fill_bound_by_hand() -> None:
    # zbv p 2, m 2, stages F 1, B 1, W 1: device 0 holds stages 0 and 3, device 1 stages
    # 1 and 2; device 1 waits for stage 0's first F (1), then runs all its work:
    # 1 + 2 x (1 + 1 + 2 + 2) = 13 (its work alone: 12)
    stages = [StageCost(1.0, 1.0, 1.0) for _ in range(4)]
    assert lower_bound(Schedule.ZBV, 2, 2, stages) == 13.0
    assert simulate(Schedule.ZBV, 2, 2, stages).step_time_s >= 13.0


def test_overlapping_pairs_still_pay_the_larger_of_compute_and_communication() -> None:
    # dualpipev p 1, m 4, two stages of F 0.5, B 0.5 and all-to-alls of 2 each way:
    # a pair hides one half's communication behind the other's compute, but a device
    # still sends 4 x 2 x (2 + 2) = 32 s of all-to-alls (its compute: 4 x 2 x 1 = 8)
    stages = [StageCost(0.5, 0.5, fwd_comm_s=2.0, bwd_comm_s=2.0) for _ in range(2)]
    assert lower_bound(Schedule.DUALPIPEV, 1, 4, stages) == 32.0
    assert simulate(Schedule.DUALPIPEV, 1, 4, stages).step_time_s >= 32.0


def _stage() -> st.SearchStrategy[StageCost]:
    t = st.floats(0.0, 4.0, allow_nan=False)
    return st.builds(StageCost, fwd_s=t, bwd_s=t, wgrad_s=t,
                     act_bytes=st.floats(0.0, 100.0), out_bytes=st.just(0.0),
                     fwd_comm_s=t, bwd_comm_s=t,
                     split_bwd_s=st.none() | t, split_wgrad_s=st.none() | t)


@st.composite
def runnable(draw: st.DrawFn, max_p: int, max_m: int,
             max_v: int) -> tuple[Schedule, int, int, int, bool, int]:
    """(schedule, p, m, v, combined, global stages) of an order the schedule builds."""
    schedule = draw(st.sampled_from(list(Schedule)))
    p, m = draw(st.integers(1, max_p)), draw(st.integers(1, max_m))
    v = draw(st.integers(2, max_v)) if schedule is Schedule.INTERLEAVED else 1
    combined = draw(st.booleans()) and schedule in COMBINABLE
    try:
        validate(schedule, p, m, v, combined)
    except ScheduleError:
        assume(False)
    return schedule, p, m, v, combined, p * chunks_per_device(schedule, v)


@settings(max_examples=300, deadline=None)
@given(case=runnable(4, 12, 3), data=st.data())
def test_lower_bound_never_exceeds_the_simulated_step(
        case: tuple[Schedule, int, int, int, bool, int], data: st.DataObject) -> None:
    schedule, p, m, v, combined, n = case
    stages = data.draw(st.lists(_stage(), min_size=n, max_size=n))
    sim = simulate(schedule, p, m, stages, v=v, combined=combined)
    bound = lower_bound(schedule, p, m, stages, combined)
    assert bound <= sim.step_time_s * (1 + 1e-9) + 1e-9
    # with each stage's data-parallel traffic after its gradients, as evaluate runs it
    tails = data.draw(st.lists(st.floats(0.0, 6.0, allow_nan=False), min_size=n, max_size=n))
    with_tails = with_allreduce(sim, tails).step_time_s
    assert lower_bound(schedule, p, m, stages, combined, tails) <= (
        with_tails * (1 + 1e-9) + 1e-9)
    # the activation peaks the search tests memory with are the simulator's
    peaks = activation_peaks(schedule, p, m, v, [s.act_bytes for s in stages], combined)
    for got, dev in zip(peaks, sim.devices, strict=True):
        assert got == pytest.approx(dev.peak_activation_bytes, rel=1e-9, abs=1e-9)


def _walk(schedule: Schedule, p: int, m: int, v: int, act: list[float],
          combined: bool) -> list[float]:
    """Each rank's peak by walking its op order (what activation_peaks stands for)."""
    out = []
    for ops in raw_orders(schedule, p, m, v, combined):
        now = peak = 0.0
        for op in ops:
            if op[0] in (RAW_F, RAW_FB):
                now += act[op[2]]
                peak = max(peak, now)
            if op[0] == RAW_FB:
                now -= act[op[4]]
            elif releases(schedule, op[0]):
                now -= act[op[2]]
        out.append(peak)
    return out


@settings(max_examples=200, deadline=None)
@given(case=runnable(5, 24, 4), data=st.data())
def test_activation_peaks_match_a_walk_of_the_order(
        case: tuple[Schedule, int, int, int, bool, int], data: st.DataObject) -> None:
    schedule, p, m, v, combined, n = case
    act = data.draw(st.lists(st.floats(0.0, 1e9), min_size=n, max_size=n))
    got = activation_peaks(schedule, p, m, v, act, combined)
    assert got == pytest.approx(_walk(schedule, p, m, v, act, combined), rel=1e-9, abs=1e-6)

