"""The frameworks' own rules, re-stated from their source, for the versions named here.

Pure functions on plain numbers: how each framework splits layers into
stages, and the versions whose code they follow. check-config judges a
config with them and ``recommend --emit`` writes files that produce exactly
these splits, so what pptune predicts is what the framework builds.

Versions (``--framework-version`` picks another where a rule changed):

- DeepSpeed 0.19.8: ``deepspeed/runtime/utils.py`` (``partition_uniform``,
  ``partition_balanced``), ``deepspeed/runtime/config.py`` (batch
  derivation), ``deepspeed/runtime/pipe/{engine,module,schedule}.py``.
- Megatron-LM core_r0.16 (megatron-core 0.16.1):
  ``megatron/training/arguments.py`` (``validate_args``),
  ``megatron/core/transformer/transformer_config.py`` (uneven and
  account-for splits), ``megatron/core/pipeline_parallel/schedules.py``.
- torchtitan 0.2.2 (the last release that reads TOML job files; its head
  module is ``output``) and 0.3.0 (configs are Python; the head is
  ``lm_head``): ``torchtitan/distributed/pipeline_parallel.py``.
- torch 2.13 ``torch/distributed/pipelining/schedules.py``; before 2.6
  ``ScheduleInterleaved1F1B`` needed micro-batches a multiple of pp.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

DEEPSPEED_VERSION = "0.19.8"
MEGATRON_VERSION = "0.16.1"  # megatron-core; Megatron-LM core_r0.16 arguments.py
TORCHTITAN_TOML_VERSION = "0.2.2"
TORCHTITAN_CURRENT_VERSION = "0.3.0"
TORCH_VERSION = "2.13"


def version_tuple(text: str) -> tuple[int, ...]:
    """"0.2.2" -> (0, 2, 2); ValueError when it is not dotted numbers."""
    parts = text.strip().lstrip("v").split(".")
    if not parts or not all(p.isdigit() for p in parts) or len(parts) > 4:
        raise ValueError(text)
    return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class Versions:
    """The framework versions whose rules a check follows."""

    deepspeed: str = DEEPSPEED_VERSION
    megatron: str = MEGATRON_VERSION
    torchtitan: str = TORCHTITAN_TOML_VERSION
    torch: str = TORCH_VERSION

    def torchtitan_head(self) -> str:
        """The LM head's module name: ``output`` up to 0.2.x, ``lm_head`` from 0.3.0
        (torchtitan/distributed/pipeline_parallel.py, generate_llm_fqn_per_model_part)."""
        return "lm_head" if version_tuple(self.torchtitan) >= (0, 3) else "output"

    def torchtitan_reads_toml(self) -> bool:
        """torchtitan 0.3.0 replaced TOML job files by Python config functions (PR #2386)."""
        return version_tuple(self.torchtitan) < (0, 3)

    def torch_interleaved_rounds(self) -> bool:
        """torch >= 2.6: ScheduleInterleaved1F1B needs m a multiple of its round count
        max(1, m // pp); before, a multiple of pp (torch/distributed/pipelining/schedules.py)."""
        return version_tuple(self.torch) >= (2, 6)

    def torch_1f1b_needs_m_ge_stages(self) -> bool:
        """Schedule1F1B refuses m < stages from torch 2.7 (PR #144702); earlier it ran."""
        return version_tuple(self.torch) >= (2, 7)

    def deepspeed_uniform_first(self) -> bool:
        """DeepSpeed >= 0.10.1 (PR #4053) gives partition_uniform's extra layers to the
        first stages; before, the last stage took the whole remainder."""
        return version_tuple(self.deepspeed) >= (0, 10, 1)


# --- DeepSpeed ----------------------------------------------------------------


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
                                          first_gets_extra=versions.deepspeed_uniform_first()))
    if method == "parameters":
        return sizes(ds_partition_balanced(param_counts, num_stages))
    return None


# --- Megatron-LM --------------------------------------------------------------


class FrameworkRefusal(ValueError):
    """The framework's own validation refuses this configuration (message cites the rule)."""

    def __init__(self, rule_id: str, message: str) -> None:
        super().__init__(message)
        self.rule_id = rule_id


@dataclass(frozen=True)
class MegatronSplit:
    """The pipeline flags of a Megatron-LM run that decide its layer split."""

    num_layers: int
    pp: int
    vpp: int = 1
    first: int | None = None  # --decoder-first-pipeline-num-layers
    last: int | None = None  # --decoder-last-pipeline-num-layers
    account_embedding: bool = False  # --account-for-embedding-in-pipeline-split
    account_loss: bool = False  # --account-for-loss-in-pipeline-split


def megatron_blocks(s: MegatronSplit) -> list[int]:
    """Transformer blocks per virtual stage, in model order (chunk-major), as
    megatron-core builds them; FrameworkRefusal with Megatron's message otherwise.

    megatron/core/transformer/transformer_config.py ``__post_init__`` and
    ``get_num_layers_to_build``: uneven first/last stages take their count
    (split evenly over the rank's vpp chunks) and the middle ranks share the
    rest evenly; the account-for flags count the embedding / loss as one
    layer each on the first / last virtual stage; otherwise every stage gets
    num_layers / (pp x vpp).
    """
    p, v, n = s.pp, s.vpp, s.num_layers
    uneven = s.first is not None or s.last is not None
    if uneven and (s.account_embedding or s.account_loss):
        raise FrameworkRefusal(
            "megatron-uneven-and-account",
            "--decoder-first/last-pipeline-num-layers cannot be combined with "
            "--account-for-embedding/loss-in-pipeline-split (megatron-core "
            "TransformerConfig.__post_init__)")
    if uneven:
        return _megatron_uneven(s)
    total = n + s.account_embedding + s.account_loss
    if total % (p * v):
        extra = " + 1 embedding" * s.account_embedding + " + 1 loss" * s.account_loss
        raise FrameworkRefusal(
            "megatron-layers-not-divisible",
            f"--num-layers {n}{extra} = {total} is not divisible by pp {p} x vpp {v} = {p * v} "
            "(Megatron-LM validate_args / megatron-core TransformerConfig: 'number of layers "
            "should be divisible by the pipeline-model-parallel size'); change --num-layers, "
            "the pipeline size or the virtual stages")
    per = total // (p * v)
    blocks = [per] * (p * v)
    blocks[0] -= s.account_embedding
    blocks[-1] -= s.account_loss
    return blocks


def _megatron_uneven(s: MegatronSplit) -> list[int]:
    p, v, n = s.pp, s.vpp, s.num_layers
    for name, count in (("first", s.first), ("last", s.last)):
        if count is None:
            continue
        if count < 1:
            raise FrameworkRefusal(
                "megatron-uneven-split",
                f"--decoder-{name}-pipeline-num-layers is {count}; megatron-core requires > 0 "
                f"('num_layers_in_{name}_pipeline_stage must be larger than 0')")
        if count % v:
            raise FrameworkRefusal(
                "megatron-uneven-split",
                f"--decoder-{name}-pipeline-num-layers {count} is not divisible by the {v} "
                "virtual stages per rank (megatron-core TransformerConfig.__post_init__); "
                "change it or --num-virtual-stages-per-pipeline-rank")
    middle = p - (s.first is not None) - (s.last is not None)
    rest = n - (s.first or 0) - (s.last or 0)
    if rest < 0 or (middle == 0 and rest) or (middle > 0 and (rest % middle or (rest // middle) % v)):
        raise FrameworkRefusal(
            "megatron-uneven-split",
            f"--num-layers {n} minus first {s.first} / last {s.last} stage layers leaves {rest} "
            f"for {middle} middle stage(s) x {v} virtual stage(s), which does not divide "
            "evenly (megatron-core TransformerConfig: 'number of layers at middle stage must "
            "be divisible by the middle pipeline model parallel size'); change "
            "--decoder-first/last-pipeline-num-layers")
    per_rank = [rest // middle if middle else 0] * p
    if s.first is not None:
        per_rank[0] = s.first
    if s.last is not None:
        per_rank[-1] = s.last
    return [per_rank[r] // v for _chunk in range(v) for r in range(p)]


# --- torchtitan ---------------------------------------------------------------


def torchtitan_stage_count(num_layers: int, layers_per_stage: int, input_weight: int = 1,
                           output_weight: int = 1) -> int:
    """Stages from pipeline_parallel_layers_per_stage (torchtitan pipeline_llm):
    ceil((layers + input_weight + output_weight) / layers_per_stage)."""
    return math.ceil((num_layers + input_weight + output_weight) / layers_per_stage)


def torchtitan_fqns(num_stages: int, num_layers: int, head: str = "output",
                    input_weight: int = 1, output_weight: int = 1) -> list[list[str]]:
    """Module names per stage as torchtitan's ``generate_llm_fqn_per_model_part``
    builds them: the embedding and the head (with the norm) count as
    input_weight / output_weight layers, the first ``effective % stages``
    stages get one layer more. FrameworkRefusal with torchtitan's message."""
    if num_stages == 1:
        return [["tok_embeddings", *(f"layers.{i}" for i in range(num_layers)), "norm", head]]
    effective = num_layers + input_weight + output_weight
    if num_stages > effective:
        raise FrameworkRefusal(
            "torchtitan-too-many-stages",
            f"Number of stages ({num_stages}) cannot be greater than effective layers "
            f"({effective}) (torchtitan generate_llm_fqn_per_model_part)")
    per, extra = divmod(effective, num_stages)
    if input_weight > per or output_weight > per:
        raise FrameworkRefusal(
            "torchtitan-weights",
            f"input/output weight ({input_weight}/{output_weight}) exceeds minimum layers per "
            f"stage ({per}) (torchtitan generate_llm_fqn_per_model_part)")
    parts, layer = [], 0
    for stage in range(num_stages):
        size = per + (stage < extra)
        names: list[str] = []
        if stage == 0:
            names.append("tok_embeddings")
            size -= input_weight
        elif stage == num_stages - 1:
            size -= output_weight
        names += [f"layers.{i}" for i in range(layer, layer + size)]
        layer += size
        if stage == num_stages - 1:
            names += ["norm", head]
        parts.append(names)
    return parts
