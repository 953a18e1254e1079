"""recommend says what a step made mostly of attention is priced at (attention_share.py)."""

from __future__ import annotations

from pptune.costmodel.breakdown import step_parts
from pptune.costmodel.parts import ATTENTION
from pptune.plan.recommend import RecommendSpec, recommend


def _notes(**flags: object) -> list[str]:
    return [n for n in recommend(RecommendSpec.of(top=1, **flags)).result.notes
            if n.startswith("attention is")]


def test_long_context_step_names_its_kernel_and_whose_rates() -> None:
    run = recommend(RecommendSpec.of(gpus=16, model="llama3-8b", seq_len=131072,
                                     global_batch=16, gpu="b300", top=1))
    best = run.result.plans[0]
    table = run.table_for(best.key)
    share = step_parts(table, run.plan_request, best,
                       table.layer_parts[best.micro_batch_size]).share(ATTENTION)  # type: ignore[index]
    # causal attention at 131,072 tokens: 6 x 32 x 4096 x 131072 FLOPs a token against
    # 6 x 8e9, at a third of the GEMMs' share of peak: most of the step
    assert share > 0.5
    note = next(n for n in run.result.notes if n.startswith("attention is"))
    assert f"attention is {share:.0%}" in note
    # the default, torch's SDPA, runs cuDNN's kernel on a B300 (sm103); no sweep of B300
    # is published: B200's measured shares price it
    assert ("cuDNN's fused attention rates, the kernel torch's SDPA runs on b300, on b300 "
            "at b200's measured share") in note
    assert "--attention flash" in note


def test_blackwell_with_its_own_sweep_names_no_other_gpu() -> None:
    notes = _notes(gpus=16, model="llama3-8b", seq_len=131072, global_batch=16, gpu="b200",
                   attention="flash")
    assert len(notes) == 1 and "FlashAttention-2's rates;" in notes[0]
    assert "--attention cudnn" in notes[0]


def test_hopper_own_rates_and_short_sequences() -> None:
    cudnn = _notes(gpus=16, model="llama3-8b", seq_len=131072, global_batch=16,
                   attention="cudnn")
    assert len(cudnn) == 1 and "cuDNN's fused attention rates;" in cudnn[0]
    assert "--attention flash" in cudnn[0]
    assert _notes(gpus=8) == []  # Llama 3 8B at 8,192 tokens: GEMMs outweigh attention
