"""Context parallelism: the K/V traffic of each algorithm and the split of the work, by hand."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import analytic_layers, block_act_bytes
from pptune.costmodel.collectives import Collective, Fabric, collective_s
from pptune.costmodel.comm import all_to_all_s
from pptune.costmodel.context import (
    AttentionRates,
    CpComm,
    CpLinks,
    CpShape,
    attention,
    fraction_at,
    local_links,
    problems,
)
from pptune.costmodel.layout import Group
from pptune.costmodel.simulate import Link

# 100 TFLOP/s of attention flat (no curve); links: 100 GB/s copies, 10 GB/s a NIC
RATES = AttentionRates(peak_flops=200e12, fraction=0.5)
FABRIC = Fabric(ring_busbw_bytes_per_s=80e9, p2p_bytes_per_s=100e9, nic_busbw_bytes_per_s=10e9)
# one rank's attention: 8 query heads, 2 KV heads of 128, sequence 8192, 1 sequence
SHAPE = CpShape(seq_len=8192, head_dim=128, heads=8, kv_heads=2, micro_batch=1)
S, D, A, G = 8192, 128, 8, 2
CAUSAL = 4.0 * S * S * D * A / 2  # the layer's causal forward FLOPs


def links(cp: int, per_node: int) -> CpLinks:
    return CpLinks(Group(cp, per_node, cp // per_node), FABRIC, 5e-6, 20e-6)


def kv_bytes(cp: int) -> float:
    return 2.0 * (S / cp) * G * D * 2  # K and V of one rank, 2 bytes an element


def test_without_cp_the_whole_causal_attention_runs_on_one_rank() -> None:
    att = attention(SHAPE, 1, CpComm.P2P, RATES, None)
    assert att.fwd_flops == CAUSAL and att.bwd_flops == 2.5 * CAUSAL
    assert att.fwd_compute_s == pytest.approx(CAUSAL / 100e12)
    assert (att.fwd_comm_s, att.bwd_comm_s, att.steps) == (0.0, 0.0, 1)


def test_p2p_ring_splits_the_work_and_sends_kv_each_step() -> None:
    # cp = 4 in one node: each rank 1/4 of the FLOPs in 4 steps; a hop sends the
    # rank's K/V (2 x 2048 tokens x 2 heads x 128 x 2 bytes = 2 MiB) at 100 GB/s
    cp = 4
    att = attention(SHAPE, cp, CpComm.P2P, RATES, links(cp, 4))
    kv = kv_bytes(cp)
    assert kv == 2 * 2048 * 2 * 128 * 2
    assert att.fwd_flops == pytest.approx(CAUSAL / cp) and att.steps == cp
    step_s = CAUSAL / cp / cp / 100e12
    hop = 5e-6 + kv / 100e9
    assert att.fwd_compute_s == pytest.approx(cp * step_s)
    # three hops, each behind a step of compute: exposed only what outlasts it
    assert att.fwd_comm_s == pytest.approx(3 * max(0.0, hop - step_s))
    assert att.fwd_bytes == pytest.approx(3 * kv)
    # backward: K/V and their gradients each hop (2 kv), then the gradients home (kv)
    bhop = 5e-6 + 2 * kv / 100e9
    assert att.bwd_comm_s == pytest.approx(3 * max(0.0, bhop - 2.5 * step_s) + hop)
    assert att.bwd_bytes == pytest.approx(3 * 2 * kv + kv)


def test_p2p_hops_across_nodes_run_at_one_nic() -> None:
    cp = 16  # 8 a node: the ring crosses nodes, every step waits for the slowest hop
    att = attention(SHAPE, cp, CpComm.P2P, RATES, links(cp, 8))
    step_s = CAUSAL / cp / cp / 100e12
    hop = 20e-6 + kv_bytes(cp) / 10e9
    assert hop > step_s
    assert att.fwd_comm_s == pytest.approx(15 * (hop - step_s))


def test_all_gather_gathers_every_ranks_kv_exposed() -> None:
    cp = 4
    lk = links(cp, 4)
    att = attention(SHAPE, cp, CpComm.ALL_GATHER, RATES, lk)
    full = cp * kv_bytes(cp)
    gather = collective_s(Collective.ALL_GATHER, full, lk.group, FABRIC)
    scatter = collective_s(Collective.REDUCE_SCATTER, full, lk.group, FABRIC)
    # a ring of 3 steps at 80 GB/s: 8.4 + 3 x 3.4 us + 3/4 of the array
    assert gather == pytest.approx((8.4 + 3 * 3.4) * 1e-6 + 0.75 * full / 80e9)
    assert att.fwd_comm_s == pytest.approx(gather)
    assert att.bwd_comm_s == pytest.approx(gather + scatter)
    assert att.fwd_bytes == pytest.approx(3 * kv_bytes(cp))
    assert att.fwd_flops == pytest.approx(CAUSAL / cp)


def test_a2a_moves_qkv_in_and_the_output_back() -> None:
    cp = 2
    lk = links(cp, 2)
    att = attention(SHAPE, cp, CpComm.A2A, RATES, lk)
    tokens = S / cp
    qkv = tokens * (A + 2 * G) * D * 2
    out = tokens * A * D * 2
    near, far = Link(5e-6, 100e9), Link(20e-6, 10e9)
    t = all_to_all_s(qkv, lk.group, near, far) + all_to_all_s(out, lk.group, near, far)
    # 2 in a node: half of each tensor crosses NVLink
    assert t == pytest.approx(2 * 5e-6 + 0.5 * (qkv + out) / 100e9)
    assert (att.fwd_comm_s, att.bwd_comm_s) == (pytest.approx(t), pytest.approx(t))
    assert att.fwd_bytes == pytest.approx(0.5 * (qkv + out))
    # the whole sequence for half the heads: the same FLOPs per rank, at full length
    assert att.fwd_flops == pytest.approx(CAUSAL / cp)


def test_hierarchical_a2a_inside_nodes_ring_across() -> None:
    # cp = 16 on 2 nodes of 8: a2a over the 8 on a node, a 2-step ring across
    cp = 16
    lk = links(cp, 8)
    att = attention(SHAPE, cp, CpComm.A2A_P2P, RATES, lk)
    inner, outer = 8, 2
    ring_shape = CpShape(S, D, A // inner, 1, 1)  # 8 / 8 query heads, 2 / 8 -> 1 KV head
    ring = attention(ring_shape, outer, CpComm.P2P, RATES, CpLinks(Group(2, 1, 2), FABRIC,
                                                                   5e-6, 20e-6))
    tokens = S / cp
    qkv, out = tokens * (A + 2 * G) * D * 2, tokens * A * D * 2
    node = Group(8, 8, 1)
    a2a = (all_to_all_s(qkv, node, Link(5e-6, 100e9), Link(20e-6, 10e9))
           + all_to_all_s(out, node, Link(5e-6, 100e9), Link(20e-6, 10e9)))
    assert att.fwd_comm_s == pytest.approx(ring.fwd_comm_s + a2a)
    assert att.fwd_flops == pytest.approx(ring.fwd_flops)


def test_constraints_name_the_values() -> None:
    assert problems(8192, 32, 8, 2, CpComm.P2P) == []
    (msg,) = problems(8190, 32, 8, 2, CpComm.P2P)
    assert "8190" in msg and "2 x cp = 4" in msg
    msgs = problems(8192, 32, 8, 16, CpComm.A2A)
    assert len(msgs) == 1 and "8 key/value heads" in msgs[0] and "cp = 16" in msgs[0]
    assert problems(8192, 30, 8, 4, CpComm.A2A)[0].startswith("--cp-comm a2a")


def test_measured_attention_share_is_interpolated_in_log2_seq() -> None:
    curve = ((1024, 0.2), (4096, 0.4))
    assert fraction_at(curve, 2048, 0.9) == pytest.approx(0.3)
    assert fraction_at(curve, 512, 0.9) == 0.2 and fraction_at(curve, 1 << 20, 0.9) == 0.4
    assert fraction_at((), 2048, 0.9) == 0.9


def test_local_links_place_cp_just_outside_tp() -> None:
    assert local_links(2, 4, 8).group == Group(2, 2, 1)  # tp4 x cp2 fills one node
    assert local_links(4, 4, 8).group == Group(4, 2, 2)  # tp4 x cp4 spans two
    assert local_links(72, 1, 72).group.intra  # a GB200 NVL72 domain holds cp72


def test_every_per_token_term_of_a_block_is_split_by_cp() -> None:
    m, gpu = presets.MODELS["llama3-8b"], presets.GPUS["h100-sxm"]
    assert block_act_bytes(m, 1, cp=4) == pytest.approx(block_act_bytes(m, 1) / 4)
    one = analytic_layers(m, gpu, [1])
    four = analytic_layers(m, gpu, [1], cp=4, cp_links=local_links(4, 1, 8, gpu.fabric))
    assert four[1].per_micro_batch[1].out_bytes == one[1].per_micro_batch[1].out_bytes / 4
    assert four[1].per_micro_batch[1].fwd_s < one[1].per_micro_batch[1].fwd_s / 2
    assert four[-1].per_micro_batch[1].act_bytes == pytest.approx(
        one[-1].per_micro_batch[1].act_bytes / 4)


def test_cp_needs_flash_attention() -> None:
    m = dataclasses.replace(presets.MODELS["gpt3-1.3b"])
    with pytest.raises(ValueError, match="flash"):
        block_act_bytes(m, 1, flash_attention=False, cp=2)
