"""The notes recommend prints when its winner fills its GPUs to the reserve, or idles
much of its step for want of micro-batches.

The memory model prices every tensor a step holds plus a reserve for what it does not
count (the CUDA context, NCCL's buffers, the caching allocator's fragmentation:
--reserve-gib, 2 GiB by default). A winner that leaves less than ``TIGHT_BYTES`` beyond
that reserve runs only if the job's real overhead stays within it, which a planner
cannot promise; when a plan listed near it leaves room, the note names it, so the
choice between a fraction of a per cent and an out-of-memory restart is the user's.

Tight is under a twentieth of the GPU's memory free beyond the reserve (what
``--max-memory 0.95`` asks of every plan), and at least 1 GiB; roomy is a plan that
leaves that twentieth, and at least 4 GiB."""

from __future__ import annotations

from pptune.costmodel.search import SearchResult
from pptune.report.fmt import fmt_bytes, fmt_microbatches, fmt_pct

GIB = 1024**3
TIGHT_SHARE = 0.05  # of the GPU's memory: free beyond the reserve under which the note is printed
TIGHT_BYTES = 1 * GIB  # ...and at least this
ROOMY_BYTES = 4 * GIB  # free beyond the reserve of a plan worth naming instead (at least)
NEAR_SHARE = 0.01  # ...at most this share of the winner's step slower
# the bubble share from which the batch is named: check-config's default --max-bubble
# (a display rule, not a cost)
STARVED_BUBBLE = 0.25


def headroom_note(result: SearchResult, reserve_bytes: float, capacity_bytes: float,
                  max_memory: float | None = None) -> str | None:
    """One line when the winner leaves under ``tight`` free beyond the reserve on its
    fullest GPU (module doc), naming the first listed plan within ``NEAR_SHARE`` of its
    step that leaves ``roomy`` or more; None otherwise, and None under a --max-memory
    (``capacity_bytes`` its share of the GPU) that already keeps a twentieth free."""
    if max_memory is not None and 1 - max_memory >= TIGHT_SHARE:
        return None
    tight = max(TIGHT_BYTES, TIGHT_SHARE * capacity_bytes)
    if not result.plans or result.plans[0].headroom_bytes >= tight:
        return None
    best = result.plans[0]
    text = (f"the winner leaves {fmt_bytes(best.headroom_bytes)} free beyond the "
            f"{fmt_bytes(reserve_bytes)} reserve on its fullest GPU")
    roomy = next(((n, p) for n, p in enumerate(result.plans[1:], 2)
                  if p.step_time_s <= best.step_time_s * (1 + NEAR_SHARE)
                  and p.headroom_bytes >= max(ROOMY_BYTES, tight)), None)
    if roomy is not None:
        n, p = roomy
        text += (f"; plan {n}, {p.step_time_s / best.step_time_s - 1:.2%} slower, leaves "
                 f"{fmt_bytes(p.headroom_bytes)}")
    return (text + ": if the job's context, NCCL buffers and fragmentation outgrow the "
            "reserve it runs out of memory (--max-memory 0.95 ranks only plans that "
            "keep a twentieth of the GPU free)")


def starved_note(result: SearchResult, global_batch: int) -> str | None:
    """One line when the winner's pipeline idles ``STARVED_BUBBLE`` of its step or more:
    the global batch, the pipelines it is shared by and the micro-batches each gets for
    its stages (a batch too small for the GPUs is the cause no search can fix)."""
    if not result.plans or result.plans[0].pp <= 1 \
            or result.plans[0].bubble_rate < STARVED_BUBBLE:
        return None
    w = result.plans[0]
    return (f"the winner idles {fmt_pct(w.bubble_rate)} of its step in the pipeline bubble: "
            f"global batch {global_batch} gives each of its {w.dp} pipelines "
            f"{fmt_microbatches(w.num_microbatches, w.micro_batch_size)} for {w.pp} stages; "
            "more micro-batches a pipeline (a larger --global-batch, or fewer GPUs for this "
            "one) shrink it")


def winner_notes(result: SearchResult, reserve_bytes: float, capacity_bytes: float,
                 max_memory: float | None, global_batch: int) -> list[str]:
    """The winner's notes of this module that apply."""
    return [n for n in (headroom_note(result, reserve_bytes, capacity_bytes, max_memory),
                        starved_note(result, global_batch)) if n]
