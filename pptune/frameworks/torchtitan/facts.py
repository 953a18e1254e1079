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

GROUPED = ("'Float8 MoE training only supported on SM89 or later.' "
           "(torchtitan/components/quantization/float8.py Float8GroupedMMConverter)")
SWAP = ("'Failed to swap to Float8Linear because float8 is only supported on SM89 or "
        "later.To enable testing on older hardware, set `float8.emulate` to True in eager "
        "mode.' (torchtitan/components/quantization/float8.py Float8LinearConverter)")


@dataclass
class Facts:
    """The reader's record (Semantics.details) of a torchtitan file."""

    # the float8 table (quantize.linear.float8 or 0.1's float8) when it emulates with the
    # model compiled: torchtitan refuses that on a GPU without FP8 tensor cores
    float8_emulate_compiled: str | None = None
    # quantize.grouped_mm.float8 is listed: it raises before SM89 (converters.py)
    grouped_float8: bool = False
    # training.global_batch_size is stated (not -1, torchtitan's local x dp): a fix of the
    # micro-batch count keeps it (adapter.py microbatch_rules)
    global_batch_stated: bool = False
    # a torchtitan main dump (dump_batch.py): its tokens a micro-batch per dp rank, for the
    # micro-batch count's fix, in num_pp_microbatches (adapter.py microbatch_rules)
    main_tokens: int | None = None


def facts(semantics: Semantics) -> Facts:
    if not isinstance(semantics.details, Facts):
        semantics.details = Facts()
    return semantics.details


def config_rules(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    _grouped_rules(cfg, semantics, add)
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


def _grouped_rules(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """quantize.grouped_mm.float8 on the config's GPU: torchtitan raises before SM89 (where
    the experts stay BF16: precision_refusal says it otherwise), and torch's FP8 grouped
    GEMM runs on SM90 only (converters.py)."""
    if not facts(semantics).grouped_float8 or cfg.gpu not in presets.GPUS:
        return
    experts = cfg.expert_precision or cfg.precision
    if presets.GPUS[cfg.gpu].fp8_peak_flops is None:
        if experts != "fp8":
            add("torchtitan-float8-sm89", "error", f"quantize.grouped_mm.float8 on {cfg.gpu}, "
                f"which has no FP8 tensor cores (before SM89): torchtitan raises {GROUPED}; "
                "remove it from [model] converters", gpu=cfg.gpu)
        return
    if experts == "fp8" and presets.GPUS[cfg.gpu].mxfp8:  # Blackwell: SM100 and later
        add("torchtitan-float8-moe-sm90", "error",
            f"quantize.grouped_mm.float8 on {cfg.gpu}: torch's FP8 rowwise grouped GEMM "
            "(torch._scaled_grouped_mm, which torchao's MoE training calls) has SM90 kernels "
            "only (torch/testing/_internal/common_cuda.py "
            "evaluate_platform_supports_fp8_grouped_gemm; torchao's moe_training tests "
            "'require sm90'), so the experts' FP8 GEMMs do not run there; drop it from "
            "[model] converters (the experts run BF16) or use quantize.linear.mx with "
            "quantize.grouped_mm.mx (MXFP8, SM100)", gpu=cfg.gpu)


def precision_refusal(precision: Precision, gpu: str, experts: bool = False) -> str | None:
    """torchtitan's words for float8 on a GPU without FP8 tensor cores (``experts``: the
    grouped GEMMs' converter), or MXFP8 experts off SM100."""
    if experts and precision is Precision.MXFP8:
        return (f"quantize.grouped_mm.mx on {gpu}: torchtitan asserts 'MXFP8 is only supported "
                "on SM100 or architectures' (torchtitan/components/quantization/mx.py "
                "MXGroupedMMConverter); remove it from [model] converters")
    if experts and precision is Precision.FP8:
        return (f"quantize.grouped_mm.float8 on {gpu}, which has no FP8 tensor cores (before "
                f"SM89): torchtitan raises {GROUPED}; remove it from [model] converters")
    if precision is not Precision.FP8:
        return None
    return (f"the float8 converter on {gpu}, which has no FP8 tensor cores (before SM89): "
            f"torchtitan raises {SWAP}; remove the float8 converter from [model] converters "
            "(training.mixed_precision_param bfloat16 trains in BF16), or set emulate = true "
            "with the model not compiled (priced as BF16)")
