"""recommend's note where a size the user forced (--tp, --cp, --ep) costs the winner
(plan/forced.py): a tensor-parallel group that spans nodes, or a step slower than the
best plan without the forced sizes by more than check-config's slower-than-best limit
(1.10x, its --max-slowdown default), so that recommend says what check-config of the
written file would. From a user trial: --tp 16 on nodes of 8 and --cp 8 on 4,096 tokens
said nothing."""

from __future__ import annotations

import dataclasses

from pptune.plan.recommend import RecommendSpec, recommend


def forced_notes(**flags: object) -> tuple[list[str], float]:
    run = recommend(dataclasses.replace(RecommendSpec.of(**flags), top=1))
    return [n for n in run.result.notes + run.notes if n.startswith("forced ")], \
        run.result.plans[0].step_time_s


def test_a_forced_cp_much_slower_than_the_best_without_it_is_said() -> None:
    """cp 8 leaves 512 tokens a rank: the best plan without --cp (the search's own
    winner, taken from the same search) steps at least 10% faster."""
    (said,), forced = forced_notes(gpus=64, model="llama3-8b", seq_len=4096, cp="8")
    _, free = forced_notes(gpus=64, model="llama3-8b", seq_len=4096)
    assert forced / free > 1.10
    assert said.startswith("forced --cp 8: the best plan without it, pp=")
    assert f"steps {free:.4g} s ({forced / free:.2f}x faster)" in said


def test_a_forced_tp_across_nodes_is_said_with_the_best_without_it() -> None:
    (said,), forced = forced_notes(gpus=32, model="llama3-8b", tp="16")
    _, free = forced_notes(gpus=32, model="llama3-8b")
    assert said.startswith("forced --tp 16: the winner's tensor-parallel group spans 2 nodes "
                           "of 8 GPUs (its collectives in every layer run over the network); "
                           "the best plan without it, pp=")
    assert f"steps {free:.4g} s ({forced / free:.2f}x faster)" in said


def test_nothing_is_said_of_a_forced_size_that_costs_little_or_of_none() -> None:
    assert forced_notes(gpus=32, model="llama3-8b", tp="1")[0] == []
    assert forced_notes(gpus=32, model="llama3-8b")[0] == []
