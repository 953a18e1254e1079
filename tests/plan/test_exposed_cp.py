"""The winner's exposed context-parallel exchange (breakdown.exposed_cp_s), by hand.

GPT-3 1.3B (16 heads of 128, 24 blocks) at 8,192 tokens on 2 H100s, tp 1, cp 2 with
Ulysses (a2a), no pipeline, 4 micro-batches of 1: each block's forward all-to-alls Q, K,
V (4,096 tokens x (16 + 2 x 16) heads x 128 x 2 bytes) in and the output (4,096 x 16 x
128 x 2) back, half of each over NVLink (396.4 GB/s, 10 us a transfer: presets.py), all
exposed; the backward the mirror image.
"""

from __future__ import annotations

import pytest

from pptune.costmodel import presets
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend
from pptune.report.fmt import fmt_pct, fmt_seconds
from pptune.report.plans import why_lines

TOKENS = 8192 / 2
QKV = TOKENS * (16 + 2 * 16) * 128 * 2
OUT = TOKENS * 16 * 128 * 2
BW = 396.4e9
LAT = 10e-6
PHASE = 2 * LAT + 0.5 * (QKV + OUT) / BW  # one block's forward (or backward) exchange


def planned(recompute: str) -> RecommendRun:
    return recommend(RecommendSpec.of(
        gpus=2, model="gpt3-1.3b", seq_len=8192, tp="1", cp="2", cp_comm="a2a", pp="1",
        global_batch=4, micro_batch_sizes="1", sharding="none", recompute=recompute, top=1))


def test_the_exchange_of_every_block_and_micro_batch_is_counted() -> None:
    assert presets.GPUS["h100-sxm"].fabric_or_line().p2p_bytes_per_s == BW
    assert presets.P2P_LATENCY_INTRA_S == LAT
    plan = planned("none").result.plans[0]
    assert (plan.pp, plan.cp, plan.num_microbatches) == (1, 2, 4)
    assert plan.exposed_cp_s == pytest.approx(4 * 24 * 2 * PHASE, rel=1e-9)


def test_recomputed_forwards_exchange_again() -> None:
    plan = planned("full").result.plans[0]
    assert plan.recompute.value == "full" and plan.recompute_layers is None
    assert plan.exposed_cp_s == pytest.approx(4 * 24 * 3 * PHASE, rel=1e-9)


def test_the_winner_line_says_it() -> None:
    run = planned("none")
    plan = run.result.plans[0]
    assert plan.exposed_cp_s is not None
    share = plan.exposed_cp_s / plan.step_time_s
    assert share > 0.005
    (line,) = [line for line in why_lines(run.result) if "CP K/V exchange" in line]
    assert f"CP K/V exchange adds {fmt_seconds(plan.exposed_cp_s)} ({fmt_pct(share)})" in line
