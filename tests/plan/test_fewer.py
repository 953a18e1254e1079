"""recommend's note on a GPU count whose factors leave the winner a large bubble
(plan/fewer.py)."""

from __future__ import annotations

import re

import pytest

from pptune.plan.fewer import fewer_counts
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
    run = recommend(RecommendSpec.of(gpus=100, model="llama3-8b", gpu="h100-sxm", top=1))
    win = run.result.plans[0]
    assert win.bubble_rate > 0.25
    note = next(n for n in run.result.notes if n.startswith("the winner idles"))
    found = re.search(r"on 96 of them \(4 left out\) the best plan, pp=(\d+) dp=(\d+) tp=(\d+)"
                      r" \S+, steps ([\d.]+) s, ([\d.]+)x the samples", note)
    assert found is not None, note
    pp, dp, tp = (int(found[i]) for i in (1, 2, 3))
    assert pp * dp * tp == 96
    # the same request on 96 GPUs ranks that plan first (its tables price the slowest of
    # 96 GPUs, the note's the slowest of 100: within a per cent)
    alone = recommend(RecommendSpec.of(gpus=96, model="llama3-8b", gpu="h100-sxm", top=1))
    best = alone.result.plans[0]
    assert (best.pp, best.dp, best.tp) == (pp, dp, tp)
    assert float(found[4]) == pytest.approx(best.step_time_s, rel=0.01)
    assert float(found[5]) == pytest.approx(win.step_time_s / float(found[4]), abs=0.01)


def test_a_small_bubble_or_a_fixed_pp_says_nothing() -> None:
    run = recommend(RecommendSpec.of(gpus=96, model="llama3-8b", gpu="h100-sxm", top=1))
    assert not any(n.startswith("the winner idles") for n in run.result.notes)
    run = recommend(RecommendSpec.of(gpus=100, model="llama3-8b", gpu="h100-sxm", top=1,
                                     pp="25"))
    assert not any(n.startswith("the winner idles") for n in run.result.notes)
