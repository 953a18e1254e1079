"""torchtitan's per-op selective checkpointing (op_sac.py), derived by hand.

A small Llama-style block: h = 64, 4 query heads and 2 KV heads of 16, a SwiGLU MLP
of 128, 32 tokens a micro-batch. The policy saves the odd mms of the block (wq, wv,
w1, w2), the attention output and its fp32 log-sum-exp, and the block input, under
float8 as under BF16 (torchao's float8 mm is ``aten.mm`` on a tensor subclass).
"""

from __future__ import annotations

import pytest

from pptune.costmodel import op_sac, presets
from pptune.costmodel.analytic import analytic_layers
from pptune.costmodel.kernels import Phase, gemm, phase_s
from pptune.costmodel.keys import Precision
from pptune.costmodel.models import ModelShape
from pptune.costmodel.ops import Kind, block_ops
from pptune.costmodel.rates import Parallel, Rates

SAC = ModelShape("sac", 2, 64, 4, 2, 128, 256, 32, 8, True, False, "test")
H100 = presets.GPUS["h100-sxm"]


def test_the_policy_saves_the_odd_mms_of_the_block() -> None:
    assert [n for n, *_ in op_sac.block_mms(SAC, 1)] == ["wq", "wk", "wv", "wo", "w1", "w3",
                                                          "w2"]
    # bytes: input 2 h T, attention output 2 q T, lse 4 a T, wq 2 q T, wv 2 kv T,
    # w1 2 f T, w2 2 h T (T = 32, h = q = 64, kv = 32, f = 128, a = 4)
    want = 2 * 64 * 32 + 2 * 64 * 32 + 4 * 4 * 32 + 2 * 64 * 32 + 2 * 32 * 32 \
        + 2 * 128 * 32 + 2 * 64 * 32
    assert want == 27136
    assert op_sac.saved_bytes(SAC, 1, Parallel()) == want


def test_float8_keeps_the_same_bf16_outputs() -> None:
    # torchao's float8 mm is aten.mm on a tensor subclass: the policy saves its output
    assert op_sac.saved_bytes(SAC, 1, Parallel(precision=Precision.FP8)) == 27136
    assert op_sac.saved_bytes(SAC, 1, Parallel(precision=Precision.MXFP8)) == 27136


def test_tensor_parallel_splits_and_keeps_the_reduce_scatter_outputs() -> None:
    par = Parallel(tp=2, sequence_parallel=True)
    # input 2 h T/2 = 2048, attention output 2 (q/2) T = 2048, lse 4 (a/2) T = 256,
    # wq 2 (q/2) T = 2048, wv 2 (kv/2) T = 1024, w1 2 (f/2) T = 4096, w2's partial sum
    # 2 h T = 4096, two reduce-scatter outputs 2 x 2 h T/2 = 4096
    assert op_sac.saved_bytes(SAC, 1, par) == 19712
    # two micro-batch sequences: twice the bytes
    assert op_sac.saved_bytes(SAC, 2, par) == 2 * 19712


def _blocks(precision: Precision, modules: frozenset[str]) -> tuple[float, float, float]:
    layers = analytic_layers(SAC, H100, [1], gemm_precision=precision,
                             recompute_modules=modules)
    spec = layers[1].per_micro_batch[1]
    return spec.fwd_s, spec.bwd_s, spec.act_bytes


def test_the_backward_reruns_the_forward_but_attention_and_the_saved_mms() -> None:
    rates = Rates.of(H100)
    f0, b0, _ = _blocks(Precision.BF16, frozenset())
    f1, b1, act = _blocks(Precision.BF16, frozenset({op_sac.OP_SAC}))
    assert f1 == f0 and act == 27136
    # the memory ops rerun: two norms 4 h T, rotary 4 T (q + kv), two residuals 6 h T,
    # SwiGLU 6 f T: 32 (8 x 64 + 4 x 96 + 12 x 64 + 6 x 128) = 77824 bytes in 6 kernels
    memory_s = 77824 / rates.hbm_bytes_per_s + 6 * rates.launch_s
    # the even mms: wk (32 x 32 by 64), wo (32 x 64 by 64), w3 (32 x 128 by 64)
    gemms = [gemm("wk", Phase.F, 32, 32, 64, rates), gemm("wo", Phase.F, 32, 64, 64, rates),
             gemm("w3", Phase.F, 32, 128, 64, rates)]
    assert b1 - b0 == pytest.approx(memory_s + phase_s(gemms, Phase.F, rates))


def test_under_float8_the_even_mms_rerun_at_the_float8_rate() -> None:
    rates = Rates.of(H100)
    f0, b0, _ = _blocks(Precision.FP8, frozenset())
    f1, b1, act = _blocks(Precision.FP8, frozenset({op_sac.OP_SAC}))
    assert f1 == f0 and act == 27136
    # the forward's memory ops (now with the casts of the attention output and of
    # fc2's input, 2 kernels) and the three even mms in FP8
    fwd = [o for o in block_ops(SAC, 1, rates, Parallel(precision=Precision.FP8))
           if o.phase is Phase.F and o.kind is Kind.MEMORY]
    gemms = [gemm(n, Phase.F, 32, w, 64, rates, fp8=True) for n, w in
             (("wk", 32), ("wo", 64), ("w3", 128))]
    assert len(fwd) == 8
    assert b1 - b0 == pytest.approx(phase_s(fwd, Phase.F, rates) + phase_s(gemms, Phase.F, rates))
