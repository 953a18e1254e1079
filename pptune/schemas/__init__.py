"""Pydantic models for everything that crosses a file boundary.

- ``Profile``: per-layer costs and links, written by ``pptune probe`` or the
  analytic presets, read by ``simulate``, ``recommend`` and ``check-config``.
- ``TrainingConfig``: pptune's own training config, and the normalized form
  every framework reader (DeepSpeed, Megatron-LM, torchtitan) produces.
- ``PlanFile``: what ``pptune recommend --json`` prints and ``-o`` saves; its
  ``request`` is the planning options (``pptune.options.record``).

All models forbid unknown keys, so a typo in a hand-written file is an error
that names the key, not a silently ignored value (a plan file's ``request``
ignores keys it does not know, so a newer pptune's plan file still loads).
"""

from pptune.schemas.base import (
    MAX_JSON_FILE_BYTES,
    Strict,
    load_json_model,
    one_line,
    write_atomic,
)
from pptune.schemas.config import TrainingConfig
from pptune.schemas.limits import Limits
from pptune.schemas.plan import MemoryParts, PlanFile, PlanRecord
from pptune.schemas.profile import (
    PROFILE_SCHEMA_VERSION,
    Calibration,
    CalibrationRun,
    DeviceInfo,
    FabricSpec,
    Layer,
    LayerCost,
    LinkPair,
    Links,
    LinkSpec,
    ModelInfo,
    Profile,
    load_profile,
)

__all__ = [
    "MAX_JSON_FILE_BYTES", "PROFILE_SCHEMA_VERSION", "Calibration", "CalibrationRun",
    "DeviceInfo", "FabricSpec", "Layer", "LayerCost",
    "Limits", "LinkPair", "LinkSpec", "Links", "MemoryParts", "ModelInfo", "PlanFile",
    "PlanRecord",
    "Profile", "Strict", "TrainingConfig", "load_json_model", "load_profile", "one_line",
    "write_atomic",
]
