"""Context parallelism with multi-head latent attention: the K/V MLA exchanges, by hand.

Megatron-core hands Transformer Engine keys of ``qk_nope + qk_rope`` and values of
``v_head_dim`` a head (multi_latent_attention.py); its p2p ring sends them flattened
into one buffer, K then V (context_parallel.py ``AttnFuncWithCPAndKVP2P``)."""

from __future__ import annotations

import pytest

from pptune.costmodel.attention import mla_core_ops, mla_part
from pptune.costmodel.collectives import Fabric
from pptune.costmodel.context import CpComm, CpShape, local_links
from pptune.costmodel.ops import Parallel, Rates
from pptune.costmodel.presets import ModelShape

RATES = Rates(peak_flops=1e12, hbm_bytes_per_s=1e12, sm_count=4, gemm_fraction=1.0,
              attention_fraction=0.5, launch_s=0.0)
FABRIC = Fabric(ring_busbw_bytes_per_s=80e9, p2p_bytes_per_s=100e9, nic_busbw_bytes_per_s=10e9)
# h 256, 4 heads; MLA latents q 64, kv 32, rotary 16, nope 32, value 32; s 128
MLA = ModelShape("mla-small", 2, 256, 4, 4, 1024, 1024, 128, 8, True, False, "test",
                 q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32,
                 v_head_dim=32)


def cp2(comm: CpComm = CpComm.P2P) -> Parallel:
    """cp 2 inside one node of 8 (pairwise copies at 100 GB/s, 10 us a hop)."""
    return Parallel(cp=2, cp_comm=comm, cp_links=local_links(2, 1, 8, FABRIC))


def ops_by_name(comm: CpComm = CpComm.P2P) -> dict[str, object]:
    return {o.name: o for o in mla_core_ops(MLA, 1, RATES, cp2(comm))}


def test_p2p_ring_passes_mla_keys_and_values_at_their_widths() -> None:
    # a rank's 64 tokens: K 4 heads x (32 + 16) = 192 and V 4 x 32 = 128 elements a token,
    # 2 bytes each: 64 x 320 x 2 = 40,960 bytes a hop (MHA's 2 x 4 x 48 x 2 would be 49,152)
    kv = 64 * (4 * 48 + 4 * 32) * 2
    assert kv == 40_960
    ops = ops_by_name()
    fwd, bwd = ops["cp_kv"], ops["cp_kv.bwd"]
    assert fwd.hbm_bytes == kv  # cp - 1 = 1 hop
    assert bwd.hbm_bytes == 2 * kv + kv  # K/V and their gradients, then the gradients home
    # half the causal FLOPs a rank: 2 x 128^2 x (48 + 32) x 4 / 2 / 2, in two ring steps
    att = ops["flash_attn"]
    assert att.flops == 2 * 128**2 * 80 * 4 / 2 / 2 == 2_621_440
    assert att.kernels == 2
    # one hop (10 us + 40,960 B at 100 GB/s) behind the diagonal step's compute at the
    # flat share (1e12 x 0.5): exposed what outlasts it
    step_s = 2_621_440 / 2 / 0.5e12
    assert fwd.time_s == pytest.approx(10e-6 + kv / 100e9 - step_s)


def test_p2p_merges_the_v_wide_output_and_the_qk_wide_query_gradient() -> None:
    o_bytes = 64 * 4 * 32 * 2  # the rank's output: 16,384
    q_bytes = 64 * 4 * 48 * 2  # its Q and dQ: 24,576
    kv = 40_960
    ops = ops_by_name()
    # forward: zero the output, merge each of the 2 steps' partial outputs (3 o), K and V
    # into the send buffer (2 kv); backward: dQ added each step (3 q), dK/dV (5 kv)
    assert ops["cp_merge"].hbm_bytes == 2 * 3 * o_bytes + o_bytes + 2 * kv == 196_608
    assert ops["cp_merge.bwd"].hbm_bytes == 2 * (3 * q_bytes + 5 * kv) == 557_056


def test_a2a_moves_q_k_v_in_and_the_output_back_at_their_widths() -> None:
    # Ulysses over 2 ranks on a node: half of Q (4 x 48), K (4 x 48), V (4 x 32) and of
    # the output (4 x 32) of the rank's 64 tokens crosses to the other
    qkv = 64 * (4 * 48 + 4 * 48 + 4 * 32) * 2
    out = 64 * 4 * 32 * 2
    assert ops_by_name(CpComm.A2A)["cp_kv"].hbm_bytes == 0.5 * (qkv + out) == 40_960


def test_deepseek_v3_exchanges_80_mib_a_ring_hop_at_tp2_cp2() -> None:
    """DeepSeek-V3 (128 heads of K 128 + 64, V 128), tp 2, cp 2, one 4,096-token
    sequence: 64 heads on a rank, 2,048 tokens: 2,048 x 64 x 320 x 2 bytes a hop."""
    shape = CpShape(4096, 192, 64, 64, 1, 128)
    assert shape.kv_bytes(2048) == 2048 * 64 * (192 + 128) * 2 == 83_886_080


def test_the_block_prices_the_exchange_on_its_rank_share_of_tokens() -> None:
    part = mla_part(MLA, 1, RATES, cp2())
    names = [o.name for o in part.fwd]
    assert "cp_kv" in names and "cp_merge" in names
    # everything else sees s / cp tokens: the output projection's 64 rows
    proj = next(o for o in part.fwd if o.name == "attn_out")
    assert proj.flops == 2 * 64 * 128 * 256


def test_without_cp_mla_attention_is_priced_as_before() -> None:
    fwd, bwd = mla_core_ops(MLA, 1, RATES, Parallel())
    assert fwd.flops == 2 * 128**2 * 80 * 4 / 2 and fwd.kernels == 1 and bwd.kernels == 3
    assert fwd.time_s == pytest.approx(fwd.flops / 0.5e12)
