"""The layout's group arithmetic against brute force, and hand-derived cases."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.costmodel.layout import DP_INNER, PP_INNER, Dim, Group, Layout, LayoutError


def brute_groups(lay: Layout, dims: tuple[Dim, ...]) -> Group:
    """Every rank's coordinates, grouped by the coordinates outside ``dims``."""
    order = lay.dims(dims[0])
    sizes = [lay.size(d) for d in order]
    groups: dict[tuple[int, ...], list[int]] = {}
    for coords in itertools.product(*(range(n) for n in reversed(sizes))):
        coords = tuple(reversed(coords))  # fastest first
        rank, stride = 0, 1
        for c, n in zip(coords, sizes, strict=True):
            rank += c * stride
            stride *= n
        key = tuple(c for c, d in zip(coords, order, strict=True) if d not in dims)
        groups.setdefault(key, []).append(rank)
    per_node = []
    spans = []
    for ranks in groups.values():
        nodes: dict[int, int] = {}
        for r in ranks:
            nodes[r // lay.gpus_per_node] = nodes.get(r // lay.gpus_per_node, 0) + 1
        per_node.append(min(nodes.values()))
        spans.append(len(nodes))
    size = len(next(iter(groups.values())))
    return Group(size, min(per_node), max(spans))


def test_megatron_rank_order_by_hand() -> None:
    # tp2 cp2 dp2 pp2 on 8-GPU nodes, tp-cp-dp-pp: rank = t + 2c + 4d + 8s
    lay = Layout(pp=2, dp=2, tp=2, cp=2, gpus_per_node=8)
    assert lay.world == 16
    assert lay.rank(stage=1, replica=1, t=1, c=1) == 15
    assert lay.group(Dim.TP) == Group(2, 2, 1)
    assert lay.group(Dim.CP, Dim.DP) == Group(4, 4, 1)  # Megatron's dp-cp group
    assert lay.group(Dim.PP) == Group(2, 1, 2)  # stages 8 ranks apart: two nodes
    assert not lay.same_node(0, 1)
    pp_inner = Layout(pp=2, dp=2, tp=2, cp=2, gpus_per_node=8, order=PP_INNER)
    assert pp_inner.rank(stage=1, replica=0, t=0, c=0) == 4  # tp-cp-pp-dp
    assert pp_inner.same_node(0, 1)
    assert pp_inner.group(Dim.DP) == Group(2, 1, 2)


def test_expert_grouping_follows_megatron() -> None:
    # DeepSeek-V3's recipe shape: TP2 PP8 EP64 on 1,024 GPUs: dp = 64, edp = 2
    lay = Layout(pp=8, dp=64, tp=2, ep=64, etp=1, gpus_per_node=8)
    assert lay.edp == 2
    assert lay.group(Dim.EP) == Group(64, 8, 8)  # an EP group spans 8 nodes, 8 GPUs each
    assert lay.group(Dim.EDP) == Group(2, 1, 2)
    assert lay.stride(Dim.PP) == 128  # the same pipeline ranks for both groupings
    with pytest.raises(LayoutError, match="must divide"):
        Layout(pp=1, dp=3, ep=2)


def test_group_needs_one_grouping() -> None:
    with pytest.raises(ValueError, match="not one grouping"):
        Layout(pp=1, dp=4, ep=2).group(Dim.EP, Dim.DP)


def _old_same_node(lay: Layout, a: int, b: int) -> bool:
    """The pre-layout Topology.same_node: every replica's hop stays in a node."""
    return all(lay.node(lay.rank(a, i, t)) == lay.node(lay.rank(b, i, t))
               for i in range(lay.dp) for t in range(lay.tp))


sizes = st.sampled_from([1, 2, 3, 4, 6, 8])


@settings(max_examples=300, deadline=None)
@given(pp=sizes, dp=sizes, tp=sizes, cp=st.sampled_from([1, 2, 3]),
       gpn=st.sampled_from([1, 2, 4, 6, 8, 16]), inner=st.booleans(),
       ep=st.sampled_from([1, 2, 3, 4]), etp=st.sampled_from([1, 2]))
def test_groups_match_brute_force(pp: int, dp: int, tp: int, cp: int, gpn: int, inner: bool,
                                  ep: int, etp: int) -> None:
    if (tp * cp * dp) % (ep * etp):
        return
    order = DP_INNER if inner else PP_INNER
    if order is PP_INNER and ep > 1 and ep * etp != tp * cp:
        return
    lay = Layout(pp=pp, dp=dp, tp=tp, cp=cp, ep=ep, etp=etp, gpus_per_node=gpn, order=order)
    for dims in [(Dim.TP,), (Dim.CP,), (Dim.DP,), (Dim.PP,), (Dim.CP, Dim.DP), (Dim.TP, Dim.CP),
                 (Dim.EP,), (Dim.ETP,), (Dim.EDP,), (Dim.ETP, Dim.EP)]:
        assert lay.group(*dims) == brute_groups(lay, dims), dims
    if cp == 1:
        for a, b in itertools.combinations(range(pp), 2):
            assert lay.same_node(a, b) == _old_same_node(lay, a, b), (a, b)
