"""Training-state sharding over data parallelism: its memory and its traffic.

Mixed-precision Adam keeps, per parameter, bf16 weights (2 bytes), gradients
(fp32 = 4 in Megatron-LM, whose DDP accumulates into an fp32 ``main_grad``;
bf16 = 2 in DeepSpeed by default), and fp32 master weights plus two fp32
Adam moments (12). What each sharding keeps per GPU, over ``dp`` ranks:

============  ====================================  =================  ==========================
sharding      framework                             bytes / parameter  communication per step
============  ====================================  =================  ==========================
``none``      DDP / ZeRO-0 (Megatron-LM default)    2 + 4 + 12 = 18    all-reduce fp32 grads
``zero1``     Megatron-LM --use-distributed-opt.    6 + 12/dp          reduce-scatter fp32 grads,
                                                                       all-gather bf16 weights
``zero2``     DeepSpeed ZeRO stage 2                2 + (2 + 12)/dp    reduce-scatter bf16 grads
                                                                       every micro-batch, all-gather
                                                                       bf16 weights after the step
``zero3``     DeepSpeed ZeRO stage 3                (2 + 2 + 12)/dp    per micro-batch: all-gather
                                                                       weights in forward and in
                                                                       backward, reduce-scatter grads
``fsdp``      torch FSDP2 full shard (torchtitan)   (4 + 4 + 8)/dp     see below
============  ====================================  =================  ==========================

Sources: Megatron-LM docs (distributed optimizer: 18 vs 6 + 12/dp bytes),
Rajbhandari et al. 2020 ("ZeRO", sec. 5.1 and fig. 1: 2 + 2 + K with K = 12,
sharding the last term, then the gradients, then the weights). FSDP2 keeps
sharded fp32 weights (the master copy), fp32 sharded gradients and the two
moments (torch ``fully_shard`` with ``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)``, torchtitan's default).

Working copies, gathered while used: ZeRO-3 and FSDP with
``reshard_after_forward`` hold the bf16 weights of the block in use and of
the prefetched next one, and one block's unsharded gradient before it is
reduce-scattered (bf16, plus its fp32 reduce copy for FSDP). torchtitan sets
``reshard_after_forward = not pp_enabled`` by default
(torchtitan/distributed/fsdp.py, ``get_fsdp_reshard_after_forward_policy``:
"For PP, by default do not reshard after forward to avoid per-microbatch
all-gathers"), and torch's pipeline stages run every backward but the last
with ``set_requires_gradient_sync(False)`` and ``set_reshard_after_backward
(False)`` (torch/distributed/pipelining/stage.py, ``backward_maybe_with_nosync``;
the reduce-scatter runs once, in ``perform_reduce_grad``), accumulating the
unsharded gradient in the fp32 reduce dtype (FSDPParam
``to_accumulated_grad_if_needed``). So FSDP under pipeline parallelism keeps
the stage's bf16 weights (2) and fp32 gradients (4) unsharded for the whole
step, gathers once per step and reduce-scatters once per step.

Megatron-FSDP's gradient buckets (``queued``): with its gradients sharded (optim_grads,
optim_grads_params) a backward does not reduce one block's gradient at a time. Each
parameter's gradient lands in an unsharded bucket of the gradient buffer's width
(megatron_fsdp.py ``_grad_acc``: ``param.main_grad = param.get_main_grad()``, a view of
``fetch_bucket()``, which allocates the bucket in the buffer's dtype; the BF16
``param.grad`` is copied in and deleted, or the fused wgrad GEMM writes it directly);
the bucket's reduce-scatter is queued, and before queuing the next the queue frees its
oldest buckets only while it holds more than ``suggested_communication_unit_size``
elements (param_and_grad_buffer.py ``GradReducePipeline.wait_for_previous_grad_reduce``:
at least 1e9 elements unless given, megatron_fsdp.py), the rest when the backward ends
(``_root_post_backward``: ``reset()``). So a stage holds at most the queue's elements,
the bucket just queued and the one being filled: ``min(params, queue + 2 x largest
layer)`` unsharded gradient elements; with ``--fsdp-double-buffer`` (or
``--use-nccl-ub``) optim_grads_params keeps two layers' (``_enforce_double_buffer_limit``:
a queue of 0 here). Counted in place of the one block's unsharded gradient of ZeRO-3 and
FSDP, beside their two blocks' gathered weights, and added to ZeRO-2, at the priced
gradient width (ZeRO-2 and ZeRO-3: 2 bytes, FSDP: its reduce dtype's) and at the
activation peak, an over-count of at most one micro-batch's activations (the buckets fill
as that backward frees them). Not linear in a stage's parameters, so the splitter's
budgets and bounds leave them out (``buckets`` False: a lower bound).

Overlap: per-micro-batch collectives run on their own stream, the next
block's gather behind the current block's compute (FSDP and ZeRO-3
prefetch): a stage's forward takes ``max(compute + gather x sm_share, gather)``
plus the first block's gather, which nothing hides (``sm_share``: the SMs NCCL's
kernels hold while they run, collectives.Fabric; evaluate.with_comm). ``none`` and ``zero1`` reduce in buckets
during the last backward and zero1 gathers ahead of the next forward
(comm.py, ``dp_exposed_s``); what is left of that, and FSDP's once-per-step
reduce-scatter under a pipeline, runs after the stage's last backward on the
communication stream, where the simulator lets other stages' cool-down hide it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum

from pptune.costmodel.comm import (
    AllReduceLink,
    DpReduction,
    all_gather_s,
    dp_exposed_s,
    reduce_scatter_s,
)


class Sharding(str, Enum):
    NONE = "none"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    FSDP = "fsdp"


# DeepSpeed's PipelineEngine asserts ZeRO stage < 2 ("ZeRO-2 and ZeRO-3 are
# incompatible with pipeline parallelism", deepspeed/runtime/pipe/engine.py);
# Megatron-LM has no ZeRO-2/3. FSDP composes with pipelines in torchtitan.
PIPELINE_SHARDINGS = frozenset({Sharding.NONE, Sharding.ZERO1, Sharding.FSDP})

BF16_BYTES = 2
MEGATRON_GRAD_BYTES = 4  # fp32 main_grad (Megatron-LM DDP)
DEEPSPEED_GRAD_BYTES = 2  # bf16 gradients (DeepSpeed default)
FSDP_REDUCE_BYTES = 4  # fp32 reduce dtype (torchtitan mixed_precision_reduce = "float32")
FSDP_WEIGHT_BYTES = 4  # fp32 sharded weights (torchtitan training.dtype = "float32")
OPTIMIZER_BYTES = 12  # fp32 master weights + Adam m and v
FP32_MOMENT_BYTES = 4.0  # each Adam moment in OPTIMIZER_BYTES (and FSDP's state)


class StateDtype(str, Enum):
    """A width of the optimizer's state (megatron-core's precision-aware optimizer,
    ``--exp-avg-dtype``, ``--exp-avg-sq-dtype``, ``--main-grads-dtype``), by its name."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def bytes(self) -> float:
        return STATE_DTYPE_BYTES[self.value]


STATE_DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0}


def moment_bytes(exp_avg: StateDtype | str, exp_avg_sq: StateDtype | str) -> float:
    """Bytes each of Adam's two moments holds on average (``state_bytes_per_param``)."""
    return (StateDtype(exp_avg).bytes + StateDtype(exp_avg_sq).bytes) / 2


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter held all step: ``fixed + sharded / dp``."""

    fixed: float
    sharded: float

    def per_param(self, dp: int) -> float:
        return self.fixed + self.sharded / dp


STATE = {
    Sharding.NONE: StateBytes(BF16_BYTES + MEGATRON_GRAD_BYTES + OPTIMIZER_BYTES, 0.0),
    Sharding.ZERO1: StateBytes(BF16_BYTES + MEGATRON_GRAD_BYTES, OPTIMIZER_BYTES),
    Sharding.ZERO2: StateBytes(BF16_BYTES, DEEPSPEED_GRAD_BYTES + OPTIMIZER_BYTES),
    Sharding.ZERO3: StateBytes(0.0, BF16_BYTES + DEEPSPEED_GRAD_BYTES + OPTIMIZER_BYTES),
    Sharding.FSDP: StateBytes(0.0, FSDP_WEIGHT_BYTES + FSDP_REDUCE_BYTES + 8),  # + Adam m, v
}


def state_bytes_per_param(sharding: Sharding, dp: int, grad_bytes: float | None = None,
                          moment_bytes: float = FP32_MOMENT_BYTES,
                          fsdp_weight_bytes: float = FSDP_WEIGHT_BYTES,
                          fsdp_grad_bytes: float = FSDP_REDUCE_BYTES,
                          offloaded: float = 0.0) -> float:
    """Bytes per parameter of the training state; ``grad_bytes``: Megatron's gradient
    buffer at another width than FP32 (NeMo's ``grad_sync_dtype: bf16`` keeps BF16
    gradient buckets, 2 bytes), for ``none`` and ``zero1``; ``moment_bytes``: each of
    Adam's two moments (2: BF16 moments, as Megatron-LM's precision-aware optimizer
    and the DeepSeek-V3 report keep them), sharded wherever the optimizer state is;
    ``fsdp_weight_bytes`` and ``fsdp_grad_bytes``: FSDP's sharded weights (the
    optimizer's copy, 6 with the BF16 model shard Megatron-FSDP keeps beside it) and
    gradients, FP32, or 2 under torchtitan's training.dtype bfloat16 (no FP32 copy); the
    sharded gradients take the weights' dtype whatever the reduce dtype (torch FSDP2's
    ``foreach_reduce`` casts the reduce-scatter's output to it: mixed_precision_reduce
    bfloat16 narrows only the reduction and the unsharded gradients, ``working_bytes``'s
    ``reduce``); ``offloaded``: bytes a parameter of the optimizer's share of the state kept
    in host memory instead (DeepSpeed ZeRO-Offload: ``offload_optimizer`` the FP32 master
    weights and both moments, 12; ZeRO-3's ``offload_param`` the BF16 weights too, +2)."""
    st = STATE[sharding]
    out = st.per_param(dp)
    if grad_bytes is not None and sharding in (Sharding.NONE, Sharding.ZERO1):
        out = out - MEGATRON_GRAD_BYTES + grad_bytes
    if sharding is Sharding.FSDP:
        out += (fsdp_weight_bytes - FSDP_WEIGHT_BYTES + fsdp_grad_bytes - FSDP_REDUCE_BYTES) / dp
    if moment_bytes != FP32_MOMENT_BYTES:
        out -= 2 * (FP32_MOMENT_BYTES - moment_bytes) / (1 if sharding is Sharding.NONE else dp)
    if offloaded:
        out = max(0.0, out - offloaded / (1 if sharding is Sharding.NONE else dp))
    return out


def reshards(sharding: Sharding, pp: int, fsdp_reshard: bool | None = None) -> bool:
    """Whether weights are gathered per use (per micro-batch) rather than kept."""
    if sharding is Sharding.ZERO3:
        return True
    if sharding is Sharding.FSDP:
        return pp == 1 if fsdp_reshard is None else fsdp_reshard
    return False


def traffic_in_ops(sharding: Sharding, reshard: bool) -> bool:
    """Whether the sharding's data-parallel traffic runs during each micro-batch's
    forward or backward (``stage_comm``'s ``fwd_s`` / ``bwd_s``) rather than once a
    step, before the first forward or after the last backward."""
    return sharding is Sharding.ZERO2 or reshard


def working_bytes(
    sharding: Sharding, reshard: bool, device_params: float, largest_layer_params: float,
    reduce: float = FSDP_REDUCE_BYTES, queued: float | None = None, buckets: bool = True,
) -> float:
    """Unsharded copies a device holds on top of its training state; ``reduce``: FSDP's
    reduce dtype's bytes (the unsharded gradient's copy); ``queued``: Megatron-FSDP's
    gradient buckets, kept until more than that many elements wait for their
    reduce-scatters (module docstring; None: none), left out where ``buckets`` is False."""
    # FSDP kept gathered (torch's pipeline) already holds every gradient unsharded
    if queued is not None and sharding in (Sharding.ZERO2, Sharding.ZERO3, Sharding.FSDP) \
            and (reshard or sharding is not Sharding.FSDP):
        width = reduce if sharding is Sharding.FSDP else DEEPSPEED_GRAD_BYTES
        held = min(device_params, queued + 2 * largest_layer_params) if buckets else 0.0
        gathered = 0.0 if sharding is Sharding.ZERO2 else 2 * BF16_BYTES  # two blocks' weights
        return largest_layer_params * gathered + width * held
    if sharding is Sharding.ZERO3:
        return largest_layer_params * (2 * BF16_BYTES + DEEPSPEED_GRAD_BYTES)
    if sharding is Sharding.FSDP and reshard:
        return largest_layer_params * (2 * BF16_BYTES + BF16_BYTES + reduce)
    if sharding is Sharding.FSDP:
        return device_params * (BF16_BYTES + reduce)
    return 0.0


@dataclass(frozen=True)
class ShardComm:
    """One stage's data-parallel traffic, in seconds."""

    fwd_s: float = 0.0  # during each micro-batch's forward (overlaps it)
    bwd_s: float = 0.0  # during each micro-batch's backward (overlaps it)
    start_s: float = 0.0  # once, before the step's first forward
    tail_s: float = 0.0  # once, after the stage's last backward


def gradient_wire_bytes(sharding: Sharding, grad_factor: float = 1.0) -> float:
    """Bytes a gradient element crosses the data-parallel wire in (``stage_comm``'s):
    FP32's 4 times ``grad_factor``, never wider than the sharding holds it (ZeRO-2/3's
    16-bit gradients)."""
    held = DEEPSPEED_GRAD_BYTES if sharding in (Sharding.ZERO2, Sharding.ZERO3) else (
        FSDP_REDUCE_BYTES if sharding is Sharding.FSDP else MEGATRON_GRAD_BYTES)
    return min(held, MEGATRON_GRAD_BYTES * grad_factor)


@functools.lru_cache(maxsize=1 << 16)  # pure; a search asks it per stage of every plan
def stage_comm(
    sharding: Sharding, reshard: bool, params: float, dp: int, link: AllReduceLink,
    grad_factor: float = 1.0, overlap: bool = True, bwd_window_s: float = 0.0,
    fwd_window_s: float = 0.0, param_bytes: float = BF16_BYTES,
    overlap_gather: bool | None = None,
) -> ShardComm:
    """Collective times of a stage with ``params`` parameters over ``dp`` ranks.

    ``grad_factor``: the bytes a gradient crosses the wire in over FP32's 4, for every
    sharding (``--grad-compression``; 0.5 where a config states BF16 gradients), never
    wider than the gradient is held (ZeRO-2/3's 16-bit ones stay 2 bytes at 0.5 or 1:
    the factor narrows the wire, it does not halve DeepSpeed's width twice). ``none`` and
    ``zero1`` reduce in buckets during the stage's last backward (``bwd_window_s``)
    and zero1 gathers ahead of its first forward (``fwd_window_s``), as
    ``comm.dp_exposed_s`` models it (``overlap``: bucketed, else after the backward;
    ``overlap_gather``: the gather's own switch, None: as ``overlap``).
    ``param_bytes``: bytes a parameter moves in the gathers (1 for FP8 parameters).
    """
    if dp <= 1:
        return ShardComm()

    def gather() -> float:
        return all_gather_s(params * param_bytes, dp, link)

    def scatter() -> float:
        return reduce_scatter_s(params * gradient_wire_bytes(sharding, grad_factor), dp, link)

    if sharding in (Sharding.NONE, Sharding.ZERO1):
        red = DpReduction(params, dp, link, gradient_wire_bytes(sharding, grad_factor), param_bytes,
                          sharded=sharding is Sharding.ZERO1, overlap=overlap,
                          overlap_gather=overlap_gather)
        return ShardComm(tail_s=dp_exposed_s(red, bwd_window_s, fwd_window_s))
    if sharding is Sharding.ZERO2:
        return ShardComm(bwd_s=scatter(), tail_s=gather())
    if sharding is Sharding.ZERO3:
        return ShardComm(fwd_s=gather(), bwd_s=gather() + scatter())
    if reshard:
        return ShardComm(fwd_s=gather(), bwd_s=gather() + scatter())
    # torch's pipeline runs the reduce-scatter once, after every backward (perform_reduce_grad)
    return ShardComm(start_s=gather(), tail_s=scatter())
