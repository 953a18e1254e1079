"""The published-MoE benchmark's rows as their sources state them (no predictions asserted)."""

from __future__ import annotations

import pytest

from bench.published_moe import RUNS, _deepseek_keys, _even_split


def test_every_development_set_moe_row_is_present_and_consistent() -> None:
    # dgxc Grok-1: 9 scales x BF16 and FP8; NeMo 25.02 Mixtral 8x7B and 8x22B; DeepSeek-V3
    assert len(RUNS) == 21
    assert sum(r.model == "grok-1" for r in RUNS) == 18
    for r in RUNS:
        ranks = r.tp * r.pp * r.cp
        assert r.gpus % ranks == 0, r
        dp = r.gpus // ranks
        assert r.gbs % (r.mbs * dp) == 0, r  # GBS = MBS x micro-batches x dp exactly
        assert (r.tp * r.cp * dp) % r.ep == 0, r  # ep divides a stage's ranks


def test_per_gpu_figures_follow_from_the_printed_ones() -> None:
    grok = next(r for r in RUNS if (r.model, r.gpus, r.precision) == ("grok-1", 512, "bf16"))
    assert grok.tokens_per_s_per_gpu == pytest.approx(399191 / 512)
    # 8192 tokens x 1024 sequences / 21.01 s: the README's 399,191 tokens/s
    assert 8192 * 1024 / 21.01 == pytest.approx(399191, rel=5e-4)  # step printed to 10 ms
    ds = next(r for r in RUNS if r.model == "deepseek-v3")
    assert ds.tokens_per_s_per_gpu == pytest.approx(1543.2, abs=0.1)  # 1e12 / (180e3 h)


def test_every_row_is_expressible_with_its_published_layout() -> None:
    """FP8, context parallelism, the B200 and H800 presets and DualPipe are all there:
    no row needs other work, and each states the settings its source gives."""
    assert all(r.needs == () for r in RUNS)
    ds = next(r for r in RUNS if r.model == "deepseek-v3")
    assert (ds.gpu, ds.precision, ds.pp, ds.ep, ds.etp, ds.dispatcher.value) == (
        "h800", "fp8", 16, 64, 1, "deepep")
    assert ds.schedule is not None and ds.schedule.value == "dualpipe"
    grok = [r for r in RUNS if r.model == "grok-1"]
    assert all(not r.grouped and r.grad_bf16 and r.etp is None for r in grok)  # etp = tp
    # its NeMo 1.x yaml leaves cross_entropy_loss_fusion at megatron-core's default, off
    assert all(r.cross_entropy.value == "unfused" for r in grok)


def test_megatron_placement_and_searched_keys() -> None:
    assert _even_split(16, 16) == [2] + [1] * 14 + [2]
    assert sum(_even_split(64, 8)) == 66
    assert all(256 % k.ep == 0 for k in _deepseek_keys())


def test_megatron_layer_rows_as_the_benchmark_states_them() -> None:
    from bench.published_moe import MEGATRON_LAYER_MS, megatron_layer

    assert [c[0] for c in MEGATRON_LAYER_MS] == [
        "Qwen3-30B-A3B shape", "Qwen3-235B-A22B shape", "32 experts", "64 experts"]
    rows = megatron_layer()["rows"]
    first = rows[0]
    assert (first["hidden"], first["expert_ffn"], first["experts"], first["local_experts"]) == (
        2048, 768, 128, 16)
    # by hand: 4,096 tokens x top-8 copies through fc1 (gate and up, 2 x 768) and fc2
    # (768), 2 FLOPs a multiply-add, forward + data and weight gradients (3x); the
    # router GEMM 4,096 x 2,048 x 128 likewise
    experts = 3 * 2 * 4096 * 8 * 2048 * (2 * 768 + 768)
    router = 3 * 2 * 4096 * 2048 * 128
    assert first["measured_tflops"] == pytest.approx(
        (experts + router) / 12.41e-3 / 1e12, abs=0.05)
    assert first["ratio"] == pytest.approx(12.41 / first["predicted_ms"], abs=0.01)
