"""The layouts check-config's best-plan comparison searches besides the config's own.

``recommend`` searches cost keys (costs/dims.py ``search_keys``): tensor
parallelism 1, 2, 4, 8 within a node and dividing the heads, context
parallelism in powers of two that leave at least 2,048 tokens a rank,
expert parallelism in the powers of two that divide the routed experts,
expert tensor parallelism 1, each pair and size that fits the GPUs. The
comparison searches the same sizes for the config's GPUs and node, with the
config's own key among them, at the config's GEMM precision: FP8 is a choice
about the numerics of the training, which a tuning advisor does not make for
the user (``recommend --precision`` does on request). Which of those keys the
config's framework states is the adapter's to say (check.framework
``stateable_requests``). Measured costs (a profile) price their own key only:
the comparison then keeps the config's tensor, context and expert sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pptune.check.job import ConfigCosts
from pptune.costmodel import presets
from pptune.costmodel.keys import CostKey
from pptune.costmodel.search import PlanRequest
from pptune.costs.dims import search_keys
from pptune.errors import BadInput


def searched_keys(costs: ConfigCosts, req: PlanRequest,
                  held: Sequence[str] = ()) -> tuple[CostKey, ...]:
    """The config's key (``req``'s first) and every other key recommend searches for
    ``req``'s GPUs and node at the config's precision (module docstring), at the tensor
    parallel sizes its framework takes for the key/value heads (``costs.kv_heads``), with
    the sizes ``held`` names (tp, cp, ep, etp: ``Limits.held``) at the config's own; the
    config's key alone for measured costs (no ``tables``), or where none other fits."""
    own = req.keys()[0]
    gpu = presets.GPUS.get(str(costs.gpu))
    if costs.tables is None or costs.options is None or costs.shape is None or gpu is None:
        return (own,)
    def kept(size: int, name: str) -> tuple[int, ...] | None:
        return (size,) if name in held else None

    opts = replace(costs.options, precision=(own.precision,), tp=kept(own.tp, "tp"),
                   cp=kept(own.cp, "cp"), ep=kept(own.ep, "ep"), etp=kept(own.etp, "etp"))
    try:
        found = search_keys(opts, costs.shape, gpu, req.gpus, req.gpus_per_node,
                            costs.kv_heads)
    except BadInput:  # no other layout fits the GPUs: the config's own is compared
        found = ()
    return (own, *(k for k in found if k != own))


def own_first(req: PlanRequest, own: CostKey) -> list[PlanRequest]:
    """``req`` as searched: the config's own key (where ``req`` has it) with every setting
    its framework states, as the comparison always searched it, then the other keys
    together with recomputation chosen for the whole model (every block, selective,
    modules or none), not fitted stage by stage (stage_recompute.py). That fit is the
    search's costliest step on a large model (Llama 3.1 405B at 32,768 tokens on 1,024
    H100s: 42 s over twenty keys, 12 s without it at the other nineteen) and only
    shortens a plan that recomputes: the comparison may miss a plan a little faster at
    another key, and never names one the framework does not state."""
    others = tuple(k for k in req.keys() if k != own)
    if own not in req.keys():
        return [replace(req, stage_recompute=False)]
    return [replace(req, cost_keys=(own,), tp=own.tp),
            *([replace(req, cost_keys=others, tp=others[0].tp, stage_recompute=False)]
              if others else [])]
