"""The memory a plan may fill on each GPU: the reserve kept back (--reserve-gib, a
calibrated profile's, else 2 GiB) and the --max-memory share, refused in one line where
they leave nothing for a plan."""

from __future__ import annotations

import functools
from dataclasses import replace

from pptune.costmodel.memory import DEFAULT_RESERVE_BYTES
from pptune.costmodel.table import within_share
from pptune.costs.resolve import Costs
from pptune.errors import BadInput
from pptune.options import PlanSpace
from pptune.report.fmt import fmt_bytes

GIB = 1024**3


def within_memory(costs: Costs, share: float) -> Costs:
    """The costs with ``share`` of each GPU's memory to fill (--max-memory): every table
    the search prices, each built once."""
    inner = costs.tables
    tables = None if inner is None else functools.cache(
        lambda key: within_share(inner(key), share))
    return replace(costs, table=within_share(costs.table, share), tables=tables)


def check_reserve(reserve_bytes: float, memory_bytes: float, gpu: str,
                  reserve_gib: float | None, max_memory: float | None) -> None:
    """BadInput when the reserve leaves nothing of the GPU's memory (``memory_bytes``,
    the whole GPU) or of the ``max_memory`` share of it: every plan would be out of
    memory, and the flag that did it is the fix."""
    share = memory_bytes * (max_memory if max_memory is not None else 1.0)
    if reserve_bytes < share:
        return
    if reserve_bytes >= memory_bytes:
        given = (f"--reserve-gib {reserve_gib:g}" if reserve_gib is not None
                 else f"the reserve of {fmt_bytes(reserve_bytes)}")
        how = "more than" if reserve_bytes > memory_bytes else "all of"
        raise BadInput(f"{given} is {how} {gpu}'s {fmt_bytes(memory_bytes)}")
    raise BadInput(f"--max-memory {max_memory:g} leaves {fmt_bytes(share)} of {gpu}'s "
                   f"{fmt_bytes(memory_bytes)}, no more than the {fmt_bytes(reserve_bytes)} "
                   "reserve; raise --max-memory or lower --reserve-gib")


def reserve_bytes(s: PlanSpace, costs: Costs) -> float:
    """--reserve-gib, else what a calibrated profile measured, else 2 GiB."""
    if s.reserve_gib is not None:
        return s.reserve_gib * GIB
    return costs.reserve_bytes if costs.reserve_bytes is not None else DEFAULT_RESERVE_BYTES
