"""The note recommend prints when the winner spends much of its step in the bubble on a
GPU count whose factors fit neither the layers nor the batch, and fewer GPUs would do
more work a second.

Every plan splits the GPUs as tp x cp x dp x pp (x ep inside), so the count's prime
factors decide which plans exist: 1,000 GPUs are 8 x 5^3, and a global batch of 512
sequences (a power of two) leaves the fives to the pipeline, 125 stages of Llama 3.1
405B's 126 layers with half its step idle. Practitioners leave a few GPUs out instead.
The note searches the same request on ``TRIED`` smaller count(s), each whole
nodes of an odd factor ``ODD`` times a power of two (the counts whose factors the
batch and the layers divide most often), at least half the GPUs, and names the one
that processes the most samples a second, when it beats every GPU by ``GAIN``. Its
tables price the slowest of the job's GPUs, as the winner's do (a few fewer GPUs run
a little faster: a conservative comparison)."""

from __future__ import annotations

from dataclasses import replace

from pptune.costmodel.keys import TableSource
from pptune.costmodel.search import PlanRequest, SearchResult, search
from pptune.plan.what_if import Search

BUBBLE = 0.25  # the winner's bubble above which the note looks (check-config's max_bubble)
ODD = (1, 3, 5, 7, 9)  # odd parts of the counts tried: whole nodes x ODD x a power of two
TRIED = 1  # smaller counts searched: the largest of the forms above (each a whole search)
GAIN = 1.03  # samples a second over the winner's, below which nothing is said


def fewer_counts(gpus: int, per_node: int) -> list[int]:
    """The ``TRIED`` largest counts below ``gpus`` of the form per_node x odd x 2^a
    (odd in ``ODD``), at least half of ``gpus``; largest first."""
    found = set()
    for odd in ODD:
        n = per_node * odd
        if n > gpus:
            continue
        while n * 2 <= gpus:
            n *= 2
        if gpus // 2 <= n < gpus:
            found.add(n)
    return sorted(found, reverse=True)[:TRIED]


def fewer_gpus_what_if(tables: TableSource, req: PlanRequest, result: SearchResult,
                       searching: Search = search) -> str | None:
    """One line naming a smaller GPU count whose best plan processes the global batch
    ``GAIN`` x faster than the winner on every GPU, when the winner's bubble is over
    ``BUBBLE``; None otherwise."""
    if not result.plans or result.plans[0].bubble_rate <= BUBBLE:
        return None
    win = result.plans[0]
    found = []  # (step, count, plan)
    for n in fewer_counts(req.gpus, req.gpus_per_node):
        alt = searching(tables, replace(req, gpus=n, top=1, with_best_1f1b=False)).plans
        if alt:
            found.append((alt[0].step_time_s, n, alt[0]))
    if not found:
        return None
    step, n, a = min(found, key=lambda f: (f[0], -f[1]))
    if win.step_time_s < GAIN * step:
        return None
    return (f"the winner idles {win.bubble_rate:.0%} of its step in the bubble: {req.gpus} "
            f"GPUs leave few splits of the layers and the batch; on {n} of them ({req.gpus - n} "
            f"left out) the best plan, pp={a.pp} dp={a.dp} tp={a.tp}"
            + (f" cp={a.key.cp}" if a.key.cp > 1 else "")
            + f" {a.schedule.value}, steps {step:.3g} s, {win.step_time_s / step:.2f}x the "
            f"samples a second of all {req.gpus} (--gpus {n} ranks its plans)")
