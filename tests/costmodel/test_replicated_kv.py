"""Tensor parallelism above the key/value heads (megatron-core's replication): each
rank keeps one whole key/value head after an all-gather of the QKV output, while the
QKV weights and their GEMM stay split over tp (megatron-core 0.16.1 attention.py:
``linear_qkv`` a ColumnParallelLinear of (heads + 2 groups) x head_dim columns,
``get_query_key_value_tensors``' all_gather_last_dim_from_tensor_parallel_region)."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import attention_params, block_act_bytes
from pptune.costmodel.ops import Kind, Parallel, Phase, Rates, block_ops

GPU = dataclasses.replace(
    presets.GPUS["a100-80gb"], peak_flops=100e12, hbm_bytes_per_s=1e12, hbm_fraction=1.0,
    sm_count=4, gemm_fraction=0.5, attention_fraction=0.5, launch_s=1e-6,
)
RATES = Rates.of(GPU)
# Llama-style: h = 1024, 8 query heads of 128, 2 key/value heads, SwiGLU FFN 4096,
# sequence 512, no dropout
GQA = presets.ModelShape("t", 2, 1024, 8, 2, 4096, 4096, 512, 8, True, False, "test")
S = 512


def _op(ops: list, name: str):  # type: ignore[no-untyped-def]
    found = [o for o in ops if o.name == name]
    assert len(found) == 1, [o.name for o in ops]
    return found[0]


def test_a_rank_keeps_one_whole_key_value_head_above_the_groups() -> None:
    """Bytes a token keeps for backward on a rank (module docstring of analytic.py):
    norm inputs 2 x 2 h and the attention's and MLP's inputs 2 x 2 h, unsplit (8 h =
    8,192); Q 2 x 1024 / t, K and V 2 x 2 x 128 x (heads a rank), the output
    projection's input 2 x 1024 / t, the MLP's gate and up and the down GEMM's input
    (4 + 2) x 4096 / t."""
    # tp 2: one key/value head a rank, as split
    split = 8192 + 2 * 1024 / 2 + 2 * 2 * 128 * 1 + 2 * 1024 / 2 + 6 * 4096 / 2
    assert block_act_bytes(GQA, 1, tp=2) == pytest.approx(S * split)
    # tp 4: still one whole head a rank (2 groups over 4 ranks, each kept by 2), not 1/2
    replicated = 8192 + 2 * 1024 / 4 + 2 * 2 * 128 * 1 + 2 * 1024 / 4 + 6 * 4096 / 4
    assert replicated == 15872
    assert block_act_bytes(GQA, 1, tp=4) == pytest.approx(S * 15872)


def test_the_qkv_weights_and_gemm_stay_split_over_tp() -> None:
    """(8 + 2 x 2) heads x 128 = 1,536 QKV columns over 4 ranks: 384 each."""
    assert attention_params(GQA, tp=4) == (1024 * 1536 + 1024 * 1024) / 4
    ops = block_ops(GQA, 1, RATES, Parallel(tp=4))
    assert _op(ops, "qkv").flops == 2 * S * 1024 * 384


def test_replicated_heads_all_gather_the_qkv_output() -> None:
    """Forward: each rank's 384 QKV columns all-gathered to 1,536 (BF16: 2 x 512 tokens
    x 1,536 = 1,572,864 bytes; ring, (t - 1) / t of them over the link) and
    concatenated along the last dimension (read and write them); backward the
    reverse: the same copy, then a reduce-scatter (mappings.py _gather_along_last_dim,
    _reduce_scatter_along_last_dim)."""
    par = Parallel(tp=4, tp_latency_s=10e-6, tp_busbw_bytes_per_s=100e9)
    ops = block_ops(GQA, 1, RATES, par)
    n = 2 * S * 1536
    gather, scatter = _op(ops, "tp_kv_gather"), _op(ops, "tp_kv_gather.bwd")
    assert (gather.phase, scatter.phase, gather.kind) == (Phase.F, Phase.B, Kind.COMM)
    assert gather.hbm_bytes == scatter.hbm_bytes == n == 1_572_864
    assert gather.time_s == scatter.time_s == pytest.approx(10e-6 + 0.75 * n / 100e9)
    cat, cat_b = _op(ops, "kv_gather_cat"), _op(ops, "kv_gather_cat.bwd")
    assert cat.hbm_bytes == cat_b.hbm_bytes == 2 * n
    assert cat.time_s == pytest.approx(2 * n / 1e12)
    # rotary on the rank's 2 query heads and its 1 key head: read and write 4 x 384
    assert _op(ops, "rotary").hbm_bytes == 4 * S * (256 + 128)
    # tensor parallelism that divides the key/value heads gathers nothing
    two = block_ops(GQA, 1, RATES, dataclasses.replace(par, tp=2))
    assert not [o for o in two if "kv_gather" in o.name]
    assert _op(two, "rotary").hbm_bytes == 4 * S * (512 + 128)
