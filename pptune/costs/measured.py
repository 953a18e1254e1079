"""Guards on a measured profile: what it can be asked to price."""

from __future__ import annotations

from pptune import limits
from pptune.costmodel.models import MODELS
from pptune.costmodel.presets import ModelShape
from pptune.costs.dims import KvHeads, kv_problem
from pptune.costs.modelspec import read_hf_config
from pptune.errors import BadInput, PptuneError
from pptune.schemas import Profile


def check_profile_size(prof: Profile, where: str) -> None:
    """A profile of more layers than pptune plans is refused before any work."""
    if len(prof.layers) > limits.MAX_LAYERS + 2:
        raise BadInput(f"{where} has {len(prof.layers):,} layers; pptune plans up to "
                       f"{limits.MAX_LAYERS:,}")


def probed_shape(prof: Profile) -> tuple[ModelShape, str] | None:
    """The model a measured profile was probed from, and where it was read: its Hugging
    Face config, or the preset it names (None: neither, or the config moved since)."""
    hf = prof.model.hf_config
    preset = MODELS.get(prof.model.name)
    if hf is not None:
        try:
            return read_hf_config(hf).shape, hf
        except PptuneError:
            return None  # moved since the probe: nothing to check against
    return None if preset is None else (preset, f"the {preset.name} preset")


def tp_heads_problem(prof: Profile, tp: int, origin: str,
                     kv: KvHeads = KvHeads.REPLICATE) -> str | None:
    """Why ``--tp`` cannot split the heads of the model a measured profile was probed
    from (None: it can, or the profile names no model): the attention heads, and the
    key/value heads by the framework's rule ``kv`` (dims.KvHeads), as for analytic costs
    (the framework refuses it too)."""
    found = probed_shape(prof) if tp > 1 else None
    if found is None:
        return None
    shape, source = found
    if shape.heads % tp:
        return (f"--tp {tp} does not divide the {shape.heads} attention heads of the model "
                f"{origin} was measured from ({source}); choose a tp that divides "
                f"{shape.heads}")
    why = None if shape.mla else kv_problem(
        shape.kv_heads, tp, kv, f"the model {origin} was measured from ({source})")
    return None if why is None else f"--tp {tp} {why}"


def replicated_kv_note(prof: Profile, tp: int) -> str | None:
    """What linear scaling leaves out where ``tp`` exceeds the key/value heads of the
    model a measured profile was probed from (megatron-core's replication, dims.KvHeads)."""
    found = probed_shape(prof) if tp > 1 else None
    if found is None or found[0].mla or tp <= found[0].kv_heads:
        return None
    kv = found[0].kv_heads
    return (f"--tp {tp} exceeds the model's {kv} key/value heads: megatron-core keeps one "
            f"whole head a rank ({tp // kv} ranks share each) after an all-gather of the QKV "
            "output, which the profile's linear scaling does not price (analytic costs do)")


def check_tp(prof: Profile, tp: int, origin: str) -> list[str]:
    """``tp_heads_problem`` by the generic rule as bad input; else, as notes, how the
    profile's costs are divided by ``tp`` and what that leaves out (replicated_kv_note)."""
    why = tp_heads_problem(prof, tp, origin)
    if why:
        raise BadInput(why)
    if tp == 1:
        return []
    linear = (f"the profile was measured without tensor parallelism; --tp {tp} divides its "
              "compute, memory and sends by tp (linear scaling, an approximation)")
    return [linear, *filter(None, [replicated_kv_note(prof, tp)])]
