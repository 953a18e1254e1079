"""The optimizer step: Adam over each rank's shard of the state, bound by HBM.

After the step's last backward (and its gradient reduction) every rank updates
the parameters whose optimizer state it holds: all of its parameters without
sharding, ``1 / (dp x cp)`` of them under the distributed optimizer, ZeRO or
FSDP (sharding.py). Every kernel of the step streams its operands once and does
a few FLOPs an element, so each is HBM-bound; the bytes per parameter of the
shard (FP32 state, Megatron-core's distributed optimizer,
megatron/core/optimizer/distrib_optimizer.py, with apex / Transformer Engine
``FusedAdam``'s multi-tensor kernel):

==========================================  ==========================
gradient norm for clipping (read the grad)   4
Adam: read param, grad, m, v; write param,   7 x 4 = 28
m, v (FusedAdam's multi_tensor_adam)
copy the FP32 master to the BF16 model       4 + 2 = 6
weight (read 4, write 2)
==========================================  ==========================

38 bytes a shard parameter in all, with FP32 moments; BF16 moments (NeMo's
``optim.dtype: bf16``) read and write 2 bytes each instead of 4 (30 bytes).
Then the gradient buffer of every local parameter is zeroed for the next step
(``zero_grad_buffer``: 4 bytes a parameter written, FP32 gradients).

Time = bytes / achieved HBM bandwidth (presets.py: the datasheet figure times
the measured streaming fraction). The step starts when the rank's last
gradient reduction ends; the step's time is the slowest rank's.
"""

from __future__ import annotations

from dataclasses import dataclass

MASTER_TO_MODEL_BYTES = 6.0  # read the FP32 master (4), write the BF16 weight (2)


@dataclass(frozen=True)
class AdamStep:
    """What one rank's optimizer step touches."""

    shard_params: float  # parameters whose optimizer state this rank holds
    local_params: float  # parameters of this rank's model (its gradient buffer)
    moment_bytes: float = 4.0  # FP32 Adam moments (2: BF16)
    grad_bytes: float = 4.0  # FP32 main gradients (Megatron-LM)

    def hbm_bytes(self) -> float:
        """Bytes moved: per shard parameter the norm's gradient read, Adam's
        FP32 parameter (read, written), gradient (read) and moments (read,
        written), and the master-to-model copy; per local parameter the zeroing."""
        g, mo = self.grad_bytes, self.moment_bytes
        per_shard = g + (2 * 4.0 + g + 4 * mo) + MASTER_TO_MODEL_BYTES  # 38 with FP32
        return self.shard_params * per_shard + self.local_params * g


def step_s(step: AdamStep, hbm_bytes_per_s: float) -> float:
    """Seconds of one rank's optimizer step at ``hbm_bytes_per_s`` (achieved)."""
    if step.shard_params <= 0 and step.local_params <= 0:
        return 0.0
    return step.hbm_bytes() / hbm_bytes_per_s
