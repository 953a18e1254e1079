"""Megatron-LM's training-state widths: the precision-aware optimizer's
(``--use-precision-aware-optimizer`` with ``--main-grads-dtype``, ``--exp-avg-dtype``,
``--exp-avg-sq-dtype``) and the gradient buffer's (``--grad-reduce-in-bf16``; FP16 under
``--fp16`` without ``--accumulate-allreduce-grads-in-fp32``), read and
checked by megatron-core's own rules (core_r0.16 / megatron-core 0.16.1)."""

from __future__ import annotations

from typing import Any

from pptune.frameworks.megatron.flags import FlagReader

OPTIMIZER_DTYPES = {"--main-grads-dtype": ("main_grads_dtype", ("fp32", "bf16")),
                    "--exp-avg-dtype": ("exp_avg_dtype", ("fp32", "fp16", "bf16", "fp8")),
                    "--exp-avg-sq-dtype": ("exp_avg_sq_dtype", ("fp32", "fp16", "bf16", "fp8"))}


def read_widths(r: FlagReader, fields: dict[str, Any]) -> None:
    """--use-precision-aware-optimizer's state widths (megatron-core OptimizerConfig
    __post_init__: only with the distributed optimizer; without it every width must
    stay fp32). Master weights are priced at fp32 (its remainder storage is not)."""
    where = "(megatron-core megatron/core/optimizer/optimizer_config.py __post_init__)"
    aware = r.flags.has("--use-precision-aware-optimizer")
    if aware and not r.flags.has("--use-distributed-optimizer"):
        r.ctx.refuse("megatron-precision-aware-optimizer",
                     "--use-precision-aware-optimizer without --use-distributed-optimizer: "
                     "megatron-core asserts '--use-precision-aware-optimizer only supported "
                     f"with distributed optimizer' {where}; add --use-distributed-optimizer")
    for flag, (key, choices) in OPTIMIZER_DTYPES.items():
        value = r.text(flag)
        if value is None:
            continue
        if value not in choices:
            raise r.ctx.bad(f"{flag} is {value[:40]!r}; expected one of {', '.join(choices)}")
        if not aware and value != "fp32":
            r.ctx.refuse("megatron-precision-aware-optimizer",
                         f"{flag} {value} without --use-precision-aware-optimizer: megatron-core "
                         f"asserts '{key} can only be fp32 when not using precision-aware "
                         f"optimizer' {where}; add --use-precision-aware-optimizer")
        fields[key] = value
    # megatron/training/arguments.py validate_args: under --bf16, --grad-reduce-in-bf16 turns
    # accumulate_allreduce_grads_in_fp32 off, so DDP's gradient buffer takes the parameters'
    # dtype (distributed_data_parallel.py: grad_dtype = param.dtype): accumulated and reduced
    # in BF16, 2 bytes a parameter
    if (r.flags.has("--grad-reduce-in-bf16") and r.flags.has("--bf16")
            and fields.get("main_grads_dtype") is None):
        fields["main_grads_dtype"] = "bf16"
    # validate_args turns accumulate_allreduce_grads_in_fp32 on only under --bf16: under
    # --fp16 the buffer takes the parameters' dtype, FP16, unless the flag says otherwise
    if (r.flags.has("--fp16") and not r.flags.has("--accumulate-allreduce-grads-in-fp32")
            and fields.get("main_grads_dtype") is None):
        fields["main_grads_dtype"] = "fp16"
