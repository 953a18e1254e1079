"""The training-state widths a config states, as the plan request's fields: Megatron-LM's
precision-aware optimizer and gradient buffer, torchtitan's training.dtype and
mixed_precision_reduce, Megatron-FSDP's BF16 weight shard and gradient buckets, DeepSpeed's
ZeRO-Offload."""

from __future__ import annotations

from typing import Any

from pptune.costmodel.sharding import BF16_BYTES, STATE_DTYPE_BYTES, moment_bytes
from pptune.frameworks.common.compression import reduction_widths
from pptune.schemas import TrainingConfig


def optimizer_widths(cfg: TrainingConfig) -> dict[str, Any]:
    """The request's state widths as the config states them (Megatron-LM's
    precision-aware optimizer, torchtitan's training.dtype and mixed_precision_reduce):
    gradient buffer bytes a parameter (None: fp32), the data-parallel reduction's bytes
    over fp32's (a BF16 buffer holds and reduces 2), bytes of each Adam moment, FSDP's
    sharded weights (the optimizer's copy, and the model's BF16 shard where one is kept
    beside it), its unsharded gradients (the reduce dtype) and sharded ones (the
    weights' dtype), Megatron-FSDP's queue of unsharded gradient buckets, and the bytes
    ZeRO-Offload keeps on the host."""
    bf16 = cfg.main_grads_dtype in ("fp16", "bf16")  # a 16-bit buffer: 2 bytes either way
    moments = moment_bytes(cfg.exp_avg_dtype or "fp32", cfg.exp_avg_sq_dtype or "fp32")
    # DeepSpeed's communication_data_type: gradients held at their width, reduced in 16 bits
    wire = {"grad_bytes_factor": 0.5} if cfg.grad_reduce_dtype in ("fp16", "bf16") else {}
    return {**reduction_widths(bf16), **wire, "moment_bytes": moments,
            "fsdp_weight_bytes": STATE_DTYPE_BYTES[cfg.main_params_dtype or "fp32"]
            + (BF16_BYTES if cfg.fsdp_model_weights else 0.0),  # Megatron-FSDP's own shard
            # FSDP2 casts the reduced shard back to the weights' dtype (torch
            # _fsdp_collectives.py foreach_reduce, frameworks/torchtitan/widths.py)
            "fsdp_grad_bytes": STATE_DTYPE_BYTES[cfg.main_params_dtype or "fp32"],
            "fsdp_grad_queue_elements": cfg.fsdp_grad_queue_elements,
            # ZeRO-Offload: master weights and moments (12), ZeRO-3's weight shard (+2)
            "offloaded_bytes": 12.0 * cfg.offload_optimizer + 2.0 * cfg.offload_params}
