"""Runs that share the start of their op orders (sim_loop.py): the same numbers as
separate runs, exactly."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.costmodel import simulate as sim_mod
from pptune.costmodel.schedules import COMBINABLE, Schedule, chunks_per_device
from pptune.costmodel.sim_plan import common_start
from pptune.costmodel.simulate import Link, StageCost, simulate


def test_orders_for_more_micro_batches_begin_as_the_shorter_ones() -> None:
    # 1F1B on 2 devices, 2 and 3 micro-batches: dev0 F0 F1 B0 B1 and F0 F1 B0 F2 B1 B2
    # share F0 F1 B0; dev1 F0 B0 F1 B1 and F0 B0 F1 B1 F2 B2 all of the first
    assert common_start(Schedule.ONE_F_ONE_B, 2, (2, 3), 1, False) == (3, 4)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_runs_from_a_common_start_equal_separate_runs(data: st.DataObject) -> None:
    schedule = data.draw(st.sampled_from(list(Schedule)))
    p = data.draw(st.integers(1, 5))
    v = data.draw(st.integers(2, 3)) if schedule is Schedule.INTERLEAVED else 1
    combined = schedule in COMBINABLE and data.draw(st.booleans())
    even = schedule in (Schedule.DUALPIPE, Schedule.DUALPIPEV)
    if schedule is Schedule.DUALPIPE and p % 2:
        p += 1
    first = data.draw(st.integers(2 * p if even else p, 4 * p + 4))
    first += first % 2 if even else 0
    step = data.draw(st.integers(1, 2 * p)) * (2 if even else 1)
    if combined and schedule is Schedule.INTERLEAVED:  # m a multiple of p
        first, step = -(-first // p) * p, step * p
    ms = tuple(first + i * step for i in range(3))
    n = p * chunks_per_device(schedule, v)
    cost = st.floats(0.1, 3.0)
    stages = [StageCost(data.draw(cost), data.draw(cost), data.draw(st.floats(0.0, 1.0)),
                        data.draw(cost), data.draw(cost), fwd_comm_s=data.draw(st.floats(0, 0.5)),
                        bwd_comm_s=data.draw(st.floats(0, 0.5)),
                        comm_sm_share=data.draw(st.floats(0, 0.3)))
              for _ in range(n)]
    near, far = Link(0.01, 5.0), Link(0.05, 1.0)
    start = data.draw(st.none() | st.lists(st.floats(0.0, 2.0), min_size=p, max_size=p))
    blocking = data.draw(st.booleans())

    def link(a: int, z: int) -> Link:
        return near if a // 2 == z // 2 else far

    shared = sim_mod._probes(schedule, p, ms, stages, v, link, blocking, start, combined)
    for m, got in zip(ms, shared, strict=True):
        alone = simulate(schedule, p, m, stages, v=v, link=link, blocking_send=blocking,
                         keep_events=False, device_start_s=start, combined=combined)
        assert got == alone


def test_a_stage_summed_at_once_is_the_dataclass_s() -> None:
    """StageCost.summed (table.stage_costs' fast path) sets every field as __init__."""
    fields = dict(fwd_s=1.0, bwd_s=2.0, wgrad_s=0.5, act_bytes=3.0, out_bytes=4.0,
                  fwd_comm_s=0.1, bwd_comm_s=0.2, split_bwd_s=2.5, split_wgrad_s=None,
                  comm_sm_share=0.15, rerun_bytes=6.0)
    fast, slow = StageCost.summed(**fields), StageCost(**fields)  # type: ignore[arg-type]
    assert fast == slow and hash(fast) == hash(slow) and fast.__dict__ == slow.__dict__
    assert set(fast.__dict__) == {f.name for f in dataclasses.fields(StageCost)}
