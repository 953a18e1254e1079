"""The search's identity memo: a hit only for the very objects an entry was made for."""

from __future__ import annotations

import gc

from pptune.costmodel.memo import ByIdentity, ByKey, collector_paused


def test_hits_only_the_same_objects() -> None:
    memo: ByIdentity[int] = ByIdentity(8)
    a, b = [1, 2], [1, 2]  # equal, not the same
    assert memo.put((a,), "k", 7) == 7
    assert memo.get((a,), "k") == 7
    assert memo.get((b,), "k") is None  # an equal object is another entry
    assert memo.get((a,), "other") is None
    assert memo.get((a, b), "k") is None  # and so is a pair holding it
    made: list[int] = []
    assert memo.of((b,), "k", lambda: made.append(1) or 9) == 9  # made once
    assert memo.of((b,), "k", lambda: made.append(1) or 0) == 9 and made == [1]


def test_an_entry_keeps_its_objects_and_the_memo_clears_when_full() -> None:
    memo: ByIdentity[int] = ByIdentity(2)
    memo.put(([0],), 0, 0)  # the list lives on in the entry: its id is not reused
    memo.put(([1],), 1, 1)
    x = [2]
    memo.put((x,), 2, 2)  # full: cleared first
    assert memo.get((x,), 2) == 2
    assert len(memo._entries) == 1


def test_by_key_makes_each_piece_of_a_group_once() -> None:
    memo = ByKey()
    made: list[tuple[int, int]] = []

    def make(x: int, y: int) -> int:
        made.append((x, y))
        return x * 10 + y

    first = memo.group(("layout", 1)).of
    assert first("piece", make, 1, 2) == 12
    assert first("piece", make, 3, 4) == 12  # the piece's result, not made again
    assert memo.group(("layout", 1)).of("piece", make, 5, 6) == 12  # the same group
    assert memo.group(("layout", 2)).of("piece", make, 5, 6) == 56  # another group
    assert first("other", make, 7, 8) == 78
    assert made == [(1, 2), (5, 6), (7, 8)]


def test_what_a_paused_search_still_holds_is_left_to_the_oldest_generation() -> None:
    was = gc.isenabled()
    gc.enable()
    try:
        with collector_paused():
            assert not gc.isenabled()
            held = [[] for _ in range(3)]  # tracked containers made while paused
        assert gc.isenabled()
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert all(id(x) in oldest for x in held)  # not walked by the young passes
    finally:
        if not was:
            gc.disable()


def test_a_nested_pause_leaves_the_collector_off() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_a_stage_layout_is_shared_by_what_it_reads() -> None:
    """stage_layout's memo key: a spec's all-to-all overlap counts only as a2a_stream
    (1f1b and interleaved keep their all-to-alls on the stream either way, the DualPipes
    only with the overlap); every other PlanSpec field is in the key."""
    import dataclasses

    from pptune.costmodel.comm import AllReduceLink
    from pptune.costmodel.evaluate import PlanRequest, PlanSpec, stage_layout
    from pptune.costmodel.schedules import Schedule
    from pptune.costmodel.simulate import Link
    from pptune.costmodel.table import CostTable, LayerCosts

    assert {f.name for f in dataclasses.fields(PlanSpec)} == {
        "schedule", "pp", "micro_batch_size", "num_microbatches", "stage_layers",
        "virtual_stages", "rank_order", "sharding", "recompute", "key", "a2a_overlap",
        "recompute_layers"}
    n, a2a = 6, [0.25] * 6  # F 1, B 2, W 0.5 a layer, an all-to-all of 0.25 s each way
    costs = LayerCosts([1.0] * n, [2.0] * n, [0.5] * n, [100.0] * n, [5.0] * n,
                       fwd_a2a_s=a2a, bwd_a2a_s=a2a)
    table = CostTable(["embedding", *[f"block{i}" for i in range(n - 2)], "head"],
                      [2e6] * n, 2, {1: costs}, 128, 1e12, Link(0.0), Link(0.0),
                      AllReduceLink(0.0, 1e9), AllReduceLink(0.0, 1e9))
    req = PlanRequest(gpus=2, global_batch=4, reserve_bytes=0.0)
    plain = PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 4, (3, 3))
    combined = dataclasses.replace(plain, a2a_overlap=True)
    assert stage_layout(table, req, plain) is stage_layout(table, req, combined)
    # the DualPipes hide the all-to-all only with the overlap: another layout, whose
    # stages keep the all-to-alls apart (F 2 x 1 + 2 x 0.25 on the stream, or folded in)
    pairs = PlanSpec(Schedule.DUALPIPEV, 2, 1, 4, (2, 1, 1, 2))
    hidden = stage_layout(table, req, dataclasses.replace(pairs, a2a_overlap=True))
    folded = stage_layout(table, req, pairs)
    assert hidden is not folded
    assert (hidden.stages[0].fwd_s, hidden.stages[0].fwd_comm_s) == (2.0, 0.5)
    assert (folded.stages[0].fwd_s, folded.stages[0].fwd_comm_s) == (2.5, 0.0)
