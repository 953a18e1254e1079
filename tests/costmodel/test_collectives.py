"""Collectives at what NCCL achieves, and the algorithm it picks: hand-derived."""

from __future__ import annotations

import math

import pytest

from pptune.costmodel import presets
from pptune.costmodel.collectives import (
    Algorithm,
    Choice,
    Collective,
    Fabric,
    choices,
    choose,
    collective_s,
    link_for,
    p2p_s,
    ring_busbw,
)
from pptune.costmodel.comm import allreduce_s, reduce_scatter_s
from pptune.costmodel.layout import Group

GB = 1e9
GIB = 2**30
# 8 x H200 (the H100 fabric): ring 367.2, NVLS 480, copy 396.4, 47 GB/s a NIC
H = presets.GPUS["h100-sxm"].fabric
assert H is not None
NODE8 = Group(8, 8, 1)


def test_the_h100_fabric_is_the_measured_one() -> None:
    assert (H.ring_busbw_bytes_per_s, H.nvls_busbw_bytes_per_s, H.p2p_bytes_per_s,
            H.nic_busbw_bytes_per_s) == (367.2 * GB, 480.0 * GB, 396.4 * GB, 47 * GB)


def test_large_all_reduce_in_a_node_takes_nvls() -> None:
    # NVLS: 23 us, then 2 (n-1)/n x 1 GiB at 480 GB/s; the ring would be
    # 8.4 + 14 x 3.4 = 56 us and 367.2 GB/s
    c = choose(Collective.ALL_REDUCE, GIB, NODE8, H)
    assert c.algorithm is Algorithm.NVLS
    assert c.time_s == pytest.approx(23e-6 + 2 * 7 / 8 * GIB / 480e9)


def test_without_nvls_the_ring_runs_at_367() -> None:
    c = choose(Collective.ALL_REDUCE, GIB, NODE8, H.without_nvls())
    assert c.algorithm is Algorithm.RING
    assert c.latency_s == pytest.approx((8.4 + 14 * 3.4) * 1e-6)
    assert c.time_s == pytest.approx(56e-6 + 2 * 7 / 8 * GIB / 367.2e9)


def test_nvls_needs_five_ranks_on_hopper() -> None:
    # four ranks: the ring, 8.4 + 6 x 3.4 = 28.8 us
    c = choose(Collective.ALL_REDUCE, GIB, Group(4, 4, 1), H)
    assert c.algorithm is Algorithm.RING
    assert c.time_s == pytest.approx(28.8e-6 + 2 * 3 / 4 * GIB / 367.2e9)
    assert choose(Collective.ALL_REDUCE, GIB, Group(5, 5, 1), H).algorithm is Algorithm.NVLS


def test_small_messages_take_the_low_latency_protocol() -> None:
    # 1 KiB over 8: LL 6.6 + 14 x 0.6 = 15 us at a quarter of the bandwidth,
    # against the ring's 56 us and NVLS's 23 us
    c = choose(Collective.ALL_REDUCE, 1024, NODE8, H)
    assert c.algorithm is Algorithm.RING_LL
    assert c.time_s == pytest.approx(15e-6 + 2 * 7 / 8 * 1024 / (367.2e9 / 4))


def test_reduce_scatter_is_a_ring_of_n_minus_1_steps() -> None:
    # 8 ranks on 2 nodes, 4 a node: 7 steps, 1 on the network; busbw 4 x 47
    g = Group(8, 4, 2)
    c = choose(Collective.REDUCE_SCATTER, GIB, g, H)
    assert c.algorithm is Algorithm.RING
    assert c.busbw_bytes_per_s == pytest.approx(4 * 47e9)
    assert c.latency_s == pytest.approx((8.4 + 6 * 3.4 + 1 * 14) * 1e-6)
    assert c.time_s == pytest.approx(c.latency_s + 7 / 8 * GIB / 188e9)


def test_a_full_node_across_nodes_is_bounded_by_the_node() -> None:
    # 8 members a node x 47 = 376 GB/s > 367.2: the node's own ring bounds it
    assert ring_busbw(Group(64, 8, 8), H) == 367.2e9
    assert ring_busbw(Group(64, 1, 64), H) == 47e9


def test_many_nodes_small_bucket_takes_the_tree() -> None:
    # 256 ranks, one a node, 16 MB: ring latency 8.4 + 510 x 14 (every step on the
    # network) = 7.15 ms; tree 2 x (0 x 28 + 8 x 28) = 448 us at 0.92 of the bandwidth
    g = Group(256, 1, 256)
    nbytes = 16e6
    ring = 8.4e-6 + 2 * 255 * 14e-6 + 2 * 255 / 256 * nbytes / 47e9
    tree = 448e-6 + 2 * nbytes / (0.92 * 47e9)
    c = choose(Collective.ALL_REDUCE, nbytes, g, H)
    assert c.algorithm is Algorithm.TREE and tree < ring
    assert c.time_s == pytest.approx(tree)
    # and the link it hands comm.py reproduces that time with the ring formula
    assert allreduce_s(nbytes, 256, link_for(Collective.ALL_REDUCE, nbytes, g, H)) \
        == pytest.approx(tree)


def test_two_nodes_large_message_stays_on_the_ring() -> None:
    g = Group(16, 8, 2)
    c = choose(Collective.ALL_REDUCE, GIB, g, H)
    assert c.algorithm is Algorithm.RING
    # 30 steps, 4 of them (2 x nodes) on the network
    assert c.latency_s == pytest.approx((8.4 + 26 * 3.4 + 4 * 14) * 1e-6)


def test_link_for_a_reduce_scatter_feeds_comm_py() -> None:
    g = Group(8, 4, 2)
    link = link_for(Collective.REDUCE_SCATTER, GIB, g, H)
    assert reduce_scatter_s(GIB, 8, link) == pytest.approx(
        collective_s(Collective.REDUCE_SCATTER, GIB, g, H))
    assert link_for(Collective.ALL_REDUCE, GIB, Group(1, 1, 1), H).busbw_bytes_per_s == math.inf
    assert collective_s(Collective.ALL_REDUCE, GIB, Group(1, 1, 1), H) == 0.0


def test_point_to_point_uses_the_copy_rate_inside_and_one_nic_across() -> None:
    assert p2p_s(396.4e6, True, H, 10e-6, 20e-6) == pytest.approx(10e-6 + 1e-3)
    assert p2p_s(47e6, False, H, 10e-6, 20e-6) == pytest.approx(20e-6 + 1e-3)
    assert p2p_s(0.0, False, H, 10e-6, 20e-6) == 0.0


def test_a_gpu_without_a_measured_fabric_gets_its_line_rates() -> None:
    import dataclasses

    g = dataclasses.replace(presets.GPUS["a100-80gb"], fabric=None)
    assert g.fabric_or_line() == Fabric(300e9, 300e9, 25e9)


def test_a_tiny_all_reduce_across_nodes_takes_the_low_latency_tree() -> None:
    # 96 bytes over 256 ranks, 8 a node on 32 nodes (tuning.cc): tree LL 6.8 + 2 x (7 x 0.6
    # + log2(32) x 5.0) = 65.2 us; ring LL 6.6 + (510 - 64) x max(0.6, 1.0 net overhead)
    # + 64 x 2.7 = 625.4 us;
    # tree Simple 2 x (7 + 5) x 28 = 672 us. Tree LL runs at 0.92 / 3.8 of the ring's
    # bus bandwidth and sends every byte twice
    g = Group(256, 8, 32)
    c = choose(Collective.ALL_REDUCE, 96, g, H)
    assert c.algorithm is Algorithm.TREE_LL
    assert c.latency_s == pytest.approx(65.2e-6)
    factor = 2 * 255 / 256
    assert c.time_s == pytest.approx(65.2e-6 + 96 / (0.92 * 367.2e9 * factor / 2 / 3.8) * factor)
    by: dict[Algorithm, Choice] = {x.algorithm: x for x in
                                   choices(Collective.ALL_REDUCE, 96, g, H)}
    assert by[Algorithm.RING_LL].latency_s == pytest.approx(625.4e-6)
    assert by[Algorithm.TREE].latency_s == pytest.approx(672.0e-6)
