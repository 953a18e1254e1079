"""A memo keyed by objects' identities, for the search's pure functions of frozen
records whose fields cannot be hashed (a cost table's per-layer lists), and one
keyed by hashable values in groups (``ByKey``); and the search's garbage collector
paused (``collector_paused``).

An entry holds the objects it was made for, so an identity is never reused while
the entry lives (CPython may give a freed object's id to a new one); the memo is
cleared when it reaches ``max_entries``. Results are shared: callers read them and
never change them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar, cast

R = TypeVar("R")
T = TypeVar("T")


class ByIdentity(Generic[R]):
    """Results by (the identities of some objects, a hashable key)."""

    def __init__(self, max_entries: int) -> None:
        self._entries: dict[tuple[tuple[int, ...], Hashable], tuple[tuple[object, ...], R]] = {}
        self._max = max_entries

    def get(self, objs: tuple[object, ...], key: Hashable) -> R | None:
        hit = self._entries.get((tuple(map(id, objs)), key))
        if hit is None or any(a is not b for a, b in zip(hit[0], objs, strict=True)):
            return None
        return hit[1]

    def put(self, objs: tuple[object, ...], key: Hashable, value: R) -> R:
        if len(self._entries) >= self._max:
            self._entries.clear()
        self._entries[(tuple(map(id, objs)), key)] = (objs, value)
        return value

    def of(self, objs: tuple[object, ...], key: Hashable, make: Callable[[], R]) -> R:
        """The entry for (objs, key), made by ``make()`` when there is none."""
        hit = self.get(objs, key)
        return hit if hit is not None else self.put(objs, key, make())


class ByKey:
    """Results by (a group's key, a piece's key), both hashable: what pure functions
    made of them, kept while the memo lives (analytic.analytic_layers: the layers of a
    job's cost tables, one group a layout, one piece a layer kind and micro-batch size)."""

    def __init__(self) -> None:
        self._groups: dict[Hashable, Pieces] = {}

    def group(self, key: Hashable) -> Pieces:
        """The pieces made so far in the group ``key``."""
        return self._groups.setdefault(key, Pieces())


class Pieces:
    """One group of a ``ByKey``."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, object] = {}

    def of(self, piece: Hashable, make: Callable[..., T], *args: object) -> T:
        """The result for ``piece``, made by ``make(*args)`` when there is none."""
        found = self._entries.get(piece)
        if found is None:
            found = self._entries[piece] = make(*args)
        return cast(T, found)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector off for the while (as it was after). A search
    makes millions of small records (candidates, compiled ops, stage costs) that reference
    counting frees; the collector, run every 700 allocations, walked them again and again
    for almost nothing (under 1,000 objects in cycles a search): 14% of the CPU of
    DeepSeek-V3 on 2,048 GPUs (1.9 s of 13.8), the same peak memory.

    What the search made and still holds (its caches: millions of objects) was all in
    the youngest generation, which the collector's first passes after it walked, then
    the next, then the oldest: 4.0 s of that search's 16.3 s of CPU (a busy machine).
    It is moved to the oldest generation unexamined instead (``gc.freeze`` then
    ``gc.unfreeze``; the collections of that search then took 0.16 s), whose full
    passes, rare, still free its cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
