"""``--grad-compression`` as a framework's files state it.

pptune prices fp16/bf16 compression as gradients crossing the wire at 2 bytes
(costmodel/comm.py ``compression_factor``) and top-k as a fraction of them with an
index each. A framework's files state only the 16-bit reduction, each in its own words
(``Adapter.grad_compressions``): torchtitan as FSDP's reduce dtype
(``training.mixed_precision_reduce = "bfloat16"``), Megatron-LM as its BF16 gradient
buffer (``--grad-reduce-in-bf16``), DeepSpeed as ``communication_data_type``; none states
top-k sparsification, which ``--framework`` and ``--emit`` refuse (as they refuse Adam's
moments below fp32 where the files cannot keep them).
"""

from __future__ import annotations

from typing import Any

from pptune.costmodel.comm import compression_factor
from pptune.costmodel.sharding import BF16_BYTES, MEGATRON_GRAD_BYTES
from pptune.errors import BadInput
from pptune.frameworks.common.adapter import Adapter

SIXTEEN_BIT = ("fp16", "bf16")  # --grad-compression values of a 16-bit reduction


def reduction_widths(bf16: bool) -> dict[str, Any]:
    """The request's gradient widths where a file states gradients kept and reduced in
    BF16 (``bf16``: Megatron-LM's BF16 buffer, torchtitan FSDP's reduce dtype), else FP32:
    the buffer's bytes a parameter (None: fp32), the reduction's bytes over fp32's, FSDP's
    unsharded gradients' bytes. check-config prices a file's ``main_grads_dtype`` with
    these (check/widths.py) and recommend a plan whose file will state it."""
    return {"grad_buffer_bytes": float(BF16_BYTES) if bf16 else None,
            "grad_bytes_factor": BF16_BYTES / MEGATRON_GRAD_BYTES if bf16 else 1.0,
            "fsdp_reduce_bytes": float(BF16_BYTES if bf16 else MEGATRON_GRAD_BYTES)}


def sixteen_bit(compression: str) -> bool:
    """Whether ``--grad-compression`` asks for a 16-bit reduction."""
    return compression in SIXTEEN_BIT


def check_compression(adapter: Adapter, compression: str, flag: str) -> None:
    """BadInput when ``--grad-compression`` is none pptune prices, or ``adapter``'s files
    cannot state it."""
    try:
        compression_factor(compression)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    stated = adapter.grad_compressions
    if stated is None or compression in ("none", *stated):
        return
    raise BadInput(f"--grad-compression {compression} with {flag} {adapter.name}: "
                   f"{adapter.title}'s files state no top-k gradient compression, only a "
                   f"16-bit reduction ({adapter.grad_reduce_setting}): plan with "
                   "--grad-compression bf16, or without --grad-compression")
