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
NAME's files run them, so FP8 linears its files cannot run (``--fp8-kernels te``
for torchtitan, whose converters swap in torchao's Float8Linear whatever a flag
says) are set aside with a note, and the plans searched with the linears its
files run: its as-run pricing (FrameworkSearch) re-priced the listed plans with
them anyway, while the search had left out, as over memory, plans that fit
without Transformer Engine's cached FP8 weights. ``--emit NAME`` alone keeps the
flag (its table is every plan pptune prices) and says, as it writes the file,
that its files run the others (closest.py's note)."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.ops import Attention
from pptune.costmodel.precision import Fp8Kernels, is_low
from pptune.costmodel.rates import WgradAccum
from pptune.frameworks.common.adapter import Adapter
from pptune.frameworks.registry import find
from pptune.options import CostOptions

_SAID = {"attention": ("{} attention", "--attention"),
         "cross_entropy": ("its {} cross-entropy", "--cross-entropy"),
         "wgrad_accum": ("{} weight-gradient accumulation", "--wgrad-accum"),
         "sequence_parallel": ("tensor parallelism without sequence parallelism",
                               "--sequence-parallel"),
         "fp8_kernels": ("{} FP8 linears", "--fp8-kernels")}
# what each kind of FP8 linears keeps, for the note that sets another aside
# (costmodel/precision.py Fp8Kernels)
_RUNS = {Fp8Kernels.TORCHAO: "no cached FP8 weights",
         Fp8Kernels.TE: "each weight's FP8 copy and transpose cached"}


def written_kernels(framework: str | None, asked: CostOptions, measured: bool,
                    sequence: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The cost options ``framework``'s files run that ``asked`` leaves unset (a
    field -> value map for ``CostOptions``), and the line that says the plans are
    ranked with them; ({}, []) for measured costs, no framework or nothing to set.
    ``sequence``: whether the plans are ranked as its files run them (--framework):
    its tensor parallelism's sequence split, and its FP8 linears in place of others
    asked, which its files cannot run (module docstring), with the note that says so."""
    adapter = find(framework) if framework is not None else None
    if adapter is None or measured:
        return {}, []
    runs: dict[str, tuple[Enum | None, str | None, type[Enum]]] = {
        "attention": (asked.attention, adapter.runs_attention, Attention),
        "cross_entropy": (asked.cross_entropy, adapter.runs_loss, CrossEntropy),
        "wgrad_accum": (asked.wgrad_accum, adapter.runs_wgrad, WgradAccum)}
    fp8 = any(is_low(p) for p in asked.precision or ())  # FP8 flags act on FP8 plans alone
    if fp8:
        runs["fp8_kernels"] = (asked.fp8_kernels, adapter.runs_fp8, Fp8Kernels)
    chosen: dict[str, Any] = {name: kind(ran) for name, (given, ran, kind) in runs.items()
                              if given is None and ran is not None}
    if sequence and asked.sequence_parallel is None and not adapter.tp_splits_sequence:
        chosen["sequence_parallel"] = False
    # FP8 linears asked that its files cannot run: theirs, with a note of its own
    aside = _fp8_set_aside(adapter, asked) if sequence and fp8 else None
    said = [aside] if aside else []
    if not chosen:
        return ({"fp8_kernels": Fp8Kernels(adapter.runs_fp8)}, said) if aside else ({}, [])
    what = [_SAID[name][0].format(getattr(value, "value", value))
            for name, value in chosen.items()]
    flags = [_SAID[name][1] for name in chosen]
    listed = what[0] if len(what) == 1 else f"{', '.join(what[:-1])} and {what[-1]}"
    setter = flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} or {flags[-1]}"
    line = (f"kernels: ranked with {listed}, what {adapter.title}'s files run "
            f"({setter} sets another)")
    if aside:
        chosen["fp8_kernels"] = Fp8Kernels(adapter.runs_fp8)
    return chosen, [line, *said]


def _fp8_set_aside(adapter: Adapter, asked: CostOptions) -> str | None:
    """The note for FP8 linears asked (``--fp8-kernels``) that ``adapter``'s files never
    run (``Adapter.runs_fp8``: the only ones they run), whose plans ``recommend
    --framework`` ranks with its own (None: none asked, or those it runs)."""
    ran = adapter.runs_fp8
    if asked.fp8_kernels is None or ran is None or asked.fp8_kernels.value == ran:
        return None
    return (f"kernels: --fp8-kernels {asked.fp8_kernels.value} set aside: {adapter.title}'s "
            f"files run {ran} FP8 linears ({_RUNS[Fp8Kernels(ran)]}), with which the plans "
            f"are ranked, as --emit {adapter.name} prices the file it writes")
