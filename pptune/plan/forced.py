"""What a size the user forced costs: recommend's note where --tp, --cp or --ep make the
winner's tensor-parallel group span nodes, or make it slower than the best plan with
them searched by more than check-config's slower-than-best limit (its --max-slowdown
default, ``Limits.max_slowdown``: 1.10x); and --emit's where the plan it writes is
slower than the winner (plan/emit.py). The files --emit writes hold the forced sizes
(their plan line's ``held=``), so check-config compares them with plans of the same
sizes: this note is where the cost of forcing them is said. One line, like the other
what-ifs (what_if.py): that best plan (it may take a forced size too) is searched as
recommend searches, the other flags kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pptune.costmodel.keys import TableSource
from pptune.costmodel.layout import contiguous_group
from pptune.costmodel.presets import GpuSpec, ModelShape
from pptune.costmodel.search import Plan, PlanRequest, SearchResult
from pptune.costs.dims import KvHeads, search_keys
from pptune.errors import BadInput
from pptune.options import CostOptions
from pptune.report.fmt import fmt_ratio, fmt_sizes
from pptune.schemas.limits import Limits

# the step ratio over which a forced size is said (check-config's slower-than-best)
SLOWDOWN = Limits().max_slowdown

Search = Callable[[TableSource, PlanRequest], SearchResult]


@dataclass(frozen=True)
class Forced:
    """The sizes a recommendation forced (flag, values) and the best plan with them searched
    (None: no plan fits so), on nodes of ``gpus_per_node``."""

    sizes: tuple[tuple[str, tuple[int, ...]], ...]
    best: Plan | None
    gpus_per_node: int

    def note(self, plan: Plan, what: str = "the winner") -> str | None:
        """What forcing the sizes costs ``plan`` (``what`` names it): None where its
        tensor-parallel group stays in a node (or --tp was not forced) and it steps
        within ``SLOWDOWN`` times the best plan with them searched."""
        tp_forced = any(flag == "--tp" for flag, _ in self.sizes)
        nodes = contiguous_group(plan.tp, self.gpus_per_node).nodes if tp_forced else 1
        best = self.best
        ratio = plan.step_time_s / best.step_time_s if best is not None else 1.0
        if nodes == 1 and ratio <= SLOWDOWN:
            return None
        said = "forced " + ", ".join(f"{flag} {','.join(map(str, v))}"
                                     for flag, v in self.sizes)
        across = (f"{what}'s tensor-parallel group spans {nodes} nodes of "
                  f"{self.gpus_per_node} GPUs (its collectives in every layer run over the "
                  "network); " if nodes > 1 else "")
        # the best plan may take a forced size too: it is the best of all sizes searched
        searched = " and ".join(flag for flag, _ in self.sizes) + " searched"
        if best is None or ratio <= 1:
            return f"{said}: {across}no plan with {searched} steps faster"
        than = "" if what == "the winner" else f" than {what}"
        return f"{said}: {across}the best plan with {searched}, {_plan(best)}, steps " \
            f"{best.step_time_s:.4g} s ({fmt_ratio(ratio)} faster{than})"


def unforced(opts: CostOptions, shape: ModelShape, gpu: GpuSpec, req: PlanRequest,
             result: SearchResult, tables: TableSource, searching: Search,
             kv: KvHeads = KvHeads.REPLICATE) -> Forced | None:
    """The sizes ``opts`` forces (--tp, --cp, --ep as asked) and the best plan without
    them, searched as recommend searches (``searching``, over ``tables``; ``kv``: the
    framework's rule for tp and the key/value heads); None where none is forced, no plan
    was found, or another flag leaves no layout without them."""
    sizes = tuple((flag, tuple(values)) for flag, values in (
        ("--tp", opts.tp), ("--cp", opts.cp), ("--ep", opts.ep)) if values)
    if not sizes or not result.plans:
        return None
    free = replace(opts, tp=None, cp=None, ep=None)  # the sizes not forced are None too
    try:
        keys = search_keys(free, shape, gpu, req.gpus, req.gpus_per_node, kv)
    except BadInput:  # another flag leaves no layout without the forced sizes
        return None
    alt = searching(tables, replace(req, cost_keys=keys, tp=keys[0].tp, top=1)).plans
    return Forced(sizes, alt[0] if alt else None, req.gpus_per_node)


def _plan(p: Plan) -> str:
    v = f" v={p.virtual_stages}" if p.virtual_stages > 1 else ""
    return (f"{fmt_sizes(p.pp, p.dp, p.tp, p.cp, p.ep, p.etp)} {p.schedule.value}{v}, "
            f"{p.num_microbatches} x {p.micro_batch_size}, sharding {p.sharding.value}")
