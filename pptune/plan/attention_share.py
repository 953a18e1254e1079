"""The note that says what a step made mostly of attention is priced at.

At long sequences attention outweighs the GEMMs (Llama 3 70B at 131,072 tokens: 55% of
the model FLOPs, two thirds of the step at a fused kernel's rates), and its rates are
the least certain of the compute model's: the kernel a job runs (FlashAttention-2 or
cuDNN's fused attention) moves such a step by a quarter, and GPUs without a published
forward+backward sweep are priced at another GPU's share of peak (presets.py). When
attention is the largest share of the winner's step this says so, with the kernel and
whose measurements price it."""

from __future__ import annotations

from pptune.costmodel.breakdown import step_parts
from pptune.costmodel.ops import Attention
from pptune.costmodel.parts import ATTENTION
from pptune.costmodel.presets import GpuSpec
from pptune.costmodel.search import Plan, PlanRequest
from pptune.costmodel.table import CostTable

SHARE = 0.5  # attention's share of the step from which the note is printed

_KERNELS = {Attention.FLASH: "FlashAttention-2's", Attention.CUDNN: "cuDNN's fused attention"}


def attention_note(table: CostTable, req: PlanRequest, plan: Plan, gpu: GpuSpec | None,
                   kernel: Attention) -> str | None:
    """One line when attention is at least ``SHARE`` of ``plan``'s step on its busiest
    rank (analytic costs split by part only); None otherwise."""
    layers = (table.layer_parts or {}).get(plan.micro_batch_size)
    if layers is None or gpu is None or not kernel.fused:
        return None
    share = step_parts(table, req, plan, layers).share(ATTENTION)
    if share < SHARE:
        return None
    priced = Attention(gpu.priced_kernel(kernel.value))
    other = Attention.CUDNN if priced is Attention.FLASH else Attention.FLASH
    whose = ("" if gpu.attention_rates_of is None else
             f", on {gpu.name} at {gpu.attention_rates_of}'s measured share of peak (no "
             f"published forward+backward sweep on {gpu.name})")
    how = f", the kernel torch's SDPA runs on {gpu.name}" if kernel is Attention.SDPA else ""
    return (f"attention is {share:.0%} of the winner's step, priced at {_KERNELS[priced]} "
            f"rates{how}{whose}; the step moves with the kernel the job runs (--attention "
            f"{other.value} prices the other)")
