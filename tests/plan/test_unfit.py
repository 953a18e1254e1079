"""Why no plan fits (pptune.plan.unfit): a reserve the GPU cannot hold is bad input
before the search, and the hints after a search name only what it left out."""

from __future__ import annotations

import pytest

from pptune.errors import BadInput
from pptune.plan.recommend import RecommendSpec, recommend
from pptune.plan.reserve import check_reserve
from pptune.plan.unfit import memory_hints

GIB = 1024**3


def test_a_reserve_at_or_over_the_memory_or_its_share_is_named() -> None:
    check_reserve(2 * GIB, 80 * GIB, "g", None, None)  # 78 GiB left: fine
    check_reserve(2 * GIB, 80 * GIB, "g", None, 0.5)  # 40 GiB, 38 left: fine
    with pytest.raises(BadInput) as err:
        check_reserve(100 * GIB, 80 * GIB, "g", 100, None)
    assert str(err.value) == "--reserve-gib 100 is more than g's 80.00 GiB"
    with pytest.raises(BadInput) as err:
        check_reserve(80 * GIB, 80 * GIB, "g", 80, 0.9)  # the flag that overflows first
    assert str(err.value) == "--reserve-gib 80 is all of g's 80.00 GiB"
    with pytest.raises(BadInput) as err:  # 2.5% of 80 GiB = 2 GiB, no more than 2 GiB
        check_reserve(2 * GIB, 80 * GIB, "g", None, 0.025)
    assert str(err.value) == ("--max-memory 0.025 leaves 2.00 GiB of g's 80.00 GiB, no more "
                              "than the 2.00 GiB reserve; raise --max-memory or lower "
                              "--reserve-gib")


def test_memory_hints_leave_out_what_was_searched() -> None:
    """Llama 3.1 405B on 8 GPUs fits in no plan; with the search narrowed by hand each
    narrowing comes back, and nothing the search tried does."""
    spec = dict(gpus=8, model="llama3.1-405b", gpu="h100-sxm")
    full = recommend(RecommendSpec.of(**spec))
    assert not full.result.plans and memory_hints(full) == []
    narrow = recommend(RecommendSpec.of(**spec, tp="1,2", sharding="none,zero3",
                                        recompute="full", micro_batch_sizes="2"))
    assert not narrow.result.plans
    # tp 4 and 8 divide the 128 heads and 8 key/value heads; zero3 already shards the
    # whole state (fsdp would too, zero1 less); full recomputation was searched
    assert memory_hints(narrow) == ["--tp 4/8", "smaller --micro-batch-sizes"]


def test_adams_moments_in_bf16_are_named_where_the_state_fits_and_nothing_else_does() -> None:
    """Llama 3 8B on 8 GPUs at 262,144 tokens, tp 1, cp 1: the state fits sharded (16
    bytes x 8B / 8), the activations do not even recomputed; every sharding and
    recomputation searched, FP32 moments: a tensor-parallel size (--tp 1 was asked) and
    BF16 moments are what is left to try."""
    spec = dict(gpus=8, model="llama3-8b", gpu="h100-sxm", seq_len=262144, tp="1", cp="1")
    run = recommend(RecommendSpec.of(**spec))
    assert not run.result.plans
    assert memory_hints(run) == ["--tp 2/4/8", "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"]
    bf16 = recommend(RecommendSpec.of(**spec, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"))
    assert not bf16.result.plans and memory_hints(bf16) == ["--tp 2/4/8"]  # not enough
