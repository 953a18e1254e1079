"""The gradient widths recommend prices: ``--grad-compression`` as given, else a
calibrated profile's jobs' own.

A calibration's memory reserve is what the jobs' logs held beyond the tensors pptune
counted at the jobs' own widths (``Calibration.main_grads_dtype``: a Megatron-LM
``--fp16`` job without ``--accumulate-allreduce-grads-in-fp32`` keeps an FP16 gradient
buffer, one with ``--grad-reduce-in-bf16`` a BF16 one). Plans on that profile are priced
at the same widths, as its GEMM precision and kernels are (costs/calibrated.py
``as_ran``), unless ``--grad-compression`` names one: plans priced with FP32 buffers
hold 2 bytes a parameter more than the jobs did, which the reserve does not cover.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pptune.costmodel.sharding import BF16_BYTES
from pptune.frameworks.common.compression import reduction_widths
from pptune.frameworks.registry import ADAPTERS
from pptune.options import CostOptions
from pptune.plan.framework_search import grad_reduction, parse_framework
from pptune.schemas.profile import load_profile

SIXTEEN_BIT_BUFFERS = ("fp16", "bf16")


def jobs_width(costs: CostOptions) -> str | None:
    """The calibrated profile's jobs' 16-bit gradient buffer ("fp16", "bf16"), None where
    the profile is not calibrated or its jobs kept FP32 gradients."""
    if costs.profile is None:
        return None
    cal = load_profile(costs.profile).calibration
    width = cal.main_grads_dtype if cal is not None else None
    return width if width in SIXTEEN_BIT_BUFFERS else None


def gradients(compression: str, framework: str | None, flag: str, costs: CostOptions,
              jobs_default: bool) -> tuple[str, dict[str, Any], CostOptions, str | None]:
    """The --grad-compression priced, the request's gradient widths, the cost options
    that price them and a note: ``compression`` as given (``jobs_default`` False), else
    the calibrated jobs' 16-bit buffer where there is one and ``framework``'s files can
    state it (plan/framework_search.py ``grad_reduction``)."""
    width = jobs_width(costs) if jobs_default else None
    if width is None:
        return (compression, *grad_reduction(compression, framework, flag, costs), None)
    if framework is not None:
        adapter = ADAPTERS[parse_framework(framework, flag)]
        stated = adapter.grad_compressions or frozenset()
        if width not in stated or not adapter.grad_reduce_held:
            return (compression, *grad_reduction(compression, framework, flag, costs),
                    f"the calibrated jobs kept {width.upper()} gradients, which {adapter.title}'s "
                    f"files do not state: plans priced with FP32 gradient buffers, 2 bytes a "
                    "parameter more than the jobs held")
    note = (f"gradients kept and reduced in {width.upper()}, as the calibrated jobs kept "
            "them (--grad-compression none prices FP32 gradient buffers)")
    return (width, reduction_widths(True), replace(costs, main_grad_bytes=float(BF16_BYTES)),
            note)
