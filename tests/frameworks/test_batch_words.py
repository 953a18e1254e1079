"""check-config's batch advice in a token-counted file's words (batch_words.TokenBatch):
values derived by hand from its keys."""

from __future__ import annotations

from pptune.frameworks.common.batch_words import TokenBatch

# a file of 10000 tokens a micro-batch at 4096-token sequences: priced as 3 sequences
WORDS = TokenBatch(micro="tok", count="cnt", step="stp", tokens=10000, seq_len=4096, size=3)


def test_the_files_own_size_keeps_its_own_tokens() -> None:
    assert (WORDS.tokens_of(3), WORDS.tokens_of(1), WORDS.tokens_of(2)) == (10000, 4096, 8192)
    assert WORDS.size_change(3, 1) == "tok 10000 -> 4096"


def test_a_plan_is_stated_by_the_keys_that_make_it() -> None:
    """With a pipeline the count key gives m; without, m micro-batches a step are the step
    key's tokens / (tokens a micro-batch x dp): 4 x 4096 x 8 = 131072; one needs neither."""
    assert WORDS.plan(4, 1, 8, 1) == "4 micro-batches of 4096 tokens (stp 131072)"
    assert WORDS.plan(8, 2, 4, 2) == "8 micro-batches of 8192 tokens (cnt 8)"
    assert WORDS.plan(1, 3, 8, 1) == "1 micro-batch of 10000 tokens"


def test_ga_not_aligned_in_the_files_keys() -> None:
    """8 micro-batches x 2 runs x dp 4 of 10000 tokens: 640000 tokens a step."""
    assert WORDS.not_multiple(6, 4) == "cnt 6 is not a multiple of pp (4); "
    assert WORDS.step_made(8, 2, 4) == (", with stp 640000 (tok 10000 x 8 x 2 runs a step x "
                                        "dp 4)")
    assert WORDS.step_made(8, 1, 2) == ", with stp 160000 (tok 10000 x 8 x dp 2)"
