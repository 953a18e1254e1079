"""A switchless full mesh (8 x MI300X over xGMI): collectives, copies and all-to-alls
inside a node run on the direct links a group's members have to each other, derived by
hand from the preset's figures (46.552 GB/s a link, 318.98 GB/s a full node's ring, 47
GB/s a NIC); switched (NVSwitch) nodes keep their one node-wide figure."""

from __future__ import annotations

import pytest

from pptune.costmodel import presets
from pptune.costmodel.collectives import (
    Algorithm,
    Collective,
    choose,
    collective_s,
    p2p_s,
    ring_busbw,
)
from pptune.costmodel.comm import all_to_all_s
from pptune.costmodel.context import CpComm, CpLinks, attention
from pptune.costmodel.dispatch import dispatch
from pptune.costmodel.layout import Dim, Group
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.simulate import Link
from pptune.costs.experts import preset_experts
from tests.costmodel.test_context import RATES, SHAPE
from tests.costmodel.test_moe import SMALL

GB = 1e9
GIB = 2**30
LINK = 46.552 * GB  # TransferBench, one xGMI link a direction
NODE = 318.98 * GB  # rccl-tests all_reduce busbw, 8 x MI300X, 16 GiB
MI = presets.GPUS["mi300x"].fabric
H = presets.GPUS["h100-sxm"].fabric
assert MI is not None and H is not None


@pytest.mark.parametrize(("members", "busbw"), [(2, LINK), (4, 3 * LINK), (8, NODE)])
def test_a_ring_inside_the_node_drives_the_direct_links_of_its_members(
        members: int, busbw: float) -> None:
    # 2: one link; 4: three at once; 8: seven would be 325.9, capped at the node's 318.98
    assert MI.intra_busbw(members) == pytest.approx(busbw)
    assert ring_busbw(Group(members, members, 1), MI) == pytest.approx(busbw)


@pytest.mark.parametrize(("n", "busbw"), [(2, LINK), (4, 3 * LINK), (8, NODE)])
def test_a_large_all_reduce_by_the_ring_formula_at_the_mesh_bus_bandwidth(
        n: int, busbw: float) -> None:
    # ring Simple: 8.4 us + 3.4 us for each of 2 (n - 1) steps, then 2 (n-1)/n x 1 GiB
    expected = (8.4 + 2 * (n - 1) * 3.4) * 1e-6 + 2 * (n - 1) / n * GIB / busbw
    choice = choose(Collective.ALL_REDUCE, GIB, Group(n, n, 1), MI)
    assert choice.algorithm is Algorithm.RING  # no NVLS on a mesh
    assert collective_s(Collective.ALL_REDUCE, GIB, Group(n, n, 1), MI) == pytest.approx(expected)


def test_the_hand_figures_of_all_reduce_and_all_gather() -> None:
    # 8 GPUs: 56 us + 1.75 GiB / 318.98 GB/s = 5.947 ms; 2 GPUs: 15.2 us + 1 GiB / 46.552
    assert collective_s(Collective.ALL_REDUCE, GIB, Group(8, 8, 1), MI) == pytest.approx(
        5.9468e-3, rel=1e-4)
    assert collective_s(Collective.ALL_REDUCE, GIB, Group(2, 2, 1), MI) == pytest.approx(
        23.0806e-3, rel=1e-4)
    # all-gather over 4: 8.4 + 3 x 3.4 = 18.6 us, then 3/4 GiB over 3 links
    assert collective_s(Collective.ALL_GATHER, GIB, Group(4, 4, 1), MI) == pytest.approx(
        18.6e-6 + 0.75 * GIB / (3 * LINK))


def test_a_pipeline_send_inside_the_node_runs_over_one_link() -> None:
    assert MI.p2p_bytes_per_s == LINK
    assert p2p_s(GIB, True, MI, 10e-6, 20e-6) == pytest.approx(10e-6 + GIB / LINK)
    assert p2p_s(GIB, False, MI, 10e-6, 20e-6) == pytest.approx(20e-6 + GIB / (47 * GB))


@pytest.mark.parametrize(("group", "busbw"), [
    (Group(16, 8, 2), NODE),  # 8 NICs would carry 376: the node's ring caps it
    (Group(16, 4, 4), 3 * LINK),  # 4 NICs 188, 4 members' links 139.7
    (Group(16, 2, 8), LINK),  # 2 NICs 94, one link between the two members
    (Group(16, 1, 16), 47 * GB),  # one member a node: one NIC, no link inside
])
def test_a_ring_across_nodes_is_capped_by_its_members_links(group: Group, busbw: float) -> None:
    assert ring_busbw(group, MI) == pytest.approx(busbw)


def test_an_all_to_all_inside_the_node_uses_every_direct_link_at_once() -> None:
    assert MI.a2a_bytes_per_s(8) == pytest.approx(7 * LINK)
    assert MI.a2a_bytes_per_s(2) == pytest.approx(LINK)
    # 1 GiB a member over 8 on the node: 7/8 of it leaves, 1/8 over each of 7 links
    near = Link(10e-6, MI.a2a_bytes_per_s(8))
    assert all_to_all_s(GIB, Group(8, 8, 1), near, Link(20e-6, 47 * GB)) == pytest.approx(
        10e-6 + GIB / 8 / LINK)


def test_ulysses_all_to_all_on_the_mesh() -> None:
    cp = 8
    att = attention(SHAPE, cp, CpComm.A2A, RATES, CpLinks(Group(cp, cp, 1), MI, 5e-6, 20e-6))
    tokens = 8192 / cp
    qkv = tokens * (8 + 2 * 2) * 128 * 2  # Q, K, V of 8 query and 2 KV heads of 128
    out = tokens * 8 * 128 * 2
    # each tensor: 7/8 leaves the rank, an eighth down each of the 7 links
    expected = 2 * 5e-6 + (qkv + out) / 8 / LINK
    assert att.fwd_comm_s == pytest.approx(expected)
    # the p2p ring's hop is one link
    hop = CpLinks(Group(cp, cp, 1), MI, 5e-6, 20e-6).hop(True)
    assert hop.bytes_per_s == LINK


@pytest.mark.parametrize(("ep", "links"), [(2, 1), (4, 3), (8, 7)])
def test_expert_dispatch_inside_the_node_uses_the_members_links(ep: int, links: int) -> None:
    ex = preset_experts(MI, 8, ExpertParallel(ep=ep))
    assert ex.near_link(ex.group(Dim.EP)).bytes_per_s == pytest.approx(links * LINK)
    token_bytes = 1e6
    # alltoall: top-2 copies, (ep - 1)/ep of them leave over ep - 1 links
    nbytes, seconds = dispatch(token_bytes, SMALL, ex)
    assert nbytes == 2 * token_bytes
    assert seconds == pytest.approx(presets.P2P_LATENCY_INTRA_S
                                    + 2 * token_bytes * (ep - 1) / ep / (links * LINK))


def test_expert_tensor_parallel_collectives_on_the_mesh() -> None:
    ex = preset_experts(MI, 8, ExpertParallel(ep=2, etp=4))
    assert ex.ring_link(ex.group(Dim.ETP)).busbw_bytes_per_s == pytest.approx(3 * LINK)
    assert ex.ring_link(ex.group(Dim.ETP, Dim.EP)).busbw_bytes_per_s == pytest.approx(NODE)


def test_switched_nodes_keep_their_one_node_wide_figures() -> None:
    for name, gpu in presets.GPUS.items():
        if name.startswith("mi3"):
            continue
        assert gpu.fabric is not None and gpu.fabric.mesh_link_bytes_per_s is None, name
        for m in (2, 4, 8):
            assert gpu.fabric.intra_busbw(m) == gpu.fabric.ring_busbw_bytes_per_s
            assert gpu.fabric.a2a_bytes_per_s(m) == gpu.fabric.p2p_bytes_per_s
    ex = preset_experts(H, 8, ExpertParallel(ep=8, etp=1))
    assert ex.near_link(ex.group(Dim.EP)) == Link(presets.P2P_LATENCY_INTRA_S, 396.4 * GB)
    assert ex.ring_link(ex.group(Dim.EP)).busbw_bytes_per_s == 367.2 * GB
