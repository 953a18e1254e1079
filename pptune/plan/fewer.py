"""The note recommend prints when the winner spends much of its step in the bubble on a
GPU count whose factors fit neither the layers nor the batch, and fewer GPUs would do
more work a second.

Every plan splits the GPUs as tp x cp x dp x pp (x ep inside), so the count's prime
factors decide which plans exist: 1,000 GPUs are 8 x 5^3, and a global batch of 512
sequences (a power of two) leaves the fives to the pipeline, 125 stages of Llama 3.1
405B's 126 layers with half its step idle. Practitioners leave a few GPUs out instead.
The note runs the same recommend on ``TRIED`` smaller count(s), each whole nodes of an
odd factor ``ODD`` times a power of two (the counts whose factors the batch and the
layers divide most often), at least half the GPUs: the plan ``recommend --gpus N``
ranks first, with its own layouts, tables and batch, and names it when it processes
``GAIN`` x the samples a second of every GPU. It runs after the search (the command's,
not ``recommend``'s: a what-if that is itself a whole recommend)."""

from __future__ import annotations

from dataclasses import replace

from pptune.errors import BadInput
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend

BUBBLE = 0.25  # the winner's bubble above which the note looks (check-config's max_bubble)
ODD = (1, 3, 5, 7, 9)  # odd parts of the counts tried: whole nodes x ODD x a power of two
TRIED = 1  # smaller counts tried: the largest of the forms above (each a whole recommend)
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


def fewer_gpus_note(spec: RecommendSpec, run: RecommendRun) -> str | None:
    """One line naming a smaller GPU count whose first plan processes ``GAIN`` x the
    samples a second of ``run``'s winner, when that winner's bubble is over ``BUBBLE``
    and ``--pp`` was not given; None otherwise."""
    plans = run.result.plans
    if spec.space.pp or not plans or plans[0].bubble_rate <= BUBBLE:
        return None
    win, gpus = plans[0], spec.space.gpus
    found = []  # (samples a second, count, the run there)
    for n in fewer_counts(gpus, run.plan_request.gpus_per_node):
        try:
            alt = recommend(replace(spec, space=replace(spec.space, gpus=n), top=1))
        except BadInput:  # a flag the smaller count cannot take (--tp 16 on 8 GPUs)
            continue
        if alt.result.plans:
            found.append((alt.global_batch / alt.result.plans[0].step_time_s, n, alt))
    if not found:
        return None
    rate, n, alt = max(found, key=lambda f: (f[0], f[1]))
    gain = rate / (run.global_batch / win.step_time_s)
    if gain < GAIN:
        return None
    a = alt.result.plans[0]
    batch = (f", at its global batch of {alt.global_batch}"
             if alt.global_batch != run.global_batch else "")
    return (f"the winner idles {win.bubble_rate:.0%} of its step in the bubble: {gpus} GPUs "
            f"leave few splits of the layers and the batch; recommend --gpus {n} ({gpus - n} "
            f"left out) ranks first pp={a.pp} dp={a.dp} tp={a.tp}"
            + (f" cp={a.key.cp}" if a.key.cp > 1 else "")
            + f" {a.schedule.value}"
            + (f" v={a.virtual_stages}" if a.virtual_stages > 1 else "")
            + f", {a.step_time_s:.3g} s a step{batch}: {gain:.2f}x the samples a second "
            f"of all {gpus}")
