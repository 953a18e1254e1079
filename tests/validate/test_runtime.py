"""The pipelining runtime's time per action (validate/runtime.py): hand-derived counts."""

from __future__ import annotations

import pytest

from pptune.costmodel.schedule_ops import OpKind
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.simulate import FREE_LINK, Link, StageCost, simulate
from pptune.validate.runtime import per_action_s, with_overhead
from pptune.validate.spec import RunSpec


def test_per_action_is_the_unexplained_step_over_the_busiest_ranks_actions() -> None:
    # 1f1b, pp 2, m 4, free links: each rank runs 4 F and 4 B = 8 actions, and with
    # nothing to compute the simulated step is 0: 40 ms over 8 actions is 5 ms
    spec = RunSpec(Schedule.ONE_F_ONE_B, 2, 4, 1, 1, (2, 2))
    assert per_action_s(spec, FREE_LINK, 0.040) == pytest.approx(0.005)
    # a link of 1 ms a message explains part of the step: the simulated step of the
    # tiny stages is taken off first
    slow = Link(latency_s=1e-3)
    idle = [StageCost(0.0, 0.0, 0.0, out_bytes=32.0)] * 2
    linked = simulate("1f1b", 2, 4, idle, link=lambda a, z: slow).step_time_s
    assert linked > 0
    assert per_action_s(spec, slow, 0.040) == pytest.approx((0.040 - linked) / 8)
    # a step the link alone explains leaves nothing
    assert per_action_s(spec, slow, linked / 2) == 0.0


def test_dualpipev_counts_each_half_of_a_pair() -> None:
    spec = RunSpec(Schedule.DUALPIPEV, 2, 4, 2, 1, (2, 2, 2, 2))
    idle = [StageCost(0.0, 0.0, 0.0, out_bytes=32.0)] * 4
    sim = simulate("dualpipev", 2, 4, idle)
    per_rank = [0, 0]
    for e in sim.events:
        per_rank[e.device] += 2 if e.op.kind is OpKind.FB else 1
    # 2 chunks x 4 micro-batches: 8 forwards and 8 backwards (split or whole) a rank
    assert max(per_rank) >= 16
    assert per_action_s(spec, FREE_LINK, 0.1) == pytest.approx(0.1 / max(per_rank))


def test_every_op_pays_the_action_once_and_a_pair_twice() -> None:
    st = StageCost(fwd_s=1.0, bwd_s=2.0, wgrad_s=0.5, split_bwd_s=2.5, split_wgrad_s=1.0)
    (with_it,) = with_overhead([st], 0.1)
    assert with_it.fwd_s == pytest.approx(1.1)
    assert with_it.split_b_s == pytest.approx(2.6) and with_it.split_w_s == pytest.approx(1.1)
    # a whole backward is one action: B (fused) and BW are bwd + wgrad
    assert with_it.bwd_s + with_it.wgrad_s == pytest.approx(2.6)
    plain = StageCost(fwd_s=1.0, bwd_s=2.0, wgrad_s=0.5)
    (p,) = with_overhead([plain], 0.1)
    # without split costs a split schedule's B and W are the fused parts, each + 0.1
    assert (p.split_b_s, p.split_w_s) == (pytest.approx(2.1), pytest.approx(0.6))
    assert p.bwd_s + p.wgrad_s == pytest.approx(2.6)
    assert with_overhead([plain], 0.0) == [plain]


def test_a_one_stage_zero_bubble_step_grows_by_three_actions_a_micro_batch() -> None:
    st = StageCost(fwd_s=1.0, bwd_s=2.0, wgrad_s=0.5)
    base = simulate("zb-h1", 1, 3, [st]).step_time_s
    grown = simulate("zb-h1", 1, 3, with_overhead([st], 0.1)).step_time_s
    assert grown - base == pytest.approx(3 * 3 * 0.1)  # F, B and W of 3 micro-batches
