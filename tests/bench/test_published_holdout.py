"""The held-out published benchmark: rows read as published, ratios as computed."""

from __future__ import annotations

from typing import Any

import pytest

from bench.published_holdout import META_RUNS, NOT_EXPRESSIBLE, TITAN_RUNS, meta_row, titan_row


def test_the_torchtitan_rows_read_as_the_run_was_launched() -> None:
    row = titan_row(TITAN_RUNS[0])
    # FSDP over 32 H200, local batch 2 of 8,192 tokens, float8, per-op checkpointing
    assert (row["gpus"], row["dp"], row["micro_batch"], row["global_batch"], row["seq_len"]) \
        == (32, 32, 2, 64, 8192)
    assert row["precision"] == "fp8" and row["recompute_modules"] == ["op_sac"]
    assert "h200" in row["cost_source"] and row["findings"] == []
    assert row["ratio"] == pytest.approx(row["predicted"] / 10938.0, rel=1e-3)


def test_the_meta_rows_state_table_4() -> None:
    # 16M tokens a batch: 2,048 sequences of 8,192 over DP 64 and 128
    assert [(r.gpus, r.tp, r.pp, r.cp, r.gpus // (r.tp * r.pp * r.cp)) for r in META_RUNS] \
        == [(8192, 8, 16, 1, 64), (16384, 8, 16, 1, 128)]
    assert all(r.global_batch * r.seq_len == 2048 * 8192 for r in META_RUNS)
    row = meta_row(META_RUNS[0])
    assert row["fits"] and row["ratio"] == pytest.approx(row["predicted"] / 430.0, rel=1e-3)


def test_the_grand_teton_rows_are_all_listed() -> None:
    # performance.md Tables 1-6 (3, 4, 3, 2, 2, 4 rows) and the async-TP page's 12
    assert sum(n for *_, n in NOT_EXPRESSIBLE) == 30


def test_the_megatron_bridge_moe_rows_run_their_recipes() -> None:
    from bench.published_holdout_bridge import RUNS, rows
    from bench.published_modern import account_split

    gpt_oss, qwen30, qwen235 = RUNS
    # the printed layouts: GPUs = tp x pp x dp; ep divides the experts' ranks
    assert [(r.gpus, r.tp, r.pp, r.vp, r.ep, r.mbs, r.gbs) for r in RUNS] == [
        (64, 1, 4, 1, 8, 1, 1280), (16, 1, 2, 12, 8, 1, 1024), (256, 2, 8, 4, 32, 1, 8192)]
    assert gpt_oss.recompute_modules == ("layernorm", "moe_act")
    assert qwen30.dispatcher.value == "deepep" and qwen30.a2a_overlap
    # Qwen3-235B: 94 blocks + embedding + loss, three a chunk over pp 8 x vp 4
    assert qwen235.account_ends and account_split(94, 8 * 4) == (3,) * 32
    assert not qwen235.tp_overlap and qwen235.a2a_overlap
    out = [r for r in rows()
           if r["name"].split()[0] in {r.model for r in RUNS} and r["gpu"] == "h100-sxm"]
    assert [r["published"] for r in out] == [5993, 5113, 1633]
    for r in out:
        assert r["ratio"] == pytest.approx(r["predicted"] / r["published"], rel=1e-3)
        assert r["plan"]["peak_memory_gib"] < 80  # each fits the H100 it ran on


def test_the_megatron_bridge_dense_rows_run_fp8_current_scaling() -> None:
    from bench.published_holdout_bridge import DENSE_RUNS, dense_rows

    llama70, llama405, *blackwell = DENSE_RUNS
    assert [(r.gpu, r.precision, r.gpus, r.tp, r.pp, r.cp, r.vp, r.global_batch)
            for r in DENSE_RUNS] == [
        ("h100-sxm", "fp8", 64, 4, 8, 1, 5, 256), ("h100-sxm", "fp8", 1024, 8, 8, 2, 8, 1536),
        ("gb200", "mxfp8", 64, 2, 4, 1, 5, 256), ("gb200", "fp8", 256, 4, 16, 1, 4, 1536),
        ("gb200", "mxfp8", 256, 4, 16, 1, 8, 1536),
        ("gb300", "mxfp8", 64, 1, 4, 1, 5, 256), ("gb300", "fp8", 256, 4, 8, 1, 4, 1536),
        ("gb300", "mxfp8", 256, 2, 8, 2, 4, 1536),
        ("gb200", "nvfp4", 64, 2, 4, 1, 5, 256), ("gb200", "nvfp4", 256, 4, 16, 1, 8, 1536),
        ("gb300", "nvfp4", 64, 1, 4, 1, 5, 256), ("gb300", "nvfp4", 256, 4, 8, 1, 4, 1536)]
    fp8 = [r for r in blackwell if r.precision != "nvfp4"]
    nvfp4 = [r for r in blackwell if r.precision == "nvfp4"]
    # the GB200 and GB300 rows' userbuffers entries ring-exchange without aggregation
    assert all(dict(r.recipe.ub or ())["qkv_fprop"] == "ring" for r in fp8)
    # bf16_with_nvfp4_mixed: no FP8/FP4 parameter gather; the functions turn TP overlap off
    assert all(not r.recipe.fp8_params and not r.recipe.tp_comm_overlap for r in nvfp4)
    # current scaling: no amax history reduced over the stage; FP8 parameter gather
    assert not llama70.recipe.amax_reduction and llama70.recipe.fp8_params
    assert dict(llama405.recipe.ub or ())["qkv_dgrad"] == "bulk:2"
    out = dense_rows()
    assert [r["published"] for r in out] == [1621, 311, 3613, 793, 786, 4596, 988, 931,
                                              4458, 1076, 6798, 1333]
    capacity = {"h100-sxm": 80.0, "gb200": 186e9 / 2**30, "gb300": 288e9 / 2**30}
    for r in out:
        assert r["ratio"] == pytest.approx(r["predicted"] / r["published"], rel=1e-3)
        # each fits the GPU it ran on (80 GB H100, 186 GB GB200, 288 GB GB300)
        assert r["plan"]["peak_memory_gib"] < capacity[r["gpu"]]


def _layouts(runs: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """GPU, GPUs, PP, VP, EP, MBS, GBS, tokens/s/GPU of each MoE run."""
    return [(r.gpu, r.gpus, r.pp, r.vp, r.ep, r.mbs, r.gbs, r.tokens_per_s_per_gpu)
            for r in runs]


def _moe_rows(container: str, runs: tuple[Any, ...]) -> list[dict[str, Any]]:
    """The holdout rows of ``runs`` (one container's), each with its published figure and
    a ratio that is predicted over published."""
    from bench.published_holdout_bridge import rows

    out = [r for r in rows() if r.get("ep") and r["gpu"] != "h100-sxm"
           and f"(Megatron-Bridge {container})" in r["name"]]
    assert len(out) == len(runs)
    for r, run in zip(out, runs, strict=True):
        assert r["published"] == run.tokens_per_s_per_gpu
        assert r["ratio"] == pytest.approx(r["predicted"] / r["published"], rel=1e-3)
    return out


def test_the_megatron_bridge_blackwell_moe_rows_run_their_recipes() -> None:
    from bench.published_holdout_bridge import BLACKWELL_RUNS, DEEPSEEK_LAYOUT

    # the summary's DGX-GB200, DGX-B200, DGX-GB300 and DGX-B300 rows
    assert _layouts(BLACKWELL_RUNS) == [
        ("gb200", 256, 4, 4, 64, 1, 4096, 3955), ("gb200", 64, 1, 1, 64, 4, 1280, 15784),
        ("gb200", 8, 1, 1, 8, 4, 512, 26084), ("gb200", 256, 8, 1, 32, 1, 8192, 5448),
        ("b200", 256, 16, 1, 8, 1, 4096, 2689), ("b200", 64, 1, 1, 64, 4, 1280, 8047),
        ("b200", 8, 1, 1, 8, 1, 512, 9691), ("b200", 256, 8, 1, 8, 1, 8192, 3805),
        ("gb300", 256, 2, 8, 32, 2, 4096, 4612), ("gb300", 64, 1, 1, 64, 4, 1280, 19412),
        ("gb300", 8, 1, 1, 8, 8, 512, 30376), ("gb300", 256, 4, 1, 32, 2, 8192, 6583),
        ("b300", 256, 16, 1, 8, 1, 4096, 2983), ("b300", 64, 1, 1, 64, 4, 1280, 8359),
        ("b300", 8, 1, 1, 8, 8, 512, 29521), ("b300", 256, 8, 4, 8, 1, 8192, 2691)]
    for r in BLACKWELL_RUNS:
        dp = r.gpus // (r.tp * r.pp)
        assert r.gbs % (r.mbs * dp) == 0 and (r.tp * dp) % r.ep == 0, r
    # DeepSeek-V3's recipe layout for (4, 4) and (16, 1): the embedding and 61 blocks, the
    # MTP layer and the loss in 16 chunks
    assert len(DEEPSEEK_LAYOUT) == 16 and sum(DEEPSEEK_LAYOUT) == 1 + 61 + 1 + 1
    for r in _moe_rows("26.02", BLACKWELL_RUNS):
        # each fits its GPU (186 GB on GB200, 180 GB on B200, 288 GB on B300 and GB300)
        capacity = {"gb200": 186e9, "b200": 180e9, "gb300": 288e9, "b300": 288e9}[r["gpu"]]
        assert r["plan"]["peak_memory_gib"] < capacity / 2**30


def test_every_row_predicted_over_its_gpus_memory_is_reported() -> None:
    import json
    from pathlib import Path

    from bench.docs_modern import over_memory_lines
    from pptune.costmodel.presets import GIB, GPUS

    doc = json.loads((Path(__file__).resolve().parents[2] / "bench" / "results"
                      / "published_holdout.json").read_text())
    text = " ".join(over_memory_lines(doc))
    for r in doc["rows"]:
        over = r["plan"]["peak_memory_gib"] > GPUS[r["gpu"]].memory_bytes / GIB \
            if r.get("plan", {}).get("peak_memory_gib") else False
        assert (r["name"] in text) is over, r["name"]


def test_the_megatron_bridge_26_08_rows_run_their_recipes() -> None:
    from bench.published_holdout_bridge import BRIDGE_2608, RUNS_2608

    # the 26.08 summary's GB300 and GB200 MXFP8 rows
    assert _layouts(RUNS_2608) == [
        ("gb300", 256, 2, 8, 32, 1, 4096, 6288), ("gb200", 256, 4, 4, 64, 1, 4096, 4912),
        ("gb300", 64, 1, 1, 16, 4, 1280, 33024), ("gb200", 64, 1, 1, 64, 4, 1280, 28672),
        ("gb300", 8, 1, 1, 8, 8, 512, 44544), ("gb200", 8, 1, 1, 8, 4, 512, 39936),
        ("gb300", 256, 4, 12, 32, 2, 8192, 8816), ("gb200", 256, 8, 3, 32, 1, 8192, 7280)]
    # every recipe: MXFP8, HybridEP (priced as DeepEP), the all-to-all overlapped
    assert all(r.precision == "mxfp8" and r.a2a_overlap and r.source == BRIDGE_2608
               and r.dispatcher.value == "deepep" for r in RUNS_2608)
    _moe_rows("26.08", RUNS_2608)
