"""How DeepSpeed splits layers into pipeline stages, re-stated from its source.

DeepSpeed 0.19.8: ``deepspeed/runtime/utils.py`` (``partition_uniform``,
``partition_balanced``), ``deepspeed/runtime/pipe/module.py``
(``PipelineModule._partition_layers``). check-config judges a config with
``ds_split`` and ``recommend --emit deepspeed`` names the partition method
whose split is the plan's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

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
    minimises the spread between stages, not only the heaviest one.
    """
    n, m = len(weights), num_parts
    if n <= m:
        return ds_partition_uniform(n, m)
    inf = math.inf
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + float(w))
    dp_max = [[inf] * (m + 1) for _ in range(n + 1)]
    dp_min = [[inf] * (m + 1) for _ in range(n + 1)]
    dp_cost = [[inf] * (m + 1) for _ in range(n + 1)]
    position = [[0] * (m + 1) for _ in range(n + 1)]
    dp_max[0][0] = 0.0
    dp_cost[0][0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, min(i, m) + 1):
            for k in range(i):
                part = prefix[i] - prefix[k]
                max_sum = max(dp_max[k][j - 1], part)
                min_sum = min(dp_min[k][j - 1], part)
                cost = max_sum - min_sum
                if dp_cost[i][j] >= cost:
                    dp_cost[i][j], dp_max[i][j], dp_min[i][j] = cost, max_sum, min_sum
                    position[i][j] = k
    parts = [n]
    for j in range(m, 0, -1):
        parts.append(position[parts[-1]][j])
    return parts[::-1]


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
