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
deepspeed`` re-prices a plan of tp above 1 (its closest.py). It ranks plans as
NAME's files run them, so a kernel flag naming one its files cannot state
(Adapter.states_kernels: ``--fp8-kernels te`` for torchtitan, whose converters swap
in torchao's Float8Linear whatever a flag says; ``--attention eager`` there, whose
model runs its flavor's SDPA or FlexAttention; ``--cross-entropy fused`` for
Megatron-LM, whose scripts pptune writes with --cross-entropy-loss-fusion alone) is
set aside with a note a flag, and the plans searched with the kernel its files run:
its as-run pricing (FrameworkSearch) re-priced the listed plans with them anyway, while
the search had left out, as over memory, plans that fit without Transformer Engine's
cached FP8 weights, and the plan file's request named a kernel no plan ran. The
``kernels: ranked with`` line then names as setting another only the flags whose
other values its files state. ``--emit NAME`` alone keeps the flags (its table is
every plan pptune prices) and says, as it writes the file, that its files run the
others (closest.py's note)."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.ops import Attention
from pptune.costmodel.precision import Fp8Kernels, is_low
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.rates import WgradAccum
from pptune.frameworks.common.adapter import Adapter
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.registry import find
from pptune.options import CostOptions

_SAID = {"attention": ("{} attention", "--attention"),
         "cross_entropy": ("its {} cross-entropy", "--cross-entropy"),
         "wgrad_accum": ("{} weight-gradient accumulation", "--wgrad-accum"),
         "sequence_parallel": ("tensor parallelism without sequence parallelism",
                               "--sequence-parallel"),
         "fp8_kernels": ("{} FP8 linears", "--fp8-kernels")}
# what a kernel a framework's files run does beside what the flag says, for the note
# that sets another aside: what each kind of FP8 linears keeps (costmodel/precision.py
# Fp8Kernels); Megatron-LM's fused accumulation, whose scripts under Megatron-FSDP's
# shardings keep BF16 weight gradients instead (megatron/closest.py wgrad_accum)
_RUNS = {("fp8_kernels", "torchao"): "no cached FP8 weights",
         ("fp8_kernels", "te"): "each weight's FP8 copy and transpose cached",
         ("wgrad_accum", "fused"): "BF16 weight gradients under Megatron-FSDP's shardings alone"}


def written_kernels(framework: str | None, asked: CostOptions, measured: bool,
                    sequence: bool = False, model: str | None = None,
                    shape: ModelShape | None = None, versions: Versions | None = None
                    ) -> tuple[dict[str, Any], list[str]]:
    """The cost options ``framework``'s files run that ``asked`` leaves unset (a
    field -> value map for ``CostOptions``), and the line that says the plans are
    ranked with them; ({}, []) for measured costs, no framework or nothing to set.
    ``sequence``: whether the plans are ranked as its files run them (--framework):
    its tensor parallelism's sequence split, and in place of each kernel asked that its
    files cannot state (``Adapter.states_kernels`` for ``model``, ``shape`` and
    ``versions``) the one they run, with a note a flag (module docstring)."""
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
    stated = adapter.states_kernels(model, shape, versions or Versions()) if sequence else {}
    if sequence and asked.sequence_parallel is None and not adapter.tp_splits_sequence:
        chosen["sequence_parallel"] = False
    line = _ranked_line(adapter, chosen, stated) if chosen else []
    # kernels asked that its files cannot state: those they run, with a note of their own
    aside = {name: (given, kind(stated[name][0])) for name, (given, _, kind) in runs.items()
             if given is not None and name in stated and given.value not in stated[name]}
    chosen.update({name: ran for name, (_, ran) in aside.items()})
    return chosen, [*line, *(_set_aside(adapter, name, given, ran)
                             for name, (given, ran) in aside.items())]


def _ranked_line(adapter: Adapter, chosen: dict[str, Any],
                 stated: dict[str, tuple[str, ...]]) -> list[str]:
    """The line naming the kernels ``chosen`` for ``adapter``'s files and the flags that
    set others: under --framework (``stated``), only those its files state another of."""
    what = [_SAID[name][0].format(getattr(value, "value", value))
            for name, value in chosen.items()]
    flags = [_SAID[name][1] for name in chosen if name not in stated or len(stated[name]) > 1]
    listed = what[0] if len(what) == 1 else f"{', '.join(what[:-1])} and {what[-1]}"
    setter = " or ".join(flags) if len(flags) < 3 else f"{', '.join(flags[:-1])} or {flags[-1]}"
    sets = f" ({setter} sets another)" if flags else ""
    return [f"kernels: ranked with {listed}, what {adapter.title}'s files run{sets}"]


def _set_aside(adapter: Adapter, name: str, given: Enum, ran: Enum) -> str:
    """The note for a kernel asked (``given``, of CostOptions field ``name``) that
    ``adapter``'s files never run, whose plans ``recommend --framework`` ranks with the
    one they run (``ran``), as ``--emit`` prices the file it writes."""
    runs = _SAID[name][0].format(ran.value)
    why = _RUNS.get((name, ran.value))
    return (f"kernels: {_SAID[name][1]} {given.value} set aside: {adapter.title}'s files run "
            f"{runs}{f' ({why})' if why else ''}, with which the plans are ranked, as --emit "
            f"{adapter.name} prices the file it writes")
