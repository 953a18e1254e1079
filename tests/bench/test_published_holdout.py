"""The held-out published benchmark: rows read as published, ratios as computed."""

from __future__ import annotations

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
