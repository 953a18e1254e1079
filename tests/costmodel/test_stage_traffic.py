"""A layout's per-stage data-parallel traffic (stage_traffic.py), looked up by the stage's
parameters and windows: sharding.stage_comm's figures, worked by hand here."""

from __future__ import annotations

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.sharding import ShardComm, Sharding, stage_comm
from pptune.costmodel.sim_records import StageCost
from pptune.costmodel.stage_traffic import Reduction, stage_traffic

# a ring over 2 ranks moves (n - 1) / n = half of an array; no latency, 1 GB/s
LINK = AllReduceLink(0.0, 1e9)


def _zero3(ranks: int = 2) -> Reduction:
    # BF16 weights gathered (2 bytes a parameter), BF16 gradients reduce-scattered
    return Reduction(Sharding.ZERO3, True, ranks, LINK, 1.0, True, 2.0, None)


def test_zero3_gathers_forward_and_backward_and_scatters_the_gradients() -> None:
    stage = StageCost(fwd_s=1.0, bwd_s=2.0)
    # 1e9 parameters: a gather is half of 2e9 bytes at 1e9 B/s, 1 s; so is the scatter
    assert stage_traffic(_zero3(), None, [1e9], [], [stage]) == [ShardComm(fwd_s=1.0,
                                                                           bwd_s=2.0)]


def test_routed_experts_reduce_over_their_own_group_after_the_dense_part() -> None:
    stage = StageCost(fwd_s=1.0, bwd_s=2.0)
    # 1e9 parameters, 0.5e9 of them routed experts' over 4 ranks: dense half over 2
    # ranks, 0.5 s a gather; experts' 3/4 of 1e9 bytes, 0.75 s a gather
    got = stage_traffic(_zero3(), _zero3(4), [1e9], [0.5e9], [stage])
    assert got == [ShardComm(fwd_s=0.5 + 0.75, bwd_s=2 * 0.5 + 2 * 0.75)]


def test_each_stage_is_priced_as_stage_comm_prices_it_with_its_windows() -> None:
    none = Reduction(Sharding.NONE, False, 8, LINK, 1.0, True, 2.0, None)
    stages = [StageCost(fwd_s=1e-3, bwd_s=2e-3, wgrad_s=1e-3, bwd_comm_s=5e-4, fwd_comm_s=1e-4),
              StageCost(fwd_s=2e-3, bwd_s=3e-3)]
    got = stage_traffic(none, None, [1e8, 2e8], [], stages)
    assert got == [stage_comm(Sharding.NONE, False, 1e8, 8, LINK, 1.0, True, 3.5e-3, 1.1e-3,
                              2.0, None),
                   stage_comm(Sharding.NONE, False, 2e8, 8, LINK, 1.0, True, 3e-3, 2e-3,
                              2.0, None)]
    assert got[0].tail_s > 0  # the gradients' reduction outlasts the backward's window
    # the same stage under the same reductions: the same figures, looked up
    assert stage_traffic(none, None, [1e8], [], stages[:1])[0] is got[0]


def test_retimed_sets_forward_and_backward_and_keeps_the_rest() -> None:
    stage = StageCost(fwd_s=1.0, bwd_s=2.0, wgrad_s=3.0, act_bytes=4.0, split_bwd_s=5.0,
                      rerun_bytes=6.0)
    assert stage.retimed(7.0, 8.0) == StageCost(fwd_s=7.0, bwd_s=8.0, wgrad_s=3.0,
                                                act_bytes=4.0, split_bwd_s=5.0,
                                                rerun_bytes=6.0)
