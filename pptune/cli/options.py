"""The cost options, declared once: every command spells a cost flag the same
way with the same help (simulate, recommend, check-config, validate).

``cost_option(flag)`` builds the typer option from the one table below; a
command whose default differs (validate probes when no profile is found,
check-config's flags override the file) appends a clause with ``more``.
The ``Annotated`` aliases are what simulate and recommend use as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from pptune.cli.util import parse_ints
from pptune.costs.resolve import CostOptions

COST_FLAGS: dict[str, str] = {
    "--profile": "profile JSON (pptune probe)",
    "--model": "model preset (see pptune presets)",
    "--hf-config": "Hugging Face config.json: analytic costs of that shape",
    "--seq-len": "sequence length (default: the model's)",
    "--gpu": "GPU preset",
    "--tp": "tensor-parallel size inside each stage",
    "--efficiency": "one fraction of peak FLOP/s for every GEMM (analytic costs; default: per "
    "GEMM shape)",
    "--attention": "flash or eager (unfused) attention (analytic costs) [default: flash]",
    "--tp-comm-overlap": "tensor-parallel collectives hidden behind their GEMMs (analytic costs; "
    "Megatron-LM --tp-comm-overlap)",
    "--sequence-parallel": "with --tp: split activations along the sequence too (Megatron-LM)",
    "--micro-batch-sizes": "candidates, e.g. 1,2,4 (default: the profile's)",
}


def cost_option(flag: str, default: Any = None, more: str = "") -> Any:
    """The typer option for a cost flag, with its one help text (plus ``more``)."""
    text = COST_FLAGS[flag] + (f"; {more}" if more else "")
    return typer.Option(default, flag, help=text)


def _alias(flag: str) -> Any:
    """For ``Annotated``: typer takes the default from the parameter, not here."""
    return typer.Option(flag, help=COST_FLAGS[flag])


ProfileOpt = Annotated[Path | None, _alias("--profile")]
ModelOpt = Annotated[str | None, _alias("--model")]
HfConfigOpt = Annotated[Path | None, _alias("--hf-config")]
SeqLenOpt = Annotated[int | None, _alias("--seq-len")]
GpuOpt = Annotated[str | None, _alias("--gpu")]
TpOpt = Annotated[int, _alias("--tp")]
EfficiencyOpt = Annotated[float | None, _alias("--efficiency")]
AttentionOpt = Annotated[str | None, _alias("--attention")]
TpCommOverlapOpt = Annotated[bool, _alias("--tp-comm-overlap")]
SequenceParallelOpt = Annotated[bool, _alias("--sequence-parallel")]
MicroBatchSizesOpt = Annotated[str | None, _alias("--micro-batch-sizes")]


def cost_options(
    *, profile: Path | None = None, model: str | None = None, hf_config: Path | None = None,
    seq_len: int | None = None, gpu: str | None = None, tp: int = 1,
    efficiency: float | None = None, attention: str | None = None,
    tp_comm_overlap: bool = False, sequence_parallel: bool = False,
    micro_batch_sizes: str | list[int] | None = None,
) -> CostOptions:
    """The parsed flags as the resolver's ``CostOptions``."""
    sizes = (parse_ints(micro_batch_sizes, "--micro-batch-sizes")
             if isinstance(micro_batch_sizes, str) else micro_batch_sizes)
    return CostOptions(
        profile=profile, model=model, hf_config=hf_config, seq_len=seq_len, gpu=gpu, tp=tp,
        efficiency=efficiency, attention=attention, tp_comm_overlap=tp_comm_overlap,
        sequence_parallel=sequence_parallel, micro_batch_sizes=tuple(sizes) if sizes else None,
    )
