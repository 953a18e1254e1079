"""What a size the user forced costs: recommend's note where --tp, --cp or --ep make the
winner's tensor-parallel group span nodes, or make it slower than the best plan
without them by more than check-config's slower-than-best limit (its --max-slowdown
default, ``Limits.max_slowdown``: 1.10x), so recommend says what check-config of the
file it writes would. One line, like the other what-ifs (what_if.py): the best plan
without the forced sizes is searched as recommend searches, the other flags kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pptune.costmodel.keys import TableSource
from pptune.costmodel.layout import contiguous_group
from pptune.costmodel.presets import GpuSpec, ModelShape
from pptune.costmodel.search import Plan, PlanRequest, SearchResult
from pptune.costs.dims import KvHeads, search_keys
from pptune.errors import BadInput
from pptune.options import CostOptions
from pptune.report.fmt import fmt_ratio, fmt_sizes
from pptune.schemas.config import Limits

# the step ratio over which a forced size is said (check-config's slower-than-best)
SLOWDOWN = Limits().max_slowdown

Search = Callable[[TableSource, PlanRequest], SearchResult]


def forced_note(opts: CostOptions, shape: ModelShape, gpu: GpuSpec, req: PlanRequest,
                result: SearchResult, tables: TableSource,
                searching: Search, kv: KvHeads = KvHeads.REPLICATE) -> str | None:
    """The note for the sizes ``opts`` forces (--tp, --cp, --ep as asked), None where
    none is forced, no plan was found, or the winner neither spans nodes with its
    tensor-parallel group nor steps over ``SLOWDOWN`` times the best plan without them
    (``searching``: recommend's search, over ``tables``; ``kv``: the framework's rule for
    tp and the key/value heads)."""
    forced = [(flag, values) for flag, values in (("--tp", opts.tp), ("--cp", opts.cp),
                                                  ("--ep", opts.ep)) if values]
    if not forced or not result.plans:
        return None
    win = result.plans[0]
    free = replace(opts, tp=None, cp=None, ep=None)  # the sizes not forced are None too
    try:
        keys = search_keys(free, shape, gpu, req.gpus, req.gpus_per_node, kv)
    except BadInput:  # another flag leaves no layout without the forced sizes
        return None
    alt = searching(tables, replace(req, cost_keys=keys, tp=keys[0].tp, top=1)).plans
    best = alt[0] if alt else None
    nodes = contiguous_group(win.tp, req.gpus_per_node).nodes if opts.tp else 1
    ratio = win.step_time_s / best.step_time_s if best is not None else 1.0
    if nodes == 1 and ratio <= SLOWDOWN:
        return None
    said = "forced " + ", ".join(f"{flag} {','.join(map(str, v))}" for flag, v in forced)
    across = (f"the winner's tensor-parallel group spans {nodes} nodes of "
              f"{req.gpus_per_node} GPUs (its collectives in every layer run over the "
              "network); " if nodes > 1 else "")
    them = "it" if len(forced) == 1 else "them"
    if best is None or ratio <= 1:
        return f"{said}: {across}no plan without {them} steps faster"
    return f"{said}: {across}the best plan without {them}, {_plan(best)}, steps " \
        f"{best.step_time_s:.4g} s ({fmt_ratio(ratio)} faster)"


def _plan(p: Plan) -> str:
    v = f" v={p.virtual_stages}" if p.virtual_stages > 1 else ""
    return (f"{fmt_sizes(p.pp, p.dp, p.tp, p.cp, p.ep, p.etp)} {p.schedule.value}{v}, "
            f"{p.num_microbatches} x {p.micro_batch_size}, sharding {p.sharding.value}")
