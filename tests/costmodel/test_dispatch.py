"""The MoE token dispatchers, derived by hand: where a token's experts are, and what
alltoall, DeepEP and allgather move for one small shape (h 256, 8 experts, top-2, s 128)."""

from __future__ import annotations

import pytest

from pptune.costmodel.dispatch import (
    Dispatcher,
    Reach,
    deepep_copies,
    dispatch,
    expected_hit,
    reach,
)
from pptune.costmodel.moe import moe_part
from pptune.costmodel.ops import Kind, OpCost, Parallel, Phase
from pptune.costmodel.parts import part_of
from pptune.costmodel.presets import MODELS
from tests.costmodel.test_moe import RATES, SMALL, ex, op


def names(ops: list[OpCost]) -> list[str]:
    return [o.name for o in ops if o.time_s > 0 or o.hbm_bytes > 0]


def test_expected_blocks_hit_by_draws_without_replacement() -> None:
    # 8 experts on 2 blocks of 4, 2 drawn: both in block A with C(4,2)/C(8,2) = 6/28,
    # so block A is missed with 6/28 and the expected blocks hit are 2 (1 - 6/28) = 22/14
    assert expected_hit(8, 2, 2) == pytest.approx(2 * (1 - 6 / 28))
    # one expert a block: every draw hits its own block
    assert expected_hit(8, 8, 2) == pytest.approx(2)
    # one block, or more draws than the other blocks can absorb
    assert expected_hit(8, 1, 2) == 1
    assert expected_hit(8, 2, 5) == pytest.approx(2)


def test_reach_without_and_with_group_limited_routing() -> None:
    # 256 experts, top-8, 64 ranks on 8 nodes: 8 (1 - C(224,8)/C(256,8)) nodes
    miss = 1.0
    for i in range(8):
        miss *= (224 - i) / (256 - i)
    free = reach(256, 8, 64, 8)
    assert free.nodes == pytest.approx(8 * (1 - miss))
    # DeepSeek-V3: 8 groups, 4 chosen, a group a node: 4 of the 8 nodes,
    # 8 (1 - C(7,4)/C(8,4)) = 4; its 8 experts among the 128 of those 4 nodes' 32 ranks:
    # 32 (1 - C(124,8)/C(128,8)) = 32 (1 - (120 119 118 117)/(128 127 126 125))
    limited = reach(256, 8, 64, 8, groups=8, group_topk=4)
    assert limited.nodes == pytest.approx(4)
    assert limited.ranks == pytest.approx(32 * (1 - 120 * 119 * 118 * 117
                                                / (128 * 127 * 126 * 125)))
    # a group spanning two nodes (4 groups over 8 nodes), 1 chosen: its top-8 experts
    # over its 2 nodes of 32 experts each, 2 (1 - C(32,8)/C(64,8))
    miss2 = 1.0
    for i in range(8):
        miss2 *= (32 - i) / (64 - i)
    assert reach(256, 8, 64, 8, groups=4, group_topk=1).nodes == pytest.approx(2 * (1 - miss2))


def test_deepep_copies_per_link() -> None:
    # 2 nodes of 8 ranks: the NIC carries 4 distinct nodes' (2 - 1)/2, NVLink every rank's
    # copy but the one reached directly, 6 (8 - 1)/8
    c = deepep_copies(Reach(nodes=4, ranks=6), 2, 8)
    assert (c.nic, c.nvlink) == pytest.approx((2.0, 6 * 7 / 8))


def test_alltoall_sends_a_copy_per_expert_deepep_one_per_rank() -> None:
    one = 65536.0  # one BF16 copy of 128 tokens of h 256
    # ep 2 in a node: alltoall sends both copies, half of them to the other rank
    nbytes, seconds = dispatch(one, SMALL, ex(ep=2))
    assert nbytes == 2 * one
    assert seconds == pytest.approx(0.5 * 2 * one / 1e11)
    # DeepEP: a token reaches 2 (1 - C(4,2)/C(8,2)) ranks, one of them its own
    ranks = 2 * (1 - 6 / 28)
    nbytes, seconds = dispatch(one, SMALL, ex(ep=2, dispatcher=Dispatcher.DEEPEP))
    assert nbytes == pytest.approx(ranks / 2 * one)
    assert seconds == pytest.approx(ranks / 2 * one / 1e11)
    # ep 8 over two nodes of 4 (gpus_per_node 4): the NIC carries the distinct remote node
    e8 = ex(ep=8, gpus_per_node=4, dispatcher=Dispatcher.DEEPEP)
    r = reach(8, 2, 8, 2)
    nbytes, seconds = dispatch(one, SMALL, e8)
    assert seconds == pytest.approx(max(r.ranks * 3 / 4 * one / 1e11, r.nodes / 2 * one / 1e10))


def test_deepep_permutes_on_arrival_and_skips_the_sort() -> None:
    part = moe_part(SMALL, 1, RATES, Parallel(), ex(ep=2, dispatcher=Dispatcher.DEEPEP))
    fwd = names(part.fwd)
    assert fwd.index("a2a_dispatch") < fwd.index("permute") < fwd.index("expert_fc1")
    assert "sort_by_expert" not in fwd
    # the 128 x 2 (1 - 6/28) received copies and the 256 rows of the 4 local experts,
    # read and written in BF16
    rows = 128 * 2
    assert op(part.fwd, "permute").hbm_bytes == pytest.approx(
        2 * 256 * (128 * 2 * (1 - 6 / 28) + rows))
    plain = names(moe_part(SMALL, 1, RATES, Parallel(), ex(ep=2)).fwd)
    assert plain.index("permute") < plain.index("a2a_dispatch") < plain.index("sort_by_expert")


def test_allgather_gathers_every_token_over_the_ep_etp_ranks() -> None:
    part = moe_part(SMALL, 1, RATES, Parallel(), ex(ep=2, dispatcher=Dispatcher.ALLGATHER))
    gather = op(part.fwd, "ep_gather")
    # 2 ranks' 128 tokens: BF16 hidden (512 bytes) + the routing map and fp32
    # probabilities of 8 experts (40 bytes), half of it crossing at the ring's 1e11
    assert gather.kind is Kind.COMM
    assert gather.hbm_bytes == 256 * (512 + 40)
    assert gather.time_s == pytest.approx(0.5 * 256 * 552 / 1e11)
    assert op(part.fwd, "ep_scatter").hbm_bytes == 256 * 512
    assert op(part.bwd, "ep_gather.bwd").hbm_bytes == 256 * 512
    # no all-to-all, no expert tensor-parallel gather: the group gather covers both
    assert not [o for o in part.fwd + part.bwd if o.kind is Kind.ALL_TO_ALL]
    assert "etp_gather" not in names(part.fwd)
    # the 256 rows of the local experts picked from the 256 gathered tokens
    assert op(part.fwd, "permute").hbm_bytes == 2 * 256 * (256 + 256)
    assert {o.phase for o in part.bwd} == {Phase.B}
    # the step's breakdown names them after their group (parts.py)
    assert part_of(gather) == "ep communication"


def test_the_deepseek_preset_routes_to_four_of_eight_groups() -> None:
    m = MODELS["deepseek-v3"]
    assert (m.route_groups, m.route_group_topk) == (8, 4)


def test_a_one_rank_ep_group_runs_the_alltoall_dispatchers_local_permute() -> None:
    # DeepEP moves tokens between an ep group's ranks; with one rank there is none to move,
    # and the frameworks that offer it run their standard dispatcher there (megatron-core
    # refuses flex at tp x ep = 1, torchtitan builds DeepEP only where ep > 1)
    from pptune.costmodel.dispatch import runs_as

    assert runs_as(Dispatcher.DEEPEP, 1) is Dispatcher.ALLTOALL
    assert runs_as(Dispatcher.DEEPEP, 2) is Dispatcher.DEEPEP
    assert runs_as(Dispatcher.ALLGATHER, 1) is Dispatcher.ALLGATHER


def test_deepep_asked_at_ep_1_is_priced_as_alltoall_and_at_ep_8_as_deepep() -> None:
    from pptune.costmodel.keys import CostKey
    from pptune.costmodel.moe import ExpertParallel
    from pptune.costs.profiles import preset_tables

    def layers(dispatcher: Dispatcher, ep: int) -> object:
        source = preset_tables("qwen3-30b-a3b", "h100-sxm", (1,),
                               experts=ExpertParallel(dispatcher=dispatcher))
        table = source(CostKey(ep=ep))
        return table.by_mb, table.a2a_sm_share, table.dispatch_buffer_bytes

    assert layers(Dispatcher.DEEPEP, 1) == layers(Dispatcher.ALLTOALL, 1)
    assert layers(Dispatcher.DEEPEP, 8) != layers(Dispatcher.ALLTOALL, 8)
