"""torchtitan's per-op selective checkpointing on MoE and MLA blocks (op_sac.py), by hand.

The small block of test_op_sac.py (h = 64, 4 query heads and 2 KV heads of 16, 32
tokens a micro-batch) with 4 routed experts of width 32 (top 2) and shared experts of
width 64, or with multi-head latent attention (query latent 16, KV latent 16, rotary 8,
no-rotary 8, value 16 per head). torchtitan's policy counts the block's ``aten.mm``
calls in forward order and saves the odd ones; the router's gate is force-recomputed
outside the count (``per_op_sac_force_recompute_mm_shapes_by_fqns``, default
``moe.router.gate``); the routed experts' grouped GEMMs (``torch._grouped_mm``) are not
in the save list, so they rerun; the expert-parallel all-to-alls' outputs are saved.
"""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import op_sac, presets
from pptune.costmodel.analytic import analytic_layers
from pptune.costmodel.kernels import Phase, gemm, phase_s
from pptune.costmodel.models import ModelShape
from pptune.costmodel.moe import ExpertParallel, moe_part
from pptune.costmodel.ops import Kind, block_ops
from pptune.costmodel.rates import Parallel, Rates

SAC = ModelShape("sac", 2, 64, 4, 2, 128, 256, 32, 8, True, False, "test")
MOE = dataclasses.replace(SAC, name="sac-moe", experts=4, top_k=2, expert_ffn=32,
                          shared_ffn=64)
MLA = dataclasses.replace(SAC, name="sac-mla", q_lora_rank=16, kv_lora_rank=16,
                          qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16)
H100 = presets.GPUS["h100-sxm"]
SAC_ON = frozenset({op_sac.OP_SAC})


def test_a_moe_block_counts_the_attention_and_shared_expert_mms_only() -> None:
    # the router's gate is outside the count, the grouped expert GEMMs are not mms
    assert [n for n, *_ in op_sac.block_mms(MOE, 1, moe=True)] == [
        "wq", "wk", "wv", "wo", "w1", "w3", "w2"]
    assert [n for n, *_ in op_sac.block_mms(
        dataclasses.replace(MOE, shared_ffn=0), 1, moe=True)] == ["wq", "wk", "wv", "wo"]
    # bytes at ep 1: input 2 h T, attention output 2 q T, lse 4 a T, wq 2 q T, wv 2 kv T,
    # the shared w1 2 s T and w2 2 h T (T = 32, h = q = s = 64, kv = 32, a = 4)
    want = 2 * 64 * 32 * 5 + 2 * 32 * 32 + 4 * 4 * 32
    assert want == 23040
    assert op_sac.saved_bytes(MOE, 1, Parallel(), moe=True) == want


def test_expert_parallelism_keeps_both_all_to_all_outputs() -> None:
    # 32 tokens x top 2 = 64 rows received by the dispatch and by the combine, 2 h bytes each
    ex = ExpertParallel(ep=2)
    assert op_sac.saved_bytes(MOE, 1, Parallel(), moe=True, ex=ex) == 23040 + 2 * 2 * 64 * 64
    # an FP8 dispatch keeps its rows at 1 byte and an fp32 scale per 128 elements
    fp8 = ExpertParallel(ep=2, dispatch_bytes=1 + 4 / 128)
    assert op_sac.saved_bytes(MOE, 1, Parallel(), moe=True, ex=fp8) == pytest.approx(
        23040 + (1 + 4 / 128) * 64 * 64 + 2 * 64 * 64)


def test_mla_counts_its_down_up_and_output_projections() -> None:
    assert [n for n, *_ in op_sac.block_mms(MLA, 1)] == [
        "wq_a", "wq_b", "wkv_a", "wkv_b", "wo", "w1", "w3", "w2"]
    assert [n for n, *_ in op_sac.block_mms(dataclasses.replace(MLA, q_lora_rank=0), 1)][:1] \
        == ["wq"]
    # input 2 h T, attention output 2 (a v) T, lse 4 a T, saved wq_a 2 q_lora T,
    # wkv_a 2 (kv_lora + rope) T, wo 2 h T, w3 2 f T
    want = (2 * 64 * 32 + 2 * 64 * 32 + 4 * 4 * 32 + 2 * 16 * 32 + 2 * 24 * 32
            + 2 * 64 * 32 + 2 * 128 * 32)
    assert want == 23552
    assert op_sac.saved_bytes(MLA, 1, Parallel()) == want
    # tensor parallelism splits the up projections and the heads, not the down ones
    # (torchtitan runs wq_a and wkv_a unsplit on the gathered tokens): input 2 h T/2,
    # attention output 2 (a v / 2) T, lse 4 (a/2) T, wq_a, wkv_a whole, wo's partial sum,
    # w3 2 (f/2) T, two reduce-scatter outputs 2 x 2 h T/2
    par = Parallel(tp=2, sequence_parallel=True)
    assert op_sac.saved_bytes(MLA, 1, par) == 2048 + 2048 + 256 + 1024 + 1536 + 3 * 4096


def _block(shape: ModelShape, modules: frozenset[str],
           ex: ExpertParallel | None = None) -> tuple[float, float, float]:
    layers = analytic_layers(shape, H100, [1], recompute_modules=modules, experts=ex)
    spec = layers[1].per_micro_batch[1]
    return spec.fwd_s, spec.bwd_s, spec.act_bytes


def test_a_moe_block_reruns_its_experts_but_not_its_all_to_alls() -> None:
    rates = Rates.of(H100)
    ex = ExpertParallel(ep=2)
    f0, b0, _ = _block(MOE, frozenset(), ex)
    f1, b1, act = _block(MOE, SAC_ON, ex)
    assert f1 == f0 and act == 23040 + 16384
    ops = block_ops(MOE, 1, rates, Parallel(), mlp=moe_part(MOE, 1, rates, Parallel(), ex))
    fwd = [o for o in ops if o.phase is Phase.F]
    # rerun: every forward memory op, the router's gate and the expert GEMMs
    memory = [o for o in fwd if o.kind is Kind.MEMORY]
    experts = [o for o in fwd if o.name in ("router", "expert_fc1", "expert_fc2")]
    assert len(experts) == 3
    assert [o.name for o in fwd if o.kind is Kind.ALL_TO_ALL] == ["a2a_dispatch", "a2a_combine"]
    # and the even mms: wk (32 x 32 by 64), wo (32 x 64 by 64), the shared w3 (32 x 64 by 64)
    mms = [gemm("wk", Phase.F, 32, 32, 64, rates), gemm("wo", Phase.F, 32, 64, 64, rates),
           gemm("w3", Phase.F, 32, 64, 64, rates)]
    assert b1 - b0 == pytest.approx(phase_s(memory + experts + mms, Phase.F, rates))


def test_an_mla_block_reruns_its_even_projections() -> None:
    rates = Rates.of(H100)
    f0, b0, _ = _block(MLA, frozenset())
    f1, b1, act = _block(MLA, SAC_ON)
    assert f1 == f0 and act == 23552
    fwd = [o for o in block_ops(MLA, 1, rates, Parallel(), op_sac.attention(MLA, 1, rates,
                                                                             Parallel()))
           if o.phase is Phase.F and o.kind is Kind.MEMORY]
    # wq_b (32 x 64 by 16), wkv_b (32 x 96 by 16), w1 (32 x 128 by 64), w2 (32 x 64 by 128)
    mms = [gemm("wq_b", Phase.F, 32, 64, 16, rates), gemm("wkv_b", Phase.F, 32, 96, 16, rates),
           gemm("w1", Phase.F, 32, 128, 64, rates), gemm("w2", Phase.F, 32, 64, 128, rates)]
    assert b1 - b0 == pytest.approx(phase_s(fwd + mms, Phase.F, rates))


def test_dense_blocks_price_as_before() -> None:
    # the small dense block of test_op_sac.py: 27,136 bytes kept, the same rerun
    assert _block(SAC, SAC_ON)[2] == 27136


def test_gpt_oss_style_attention_is_not_priced() -> None:
    # biased projections run as aten.addmm (outside torchtitan 0.2.2's save list and
    # its mm count) and flex attention with sinks: a reason, not a price
    assert op_sac.unpriced(presets.MODELS["gpt-oss-120b"])
    assert op_sac.unpriced(MOE) is None and op_sac.unpriced(MLA) is None
