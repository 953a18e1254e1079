"""The top N plans are the first N of a longer list: a plan the list shows once (its
rank-order twin, or a per-stage recompute fit that came out as a plan already found)
counts once towards the search's cut-off."""

from __future__ import annotations

import dataclasses

from pptune.plan.recommend import RecommendSpec, recommend


def _plans(top: int) -> list[tuple[object, ...]]:
    # every GPU at the preset's rate (--gpu-spread 0), no sequence parallelism: the case
    # the fix was found on
    spec = RecommendSpec.of(gpus=32, model="gpt3-13b", gpu="a100-80gb", tp=2,
                            sharded_optimizer=True, gpu_spread=0.0, sequence_parallel=False)
    run = recommend(dataclasses.replace(spec, top=top))
    return [(p.schedule, p.pp, p.micro_batch_size, tuple(p.stage_layers), p.recompute,
             round(p.step_time_s, 9)) for p in run.result.plans]


def test_the_top_five_are_the_first_five_of_the_top_twelve() -> None:
    # before the fix a fit that duplicated a listed plan took a place in the cut-off, and
    # the fifth plan was a 1f1b at 22.443 s with a zbv at 22.433 s left unexplored
    five, twelve = _plans(5), _plans(12)
    assert five == twelve[:5]
    assert five[4][0].value == "zbv"  # type: ignore[attr-defined]
