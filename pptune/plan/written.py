"""The kernels recommend --emit ranks with: those the framework's files run.

Where the costs are analytic and the user names no kernel, ``recommend --emit
NAME`` prices the plans with what NAME's files run, so that plan 1 and the file
written are priced alike: the attention kernel (Adapter.runs_attention), the
loss (Adapter.runs_loss), where weight gradients go (Adapter.runs_wgrad) and,
for FP8 plans, whose FP8 linears (Adapter.runs_fp8).
Megatron-LM's scripts run Transformer Engine's cuDNN attention, megatron-core's
fused cross-entropy and weight gradients accumulated into the FP32 main_grad by
their GEMMs (its gradient_accumulation_fusion default): ranked with pptune's
defaults (flash, fused loss, BF16 gradients), a DeepSeek-V3 plan on 1,024 H100s
ranked first at 37.8 s was written at 41.3 s (1.09x) while the second, 38.1 s,
wrote at 38.3 s (its experts over 64 ranks accumulate a quarter the gradients a
GPU). torchtitan's float8 is torchao's, which caches no FP8 weight copy: ranked
with Transformer Engine's copy and transpose of every GEMM weight (2 bytes each,
whatever the sharding), llama3-70b at 32k tokens, tp 2, cp 8, pp 1 on 64 H100s was
searched with 63.75 GiB of such copies beyond its file's 66.30 GiB peak, over the GPU,
while check-config found that file fitting and 1.15x faster than the plan written.

``recommend --framework NAME`` ranks with them too and, where NAME's tensor
parallelism splits no sequence (DeepSpeed's AutoTP: Adapter.tp_splits_sequence)
and no flag says otherwise, without sequence parallelism: as ``--emit
deepspeed`` re-prices a plan of tp above 1 (its closest.py)."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.ops import Attention
from pptune.costmodel.precision import Fp8Kernels, is_low
from pptune.costmodel.rates import WgradAccum
from pptune.frameworks.registry import find
from pptune.options import CostOptions

_SAID = {"attention": ("{} attention", "--attention"),
         "cross_entropy": ("its {} cross-entropy", "--cross-entropy"),
         "wgrad_accum": ("{} weight-gradient accumulation", "--wgrad-accum"),
         "sequence_parallel": ("tensor parallelism without sequence parallelism",
                               "--sequence-parallel"),
         "fp8_kernels": ("{} FP8 linears", "--fp8-kernels")}


def written_kernels(framework: str | None, asked: CostOptions, measured: bool,
                    sequence: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The cost options ``framework``'s files run that ``asked`` leaves unset (a
    field -> value map for ``CostOptions``), and the line that says the plans are
    ranked with them; ({}, []) for measured costs, no framework or nothing to set.
    ``sequence``: whether its tensor parallelism splits the sequence too (--framework)."""
    adapter = find(framework) if framework is not None else None
    if adapter is None or measured:
        return {}, []
    runs: dict[str, tuple[Enum | None, str | None, type[Enum]]] = {
        "attention": (asked.attention, adapter.runs_attention, Attention),
        "cross_entropy": (asked.cross_entropy, adapter.runs_loss, CrossEntropy),
        "wgrad_accum": (asked.wgrad_accum, adapter.runs_wgrad, WgradAccum)}
    if any(is_low(p) for p in asked.precision or ()):  # FP8 flags act on FP8 plans alone
        runs["fp8_kernels"] = (asked.fp8_kernels, adapter.runs_fp8, Fp8Kernels)
    chosen: dict[str, Any] = {name: kind(ran) for name, (given, ran, kind) in runs.items()
                              if given is None and ran is not None}
    if sequence and asked.sequence_parallel is None and not adapter.tp_splits_sequence:
        chosen["sequence_parallel"] = False
    if not chosen:
        return {}, []
    what = [_SAID[name][0].format(getattr(value, "value", value))
            for name, value in chosen.items()]
    flags = [_SAID[name][1] for name in chosen]
    listed = what[0] if len(what) == 1 else f"{', '.join(what[:-1])} and {what[-1]}"
    setter = flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} or {flags[-1]}"
    return chosen, [f"kernels: ranked with {listed}, what {adapter.title}'s files run "
                    f"({setter} sets another)"]
