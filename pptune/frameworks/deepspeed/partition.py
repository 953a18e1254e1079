"""How DeepSpeed splits layers into pipeline stages, re-stated from its source.

DeepSpeed 0.19.8: ``deepspeed/runtime/utils.py`` (``partition_uniform``,
``partition_balanced``), ``deepspeed/runtime/pipe/module.py``
(``PipelineModule._partition_layers``). check-config judges a config with
``ds_split``, ``recommend --emit deepspeed`` names the partition method
whose split is the plan's, and ``recommend --framework deepspeed`` searches
pipelines on those splits alone (``own_splits``).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from itertools import pairwise

from pptune.costmodel.keys import CostKey
from pptune.costmodel.partition import is_mtp
from pptune.costmodel.table import CostTable, built_params
from pptune.frameworks.common.versions import VersionKey, Versions

DEEPSPEED = VersionKey(
    "deepspeed", ("deepspeed",), "0.19.8",
    "deepspeed/runtime/utils.py (partition_uniform, partition_balanced), "
    "deepspeed/runtime/config.py (batch derivation), deepspeed/runtime/pipe/"
    "{engine,module,schedule}.py")


def uniform_first(versions: Versions) -> bool:
    """DeepSpeed >= 0.10.1 (PR #4053) gives partition_uniform's extra layers to the
    first stages; before, the last stage took the whole remainder."""
    return versions.at_least(DEEPSPEED, 0, 10, 1)


def ds_partition_uniform(num_items: int, num_parts: int, *, first_gets_extra: bool = True
                         ) -> list[int]:
    """Stage boundaries as deepspeed/runtime/utils.py ``partition_uniform`` returns them.

    The first ``num_items % num_parts`` stages get one item more; with no
    more items than parts, one item per stage and the rest empty. Before
    DeepSpeed 0.10.1 (``first_gets_extra=False``) the last stage took the
    whole remainder.
    """
    if num_items <= num_parts:
        return [min(p, num_items) for p in range(num_parts + 1)]
    chunk, residual = divmod(num_items, num_parts)
    if not first_gets_extra:
        return [min(chunk * p, num_items) for p in range(num_parts)] + [num_items]
    return [chunk * p + min(p, residual) for p in range(num_parts + 1)]


def ds_partition_balanced(weights: Sequence[float], num_parts: int) -> list[int]:
    """Stage boundaries as deepspeed/runtime/utils.py ``partition_balanced`` returns them.

    DeepSpeed's dynamic programme for the linear partition problem: over
    prefixes of i items in j parts it keeps the split point k whose
    (heaviest part - lightest part) is smallest, later k winning ties
    (``if dp_cost[i, j] >= cost``), then walks the split points back. It
    minimises the spread between stages, not only the heaviest one. Kept by
    weights and parts (``_balanced``): the search asks it for every depth.
    """
    return list(_balanced(tuple(float(w) for w in weights), num_parts))


@functools.lru_cache(maxsize=256)
def _balanced(weights: tuple[float, ...], m: int) -> tuple[int, ...]:
    """``ds_partition_balanced``. DeepSpeed's loop tries every k < i; a k with fewer
    than j - 1 items before it has no (j - 1)-part prefix (its dp entries are inf, its
    cost inf), which it takes only while no k with one has been tried, and for j <= i
    the k = j - 1 always has one (j = 1: k = 0 alone, whose prefix is empty): the same
    answer from the k that have one, in the same order."""
    n = len(weights)
    if n <= m:
        return tuple(ds_partition_uniform(n, m))
    inf = math.inf
    prefix = [0.0, *itertools.accumulate(weights)]
    # by parts j, then prefix length: the heaviest and lightest part, the split point
    dp_max = [[inf] * (n + 1) for _ in range(m + 1)]
    dp_min = [[inf] * (n + 1) for _ in range(m + 1)]
    position = [[0] * (n + 1) for _ in range(m + 1)]
    dp_max[0][0] = 0.0
    for i in range(1, n + 1):
        whole = prefix[i]
        for j in range(1, min(i, m) + 1):
            before_max, before_min = dp_max[j - 1], dp_min[j - 1]
            cost_at, max_at, min_at, k_at = inf, inf, inf, 0
            for k in range(j - 1, i) if j > 1 else (0,):
                part = whole - prefix[k]
                high = before_max[k] if before_max[k] > part else part
                low = before_min[k] if before_min[k] < part else part
                if cost_at >= high - low:
                    cost_at, max_at, min_at, k_at = high - low, high, low, k
            dp_max[j][i], dp_min[j][i], position[j][i] = max_at, min_at, k_at
    parts = [n]
    for j in range(m, 0, -1):
        parts.append(position[j][parts[-1]])
    return tuple(parts[::-1])


def sizes(bounds: Sequence[int]) -> list[int]:
    """Boundaries [0, b1, ..., n] -> items per part."""
    return [b - a for a, b in pairwise(bounds)]


def ds_split(method: str, param_counts: Sequence[float], num_stages: int,
             versions: Versions | None = None) -> list[int] | None:
    """Layers per stage as DeepSpeed's PipelineModule._partition_layers builds them
    (deepspeed/runtime/pipe/module.py), over pptune's layers (embedding, blocks,
    head); None for a method pptune cannot evaluate (type:REGEX needs class names)."""
    versions = versions or Versions()
    method = method.lower()
    if method == "uniform":
        return sizes(ds_partition_uniform(len(param_counts), num_stages,
                                          first_gets_extra=uniform_first(versions)))
    if method == "parameters":
        return sizes(ds_partition_balanced(param_counts, num_stages))
    return None


METHODS = ("uniform", "parameters")  # PipelineModule partition_method values pptune places


def own_splits(table: CostTable, key: CostKey, chunks: int) -> tuple[tuple[int, ...], ...]:
    """The splits of ``table``'s layers (``key``'s) over ``chunks`` stages that
    PipelineModule builds (``ds_split`` of each of ``METHODS``, the parameters counted
    as the model builds its layers: ``built_params``). The model code builds no
    multi-token-prediction layer (as_run.py prices a plan without them): the split is
    of the layers it builds, each MTP layer kept on the stage of the layer before it."""
    params = built_params(table, key.tp, key.ep, key.etp)
    built = [i for i, name in enumerate(table.names) if not is_mtp(name)]
    out = []
    for method in METHODS:
        split = ds_split(method, [params[i] for i in built], chunks)
        if split is None or min(split) < 1:  # fewer layers than stages
            continue
        ends = [built[b] for b in itertools.accumulate(split[:-1])] + [len(params)]
        out.append(tuple(sizes([0, *ends])))
    return tuple(out)
