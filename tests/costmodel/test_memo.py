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
