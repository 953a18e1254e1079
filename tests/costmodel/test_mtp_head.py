"""Where a multi-token-prediction module's output head runs: megatron-core 0.16.1 passes
the main and the MTP hidden states on together (multi_token_prediction.py
``MultiTokenPredictionBlock.forward`` concatenates them) and runs the shared output
layer and the cross-entropy of every MTP layer on the post-process stage, the loss
``L`` (gpt_model.py ``_postprocess``). Hand-derived on a round-number GPU."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import AnalyticLayer, analytic_layers
from pptune.costmodel.evaluate import evaluate
from pptune.costmodel.records import PlanRequest, PlanSpec
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import Recompute, Sharding
from pptune.costmodel.table import stage_costs
from pptune.costs.profiles import analytic_profile, cost_table

# peak 100 TFLOP/s, half of it for large GEMMs, 1 TB/s HBM, 4 SMs, 1 us a kernel
GPU = dataclasses.replace(
    presets.GPUS["a100-80gb"], peak_flops=100e12, hbm_bytes_per_s=1e12, hbm_fraction=1.0,
    sm_count=4, gemm_fraction=0.5, attention_fraction=0.5, launch_s=1e-6,
)
# two SwiGLU blocks and one MTP module: h 1024, 8 heads, FFN 4096, vocabulary 4096, s 512
TINY = presets.ModelShape("mtp-tiny", 2, 1024, 8, 8, 4096, 4096, 512, 8, True, False,
                          "test", mtp_layers=1)
H, S, V = 1024, 512, 4096
HIDDEN = 2 * S * H  # one BF16 hidden state of the micro-batch: 1,048,576 bytes
LOGITS = 4 * S * V  # its FP32 logits: 8,388,608 bytes

# One MTP head, forward: the LM head GEMM 512 x 4096 x 1024, 4.29 GFLOP at 50 TFLOP/s
# (128 x 128 tiles: 128 of them fill 32 waves of 4 SMs), plus the last wave's output
# written after its mainloop (2 bytes x 512 x 4096 / 32 at 1 TB/s), one launch; then
# the fused cross-entropy's 6 bytes a logit, four kernels.
LM_HEAD_F_S = 2 * S * V * H / 50e12 + 2 * S * V / 32 / 1e12 + 1e-6  # 87.030 us
CE_F_S = 6 * S * V / 1e12 + 4e-6  # 16.583 us
MTP_HEAD_F_S = LM_HEAD_F_S + CE_F_S  # 103.613 us
# The MTP module's own forward besides its block: the embedding gather (4 bytes a token
# x h, one kernel), the two norms (4h each, two kernels), the projection 2h -> h
# (2.15 GFLOP at 50 TFLOP/s; 128 x 128 tiles: 32 in 8 waves, the last writing an eighth
# of the output) and its final norm (4h, one kernel)
MTP_OWN_F_S = (4 * H * S / 1e12 + 1e-6) + (8 * H * S / 1e12 + 2e-6) + (
    2 * S * H * 2 * H / 50e12 + 2 * S * H / 8 / 1e12 + 1e-6) + (4 * H * S / 1e12 + 1e-6)


def _layers(shape: presets.ModelShape) -> dict[str, AnalyticLayer]:
    return {layer.name: layer for layer in analytic_layers(shape, GPU, [1])}


def test_the_mtp_head_runs_on_the_head_not_on_the_mtp_layer() -> None:
    assert MTP_HEAD_F_S == pytest.approx(103.613e-6, abs=1e-9)
    assert MTP_OWN_F_S == pytest.approx(56.469e-6, abs=1e-9)
    layers = _layers(TINY)
    assert list(layers) == ["embedding", "block0", "block1", "mtp0", "head"]
    without = _layers(dataclasses.replace(TINY, mtp_layers=0))
    block, mtp, head = (layers[n].per_micro_batch[1] for n in ("block1", "mtp0", "head"))
    main_head = without["head"].per_micro_batch[1]
    # the MTP layer: its block and its own ops, no LM head and no loss
    assert mtp.fwd_s - block.fwd_s == pytest.approx(MTP_OWN_F_S, rel=1e-12)
    # the head: the main model's head and the MTP module's LM head and loss
    assert head.fwd_s - main_head.fwd_s == pytest.approx(MTP_HEAD_F_S, rel=1e-12)
    # kept for backward: the MTP layer its block's, three norm inputs and the 2h
    # projection input; the head its LM head input and FP32 logits besides the main's
    assert mtp.act_bytes - block.act_bytes == 3 * HIDDEN + 2 * HIDDEN
    assert main_head.act_bytes == 2 * HIDDEN + LOGITS
    assert head.act_bytes - main_head.act_bytes == HIDDEN + LOGITS
    # what each sends on: the MTP layer the main and its own hidden state
    assert (block.out_bytes, mtp.out_bytes, head.out_bytes) == (HIDDEN, 2 * HIDDEN, 4.0)


def test_every_layer_after_the_first_mtp_carries_the_hidden_states_so_far() -> None:
    layers = _layers(dataclasses.replace(TINY, mtp_layers=2))
    one = _layers(TINY)
    assert [layers[n].per_micro_batch[1].out_bytes for n in ("block1", "mtp0", "mtp1")] == [
        HIDDEN, 2 * HIDDEN, 3 * HIDDEN]
    head, head_one = layers["head"].per_micro_batch[1], one["head"].per_micro_batch[1]
    assert head.fwd_s - head_one.fwd_s == pytest.approx(MTP_HEAD_F_S, rel=1e-12)
    assert head.act_bytes - head_one.act_bytes == HIDDEN + LOGITS
    # the MTP layers' own costs do not depend on how many follow
    assert layers["mtp1"].per_micro_batch[1].fwd_s == one["mtp0"].per_micro_batch[1].fwd_s


def test_under_sequence_parallelism_the_mtp_head_keeps_its_share_of_the_tokens() -> None:
    # tp 2 with sequence parallelism: the MTP stage sends each hidden state split two
    # ways; the head keeps the MTP prediction's normalised input as it came (half the
    # tokens: megatron-core's ColumnParallelLinear saves it before its all-gather) and its
    # half of the vocabulary's FP32 logits
    par = {"tp": 2, "sequence_parallel": True}
    layers = {x.name: x.per_micro_batch[1] for x in analytic_layers(TINY, GPU, [1], **par)}
    main_head = analytic_layers(dataclasses.replace(TINY, mtp_layers=0), GPU, [1],
                                **par)[-1].per_micro_batch[1]
    assert (layers["block1"].out_bytes, layers["mtp0"].out_bytes) == (HIDDEN / 2, HIDDEN)
    assert layers["head"].act_bytes - main_head.act_bytes == HIDDEN / 2 + LOGITS / 2
    # its three norms' inputs (half the tokens each) and the projection's whole 2h input
    assert layers["mtp0"].act_bytes - layers["block1"].act_bytes == 3 * HIDDEN / 2 + 2 * HIDDEN


def test_mtp_and_loss_on_separate_stages() -> None:
    table = cost_table(analytic_profile(TINY, GPU, [1], efficiency=None))
    layers = _layers(TINY)
    emb, b0, b1, mtp, head = (layers[n].per_micro_batch[1] for n in layers)
    first, m_stage, l_stage = stage_costs(table, 1, [3, 1, 1])
    assert first.fwd_s == pytest.approx(emb.fwd_s + b0.fwd_s + b1.fwd_s)
    assert (m_stage.fwd_s, l_stage.fwd_s) == (mtp.fwd_s, head.fwd_s)
    assert m_stage.fwd_s == pytest.approx(b1.fwd_s + MTP_OWN_F_S, rel=1e-12)
    main_head = _layers(dataclasses.replace(TINY, mtp_layers=0))["head"].per_micro_batch[1]
    assert l_stage.fwd_s == pytest.approx(main_head.fwd_s + MTP_HEAD_F_S, rel=1e-12)
    assert m_stage.act_bytes == b1.act_bytes + 5 * HIDDEN
    assert l_stage.act_bytes == 3 * HIDDEN + 2 * LOGITS
    # the m -> L send carries two hidden states, the blocks' one
    assert (first.out_bytes, m_stage.out_bytes) == (HIDDEN, 2 * HIDDEN)
    # each rank keeps one buffer a boundary it sends or receives over
    req = PlanRequest(gpus=3, global_batch=1, tp=1, reserve_bytes=0.0)
    spec = PlanSpec(Schedule.GPIPE, 3, 1, 1, (3, 1, 1), 1, sharding=Sharding.NONE,
                    recompute=Recompute.NONE)
    plan = evaluate(table, req, spec)
    assert [d.p2p_bytes for d in plan.memory] == [HIDDEN, 3 * HIDDEN, 2 * HIDDEN]
    assert plan.memory[2].activation_bytes == 3 * HIDDEN + 2 * LOGITS


def test_mtp_and_loss_on_one_stage_cost_what_they_did() -> None:
    layers = _layers(TINY)
    table = cost_table(analytic_profile(TINY, GPU, [1], efficiency=None))
    _, last = stage_costs(table, 1, [3, 2])
    b1 = layers["block1"].per_micro_batch[1]
    main_head = _layers(dataclasses.replace(TINY, mtp_layers=0))["head"].per_micro_batch[1]
    # the same ops as when the MTP layer priced its own head: its block, its own ops,
    # its LM head and loss, and the main head
    assert last.fwd_s == pytest.approx(b1.fwd_s + MTP_OWN_F_S + MTP_HEAD_F_S
                                       + main_head.fwd_s, rel=1e-12)
    # its block's, three norm inputs, the projection's 2h input, the MTP head's LM head
    # input and logits, the main head's input, norm input and logits
    assert last.act_bytes == b1.act_bytes + 5 * HIDDEN + (HIDDEN + LOGITS) + (
        2 * HIDDEN + LOGITS)
    assert last.out_bytes == 4.0
