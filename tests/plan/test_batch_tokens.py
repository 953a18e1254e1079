"""recommend --seq-len without --global-batch keeps the model's batch in sequences: a note
gives the batch in tokens and the flag that sets it."""

from __future__ import annotations

from pptune.plan.recommend import RecommendSpec, recommend

FLAGS = dict(gpus=8, model="llama3-8b", pp="1", tp="1", sharding="zero2", recompute="full",
             micro_batch_sizes="1", top=1)


def test_a_longer_sequence_says_the_tokens_a_step() -> None:
    run = recommend(RecommendSpec.of(seq_len=131072, **FLAGS))
    assert run.global_batch == 512
    assert ("global batch 512 sequences of 131,072 tokens = 67.1M tokens a step (llama3-8b's "
            "default batch, set for 8,192-token sequences); --global-batch N sets the "
            "sequences a step (--global-batch 32 keeps the default's 4.2M tokens)") in run.result.notes


def test_no_note_at_the_default_length_or_with_a_batch_given() -> None:
    for extra in ({}, {"seq_len": 8192}, {"seq_len": 131072, "global_batch": 32}):
        run = recommend(RecommendSpec.of(**extra, **FLAGS))
        assert not any("tokens a step" in n for n in run.result.notes), extra
