"""Recomputation per stage: the counts the fitter chooses (hand-derived), the
per-stage table, the activation walk against the simulator, and the search."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.evaluate import PlanRequest, PlanSpec, evaluate, stage_layout
from pptune.costmodel.inflight import activation_peaks
from pptune.costmodel.memory import (
    Recompute,
    recomputed_per_stage,
    stage_recomputed_layers,
    with_recompute,
)
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import search
from pptune.costmodel.sharding import Sharding
from pptune.costmodel.simulate import Link, simulate
from pptune.costmodel.splitting import layout_bound
from pptune.costmodel.stage_recompute import (
    busy_bound,
    fit_stage_recompute,
    fitted_counts,
    stage_blocks,
    step_bound,
    summary_blocks,
)
from pptune.costmodel.table import CostTable, LayerCosts

SPLIT = (3, 2, 2, 3)  # embedding + 2 blocks, 2, 2, 2 blocks + head


def _table(memory: float, n_blocks: int = 8) -> CostTable:
    """Every layer: F 1 s, B 2 s, 100 activation bytes, 5 output bytes, 1 parameter."""
    names = ["embedding", *[f"block{i}" for i in range(n_blocks)], "head"]
    n = len(names)
    costs = LayerCosts([1.0] * n, [2.0] * n, [0.0] * n, [100.0] * n, [5.0] * n)
    return CostTable(names, [2.0] * n, 2, {1: costs}, 128, memory,
                     Link(0.0), Link(0.0), AllReduceLink(0.0, 1e9), AllReduceLink(0.0, 1e9))


REQ = PlanRequest(gpus=4, global_batch=8, reserve_bytes=0.0)


def _full(table: CostTable, split: tuple[int, ...] = SPLIT) -> object:
    return evaluate(table, REQ, PlanSpec(Schedule.ONE_F_ONE_B, 4, 1, 8, split,
                                         recompute=Recompute.FULL))


def test_the_first_blocks_of_each_stage_recompute() -> None:
    names = list(_table(1e9).names)
    # stage 0 holds layers 0-2 (blocks 1, 2), stage 1 layers 3-4
    assert stage_recomputed_layers(names, SPLIT, (2, 1, 0, 0)) == [1, 2, 3]
    assert stage_blocks(names, SPLIT) == [2, 2, 2, 2]
    assert recomputed_per_stage(names, SPLIT, [1, 2, 3]) == [2, 1, 0, 0]
    with pytest.raises(ValueError, match="3 recomputed blocks on a stage of 2"):
        stage_recomputed_layers(names, SPLIT, (3, 0, 0, 0))
    table = with_recompute(_table(1e9), Recompute.NONE, per_stage=(SPLIT, (2, 1, 0, 0)))
    c = table.by_mb[1]
    # recomputed: input (5 bytes) kept, forward (1 s) again in the backward
    assert list(c.act_bytes) == [100, 5, 5, 5, 100, 100, 100, 100, 100, 100]
    assert list(c.bwd_s) == [2, 3, 3, 3, 2, 2, 2, 2, 2, 2]


def test_only_the_memory_bound_stages_recompute() -> None:
    # 1F1B pp 4, m 8: stages hold 4, 3, 2, 1 micro-batches. A recomputed block frees
    # 100 - 5 = 95 bytes per micro-batch, and its backward re-creates those 95 bytes
    # once (r > 0). Besides activations: 18 bytes of state per parameter (one per
    # layer) and a 5-byte p2p buffer per boundary side. Under 600 bytes:
    #   rank 0: 54 + 5 + 4 x (300 - 95 r) + 95 -> r = 2: 594 (r = 1: 974)
    #   rank 1: 36 + 10 + 3 x (200 - 95 r) + 95 -> r = 1: 456 (r = 0: 646)
    #   rank 2: 36 + 10 + 2 x 200 = 446;  rank 3: 54 + 5 + 300 = 359: no recomputation
    table = _table(600.0)
    plan, runs = fit_stage_recompute(table, REQ, _full(table))  # type: ignore[arg-type]
    assert plan.recompute_layers == (2, 1, 0, 0) and plan.recompute is Recompute.FULL
    assert plan.peak_memory_bytes == [594.0, 456.0, 446.0, 359.0]
    assert runs == 1  # the counts are fitted on the op order's peaks; one simulation
    # three blocks recomputed instead of eight: three forwards more than none, five fewer
    # than full
    assert plan.step_time_s < _full(table).step_time_s  # type: ignore[attr-defined]
    assert summary_blocks(table, plan, None) == [2, 1, 0, 0]
    assert summary_blocks(table, _full(table), None) == [2, 2, 2, 2]  # type: ignore[arg-type]
    # the same counts from memory alone, before anything is simulated (what the search
    # bounds a fitted plan by); none where every block is needed
    spec = _full(table).spec  # type: ignore[attr-defined]
    assert fitted_counts(table, REQ, spec) == [2, 1, 0, 0]
    assert fitted_counts(_table(300.0), REQ, spec) is None


def test_one_count_for_every_stage_is_the_least_that_fits_the_busiest() -> None:
    # Megatron-LM's block method: the first N blocks of every stage, one N. 12 blocks as
    # (4, 3, 3, 4): embedding + 3 blocks, 3, 3, 3 blocks + head. Memory 1,100 bytes:
    #   rank 0: 72 + 5 + 4 x (400 - 95 r) + 95 -> r = 2: 1,012 (r = 1: 1,392)
    #   rank 1: 54 + 10 + 3 x 300 = 964 fits without; ranks 2, 3 likewise
    # per stage (2, 0, 0, 0); one count for all: N = 2, three stages recompute 2 of 3
    table = _table(1100.0, n_blocks=12)
    split = (4, 3, 3, 4)
    spec = _full(table, split).spec  # type: ignore[attr-defined]
    assert fitted_counts(table, REQ, spec) == [2, 0, 0, 0]
    uniform = replace(REQ, uniform_recompute=True)
    assert fitted_counts(table, uniform, spec) == [2, 2, 2, 2]
    plan, _ = fit_stage_recompute(table, uniform, _full(table, split))  # type: ignore[arg-type]
    assert plan.recompute_layers == (2, 2, 2, 2)
    assert plan.peak_memory_bytes[0] == 1012.0
    # where rank 0 needs all three, one count for all is full recomputation: none
    assert fitted_counts(_table(900.0, n_blocks=12), uniform, spec) is None


def test_no_stage_needs_it_and_none_fits_either() -> None:
    table = _table(1e9)
    plan, _ = fit_stage_recompute(table, REQ, _full(table))  # type: ignore[arg-type]
    assert (plan.recompute, plan.recompute_layers) == (Recompute.NONE, None)


def test_a_plan_slower_than_the_cut_off_is_left_as_it_is() -> None:
    table = _table(600.0)
    full = _full(table)
    plan, runs = fit_stage_recompute(table, REQ, full, limit_s=1.0)  # type: ignore[arg-type]
    assert plan is full and runs == 0  # its busiest rank alone outlasts 1 s: not simulated
    # a cut-off the bound cannot rule out: simulated, and slower than it
    plan, runs = fit_stage_recompute(table, REQ, full, limit_s=90.0)  # type: ignore[arg-type]
    assert plan is full and runs == 1


def test_the_busy_bound_is_the_busiest_ranks_compute() -> None:
    """F 1 s, B 2 s a layer, m 8; every block recomputed adds its 1 s forward to B. With
    (2, 1, 0, 0) blocks recomputed: rank 0 (embedding, 2 blocks, both rerun) 8 x (3 + 6
    + 2) = 88 s, rank 1 8 x (2 + 4 + 1) = 56, rank 2 48, rank 3 (2 blocks, head) 72."""
    table = _table(500.0)
    full = _full(table)
    assert busy_bound(table, full, [2, 1, 0, 0]) == 88.0  # type: ignore[arg-type]
    assert busy_bound(table, full, [0, 0, 0, 0]) == 72.0  # type: ignore[arg-type]
    fitted = evaluate(table, REQ, replace(full.spec, recompute_layers=(2, 1, 0, 0)))  # type: ignore[attr-defined]
    assert [d.busy_s for d in fitted.sim.devices] == [88.0, 56.0, 48.0, 72.0]
    assert fitted.step_time_s >= 88.0


def test_the_step_bound_is_the_full_step_less_every_forward_not_rerun() -> None:
    """The full plan's step is 115 s. One block fewer on rank 3 takes 8 forwards of 1 s
    out of its backwards: the step can fall by at most 8 s, to 107, which is what
    the simulator gives. With (2, 1, 0, 0) the plan loses 40 s of forwards: the busy
    bound (88 s) is the tighter one there (the step is 101 s)."""
    table = _table(500.0)
    full = _full(table)
    assert full.step_time_s == 115.0  # type: ignore[attr-defined]
    assert step_bound(table, full, [2, 2, 2, 1]) == 107.0  # type: ignore[arg-type]
    fitted = evaluate(table, REQ, replace(full.spec, recompute_layers=(2, 2, 2, 1)))  # type: ignore[attr-defined]
    assert fitted.step_time_s == 107.0
    assert step_bound(table, full, [2, 1, 0, 0]) == 88.0  # type: ignore[arg-type]
    assert evaluate(table, REQ, replace(full.spec, recompute_layers=(2, 1, 0, 0))).step_time_s == 101.0  # type: ignore[attr-defined]


def _dualpipe(table: CostTable, recompute: Recompute = Recompute.FULL,
              counts: tuple[int, ...] | None = None) -> object:
    return evaluate(table, REQ, PlanSpec(Schedule.DUALPIPE, 4, 1, 8, SPLIT,
                                         recompute=recompute, recompute_layers=counts))


def test_a_dualpipe_chunk_count_binds_both_of_its_copies() -> None:
    """dualpipe pp 4, m 8: rank d runs chunk d one way and chunk 3 - d the other, so
    ranks 0 and 3 hold chunks 0 and 3 and peak at 1,618 bytes without recomputation
    (ranks 1 and 2 at 1,092). Under a 1,500-byte cap one recomputed block of chunk 0
    frees 95 bytes for each of the 4 micro-batches its copy holds on rank 0 and on
    rank 3, and a backward re-creates 95: both fall to 1,333, and one block more than
    needed is none."""
    assert [round(x) for x in _dualpipe(_table(1e9), Recompute.NONE).peak_memory_bytes] == [  # type: ignore[attr-defined]
        1618, 1092, 1092, 1618]
    table = _table(1500.0)
    plan, runs = fit_stage_recompute(table, REQ, _dualpipe(table))  # type: ignore[arg-type]
    assert (plan.recompute, plan.recompute_layers, runs) == (Recompute.FULL, (1, 0, 0, 0), 1)
    assert [round(x) for x in plan.peak_memory_bytes] == [1333, 1092, 1092, 1333]
    assert plan.step_time_s < _dualpipe(table).step_time_s  # type: ignore[attr-defined]


def test_a_dualpipe_fit_keeps_no_block_it_does_not_need() -> None:
    # tighter: every rank fits, and dropping any recomputed block overflows one (the
    # simulator's own memory, not the fit's walk)
    table = _table(800.0)
    plan, _ = fit_stage_recompute(table, REQ, _dualpipe(table))  # type: ignore[arg-type]
    counts = plan.recompute_layers
    assert counts is not None and max(plan.peak_memory_bytes) <= 800.0
    for k, n in enumerate(counts):
        if n:
            fewer = tuple(c - (j == k) for j, c in enumerate(counts))
            assert max(_dualpipe(table, counts=fewer).peak_memory_bytes) > 800.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(("schedule", "v", "split"), [
    (Schedule.GPIPE, 1, (3, 2, 2, 3)),
    (Schedule.ONE_F_ONE_B, 1, (3, 2, 2, 3)),
    (Schedule.ZB_H1, 1, (2, 3, 3, 2)),
    (Schedule.INTERLEAVED, 2, (2, 1, 1, 1, 1, 1, 1, 2)),
    (Schedule.ZBV, 2, (1, 2, 1, 1, 1, 1, 1, 2)),
])
@pytest.mark.parametrize("m", [4, 8, 20])
def test_the_activation_walk_is_the_simulators(schedule: Schedule, v: int,
                                               split: tuple[int, ...], m: int) -> None:
    table = _table(1e9)
    spec = PlanSpec(schedule, 4, 1, m, split, v, recompute=Recompute.FULL,
                    recompute_layers=tuple(min(1, b) for b in stage_blocks(table.names, split)))
    stages = stage_layout(table, REQ, spec).stages
    sim = simulate(schedule, 4, m, stages, v=v, keep_events=False)
    walk = activation_peaks(schedule, 4, m, v, [s.act_bytes for s in stages])
    assert walk == [d.peak_activation_bytes for d in sim.devices]


@pytest.mark.parametrize("m", [8, 12, 20])  # DualPipeV needs m >= its 2 x pp stages
def test_the_activation_walk_is_the_simulators_under_dualpipev(m: int) -> None:
    """Its F&B pairs: a pair's forward counts before its backward frees."""
    test_the_activation_walk_is_the_simulators(Schedule.DUALPIPEV, 2, (1, 2, 1, 1, 1, 1, 1, 2), m)


@pytest.mark.parametrize("m", [8, 12, 20])
def test_the_activation_walk_is_the_simulators_under_dualpipe(m: int) -> None:
    """Both directions: each chunk's two copies, on two ranks."""
    test_the_activation_walk_is_the_simulators(Schedule.DUALPIPE, 1, SPLIT, m)


def test_the_search_recomputes_where_memory_binds() -> None:
    table = _table(600.0)
    req = replace(REQ, pp=[4], schedules=(Schedule.ONE_F_ONE_B,), micro_batch_sizes=(1,),
                  recomputes=(Recompute.NONE, Recompute.FULL), top=1)
    best = search(table, req).plans[0]
    assert best.recompute_layers is not None and 0 < sum(best.recompute_layers) < 8
    assert max(best.peak_memory_bytes) <= 600.0
    uniform = evaluate(table, req, replace(best.spec, recompute_layers=None))
    assert best.step_time_s < uniform.step_time_s
    # full recomputation alone asked for: every block recomputes, as asked
    only_full = search(table, replace(req, recomputes=(Recompute.FULL,))).plans[0]
    assert only_full.recompute_layers is None and only_full.recompute is Recompute.FULL


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_bound_without_recomputation_holds_for_any_counts(data: st.DataObject) -> None:
    # the search bounds a plan fitted per stage by its split recomputing nothing, with
    # its data-parallel tails and optimizer step (splitting.layout_bound): no counts of
    # recomputed blocks simulate faster, however slow the data-parallel link
    n_blocks = data.draw(st.integers(4, 8))
    names = ["embedding", *[f"block{i}" for i in range(n_blocks)], "head"]
    n = len(names)
    fwd = data.draw(st.lists(st.floats(0.01, 2.0), min_size=n, max_size=n))
    costs = LayerCosts(fwd, [2.0 * f for f in fwd], [0.0] * n, [100.0] * n, [5.0] * n)
    bw = data.draw(st.sampled_from([1e3, 1e4, 1e9]))
    params = data.draw(st.lists(st.floats(1.0, 50.0), min_size=n, max_size=n))
    table = CostTable(names, params, 2, {1: costs}, 128, 1e12, Link(0.0), Link(0.0),
                      AllReduceLink(0.0, bw), AllReduceLink(1e-3, bw / 2))
    pp, dp = data.draw(st.sampled_from([(2, 2), (2, 4), (4, 2)]))
    schedule = data.draw(st.sampled_from([Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED]))
    v = 2 if schedule is Schedule.INTERLEAVED else 1
    assume(n >= pp * v)
    req = PlanRequest(gpus=pp * dp, global_batch=2 * pp * dp, reserve_bytes=0.0,
                      overlap_grad_reduce=data.draw(st.booleans()))
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), min_size=pp * v - 1,
                                    max_size=pp * v - 1)))
    bounds = [0, *cuts, n]
    split = tuple(b - a for a, b in itertools.pairwise(bounds))
    none = PlanSpec(schedule, pp, 1, 2 * pp, split, v,
                    sharding=data.draw(st.sampled_from([Sharding.NONE, Sharding.ZERO1])))
    blocks = stage_blocks(names, split)
    counts = tuple(data.draw(st.integers(0, c)) for c in blocks)
    fitted = replace(none, recompute=Recompute.FULL, recompute_layers=counts)
    step = evaluate(table, req, fitted).step_time_s
    assert layout_bound(table, req, none) <= step * (1 + 1e-9) + 1e-12


def test_without_a_pipeline_the_fit_recomputes_the_blocks_memory_needs() -> None:
    # one GPU, pp 1: one micro-batch in flight. State 18 bytes x 10 layers = 180; each
    # layer keeps 100 activation bytes, a recomputed block 5 (95 freed), and the
    # backward re-creates 95 bytes once (r > 0): 180 + 1000 - 95 r + 95 <= 1000 needs
    # r = 3 (990 bytes; r = 2: 1085), a step 3 forwards (3 s) a micro-batch slower
    # than none, 5 s faster than all 8 blocks (Megatron-LM --recompute-num-layers 3)
    table = _table(1000.0)
    req = PlanRequest(gpus=1, global_batch=2, reserve_bytes=0.0, pp=[1],
                      schedules=(Schedule.ONE_F_ONE_B,), micro_batch_sizes=(1,),
                      shardings=(Sharding.NONE,), recomputes=(Recompute.NONE, Recompute.FULL),
                      top=1)
    best = search(table, req).plans[0]
    assert best.pp == 1 and best.recompute_layers == (3,)
    assert max(best.peak_memory_bytes) == pytest.approx(990.0)
    full = evaluate(table, req, replace(best.spec, recompute_layers=None))
    assert full.step_time_s - best.step_time_s == pytest.approx(2 * 5.0)
