"""recommend --emit's narration: every ratio is to plan N as ranked, named, and the
plan written is priced once more only when what changed says why."""

from __future__ import annotations

import re

from pptune.plan.emit import emit
from pptune.plan.recommend import RecommendSpec, recommend
from pptune.report.fmt import fmt_seconds


def _ratios(notes: list[str]) -> list[str]:
    return re.findall(r"\((\d+\.\d{3}x[^)]*)\)", " ".join(notes))


def test_every_ratio_names_plan_1_and_is_to_its_step() -> None:
    # torchtitan's qwen3 has no pipelining: plan 1 (DualPipeV) gives way to the fastest
    # plan without one, whose substitutions cost enough for the search's to replace it
    run = recommend(RecommendSpec.of(gpus=16, model="qwen3-30b-a3b", gpu="h100-sxm", top=1))
    out = emit("torchtitan", run)
    base = run.result.plans[0].step_time_s
    ratios = _ratios(out.notes)
    assert ratios and all(r.endswith("x plan 1") for r in ratios), out.notes
    for note in out.notes:  # each "step S (Rx plan 1)" has R = S / plan 1's step
        for step, r in re.findall(r"step (\d+\.\d+ s) \((\d+\.\d{3})x plan 1\)", note):
            assert step == fmt_seconds(float(r) * base) or abs(
                float(step[:-2]) / base - float(r)) < 1e-3, note
    # the plan written is stated once at its final step, not re-quoted at two prices
    final = fmt_seconds(out.plan.step_time_s)
    swapped = [n for n in out.notes if n.startswith("those substitutions")]
    assert len(swapped) == 1 and final not in swapped[0]
