"""Guards on a measured profile: what it can be asked to price."""

from __future__ import annotations

from pptune import limits
from pptune.costmodel.models import MODELS
from pptune.costs.modelspec import read_hf_config
from pptune.errors import BadInput, PptuneError
from pptune.schemas import Profile


def check_profile_size(prof: Profile, where: str) -> None:
    """A profile of more layers than pptune plans is refused before any work."""
    if len(prof.layers) > limits.MAX_LAYERS + 2:
        raise BadInput(f"{where} has {len(prof.layers):,} layers; pptune plans up to "
                       f"{limits.MAX_LAYERS:,}")


def tp_divides_heads(prof: Profile, tp: int, origin: str) -> None:
    """A measured profile's Hugging Face config names its heads: a --tp that does not
    divide them is refused as for analytic costs (the framework refuses it too)."""
    hf = prof.model.hf_config
    preset = MODELS.get(prof.model.name)
    if tp == 1 or (hf is None and preset is None):
        return
    if hf is None:
        assert preset is not None
        heads, source = preset.heads, f"the {preset.name} preset"
    else:
        try:
            heads, source = read_hf_config(hf).shape.heads, hf
        except PptuneError:
            return  # moved since the probe: nothing to check against
    if heads % tp:
        raise BadInput(f"--tp {tp} does not divide the {heads} attention heads of the model "
                       f"{origin} was measured from ({source}); choose a tp that divides "
                       f"{heads}")
