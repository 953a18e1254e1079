"""Recomputation per stage: the memory-bound stages recompute, the others do not.

Full recomputation of every block (``Recompute.FULL``) is priced by the
busiest stage only where memory binds: under 1F1B stage s holds
``min(m, p - s)`` micro-batches' activations, so the first stages need
recomputation long before the last ones do. ``fit_stage_recompute`` starts
from a plan that fits with every block recomputed and gives each stage the
fewest recomputed blocks (the first N_k of stage k, Megatron-LM's block
method with a count per stage) with which every pipeline rank still fits:
each recomputed block keeps only its input instead of its saved tensors and
runs its forward again before its backward (memory.with_groups_recomputed),
so fewer recomputed blocks are never slower. A rank's peak depends only on
its own stages' activations in the schedule's op order (simulate.py), so
the ranks are fitted independently: an over-full rank adds blocks on its
stage with the most micro-batches in flight (an estimate from the blocks'
savings, then its peak counted again until it fits), and a last pass takes
back a block wherever the rank still fits without it. The peaks are counted
on the op order alone (``activation_peaks``); the fitted plan is simulated.

The split stays the one found for full recomputation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from pptune.costmodel.evaluate import (
    Plan,
    PlanRequest,
    PlanSpec,
    device_memory,
    evaluate,
    stage_layout,
)
from pptune.costmodel.inflight import held_stages, peak_inflight_per_stage, rank_peak
from pptune.costmodel.memory import (
    Recompute,
    recomputed_layers,
    recomputed_per_stage,
    stage_recomputed_layers,
)
from pptune.costmodel.partition import stage_bounds
from pptune.costmodel.schedules import chains, stage_chunk_map, stage_devices
from pptune.costmodel.table import CostTable, named_blocks


def stage_blocks(names: list[str] | tuple[str, ...], stage_layers: list[int] | tuple[int, ...]
                 ) -> list[int]:
    """Transformer blocks per stage (what full recomputation reruns)."""
    return recomputed_per_stage(names, stage_layers, recomputed_layers(names, Recompute.FULL))


def fit_stage_recompute(table: CostTable, req: PlanRequest, plan: Plan,
                        limit_s: float = math.inf) -> tuple[Plan, int]:
    """(the plan with the fewest recomputed blocks per stage that fits, simulations run).

    ``plan`` recomputes every block and fits; it comes back unchanged when every
    block is needed, with ``recompute`` none when no stage needs any, and unchanged
    when the fitted plan is not faster than ``limit_s`` (a search's cut-off). The
    counts are one per model chunk (``plan.stage_layers``): under dualpipe each
    chunk runs on two ranks, and its count binds both copies. They are fitted on
    each rank's activation peak in the schedule's op order (``activation_peaks``:
    the simulator's own accounting, without its timing); the result is simulated."""
    if plan.recompute is not Recompute.FULL or plan.recompute_layers is not None:
        return plan, 0
    if step_bound(table, plan, [0] * len(plan.stage_layers)) >= limit_s:
        return plan, 0  # not even recomputing nothing comes in under the cut-off
    counts = fitted_counts(table, req, plan.spec)
    if counts is None:
        return plan, 0
    cap = table.memory_bytes
    if step_bound(table, plan, counts) >= limit_s:  # cannot come in under the cut-off
        return plan, 0
    fitted = evaluate(table, req, replace(plan.spec, recompute_layers=tuple(counts)))
    if max(fitted.peak_memory_bytes) > cap:  # the walk and the simulator disagree: keep full
        return plan, 1
    if fitted.step_time_s >= limit_s:  # not among the search's best: no need to list it
        return plan, 1
    if not any(counts):
        return replace(fitted, recompute=Recompute.NONE, recompute_layers=None), 1
    return fitted, 1


def fitted_counts(table: CostTable, req: PlanRequest, spec: PlanSpec) -> list[int] | None:
    """The fewest recomputed blocks per model chunk with which every rank of ``spec``
    (full recomputation, its split) fits, or None where every block is needed or no
    counts fit: from memory alone (module docstring), nothing simulated."""
    names, split = list(table.names), list(spec.stage_layers)
    chunks = _Chunks.of(spec)
    blocks = stage_blocks(names, split)
    inflight = peak_inflight_per_stage(spec.schedule, spec.pp, spec.num_microbatches,
                                       spec.virtual_stages)
    saving = _savings(table, spec.micro_batch_size, split)
    cap = table.memory_bytes
    # what a rank holds besides activations does not depend on recomputation
    plain = replace(spec, recompute=Recompute.NONE)
    base = [mem.total_bytes for mem in device_memory(req, plain, stage_layout(table, req, plain),
                                                     [0.0] * spec.pp)]
    c = table.by_mb[spec.micro_batch_size]
    bounds = stage_bounds(split)
    named = named_blocks(names)
    firsts = [[i for i in range(s, e) if named[i]] for s, e in bounds]
    # a chunk's activation bytes with its first n blocks recomputed, summed in layer order
    # as stage_recomputed_layers' choice would be: the walk asks for the same few again
    sums: dict[tuple[int, int], float] = {}

    def chunk_act(k: int, n: int) -> float:
        if (k, n) not in sums:
            if not 0 <= n <= len(firsts[k]):
                raise ValueError(f"{n} recomputed blocks on a stage of {len(firsts[k])} blocks")
            redo = set(firsts[k][:n])
            s, e = bounds[k]
            sums[k, n] = sum(min(c.act_bytes[i], c.out_bytes[i - 1] if i else 0.0)
                             if i in redo else c.act_bytes[i] for i in range(s, e))
        return sums[k, n]

    held = held_stages(spec.schedule, spec.pp, spec.num_microbatches, spec.virtual_stages,
                       spec.combined)
    chunks_on = [[chunks.chunk_of[g] for g in chunks.stages_on[d]] for d in range(spec.pp)]

    def peak(d: int, counts: list[int]) -> float:
        # a rank's peak depends on its own chunks' counts only (activation_peaks by rank)
        act = rank_peak(spec.schedule, spec.pp, spec.num_microbatches, spec.virtual_stages, d,
                        tuple(chunk_act(chunks.chunk_of[k], counts[chunks.chunk_of[k]])
                              for k in held[d]), spec.combined)
        # and the most one backward re-creates: a recomputed block's saving (device_memory)
        rerun = 0.0
        for ch in chunks_on[d]:
            rerun = max(rerun, max(saving[ch][:counts[ch]], default=0.0))
        return base[d] + act + rerun

    def peaks(counts: list[int]) -> list[float]:
        return [peak(d, counts) for d in range(spec.pp)]

    if req.uniform_recompute:
        return _uniform(cap, blocks, peaks)
    counts = [0] * len(split)
    for _ in range(sum(blocks) + 1):
        over = [(d, peak - cap) for d, peak in enumerate(peaks(counts)) if peak > cap]
        if not over:
            break
        if not _grow(chunks, counts, blocks, inflight, saving, over):
            return None
    else:
        return None
    _trim(cap, chunks, counts, peak)
    return None if counts == blocks else counts


def _uniform(cap: float, blocks: list[int], peaks: Callable[[list[int]], list[float]]
             ) -> list[int] | None:
    """The first N blocks of every chunk (fewer where a chunk has fewer), the least N
    with which every rank fits; None where that recomputes every block or none fits.
    A rank's peak does not grow with N, so N is bisected."""
    def counts(n: int) -> list[int]:
        return [min(n, b) for b in blocks]

    def fit(n: int) -> bool:
        return all(peak <= cap for peak in peaks(counts(n)))

    low, high = 0, max(blocks, default=0)
    if not fit(high):
        return None
    while low < high:
        mid = (low + high) // 2
        if fit(mid):
            high = mid
        else:
            low = mid + 1
    return None if counts(low) == blocks else counts(low)


@dataclass(frozen=True)
class _Chunks:
    """Where a plan's model chunks run: the chunk of each global stage and its rank
    (dualpipe: each chunk on two stages, one a direction; otherwise one each)."""

    chunk_of: tuple[int, ...]
    device_of: tuple[int, ...]
    runs: float  # micro-batches each global stage runs

    @classmethod
    def of(cls, plan: Plan | PlanSpec) -> _Chunks:
        chunk_of = stage_chunk_map(plan.schedule, plan.pp, plan.virtual_stages)
        return cls(tuple(chunk_of),
                   stage_devices(plan.schedule, plan.pp, len(chunk_of)),
                   plan.num_microbatches / chains(plan.schedule))

    def devices(self, chunk: int) -> set[int]:
        return self._ranks[chunk]

    @functools.cached_property
    def _ranks(self) -> list[set[int]]:
        """Per chunk, the ranks it runs on."""
        out: list[set[int]] = [set() for _ in range(max(self.chunk_of, default=-1) + 1)]
        for ch, d in zip(self.chunk_of, self.device_of, strict=True):
            out[ch].add(d)
        return out

    @functools.cached_property
    def stages_on(self) -> list[list[int]]:
        """Per rank, its global stages in order."""
        out: list[list[int]] = [[] for _ in range(max(self.device_of, default=-1) + 1)]
        for g, d in enumerate(self.device_of):
            out[d].append(g)
        return out


def step_bound(table: CostTable, plan: Plan, counts: list[int]) -> float:
    """A lower bound on the step of ``plan`` with only the first ``counts[k]`` blocks of
    chunk k recomputed: ``busy_bound``, or ``plan``'s own step less every forward no
    longer rerun on any rank. Op orders are fixed, so every time in the step is a sum
    of op times along some chain of dependencies (and link queues); shortening ops
    shortens the step by at most the total they lose."""
    removed = _removed(table, plan, counts)
    return max(busy_bound(table, plan, counts), plan.step_time_s - sum(removed))


def _removed(table: CostTable, plan: Plan, counts: list[int]) -> list[float]:
    """Per rank, the seconds of rerun forwards (and their all-to-alls) a step loses when
    only the first ``counts[k]`` blocks of chunk k are recomputed."""
    names, split = list(table.names), list(plan.stage_layers)
    c = table.by_mb[plan.micro_batch_size]
    chunks = _Chunks.of(plan)
    gone = set(recomputed_layers(names, Recompute.FULL)) - set(
        stage_recomputed_layers(names, split, counts))
    per_chunk = [sum(c.fwd_s[i] + (c.fwd_a2a_s[i] if c.fwd_a2a_s else 0.0)
                     for i in range(s, e) if i in gone) for s, e in stage_bounds(split)]
    removed = [0.0] * plan.pp
    for ch, d in zip(chunks.chunk_of, chunks.device_of, strict=True):
        removed[d] += chunks.runs * per_chunk[ch]
    return removed


def busy_bound(table: CostTable, plan: Plan, counts: list[int]) -> float:
    """A lower bound on the step of ``plan`` (every block recomputed) with only the first
    ``counts[k]`` blocks of chunk k recomputed: the busiest rank's compute once the
    forwards it no longer reruns are gone. A rank computes one op at a time, so its
    compute time bounds the step; each block not recomputed takes its forward (and the
    dispatch and combine it reran, MoE) out of the rank's backward, once for every
    micro-batch its stage runs (memory.with_groups_recomputed)."""
    removed = _removed(table, plan, counts)
    # compute only: what a rank's ops wait on for communication can overlap other work
    return max(dev.busy_s - dev.exposed_comm_s - removed[d]
               for d, dev in enumerate(plan.sim.devices))


def _savings(table: CostTable, b: int, split: list[int]) -> list[list[float]]:
    """Per stage, the bytes each of its blocks stops holding per micro-batch when
    recomputed (its saved tensors less its input), in block order."""
    c = table.by_mb[b]
    out = []
    for s, e in stage_bounds(split):
        out.append([max(0.0, c.act_bytes[i] - (c.out_bytes[i - 1] if i else 0.0))
                    for i in range(s, e) if table.names[i].startswith("block")])
    return out


def _trim(cap: float, chunks: _Chunks, counts: list[int],
          peak: Callable[[int, list[int]], float]) -> None:
    """Drop recomputed blocks wherever every rank of the chunk still fits without them
    (the estimate in ``_grow`` can overshoot where a rank holds several stages);
    ``peak(d, counts)``: rank d's peak."""
    for k in range(len(counts)):
        ranks = chunks.devices(k)
        while counts[k]:
            counts[k] -= 1
            if any(peak(d, counts) > cap for d in ranks):
                counts[k] += 1
                break


def _grow(chunks: _Chunks, counts: list[int], blocks: list[int], inflight: list[int],
          saving: list[list[float]], over: list[tuple[int, float]]) -> bool:
    """Add recomputed blocks on each over-full rank, on its stage with the most
    micro-batches in flight; False when none can be added."""
    grew = False
    for d, excess in over:
        mine = [g for g in chunks.stages_on[d] if counts[chunks.chunk_of[g]] < blocks[
            chunks.chunk_of[g]]]
        if not mine:
            continue
        g = max(mine, key=lambda j: (inflight[j], -j))
        k = chunks.chunk_of[g]
        need, freed = 0, 0.0
        for step in saving[k][counts[k]:]:
            need += 1
            freed += inflight[g] * step
            if freed >= excess:
                break
        counts[k] += max(1, min(need, blocks[k] - counts[k]))
        grew = True
    return grew


def summary_blocks(table: CostTable, plan: Plan, every: int | None) -> list[int]:
    """Blocks recomputed in full on each stage of ``plan`` (its per-stage counts, or what
    its uniform choice recomputes)."""
    if plan.recompute_layers is not None:
        return list(plan.recompute_layers)
    layers = recomputed_layers(table.names, plan.recompute, every)
    return recomputed_per_stage(table.names, plan.stage_layers, layers)

