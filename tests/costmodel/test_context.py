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
    hierarchical_sizes,
    local_links,
    problems,
)
from pptune.costmodel.layout import Group
from pptune.costmodel.rates import Rates
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
    # cp = 16 on 2 nodes of 8, 8 query and 8 KV heads: a2a over the 8 on a node, a
    # 2-step ring across
    cp, mha = 16, dataclasses.replace(SHAPE, kv_heads=8)
    lk = links(cp, 8)
    att = attention(mha, cp, CpComm.A2A_P2P, RATES, lk)
    inner, outer = 8, 2
    ring_shape = CpShape(S, D, A // inner, 8 // inner, 1)  # one query and one KV head
    ring = attention(ring_shape, outer, CpComm.P2P, RATES, CpLinks(Group(2, 1, 2), FABRIC,
                                                                   5e-6, 20e-6))
    tokens = S / cp
    qkv, out = tokens * (A + 2 * 8) * D * 2, tokens * A * D * 2
    node = Group(8, 8, 1)
    a2a = (all_to_all_s(qkv, node, Link(5e-6, 100e9), Link(20e-6, 10e9))
           + all_to_all_s(out, node, Link(5e-6, 100e9), Link(20e-6, 10e9)))
    assert att.fwd_comm_s == pytest.approx(ring.fwd_comm_s + a2a)
    assert att.fwd_flops == pytest.approx(ring.fwd_flops)


def test_hierarchical_all_to_all_takes_no_more_ranks_than_the_heads() -> None:
    """The all-to-all splits each rank's heads (as Ulysses does): 2 KV heads take an
    inner group of 2 however many of the group share a node, and the ring runs over
    the other 8, across the nodes (its slowest hop: one NIC)."""
    assert hierarchical_sizes(16, Group(16, 8, 2), 8, 2) == (2, 8)
    assert hierarchical_sizes(16, Group(16, 8, 2), 8, 8) == (8, 2)
    assert hierarchical_sizes(8, Group(8, 8, 1), 32, 4) == (4, 2)  # Qwen3-30B-A3B, tp 1
    assert hierarchical_sizes(16, Group(16, 1, 16), 8, 8) == (1, 16)  # one a node: a ring
    cp = 16
    att = attention(SHAPE, cp, CpComm.A2A_P2P, RATES, links(cp, 8))
    ring = attention(CpShape(S, D, A // 2, G // 2, 1), 8, CpComm.P2P, RATES,
                     CpLinks(Group(8, 4, 2), FABRIC, 5e-6, 20e-6))
    tokens = S / cp
    qkv, out = tokens * (A + 2 * G) * D * 2, tokens * A * D * 2
    # the pair on one node swap half of each tensor over NVLink
    a2a = 2 * 5e-6 + 0.5 * (qkv + out) / 100e9
    assert att.fwd_comm_s == pytest.approx(ring.fwd_comm_s + a2a)
    assert att.bwd_comm_s == pytest.approx(ring.bwd_comm_s + a2a)
    # inside one node the ring of 4 hops over NVLink
    cp = 8
    att = attention(SHAPE, cp, CpComm.A2A_P2P, RATES, links(cp, 8))
    ring = attention(CpShape(S, D, A // 2, G // 2, 1), 4, CpComm.P2P, RATES,
                     CpLinks(Group(4, 4, 1), FABRIC, 5e-6, 20e-6))
    tokens = S / cp
    qkv, out = tokens * (A + 2 * G) * D * 2, tokens * A * D * 2
    assert att.fwd_comm_s == pytest.approx(ring.fwd_comm_s + 2 * 5e-6
                                           + 0.5 * (qkv + out) / 100e9)


def test_constraints_name_the_values() -> None:
    assert problems(8192, 32, 8, 2, CpComm.P2P) == []
    (msg,) = problems(8190, 32, 8, 2, CpComm.P2P)
    assert "8190" in msg and "2 x cp = 4" in msg
    msgs = problems(8192, 32, 8, 16, CpComm.A2A)
    assert len(msgs) == 1 and "8 key/value heads" in msgs[0] and "cp = 16" in msgs[0]
    assert problems(8192, 30, 8, 4, CpComm.A2A)[0].startswith("--cp-comm a2a")


def test_an_odd_sequence_takes_no_cp_and_says_so() -> None:
    """131,073 tokens: 2 x cp chunks need an even length whatever cp is, so the message
    names no cp to choose (the old one said "choose a cp that divides 65536")."""
    for cp in (2, 8):
        (msg,) = problems(131073, 32, 8, cp, CpComm.P2P)
        assert msg == ("sequence 131073 is odd: context parallelism splits it into 2 x cp "
                       "chunks (causal load balancing), which no cp above 1 divides; use an "
                       "even sequence length or cp 1")
    assert problems(131073, 32, 8, 1, CpComm.P2P) == []
    # an even sequence that 2 x cp does not divide still names the cps that do:
    # 131,074 / 2 = 65,537
    (msg,) = problems(131074, 32, 8, 2, CpComm.P2P)
    assert "not divisible by 2 x cp = 4" in msg and "divides 65537" in msg


def test_a2a_names_the_heads_a_tensor_parallel_rank_holds() -> None:
    """Llama 3.1 405B (128 query, 8 KV heads) at tp 8 holds 16 and 1 a rank."""
    (msg,) = problems(131072, 16, 1, 16, CpComm.A2A, tp=8)
    assert msg == ("--cp-comm a2a splits heads over cp: 1 key/value head per tensor-parallel "
                   "rank (8 / tp 8) is not divisible by cp = 16; use p2p or a2a+p2p")
    (msg,) = problems(131072, 128, 8, 16, CpComm.A2A, tp=None)
    assert "the model's 8 key/value heads are not divisible by cp = 16" in msg
    (msg,) = problems(131072, 32, 4, 8, CpComm.A2A, tp=2)
    assert "4 key/value heads per tensor-parallel rank (8 / tp 2) are not divisible" in msg
    # Llama 2 7B (32 heads, no GQA) at tp 2, cp 32: both kinds, one reason
    (msg,) = problems(1048576, 16, 16, 32, CpComm.A2A, tp=2)
    assert msg == ("--cp-comm a2a splits heads over cp: 16 query heads per tensor-parallel "
                   "rank (32 / tp 2) are not divisible by cp = 32, nor are 16 key/value "
                   "heads; use p2p or a2a+p2p")


def test_measured_attention_share_is_interpolated_in_log2_seq() -> None:
    curve = ((1024, 0.2), (4096, 0.4))
    assert fraction_at(curve, 2048, 0.9) == pytest.approx(0.3)
    assert fraction_at(curve, 512, 0.9) == 0.2 and fraction_at(curve, 1 << 20, 0.9) == 0.4
    assert fraction_at((), 2048, 0.9) == 0.9


def test_cudnn_attention_runs_at_its_measured_forward_and_backward_rates() -> None:
    """FlashAttention-3 paper's cuDNN figures (H100, head dim 128): at 8k tokens without the
    mask, forward 600 and backward 518 TFLOP/s; the backward does 2.5x the forward's FLOPs,
    so the pair runs at 3.5 / (1/600 + 2.5/518). With the mask at 4k: forward 518, the
    backward's 499 times the mask's cost to the forward (518 / 609)."""
    h100 = presets.GPUS["h100-sxm"]
    cudnn = Rates.of(h100.with_attention_kernel("cudnn")).attention()
    full_8k = 3.5 / (1 / 600 + 2.5 / 518)  # 539.0 TFLOP/s
    assert cudnn.rate(8192, causal=False) == pytest.approx(full_8k * 1e12, rel=1e-9)
    causal_4k = 3.5 / (1 / 518 + 2.5 / (499 * 518 / 609))  # 447.5
    assert cudnn.rate(4096, causal=True) == pytest.approx(causal_4k * 1e12, rel=1e-9)
    # FlashAttention-2's curve (the default) at the same lengths: 335 and 294 TFLOP/s
    flash = Rates.of(h100).attention()
    assert flash.rate(8192, causal=False) == pytest.approx(335e12, rel=1e-9)
    assert cudnn.rate(4096, causal=True) / flash.rate(4096, causal=True) == pytest.approx(
        causal_4k / 294, rel=1e-9)
    # where cuDNN's rates are not measured (A100), the GPU is priced as flash attention
    a100 = presets.GPUS["a100-80gb"]
    assert a100.with_attention_kernel("cudnn") is a100
    assert h100.with_attention_kernel("flash") is h100


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


def test_p2p_merges_each_steps_output_and_gradients() -> None:
    # cp = 4: a rank's Q (and O, dQ) is 2048 tokens x 8 heads x 128 x 2 bytes = 4 MiB, its K/V
    # 2 MiB. Forward: concatenate K and V (read, write: 2 kv), zero O (q), merge 4 partial
    # outputs (read both, write one: 3 q each); backward: 4 x (add dQ: 3 q; concatenate dK,
    # dV: 2 kv; add them into the travelling buffer: 3 kv)
    cp = 4
    att = attention(SHAPE, cp, CpComm.P2P, RATES, links(cp, 4))
    q = 2048 * 8 * 128 * 2
    kv = kv_bytes(cp)
    assert att.fwd_merge_bytes == 2 * kv + q + 4 * 3 * q
    assert att.bwd_merge_bytes == 4 * (3 * q + 5 * kv)
    assert attention(SHAPE, 1, CpComm.P2P, RATES, None).fwd_merge_bytes == 0.0


def test_the_merge_kernels_run_at_the_hbm_rate_in_the_blocks_ops() -> None:
    # llama3-8b, 8192 tokens over cp = 2 in one node: a rank's Q (and O, dQ) is 4096 tokens x
    # 32 heads x 128 x 2 bytes = 32 MiB, its K/V 2 x 4096 x 8 x 128 x 2 = 16 MiB. Forward:
    # 2 kv + q + 2 x 3 q = 256 MiB in cp + 2 = 4 kernels; backward: 2 x (3 q + 5 kv) = 352 MiB
    # in 3 cp = 6; each at the achieved HBM bandwidth
    from pptune.costmodel.ops import Parallel, Rates, block_ops

    m, gpu = presets.MODELS["llama3-8b"], presets.GPUS["h100-sxm"]
    rates = Rates.of(gpu)
    par = Parallel(cp=2, cp_links=local_links(2, 1, 8, gpu.fabric))
    ops = {o.name: o for o in block_ops(m, 1, rates, par)}
    mib = 2.0**20
    q, kv = 32 * mib, 16 * mib
    fwd, bwd = ops["cp_merge"], ops["cp_merge.bwd"]
    assert (fwd.hbm_bytes, fwd.kernels) == (2 * kv + q + 2 * 3 * q, 4)
    assert (bwd.hbm_bytes, bwd.kernels) == (2 * (3 * q + 5 * kv), 6)
    assert fwd.time_s == pytest.approx(256 * mib / (gpu.hbm_bytes_per_s * gpu.hbm_fraction))
    assert bwd.time_s == pytest.approx(352 * mib / (gpu.hbm_bytes_per_s * gpu.hbm_fraction))
    # the all-gather and Ulysses methods run attention whole: no per-step merge
    gathered = block_ops(m, 1, rates, dataclasses.replace(par, cp_comm=CpComm.ALL_GATHER))
    assert not [o for o in gathered if o.name.startswith("cp_merge")]
