"""What recommend says beside its ranking: a nearby global batch that frees a pipeline."""

from __future__ import annotations

from pptune.plan.recommend import RecommendSpec, recommend


def test_an_odd_gpu_count_hears_of_the_batch_that_needs_no_pipeline() -> None:
    """512 samples do not divide over 24 GPUs at any tp (dp 24, 12, 6, 3): every plan
    pipelines; 528 = 24 x 22 lets dp 24 run without one, faster per sample, and recommend
    says so. A batch the user named is not second-guessed."""
    run = recommend(RecommendSpec.of(gpus=24, model="llama3-8b", gpu="h200", top=3))
    assert all(p.pp > 1 for p in run.result.plans)
    note = next(n for n in run.result.notes if "no plan without a pipeline divides" in n)
    assert "512 samples over 24 GPUs; with --global-batch 528 one runs (dp=24" in note
    named = recommend(RecommendSpec.of(gpus=24, model="llama3-8b", gpu="h200", top=3,
                                       global_batch=512))
    assert not any("no plan without a pipeline divides" in n for n in named.result.notes)
