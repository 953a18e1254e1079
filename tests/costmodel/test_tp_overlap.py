"""Transformer Engine's TP communication overlap: hand-derived step times per method."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.kernels import gemm
from pptune.costmodel.ops import Kind, Parallel, Phase, Rates, block_ops
from pptune.costmodel.tp_overlap import (
    GemmOverlap,
    Method,
    TpOverlap,
    bulk_gemm,
    gather_gemm,
    gemm_scatter,
    shared,
)

S = 132  # SMs


def rows_ms(m: int, n: int, k: int, sms: int) -> float:
    """A toy GEMM: 1 ms per 1000 rows on every SM, longer on fewer."""
    return m / 1000 * S / sms


def per_byte(nbytes: float) -> float:  # 1 MB/ms
    return nbytes / 1e6


def test_a_gemm_sharing_sms_with_communication() -> None:
    # 10 ms of GEMM beside 4 ms of comm on 33 of 132 SMs: 4 x 33/132 = 1 ms longer
    assert shared(10.0, 4.0, 33, S) == pytest.approx(11.0)
    # comm longer than the GEMM even slowed: the comm's 10 ms
    assert shared(2.0, 10.0, 33, S) == 10.0


def test_ring_exchange_chunks_and_hops() -> None:
    ring = GemmOverlap(Method.RING_EXCHANGE)
    # tp 4, 1024 rows: chunks of 256 rows, 0.256 ms each; hops of 0.1 ms hide behind them
    fast = gather_gemm(ring, 4, 1024, 64, 64, rows_ms, S, per_byte, 100e3)
    assert (fast.gemm_s, fast.exposed_s, fast.kernels) == pytest.approx((1.024, 0.0, 4))
    # hops of 0.4 ms outlast the chunk: three steps of 0.4, the last chunk alone
    slow = gather_gemm(ring, 4, 1024, 64, 64, rows_ms, S, per_byte, 400e3)
    assert slow.gemm_s + slow.exposed_s == pytest.approx(3 * 0.4 + 0.256)
    assert slow.exposed_s == pytest.approx(0.432)


def test_aggregated_ring_exchange_pays_its_first_exchange() -> None:
    agg = GemmOverlap(Method.RING_EXCHANGE, aggregate=True)
    # tp 4: a first 0.4 ms exchange, then 2 steps of 512 rows with a 0.8 ms double hop between
    got = gather_gemm(agg, 4, 1024, 64, 64, rows_ms, S, per_byte, 400e3)
    assert got.kernels == 2
    assert got.gemm_s + got.exposed_s == pytest.approx(0.4 + max(0.512, 0.8) + 0.512)


def test_pipelined_reduce_scatter_with_an_sm_margin() -> None:
    pipe = GemmOverlap(Method.PIPELINE, num_sm=33, set_sm_margin=True, num_splits=4)
    # each of 4 column chunks runs on 99 SMs: 1000 rows -> 1 x 132/99 ms; 4 MB out, 1 MB a
    # chunk's reduce-scatter = 1 ms: each later chunk waits on max(1.333, 1), the last RS exposed
    got = gemm_scatter(pipe, 4, 1000, 4096, 64, rows_ms, S, per_byte, per_byte, per_byte, 4e6)
    chunk = 132 / 99
    assert got.gemm_s == pytest.approx(4 * chunk)
    assert got.exposed_s == pytest.approx(1.0)


def test_pipelined_reduce_scatter_without_margin_shares_the_sms() -> None:
    pipe = GemmOverlap(Method.PIPELINE, num_sm=33, num_splits=4)
    # chunks of 1 ms on all SMs; chunks 2-4 beside a 1 ms RS holding a quarter of them
    got = gemm_scatter(pipe, 4, 1000, 4096, 64, rows_ms, S, per_byte, per_byte, per_byte, 4e6)
    assert got.gemm_s == pytest.approx(1.0 + 3 * 1.25)
    assert got.exposed_s == pytest.approx(1.0)


def test_ring_exchange_reduce_scatter_reduces_at_the_end() -> None:
    ring = GemmOverlap(Method.RING_EXCHANGE, num_sm=1, set_sm_margin=True)
    # tp 4: chunks of 250 rows on 131 SMs; 4 MB out, 1 MB blocks: a 1 ms hop after each of
    # the first three chunks (longer than the chunk), the last hop and a reduction of 2 ms
    got = gemm_scatter(ring, 4, 1000, 64, 64, rows_ms, S, per_byte, per_byte,
                       lambda b: 2 * b / 1e6, 4e6)
    chunk = 0.25 * 132 / 131
    assert got.gemm_s == pytest.approx(4 * chunk)
    assert got.gemm_s + got.exposed_s == pytest.approx(chunk + 3 * 1.0 + 1.0 + 2.0)


def test_bulk_overlap_with_and_without_margin() -> None:
    bulk = GemmOverlap(Method.BULK, num_sm=33)
    got = bulk_gemm(bulk, 1000, 64, 64, rows_ms, S, 4.0)
    assert (got.gemm_s, got.exposed_s) == pytest.approx((1.0 + 1.0, 2.0))  # max(4, 1 + 1)
    margin = bulk_gemm(GemmOverlap(Method.BULK, 33, set_sm_margin=True), 1000, 64, 64,
                       rows_ms, S, 1.0)
    assert (margin.gemm_s, margin.exposed_s) == pytest.approx((132 / 99, 0.0))


def test_methods_must_fit_their_collective() -> None:
    with pytest.raises(ValueError, match="ring exchange"):
        gather_gemm(GemmOverlap(Method.BULK), 4, 1024, 64, 64, rows_ms, S, per_byte, 1.0)
    with pytest.raises(ValueError, match="pipeline or ring exchange"):
        gemm_scatter(GemmOverlap(Method.BULK), 4, 1024, 64, 64, rows_ms, S, per_byte, per_byte,
                     per_byte, 1.0)


def test_defaults_are_transformer_engine_v1_13s() -> None:
    cfg = TpOverlap()
    assert {cfg.qkv_fprop, cfg.fc1_fprop, cfg.proj_dgrad, cfg.fc2_dgrad} == {
        GemmOverlap(Method.RING_EXCHANGE, num_sm=1)}
    assert cfg.proj_fprop == cfg.fc2_fprop == GemmOverlap(Method.PIPELINE, 16, False, 4)
    assert {cfg.qkv_dgrad, cfg.qkv_wgrad, cfg.fc1_dgrad, cfg.fc1_wgrad} == {
        GemmOverlap(Method.BULK, 16)}


# A block: h 1024, 8 heads, FFN 4096 (GeLU), sequence 1024, tp 4 with sequence parallelism
GPU = dataclasses.replace(presets.GPUS["h100-sxm"], launch_s=0.0)
RATES = Rates.of(GPU)
GPT = presets.ModelShape("t", 2, 1024, 8, 8, 4096, 4096, 1024, 8, False, True, "test")


def _par(overlap: bool, cfg: TpOverlap | None = None) -> Parallel:
    return Parallel(tp=4, sequence_parallel=True, tp_comm_overlap=overlap, tp_overlap=cfg,
                    tp_latency_s=0.0, tp_busbw_bytes_per_s=100e9, tp_p2p_latency_s=0.0,
                    tp_p2p_bytes_per_s=100e9)


def _op(ops: list, name: str):  # type: ignore[no-untyped-def]
    (op,) = [o for o in ops if o.name == name]
    return op


def test_the_qkv_forward_runs_as_tp_chunks_under_ring_exchange() -> None:
    ops = block_ops(GPT, 1, RATES, _par(True))
    # 1024 tokens over tp 4: four 256-row chunks of the 256 x 768 x 1024 GEMM (3h / tp wide)
    chunk = gemm("", Phase.F, 256, 768, 1024, RATES).time_s
    qkv = _op(ops, "qkv")
    assert qkv.time_s == pytest.approx(4 * chunk) and qkv.kernels == 4
    # a hop: 256 x 1024 x 2 bytes at 100 GB/s = 5.2 us, longer than a chunk here
    hop = 256 * 1024 * 2 / 100e9
    assert chunk < hop
    tp = _op(ops, "tp_attn")
    assert tp.kind is Kind.COMM
    assert tp.time_s >= 3 * (hop - chunk) - 1e-12


def test_without_sequence_parallelism_the_collectives_stay_nccls() -> None:
    plain = Parallel(tp=4, tp_comm_overlap=True, tp_latency_s=0.0, tp_busbw_bytes_per_s=100e9)
    ops = block_ops(GPT, 1, RATES, plain)
    qkv = _op(ops, "qkv")
    assert qkv.kernels == 1  # not chunked
    assert not [o for o in ops if o.name == "tp_attn.wgrad"]


def test_an_sm_margin_slows_the_forward_reduce_scatter_gemm() -> None:
    wide = presets.ModelShape("w", 2, 4096, 32, 32, 16384, 4096, 1024, 8, False, True, "test")
    margin = block_ops(wide, 8, RATES, _par(True, TpOverlap(proj_fprop=TpOverlap.pipeline(66, True))))
    free = block_ops(wide, 8, RATES, _par(True, TpOverlap(proj_fprop=TpOverlap.pipeline(1, True))))
    # 8192 tokens: 4 column chunks of 8192 x 1024 x 1024, 256 tiles of 128 x 256: 4 waves on
    # the 66 SMs left against 2 on 131
    on_66 = gemm("", Phase.F, 8192, 1024, 1024, RATES.with_sms(66)).time_s
    on_131 = gemm("", Phase.F, 8192, 1024, 1024, RATES.with_sms(131)).time_s
    assert _op(margin, "attn_out").time_s == pytest.approx(4 * on_66)
    assert _op(free, "attn_out").time_s == pytest.approx(4 * on_131)
    assert on_66 > on_131
