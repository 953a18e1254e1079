"""Rank entry points for the spawn tests (importable by spawned children; no torch)."""

from __future__ import annotations

import os
import time
from typing import Any


def _finish(q: Any, message: tuple[Any, ...], code: int = 0) -> None:
    q.put(message)
    q.close()
    q.join_thread()
    os._exit(code)


def hang_entry(rank: int, world: int, port: int, q: Any, hang_rank: int) -> None:
    """Every rank reports progress; ``hang_rank`` then never finishes."""
    q.put(("progress", rank, ("hang test", 1024)))
    if rank == hang_rank:
        time.sleep(3600)
    _finish(q, ("done", rank, {"rank": rank, "port": port}))


def fail_entry(rank: int, world: int, port: int, q: Any) -> None:
    if rank == 1:
        _finish(q, ("error", rank, "ValueError: boom"), 1)
    time.sleep(3600)  # rank 0 would wait on rank 1 forever


def crash_entry(rank: int, world: int, port: int, q: Any) -> None:
    if rank == 1:
        os._exit(3)  # dies without a word
    time.sleep(3600)


def ok_entry(rank: int, world: int, port: int, q: Any) -> None:
    q.put(("progress", rank, ("ok", rank)))
    _finish(q, ("done", rank, {"rank": rank, "world": world}))
