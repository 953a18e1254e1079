"""How megatron-core splits layers into pipeline stages, re-stated from its source.

Megatron-LM core_r0.16 (megatron-core 0.16.1): ``megatron/training/arguments.py``
(``validate_args``), ``megatron/core/transformer/transformer_config.py`` (uneven
and account-for splits). check-config judges a script with ``megatron_blocks``
and ``recommend --emit megatron`` writes flags whose split it is, so what
pptune predicts is what Megatron-LM builds.
"""

from __future__ import annotations

from dataclasses import dataclass

from pptune.frameworks.common.versions import FrameworkRefusal, VersionKey

MEGATRON = VersionKey(
    "megatron", ("megatron", "megatron-core"), "0.16.1",
    "Megatron-LM core_r0.16 megatron/training/arguments.py (validate_args); megatron-core "
    "0.16.1 megatron/core/transformer/transformer_config.py and "
    "megatron/core/pipeline_parallel/schedules.py",
    earlier_rules=False)  # no table of earlier releases' rules: 0.16.1's judge them


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
    given = f"--num-layers {n} minus first {s.first} / last {s.last} stage layers leaves {rest}"
    if rest < 0 and middle:
        raise FrameworkRefusal(
            "megatron-uneven-split",
            f"{given}: the first and last stages hold more layers than the model has "
            "(megatron-core TransformerConfig.__post_init__ splits the rest over the middle "
            "stages); change --decoder-first/last-pipeline-num-layers")
    if bool(rest) != bool(middle):
        raise FrameworkRefusal(
            "megatron-uneven-split",
            f"{given} for {middle} middle stage(s): megatron-core raises 'Mismatch: {rest} middle "
            f"layers remaining but {middle} middle PP stages available.' (TransformerConfig."
            "__post_init__); change --decoder-first/last-pipeline-num-layers")
    if middle and rest % middle:
        raise FrameworkRefusal(
            "megatron-uneven-split",
            f"{given} for {middle} middle stages: megatron-core raises 'number of layers at "
            f"middle stage: {rest} must be divisible by the middle pipeline model parallel size "
            f"{middle}' (TransformerConfig.__post_init__); change "
            "--decoder-first/last-pipeline-num-layers")
    if middle and (rest // middle) % v:
        raise FrameworkRefusal(
            "megatron-uneven-split",
            f"{given}, {rest // middle} on each of the {middle} middle ranks: megatron-core "
            f"raises 'number of layers on each middle pipeline rank: {rest // middle} must be "
            f"divisible by virtual pipeline parallel degree {v}' (TransformerConfig."
            "__post_init__); change --decoder-first/last-pipeline-num-layers or "
            "--num-virtual-stages-per-pipeline-rank")
    per_rank = [rest // middle if middle else 0] * p
    if s.first is not None:
        per_rank[0] = s.first
    if s.last is not None:
        per_rank[-1] = s.last
    return [per_rank[r] // v for _chunk in range(v) for r in range(p)]
