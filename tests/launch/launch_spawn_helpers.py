"""Rank entry points for the spawn tests of tests/launch (importable by spawned children;
no torch)."""

from __future__ import annotations

import os
import time
from typing import Any


def chatty_entry(rank: int, world: int, port: int, q: Any) -> None:
    """Reports its process id, then progress every 0.1 s, forever: never silent for the
    timeout, never done."""
    q.put(("ready", rank, None))
    q.put(("progress", rank, os.getpid()))
    while True:
        time.sleep(0.1)
        q.put(("progress", rank, None))
