"""What a torchtitan file's reader learnt that only the GPU decides, and torchtitan's
refusals once it is known (check-config's ``config_rules``).

torchtitan 0.2.2's Float8LinearConverter (torchtitan/components/quantization/float8.py)
swaps in torchao's Float8Linear only on SM89 or later, or with ``emulate = true`` when
the model is not compiled; otherwise it raises "Failed to swap to Float8Linear because
float8 is only supported on SM89 or later.To enable testing on older hardware, set
`float8.emulate` to True in eager mode." (its two strings concatenated so).
"""

from __future__ import annotations

from dataclasses import dataclass

from pptune.costmodel import presets
from pptune.costmodel.keys import Precision
from pptune.frameworks.common.adapter import Add
from pptune.frameworks.common.fields import Semantics
from pptune.schemas import TrainingConfig

SWAP = ("'Failed to swap to Float8Linear because float8 is only supported on SM89 or "
        "later.To enable testing on older hardware, set `float8.emulate` to True in eager "
        "mode.' (torchtitan/components/quantization/float8.py Float8LinearConverter)")


@dataclass
class Facts:
    """The reader's record (Semantics.details) of a torchtitan file."""

    # the float8 table (quantize.linear.float8 or 0.1's float8) when it emulates with the
    # model compiled: torchtitan refuses that on a GPU without FP8 tensor cores
    float8_emulate_compiled: str | None = None


def facts(semantics: Semantics) -> Facts:
    if not isinstance(semantics.details, Facts):
        semantics.details = Facts()
    return semantics.details


def config_rules(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    table = facts(semantics).float8_emulate_compiled
    spec = presets.GPUS.get(cfg.gpu or "")
    if table is None or spec is None or spec.fp8_peak_flops is not None:
        return
    add("torchtitan-float8-sm89", "error",
        f"{table}.emulate with the model compiled ([compile] enable, \"model\" in "
        f"components) on {cfg.gpu}, which has no FP8 tensor cores (before SM89): torchtitan "
        f"raises {SWAP}; emulation runs in eager mode only: drop \"model\" from [compile] "
        "components, or remove the float8 converter from [model] converters "
        "(mixed_precision_param bfloat16 trains in BF16)", gpu=cfg.gpu)


def precision_refusal(precision: Precision, gpu: str) -> str | None:
    """torchtitan's words for float8 on a GPU without FP8 tensor cores."""
    if precision is not Precision.FP8:
        return None
    return (f"the float8 converter on {gpu}, which has no FP8 tensor cores (before SM89): "
            f"torchtitan raises {SWAP}; remove the float8 converter from [model] converters "
            "(training.mixed_precision_param bfloat16 trains in BF16), or set emulate = true "
            "with the model not compiled (priced as BF16)")
