"""recommend's note on a GPU count whose factors leave the winner a large bubble
(plan/fewer.py)."""

from __future__ import annotations

import re

import pytest

from pptune.plan.fewer import fewer_counts, fewer_gpus_note
from pptune.plan.recommend import RecommendSpec, recommend


def test_the_largest_count_of_whole_nodes_times_a_small_odd_factor() -> None:
    # 1,000 on nodes of 8: 8 x 2^6 = 512, 8 x 3 x 2^5 = 768, 8 x 5 x 2^4 = 640,
    # 8 x 7 x 2^4 = 896, 8 x 9 x 2^3 = 576: the largest, 896
    assert fewer_counts(1000, 8) == [896]
    # 100: 64, 96, 80, 56, 72 -> 96
    assert fewer_counts(100, 8) == [96]
    # whole nodes of a power of two, or too few GPUs for a smaller form: none
    assert fewer_counts(16, 8) == [] and fewer_counts(1024, 8) == [896]
    assert fewer_counts(8, 8) == [] and fewer_counts(12, 8) == [8]


def test_llama3_8b_on_100_gpus_is_told_of_96() -> None:
    # 100 = 4 x 25: with 512 sequences a step the winner pipelines over 25 stages
    spec = RecommendSpec.of(gpus=100, model="llama3-8b", gpu="h100-sxm", top=1)
    run = recommend(spec)
    win = run.result.plans[0]
    assert win.bubble_rate > 0.25
    note = fewer_gpus_note(spec, run)
    assert note is not None and note.startswith(
        f"the winner idles {win.bubble_rate:.0%} of its step in the bubble: 100 GPUs ")
    # what recommend --gpus 96 ranks first, at its own step
    alone = recommend(RecommendSpec.of(gpus=96, model="llama3-8b", gpu="h100-sxm", top=1))
    best = alone.result.plans[0]
    assert (f"recommend --gpus 96 (4 left out) ranks first pp={best.pp} dp={best.dp} "
            f"tp={best.tp} {best.schedule.value}") in note
    found = re.search(r", ([\d.]+) s a step: ([\d.]+)x the samples a second of all 100$", note)
    assert found is not None, note
    assert float(found[1]) == pytest.approx(best.step_time_s, rel=0.005)
    gain = (alone.global_batch / best.step_time_s) / (run.global_batch / win.step_time_s)
    assert found[2] == f"{gain:.2f}"


def test_a_small_bubble_or_a_fixed_pp_says_nothing() -> None:
    spec = RecommendSpec.of(gpus=96, model="llama3-8b", gpu="h100-sxm", top=1)
    assert fewer_gpus_note(spec, recommend(spec)) is None
    spec = RecommendSpec.of(gpus=100, model="llama3-8b", gpu="h100-sxm", top=1, pp="25")
    assert fewer_gpus_note(spec, recommend(spec)) is None
