"""recommend's note where a size the user forced (--tp, --cp, --ep) costs the winner
(plan/forced.py): a tensor-parallel group that spans nodes, or a step slower than the
best plan with the forced sizes searched by more than check-config's slower-than-best
limit (1.10x, its --max-slowdown default): the files --emit writes hold the sizes, so
this note is where their cost is said. From a user trial: --tp 16 on nodes of 8 and
--cp 8 on 4,096 tokens said nothing."""

from __future__ import annotations

import dataclasses

from pptune.plan.emit import emit
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
    assert said.startswith("forced --cp 8: the best plan with --cp searched, pp=")
    assert f"steps {free:.4g} s ({forced / free:.2f}x faster)" in said


def test_a_forced_tp_across_nodes_is_said_with_the_best_without_it() -> None:
    (said,), forced = forced_notes(gpus=32, model="llama3-8b", tp="16")
    _, free = forced_notes(gpus=32, model="llama3-8b")
    assert said.startswith("forced --tp 16: the winner's tensor-parallel group spans 2 nodes "
                           "of 8 GPUs (its collectives in every layer run over the network); "
                           "the best plan with --tp searched, pp=")
    assert f"steps {free:.4g} s ({forced / free:.2f}x faster)" in said


def test_nothing_is_said_of_a_forced_size_that_costs_little_or_of_none() -> None:
    assert forced_notes(gpus=32, model="llama3-8b", tp="1")[0] == []
    assert forced_notes(gpus=32, model="llama3-8b")[0] == []


def test_emit_says_what_a_forced_size_costs_the_plan_it_writes_in_place_of_the_winner() -> None:
    """--cp 4 on Llama 3 70B over 32 GPUs: the winner (zero3) steps within 1.10x of the
    best plan with --cp searched, so recommend says nothing; torchtitan's files state no
    ZeRO-3 and the plan written steps more than 1.10x that best plan: --emit says so,
    against the same best plan."""
    run = recommend(dataclasses.replace(
        RecommendSpec.of(gpus=32, model="llama3-70b", cp="4"), top=1))
    assert run.forced is not None and run.forced.best is not None
    assert run.forced.note(run.result.plans[0]) is None
    emitted = emit("torchtitan", run)
    best, written = run.forced.best.step_time_s, emitted.plan.step_time_s
    assert written / best > 1.10
    (said,) = [n for n in emitted.notes if n.startswith("forced ")]
    assert said.startswith("forced --cp 4: the best plan with --cp searched, pp=")
    assert said.endswith(f"steps {best:.4g} s ({written / best:.2f}x faster than the plan "
                         "written)")


def test_emit_adds_nothing_where_the_plan_written_steps_within_the_limit() -> None:
    """Megatron-LM's kernels re-price the winner (1.02x), still within 1.10x of the best
    plan without --cp: nothing to say."""
    run = recommend(dataclasses.replace(
        RecommendSpec.of(gpus=32, model="llama3-8b", cp="2"), top=1))
    emitted = emit("megatron", run)
    assert run.forced is not None and run.forced.best is not None
    assert emitted.plan.step_time_s != run.result.plans[0].step_time_s
    assert emitted.plan.step_time_s / run.forced.best.step_time_s <= 1.10
    assert not [n for n in emitted.notes if n.startswith("forced ")]
