"""The splits DeepSpeed's PipelineModule builds (DeepSpeedAdapter.own_splits), derived by
hand from deepspeed/runtime/utils.py (0.19.8):

``partition_uniform(6, 2)``: chunk 3, no residual: boundaries [0, 3, 6] -> 3 + 3;
``partition_uniform(6, 3)``: 2 + 2 + 2.

``partition_balanced([10, 2, 2, 2, 2, 4], 2)`` (prefix sums 0 10 12 14 16 18 22): for the
whole list in two parts, split point k = 1 gives parts 10 and 12 (spread 2), k = 2 gives
12 and 10 (spread 2), k = 3 gives 14 and 8 (6), ...; ``if dp_cost[i, j] >= cost`` lets the
later of equal spreads win: k = 2, boundaries [0, 2, 6] -> 2 + 4.
In three parts every split keeps the 10 in its first part, so the largest part is at
least 10 and the smallest at most (22 - 10) / 2 = 6: spread 4 at best, which only
[10] [2, 2, 2] [2, 4] reaches -> 1 + 3 + 2.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.keys import CostKey
from pptune.costmodel.simulate import Link
from pptune.costmodel.table import CostTable, LayerCosts
from pptune.frameworks.deepspeed.adapter import ADAPTER as DEEPSPEED
from pptune.frameworks.deepspeed.partition import ds_partition_balanced, ds_partition_uniform
from pptune.frameworks.megatron.adapter import ADAPTER as MEGATRON
from pptune.frameworks.torchtitan.adapter import ADAPTER as TORCHTITAN

PARAMS = [10.0, 2.0, 2.0, 2.0, 2.0, 4.0]  # parameters a layer, in BF16 bytes / 2


def table(names: list[str], params: list[float]) -> CostTable:
    n = len(names)
    costs = LayerCosts([1.0] * n, [2.0] * n, [0.0] * n, [1e6] * n, [1e5] * n)
    return CostTable(names, [2 * p for p in params], 2, {1: costs}, 128, 1e12,
                     Link(1e-3, 1e9), Link(5e-3, 1e8), AllReduceLink(1e-3, 1e9),
                     AllReduceLink(1e-3, 1e8))


LAYERS = ["embedding", "block0", "block1", "block2", "block3", "head"]


def test_uniform_then_parameters_as_partition_method_builds_them() -> None:
    plain = table(LAYERS, PARAMS)
    assert DEEPSPEED.own_splits(plain, CostKey(), 2) == ((3, 3), (2, 4))
    assert DEEPSPEED.own_splits(plain, CostKey(), 3) == ((2, 2, 2), (1, 3, 2))


def test_an_mtp_layer_stays_on_the_stage_of_the_layer_before_it() -> None:
    """The model code builds no MTP layer: the split is of the six layers it builds (as
    above), the MTP layer (after the last block) kept on the last block's stage."""
    mtp = table([*LAYERS[:5], "mtp0", "head"], [*PARAMS[:5], 6.0, PARAMS[5]])
    assert DEEPSPEED.own_splits(mtp, CostKey(), 2) == ((3, 4), (2, 5))


def test_fewer_layers_than_stages_build_no_split() -> None:
    """partition_uniform(6, 8) leaves two stages empty; partition_balanced too (it calls
    partition_uniform with no more items than parts)."""
    assert DEEPSPEED.own_splits(table(LAYERS, PARAMS), CostKey(), 8) == ()


def test_routed_experts_count_ep_times_their_share() -> None:
    """A rank holds 1/ep of the routed experts, and PipelineModule counts the layers as the
    model builds them, before AutoEP shards them (table.built_params): block0's 4
    parameters on a rank, 2 of them its share of 8 routed-expert parameters at ep 4,
    weigh 2 + 8 = 10."""
    plain = table(LAYERS, [4.0, 4.0, 2.0, 2.0, 2.0, 6.0])
    experts = replace(plain, expert_param_bytes=[0.0, 4.0, 0.0, 0.0, 0.0, 0.0])
    # parameters [4, 10, 2, 2, 2, 6]: 14 | 12 (spread 2) beats 4 | 22 and 16 | 10
    assert DEEPSPEED.own_splits(experts, CostKey(ep=4), 2) == ((3, 3), (2, 4))


def test_megatron_and_torchtitan_build_any_split() -> None:
    assert MEGATRON.builds_any_split and TORCHTITAN.builds_any_split
    assert not DEEPSPEED.builds_any_split



def deepspeed_balanced(weights: list[float], num_parts: int) -> list[int]:
    """deepspeed/runtime/utils.py partition_balanced (0.19.8) line for line, with lists
    for numpy's arrays: every k < i tried."""
    n, m = len(weights), num_parts
    if n <= m:
        return ds_partition_uniform(n, m)
    dp_max = [[math.inf] * (m + 1) for _ in range(n + 1)]
    dp_min = [[math.inf] * (m + 1) for _ in range(n + 1)]
    dp_cost = [[math.inf] * (m + 1) for _ in range(n + 1)]
    position = [[0] * (m + 1) for _ in range(n + 1)]
    prefix_sum = [0.0]
    for w in weights:
        prefix_sum.append(prefix_sum[-1] + w)
    dp_max[0][0] = 0
    dp_cost[0][0] = 0
    for i in range(1, n + 1):
        for j in range(1, min(i, m) + 1):
            for k in range(i):
                max_sum = max(dp_max[k][j - 1], prefix_sum[i] - prefix_sum[k])
                min_sum = min(dp_min[k][j - 1], prefix_sum[i] - prefix_sum[k])
                cost = max_sum - min_sum
                if dp_cost[i][j] >= cost:
                    dp_cost[i][j] = cost
                    dp_max[i][j] = max_sum
                    dp_min[i][j] = min_sum
                    position[i][j] = k
    parts = [n]
    for i in reversed(range(1, m + 1)):
        parts.append(position[parts[-1]][i])
    parts.reverse()
    return parts


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0, 0.5, 1e9]), min_size=1, max_size=14),
       st.integers(1, 9))
def test_the_balanced_split_is_deepspeeds_for_any_weights(weights: list[float],
                                                          parts: int) -> None:
    """Ties included (few distinct weights): the split points DeepSpeed's own loop picks."""
    assert ds_partition_balanced(weights, parts) == deepspeed_balanced(weights, parts)
