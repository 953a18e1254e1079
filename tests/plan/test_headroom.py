"""recommend's note on a winner that fills its GPUs to the reserve (plan/headroom.py)."""

from __future__ import annotations

from types import SimpleNamespace

from pptune.plan.headroom import headroom_note

GIB = 1024**3


def _result(*plans: tuple[float, float]) -> SimpleNamespace:
    """Plans as (step s, free GiB beyond the reserve), ranked as given."""
    return SimpleNamespace(plans=[SimpleNamespace(step_time_s=s, headroom_bytes=f * GIB)
                                  for s, f in plans])


def test_no_note_with_a_gib_free() -> None:
    assert headroom_note(_result((10.0, 1.0), (10.01, 20.0)), 2 * GIB, 16 * GIB) is None  # type: ignore[arg-type]
    assert headroom_note(_result(), 2 * GIB, 16 * GIB) is None  # type: ignore[arg-type]


def test_a_tight_winner_names_the_roomy_plan_within_one_percent() -> None:
    # plan 2 is 0.5% slower with 3 GiB (not roomy), plan 3 0.8% slower with 24 GiB
    note = headroom_note(_result((10.0, 0.25), (10.05, 3.0), (10.08, 24.0)), 2 * GIB, 16 * GIB)  # type: ignore[arg-type]
    assert note is not None
    assert note.startswith("the winner leaves 256.00 MiB free beyond the 2.00 GiB reserve on "
                           "its fullest GPU; plan 3, 0.80% slower, leaves 24.00 GiB: ")
    assert note.endswith("(--max-memory 0.95 ranks only plans that keep a twentieth of "
                         "the GPU free)")


def test_a_roomy_plan_beyond_one_percent_is_not_named() -> None:
    note = headroom_note(_result((10.0, 0.25), (10.2, 24.0)), 2 * GIB, 16 * GIB)  # type: ignore[arg-type]
    assert note is not None and "plan 2" not in note


def test_tight_is_a_twentieth_of_the_gpu() -> None:
    # 80 GiB: under 4 GiB free beyond the reserve is tight, and a plan leaving 4 GiB roomy;
    # 185 GiB: 9.25 GiB, so a plan leaving 5 GiB is not named
    assert headroom_note(_result((10.0, 4.0)), 2 * GIB, 80 * GIB) is None  # type: ignore[arg-type]
    note = headroom_note(_result((10.0, 1.37), (10.001, 28.9)), 2 * GIB, 80 * GIB)  # type: ignore[arg-type]
    assert note is not None and "plan 2, 0.01% slower, leaves 28.90 GiB" in note
    note = headroom_note(_result((10.0, 3.0), (10.0, 5.0), (10.001, 21.4)), 2 * GIB,  # type: ignore[arg-type]
                         185 * GIB)
    assert note is not None and "plan 3, 0.01% slower, leaves 21.40 GiB" in note


def test_no_note_under_a_cap_that_keeps_a_twentieth_free() -> None:
    """--max-memory 0.5 already keeps half the GPU free beyond the plans' share (a user
    trial: the note suggested --max-memory 0.95, which loosens it); a cap of 0.98 keeps
    less than a twentieth, and the note stands."""
    tight = _result((10.0, 0.9))
    assert headroom_note(tight, 2 * GIB, 40 * GIB, max_memory=0.5) is None  # type: ignore[arg-type]
    assert headroom_note(tight, 2 * GIB, 0.95 * 80 * GIB, max_memory=0.95) is None  # type: ignore[arg-type]
    assert headroom_note(tight, 2 * GIB, 0.98 * 80 * GIB, max_memory=0.98) is not None  # type: ignore[arg-type]


def test_a_winner_starved_of_micro_batches_is_told_to_the_batch() -> None:
    """A trial: Llama 3.1 405B on 131,072 GB300 at the default global batch of 512 ranks a
    winner that idles 86% of its step (64 pipelines of 64 stages, 8 micro-batches each)
    and says nothing of the batch; a quarter of the step or more in the bubble is said,
    with the counts that make it."""
    from pptune.plan.headroom import starved_note

    def plan(bubble: float, pp: int = 64) -> SimpleNamespace:
        return SimpleNamespace(bubble_rate=bubble, pp=pp, dp=64, num_microbatches=8,
                               micro_batch_size=1)

    note = starved_note(SimpleNamespace(plans=[plan(0.862)]), 512)  # type: ignore[arg-type]
    assert note == ("the winner idles 86.2% of its step in the pipeline bubble: global "
                    "batch 512 gives each of its 64 pipelines 8 micro-batches of 1 for 64 "
                    "stages; more micro-batches a pipeline (a larger --global-batch, or "
                    "fewer GPUs for this one) shrink it")
    assert starved_note(SimpleNamespace(plans=[plan(0.249)]), 512) is None  # type: ignore[arg-type]
    assert starved_note(SimpleNamespace(plans=[plan(0.5, pp=1)]), 512) is None  # type: ignore[arg-type]
    assert starved_note(SimpleNamespace(plans=[]), 512) is None  # type: ignore[arg-type]
