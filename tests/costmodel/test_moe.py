"""Mixture-of-experts op costs, all-to-all volume and memory per rank, derived by hand
for one small shape: h 256, 4 heads, 8 experts of width 512 (SwiGLU), top-2, s 128."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import analytic_layers, block_act_bytes, layer_params
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.dispatch import dispatch
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import Dim, Group
from pptune.costmodel.memo import ByKey
from pptune.costmodel.memory import Recompute, with_recompute
from pptune.costmodel.moe import (
    FP8_DISPATCH_BYTES,
    ExpertParallel,
    check_experts,
    moe_act_bytes,
    moe_params,
    moe_part,
    tokens_per_expert,
)
from pptune.costmodel.ops import Kind, OpCost, Parallel, Phase, Rates, phase_s
from pptune.costmodel.presets import GpuSpec, ModelShape
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import CostTable, LayerCosts, PlanRequest, PlanSpec, evaluate
from pptune.costmodel.sharding import Sharding
from pptune.costmodel.simulate import Link
from pptune.costmodel.table import stage_costs
from pptune.costs.profiles import analytic_profile, cost_table
from pptune.errors import BadInput

SMALL = ModelShape("moe-small", 2, 256, 4, 4, 1024, 1024, 128, 8, True, False, "test",
                   experts=8, top_k=2, expert_ffn=512)
# round numbers: 1 TFLOP/s, 1 TB/s, 4 SMs, GEMMs at their tile/wave share, no launch cost
RATES = Rates(peak_flops=1e12, hbm_bytes_per_s=1e12, sm_count=4, gemm_fraction=1.0,
              attention_fraction=0.5, launch_s=0.0)
PAR = Parallel()
NVLINK, NIC = Link(0.0, 1e11), Link(0.0, 1e10)


def ex(**kw: object) -> ExpertParallel:
    base = dict(intra=NVLINK, inter=NIC, etp_link=AllReduceLink(0.0, 1e11))
    return ExpertParallel(**{**base, **kw})  # type: ignore[arg-type]


def op(ops: list[OpCost], name: str) -> OpCost:
    return next(o for o in ops if o.name == name)


def test_tokens_per_expert_follow_top_k_ep_etp_and_imbalance() -> None:
    # T k r ep etp / E = 128 x 2 x 1 x 2 x 1 / 8 = 64
    assert tokens_per_expert(SMALL, 1, PAR, ex(ep=2)) == 64
    assert tokens_per_expert(SMALL, 1, PAR, ex(ep=2, etp=2)) == 128
    assert tokens_per_expert(SMALL, 1, PAR, ex(ep=2, imbalance=1.5)) == 96
    # sequence parallelism over tp 2: the rank routes 64 of the 128 tokens
    assert tokens_per_expert(SMALL, 1, Parallel(tp=2, sequence_parallel=True), ex(ep=2)) == 32


def test_expert_gemms_are_priced_at_their_per_expert_m() -> None:
    part = moe_part(SMALL, 1, RATES, PAR, ex(ep=2))
    fc1 = op(part.fwd, "expert_fc1")
    # 4 local experts of 64 x 256 by 256 x 1024 (gate and up): 2 x 64 x 1024 x 256 x 4 FLOPs;
    # best tile 128 x 256: 1 x 4 tiles an expert, 16 in 4 waves of 4 SMs -> half of each
    # wave's work is useful (m 64 of 128 rows): efficiency 0.5, as with 32 tiles of 128 x 128
    # in 8 waves, whose last writes an eighth of the 4 x 64 x 1024 output after its mainloop
    assert fc1.flops == 2 * 64 * 1024 * 256 * 4
    assert fc1.time_s == pytest.approx(134_217_728 / (1e12 * 0.5) + 2 * 64 * 1024 * 4 / 8 / 1e12)
    assert fc1.kernels == 1


def test_grouped_gemm_fills_waves_that_one_gemm_per_expert_leaves_empty() -> None:
    # fc2: 64 x 512 by 512 x 256 per expert. Alone: 2 tiles of 128 x 128 on 4 SMs, a quarter
    # of the wave useful (64 x 256 / (4 x 128 x 128)), so cuBLAS splits k = 512 in two
    # (kernels.SPLIT_K, 256 deep each): 4 blocks fill the wave, half of it useful, plus two
    # FP32 partials of 64 x 256 written and read (8 bytes each, 1 TB/s); grouped: 8 tiles
    # in 2 full waves, half useful, no split (k / 2 slices would not fill more)
    grouped = op(moe_part(SMALL, 1, RATES, PAR, ex(ep=2)).fwd, "expert_fc2")
    single = op(moe_part(SMALL, 1, RATES, PAR, ex(ep=2, grouped_gemm=False)).fwd, "expert_fc2")
    flops = 2 * 64 * 256 * 512 * 4
    out = 2 * 64 * 256  # one expert's output bytes; the last wave's share is written after it
    assert grouped.time_s == pytest.approx(flops / (1e12 * 0.5) + 4 * out / 2 / 1e12)
    assert single.time_s == pytest.approx(flops / (1e12 * 0.5) + 4 * (8 * 2 * 64 * 256 + out) / 1e12)
    assert (grouped.kernels, single.kernels) == (1, 4)


def test_router_permutation_and_activation_bytes() -> None:
    part = moe_part(SMALL, 1, RATES, PAR, ex(ep=2))
    # router GEMM 128 x 256 by 256 x 8; scores and top-k: 128 x (2E + 4E + 4E + 12k)
    assert op(part.fwd, "router").flops == 2 * 128 * 8 * 256
    assert op(part.fwd, "router_topk").hbm_bytes == 128 * (48 + 32 + 24)
    assert op(part.bwd, "router_topk.bwd").hbm_bytes == 128 * (8 + 32 + 16)
    # permute: read 128 tokens of 256 bf16, write 2 copies each
    assert op(part.fwd, "permute").hbm_bytes == 2 * 256 * 128 * 3
    assert op(part.bwd, "unpermute.bwd").hbm_bytes == 2 * 256 * 128 * 3
    # SwiGLU over 256 rows of 512: 6 and 10 bytes an element
    assert op(part.fwd, "expert_activation").hbm_bytes == 6 * 512 * 256
    assert op(part.bwd, "expert_activation.bwd").hbm_bytes == 10 * 512 * 256


def test_received_tokens_are_sorted_by_local_expert_and_back() -> None:
    # megatron-core's alltoall dispatcher, "Permutation 2": with more than one local
    # expert the received rows are reordered from [source rank][expert] to
    # [expert][source rank] before the experts and back before the combine; each pass
    # reads and writes the 256 rows (128 tokens x top-2) of 256 elements
    part = moe_part(SMALL, 1, RATES, PAR, ex(ep=2))  # 4 local experts
    bf16 = 2 * 2 * 256 * 256
    assert op(part.fwd, "sort_by_expert").hbm_bytes == bf16
    assert op(part.fwd, "unsort_by_expert").hbm_bytes == bf16
    assert op(part.bwd, "unsort_by_expert.bwd").hbm_bytes == bf16
    assert op(part.bwd, "sort_by_expert.bwd").hbm_bytes == bf16
    assert op(part.fwd, "sort_by_expert").time_s == pytest.approx(bf16 / 1e12)
    # FP8 dispatch: the forward sort moves the dispatched FP8 rows and their scales
    fp8 = moe_part(SMALL, 1, RATES, PAR, ex(ep=2, dispatch_bytes=FP8_DISPATCH_BYTES))
    assert op(fp8.fwd, "sort_by_expert").hbm_bytes == pytest.approx(
        2 * FP8_DISPATCH_BYTES * 256 * 256)
    # one local expert (ep 8): nothing to reorder
    one = moe_part(SMALL, 1, RATES, PAR, ex(ep=8))
    assert not [o for o in one.fwd + one.bwd if "sort_by_expert" in o.name]


def test_fp8_experts_cast_their_gemm_inputs_and_output_gradients() -> None:
    # Transformer Engine casts every FP8 GEMM input no norm wrote in FP8 (cast and
    # transpose: read 2, write 1 + 1 bytes an element), as in a dense MLP: the experts'
    # fc1 input (the dispatched rows, h wide) and fc2 input (the activation's output,
    # f wide) forward; the two output gradients backward (fc2's h, fc1's gate and up 2f).
    # 128 tokens x top-2 = 256 rows at ep 2, h = 256, f = 512
    par = Parallel(precision=Precision.FP8)
    rates = dataclasses.replace(RATES, fp8_peak_flops=2e12, fp8_gemm_fraction=1.0)
    part = moe_part(SMALL, 1, rates, par, ex(ep=2))
    assert op(part.fwd, "fp8_cast.expert_fc1").hbm_bytes == 4 * 256 * 256
    assert op(part.fwd, "fp8_cast.expert_fc2").hbm_bytes == 4 * 256 * 512
    assert op(part.bwd, "fp8_cast.expert.bwd").hbm_bytes == 4 * 256 * (256 + 2 * 512)
    assert op(part.bwd, "fp8_cast.expert.bwd").kernels == 2
    # an FP8 dispatch was cast before it left: the experts' fc1 input needs no cast
    fp8_dispatch = moe_part(SMALL, 1, rates, par, ex(ep=2, dispatch_bytes=FP8_DISPATCH_BYTES))
    assert not [o for o in fp8_dispatch.fwd if o.name == "fp8_cast.expert_fc1"]
    assert op(fp8_dispatch.fwd, "fp8_cast.dispatch").hbm_bytes == 4 * 256 * 256
    # BF16: no casts
    assert not [o for o in moe_part(SMALL, 1, RATES, PAR, ex(ep=2)).fwd if "fp8_cast" in o.name]


def test_dispatch_and_combine_volume_and_time_inside_a_node() -> None:
    part = moe_part(SMALL, 1, RATES, PAR, ex(ep=2))
    # each rank sends its 128 x 2 token copies of 256 bf16 elements: 131072 bytes; of them
    # the share for its one peer (1/2) crosses NVLink
    dispatch, combine = op(part.fwd, "a2a_dispatch"), op(part.fwd, "a2a_combine")
    assert dispatch.kind is combine.kind is Kind.ALL_TO_ALL
    assert dispatch.hbm_bytes == combine.hbm_bytes == 131072
    assert dispatch.time_s == pytest.approx(65536 / 1e11)
    fp8 = op(moe_part(SMALL, 1, RATES, PAR, ex(ep=2, dispatch_bytes=FP8_DISPATCH_BYTES)).fwd,
             "a2a_dispatch")
    assert fp8.hbm_bytes == 128 * 2 * 256 * (1 + 4 / 128)  # one fp32 scale per 128
    # the backward all-to-alls carry BF16 gradients
    assert op(part.bwd, "a2a_dispatch.bwd").hbm_bytes == 131072


def test_dispatch_across_nodes() -> None:
    # ep 16 over two nodes of 8: 7/16 of the bytes over NVLink, 8/16 through the NIC at once
    one = 65536.0
    nbytes, seconds = dispatch(one, SMALL, ex(ep=16))
    assert nbytes == 2 * one
    assert seconds == pytest.approx(8 / 16 * 2 * one / 1e10)
    assert ex(ep=16).group(Dim.EP) == Group(16, 8, 2)


def test_expert_tensor_parallel_collectives() -> None:
    part = moe_part(SMALL, 1, RATES, PAR, ex(ep=2, etp=2))
    # the 256 dispatched rows of each of the 2 etp ranks gathered: 512 rows x 256 x 2 bytes,
    # (etp - 1)/etp of it moves
    gather = op(part.fwd, "etp_gather")
    assert gather.hbm_bytes == 2 * 256 * 512
    assert gather.time_s == pytest.approx(0.5 * 262144 / 1e11)
    # the expert FFN split in two: fc1 128 tokens x 256 -> 2 x 256 columns
    assert op(part.fwd, "expert_fc1").flops == 2 * 128 * 512 * 256 * 4
    assert op(moe_part(SMALL, 1, RATES, PAR, ex(ep=2)).fwd, "etp_gather").time_s == 0.0


def test_layer_keeps_the_all_to_all_apart_and_the_stage_streams_it() -> None:
    gpu = GpuSpec("test", 1e12, 80e9, 1e12 / 0.9, 1e11, 1e10, "test", sm_count=4,
                  gemm_fraction=1.0, hbm_fraction=0.9, attention_fraction=0.5, launch_s=0.0)
    layers = analytic_layers(SMALL, gpu, [1], experts=ex(ep=2))
    block = layers[1].per_micro_batch[1]
    part = moe_part(SMALL, 1, RATES, PAR, ex(ep=2))
    a2a = 65536 / 1e11
    assert block.fwd_a2a_s == pytest.approx(2 * a2a)
    assert block.bwd_a2a_s == pytest.approx(2 * a2a)
    moe_fwd = [o for o in part.fwd if o.kind is not Kind.ALL_TO_ALL]
    assert phase_s(moe_fwd, Phase.F, RATES) < block.fwd_s  # attention and norms besides
    c = LayerCosts([1.0, 2.0], [3.0, 4.0], [0.0, 0.0], [0.0, 0.0], [1.0, 1.0],
                   fwd_a2a_s=[0.0, 0.5], bwd_a2a_s=[0.0, 0.25])
    free = AllReduceLink(0.0, 1e30)
    table = CostTable(["a", "b"], [0.0, 0.0], 2, {1: c}, 128, 1e12, Link(), Link(), free, free)
    # the stage's all-to-alls go to its communication stream (an F&B pair can
    # hide them), or into its compute for a runtime that does not overlap them
    st = stage_costs(table, 1, [2])[0]
    assert (st.fwd_s, st.bwd_s, st.fwd_comm_s, st.bwd_comm_s) == (3.0, 7.0, 0.5, 0.25)
    st = stage_costs(table, 1, [2], a2a_stream=False)[0]
    assert (st.fwd_s, st.bwd_s, st.fwd_comm_s, st.bwd_comm_s) == (3.5, 7.25, 0.0, 0.0)
    # a recomputed layer dispatches its tokens again before its backward
    rc = with_recompute(dataclasses.replace(table, names=["block0", "block1"]), Recompute.FULL)
    assert list(rc.by_mb[1].bwd_a2a_s) == [0.0, 0.75]


def test_moe_activation_bytes_per_rank() -> None:
    # fp32 scores 4 x 8 x 128; 256 rows: expert inputs 2 x 256, fc1 output (gate, up)
    # 2 x 1024 and the activation output 2 x 512 a row, fp32 routing weights 4 a row
    moe = 4096 + 2 * 256 * 256 + 6 * 512 * 256 + 4 * 256
    assert moe_act_bytes(SMALL, 1, PAR, ex(ep=2)) == moe == 922_624
    # moe_act recomputation: the activation output (2 x 512 a row) is not kept
    assert moe_act_bytes(SMALL, 1, PAR, ex(ep=2), recompute_act=True) == moe - 2 * 512 * 256
    # the block: norm and sub-layer inputs (8 bytes a token x h) and attention's Q K V and
    # projection input (8), plus the MoE part instead of a dense MLP's
    assert block_act_bytes(SMALL, 1, mlp_bytes=moe) == 16 * 128 * 256 + moe
    # etp 2: the rank holds the gathered 512 rows at half the width
    assert moe_act_bytes(SMALL, 1, PAR, ex(ep=2, etp=2)) == (
        4096 + 2 * 256 * 512 + 6 * 256 * 512 + 4 * 512)


def test_moe_activation_bytes_keep_fp8_gemm_inputs_in_fp8() -> None:
    # Transformer Engine saves an FP8 GEMM's input as its FP8 cast: fc1's input (the
    # permuted rows, 1 byte) and fc2's (the activation output, 1 byte a column); the
    # scores, fc1's output (the SwiGLU's input) and the routing weights stay as they are
    fp8 = Parallel(precision=Precision.FP8)
    assert moe_act_bytes(SMALL, 1, fp8, ex(ep=2)) == (
        4096 + 1 * 256 * 256 + (4 + 1) * 512 * 256 + 4 * 256) == 726_016
    # MXFP8: one byte and one 8-bit scale per 32 elements
    mx = Parallel(precision=Precision.MXFP8)
    assert moe_act_bytes(SMALL, 1, mx, ex(ep=2)) == pytest.approx(
        4096 + (1 + 1 / 32) * 256 * 256 + (4 + 1 + 1 / 32) * 512 * 256 + 4 * 256)
    shared = dataclasses.replace(SMALL, shared_ffn=512)
    # shared experts: gate and up (the fused SwiGLU's input) at 2, the product (fc2's
    # input) at 1
    assert (moe_act_bytes(shared, 1, fp8, ex(ep=2)) - moe_act_bytes(SMALL, 1, fp8, ex(ep=2))
            == (6 - 1) * 512 * 128)


def test_expert_parameters_are_split_by_ep_and_etp_not_tp() -> None:
    # router 256 x 8 (dense, whole on every tp rank); 8 / ep experts of 3 x 256 x 512 / etp
    assert moe_params(SMALL, 2, ex(ep=2)) == (2048.0, 4 * 3 * 256 * 512)
    assert moe_params(SMALL, 2, ex(ep=4, etp=2)) == (2048.0, 2 * 3 * 256 * 512 / 2)
    shared = dataclasses.replace(SMALL, shared_ffn=512)
    assert moe_params(shared, 2, ex(ep=2))[0] == 2048 + 3 * 256 * 512 / 2
    # a block: attention 256 x 768 + 256 x 256, two RMSNorms, the MoE part
    assert layer_params(SMALL, 0, 1, ex(ep=2)) == (262144 + 512 + 2048, 1_572_864)


def test_state_memory_per_rank_shards_experts_over_edp() -> None:
    prof = analytic_profile(SMALL, "h100-sxm", [1], experts=ExpertParallel(ep=2))
    table = cost_table(prof)
    assert list(table.expert_param_bytes) == [0.0, 2 * 1_572_864, 2 * 1_572_864, 0.0]
    req = PlanRequest(gpus=4, global_batch=4, cost_keys=(CostKey(ep=2),), reserve_bytes=0.0)
    dense = 262144 + 2 * (262144 + 512 + 2048) + (262144 + 256)  # embedding, blocks, head
    expert = 2 * 1_572_864
    for sharding, per_dense, per_expert in [(Sharding.ZERO1, 6 + 12 / 4, 6 + 12 / 2),
                                            (Sharding.NONE, 18, 18)]:
        spec = PlanSpec(Schedule.ONE_F_ONE_B, 1, 1, 1, (4,), sharding=sharding,
                        key=CostKey(ep=2))
        plan = evaluate(table, req, spec)
        # dp 4 for dense weights; edp = tp x cp x dp / (ep x etp) = 4 / 2 = 2 for experts
        assert plan.memory[0].state_bytes == pytest.approx(
            dense * per_dense + expert * per_expert)


def test_experts_the_frameworks_cannot_place_are_refused() -> None:
    with pytest.raises(ValueError, match="ep 3 must divide the 8 routed experts"):
        check_experts(SMALL, ExpertParallel(ep=3))
    with pytest.raises(ValueError, match="etp 3 must divide the expert FFN width 512"):
        check_experts(SMALL, ExpertParallel(etp=3))
    with pytest.raises(ValueError, match=r"at least 1\.0"):
        ExpertParallel(imbalance=0.5)
    with pytest.raises(BadInput, match="--ep 3 does not divide the 8 routed experts"):
        analytic_profile(SMALL, "h100-sxm", [1], experts=ExpertParallel(ep=3))


def test_expert_gradients_reduce_over_the_expert_data_parallel_group() -> None:
    # one layer of 1e6 dense and 3e6 expert parameters (bf16 bytes), 16 GPUs, ep 4: dense
    # gradients all-reduce over dp 16, expert gradients over edp = 16 / 4 = 4, one after
    # the other after the backward (no overlap), fp32 on the wire
    from pptune.costmodel.comm import allreduce_s
    from pptune.costmodel.evaluate import stage_layout

    c = LayerCosts([1.0], [1.0], [0.0], [0.0], [0.0])
    link = AllReduceLink(1e-5, 1e10)
    table = CostTable(["block0"], [8e6], 2, {1: c}, 128, 1e12, Link(), Link(), link, link,
                      expert_param_bytes=[6e6])
    key = CostKey(ep=4)
    req = PlanRequest(gpus=16, global_batch=16, cost_keys=(key,), overlap_grad_reduce=False)
    spec = PlanSpec(Schedule.ONE_F_ONE_B, 1, 1, 1, (1,), key=key)
    tail = stage_layout(table, req, spec).comm[0].tail_s
    assert tail == pytest.approx(allreduce_s(1e6 * 4, 16, link) + allreduce_s(3e6 * 4, 4, link))


def test_eager_swiglu_experts_keep_and_move_the_silu_output() -> None:
    from pptune.costmodel.rates import Swiglu

    eager = Parallel(swiglu=Swiglu.EAGER)
    # 256 rows of width 512: the SiLU's output (2 bytes a column) kept besides what
    # the fused activation keeps
    assert moe_act_bytes(SMALL, 1, eager, ex(ep=2)) == 922_624 + 2 * 512 * 256
    part = moe_part(SMALL, 1, RATES, eager, ex(ep=2))
    # silu then mul: 10 bytes a column forward (2 kernels), 18 backward (3 kernels)
    assert op(part.fwd, "expert_activation").hbm_bytes == 10 * 512 * 256
    assert op(part.bwd, "expert_activation.bwd").hbm_bytes == 18 * 512 * 256
    assert (op(part.fwd, "expert_activation").kernels,
            op(part.bwd, "expert_activation.bwd").kernels) == (2, 3)
    # shared experts are a dense MLP: the same 2 bytes a token and column more
    shared = dataclasses.replace(SMALL, shared_ffn=512)
    assert moe_act_bytes(shared, 1, eager, ex(ep=2)) - moe_act_bytes(shared, 1, PAR, ex(ep=2)) \
        == 2 * 512 * 256 + 2 * 512 * 128


@pytest.mark.parametrize("model", ["moe-small", "deepseek-v3"])
def test_layers_priced_with_a_shared_memo_are_those_priced_alone(model: str) -> None:
    """A job's cost tables share the layers they price alike (memo.ByKey): in any
    order of expert parallelism and recomputed modules, each call's layers are the
    ones it prices on its own (DeepSeek-V3: dense blocks, MLA, an MTP module)."""
    shape, gpu = presets.MODELS[model], presets.GPUS["h100-sxm"]
    memo = ByKey()
    for ep in (1, 2, 8, 2):
        for modules in (frozenset(), frozenset({"moe_act", "mla_up_proj"})):
            kw = dict(tp=2, experts=ex(ep=ep), recompute_modules=modules)
            alone = analytic_layers(shape, gpu, [1, 2], **kw)  # type: ignore[arg-type]
            assert analytic_layers(shape, gpu, [1, 2], shared=memo, **kw) == alone  # type: ignore[arg-type]
