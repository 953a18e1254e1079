"""The records of the planner: the request (the job and what the search may
choose), one plan's specification, and the plan it evaluates to (evaluate.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import Layout, RankOrder
from pptune.costmodel.memory import (
    DEFAULT_RESERVE_BYTES,
    TORCHTITAN_SELECTIVE_EVERY,
    DeviceMemory,
    Recompute,
)
from pptune.costmodel.schedules import (
    COMBINABLE,
    DEFAULT_SCHEDULES,
    OVERLAPPED,
    Schedule,
    chunks_per_device,
)
from pptune.costmodel.sharding import Sharding, state_bytes_per_param, working_bytes
from pptune.costmodel.simulate import SimResult

if TYPE_CHECKING:
    from pptune.costmodel.table import CostTable

DEFAULT_VIRTUAL_STAGES = (2, 3, 4)
DEFAULT_TOP = 5  # plans recommend lists (--top)
# the splits (layers per model chunk) a framework builds a pipeline of so many chunks on,
# over the layers of a cost key's table (PlanRequest.stage_splits)
StageSplits = Callable[["CostTable", CostKey, int], Sequence[tuple[int, ...]]]


@dataclass(frozen=True)
class PlanRequest:
    gpus: int
    global_batch: int
    tp: int = 1
    gpus_per_node: int = 8
    schedules: Sequence[Schedule] = DEFAULT_SCHEDULES
    virtual_stages: Sequence[int] = DEFAULT_VIRTUAL_STAGES
    micro_batch_sizes: Sequence[int] | None = None  # None: all in the table
    pp: Sequence[int] | None = None  # None: every divisor
    shardings: Sequence[Sharding] = tuple(Sharding)
    recomputes: Sequence[Recompute] = tuple(Recompute)
    recompute_every: int | None = TORCHTITAN_SELECTIVE_EVERY  # selective: every N-th block
    # full recomputation checkpointing the blocks of each stage in runs of N (Megatron-LM
    # --recompute-method uniform --recompute-num-layers N; memory.uniform_groups): one
    # input kept a run, the run re-created at once in its backward; 1: a block a run
    recompute_group: int = 1
    fsdp_reshard_after_forward: bool | None = None  # None: torchtitan's default (not with pp)
    reserve_bytes: float = DEFAULT_RESERVE_BYTES
    grad_bytes_factor: float = 1.0  # gradient compression
    blocking_send: bool = False
    overlap_grad_reduce: bool = True  # DP reduction in buckets during backward (comm.py)
    # the distributed optimizer's parameter all-gather behind the next forward
    # (--overlap-param-gather); None: as overlap_grad_reduce
    overlap_param_gather: bool | None = None
    fp8_param_gather: bool = False  # FP8 parameters, gathered in FP8 (--fp8-param-gather)
    # FP8 under delayed scaling (Megatron-LM's default --fp8-recipe) reduces its amaxes
    # over the stage's ranks after each chunk pass (amax.py); False: a recipe that
    # scales locally (tensorwise, blockwise)
    fp8_amax_reduction: bool = True
    optimizer_step: bool = True  # price Adam's step where the table knows HBM (optimizer.py)
    moment_bytes: float = 4.0  # Adam moments: FP32 (4) or BF16 (2)
    # Megatron's gradient buffer: None FP32 (4); 2 where gradients are kept and
    # reduced in BF16 (NeMo grad_sync_dtype bf16, megatron-core grad_reduce_in_fp32 off)
    grad_buffer_bytes: float | None = None
    # FSDP's sharded weights, the optimizer's copy: FP32 (4), or BF16 (2) under
    # torchtitan's training.dtype bfloat16, with the model's BF16 shard beside it where one
    # is kept (Megatron-FSDP: 4 + 2); its reduce dtype, that of its unsharded gradients:
    # FP32 (4), or BF16 (2) under mixed_precision_reduce bfloat16; and its sharded
    # gradients, cast back to the sharded weights' dtype after the reduce-scatter (torch
    # FSDP2 foreach_reduce: frameworks/torchtitan/widths.py): FP32 (4), BF16 (2) under
    # training.dtype bfloat16, whatever the reduce dtype
    fsdp_weight_bytes: float = 4.0
    fsdp_reduce_bytes: float = 4.0
    fsdp_grad_bytes: float = 4.0
    # Megatron-FSDP's unsharded gradient buckets, kept in a backward until more than this
    # many elements wait for their reduce-scatters (sharding.working_bytes ``queued``;
    # None: a sharding without them)
    fsdp_grad_queue_elements: float | None = None
    # bytes a parameter of the optimizer's share of the state kept in host memory
    # (DeepSpeed ZeRO-Offload: 12, or 14 with ZeRO-3's offload_param; sharding.py)
    offloaded_bytes: float = 0.0
    top: int = DEFAULT_TOP
    # the search's cut-off as if this many plans were asked, the list still ``top`` long:
    # recommend ranks with --top's default, so --top 1..5 list the first plans of one
    # ranking (search.py; below the first, a ranking can depend on its cut-off)
    rank_top: int = 0
    # Megatron-LM's combined 1F1B order (--overlap-moe-expert-parallel-comm) searched
    # for 1f1b and interleaved-1f1b; False: a framework without it (torchtitan)
    combined_order: bool = True
    rank_orders: Sequence[RankOrder] = tuple(RankOrder)
    with_best_pp1: bool = True  # keep the best plan without a pipeline in the list
    with_best_1f1b: bool = True  # keep the best 1f1b plan exact (the winner line's reference)
    # the best plan without a pipeline ranks first unless the fastest (pipelined) plan
    # beats it by more than this share of its step time (search.py); 0: step time alone
    pipeline_margin: float = 0.0
    # full recomputation searched per stage too when no recomputation is searched as
    # well (a mix of both): the memory-bound stages recompute (stage_recompute.py)
    stage_recompute: bool = True
    # the per-stage counts as one count N for every model chunk (its first N blocks, as
    # Megatron-LM's --recompute-method block --recompute-num-layers N states it)
    uniform_recompute: bool = False
    # interleaved 1F1B with micro-batches not a multiple of pp, run in Megatron-LM's
    # micro-batch groups (schedule_orders.microbatch_group); False: a framework that
    # runs torch's order for them (torchtitan, pptune's own runtime)
    interleaved_groups: bool = True
    # the per-layer splits and precisions to search, one cost table each (keys.py);
    # None: the one key of ``tp`` in BF16
    cost_keys: Sequence[CostKey] | None = None
    # HSDP (torchtitan data_parallel_replicate_degree): replicas of the data-parallel
    # group that each hold the whole sharded state, so it shards over dp x cp / replicas
    # (torchtitan's "fsdp" mesh: dp_shard x cp); their gradient all-reduce across
    # replicas is priced as the one sharded reduction over dp
    dp_replicate: int = 1
    # the only splits the framework builds a pipeline's stages on (DeepSpeed's
    # partition_method: Adapter.own_splits): the search places each pipeline on those
    # alone, never on a split of its own nor a refined one (own_splits.py); None: any
    # contiguous split
    stage_splits: StageSplits | None = None

    def state_per_param(self, sharding: Sharding, dp: int) -> float:
        """Training-state bytes a parameter over ``dp`` ranks (the data-parallel group,
        HSDP's replicas apart: ``shard_ranks``), at the request's widths."""
        return state_bytes_per_param(sharding, self.shard_ranks(dp), self.grad_buffer_bytes,
                                     self.moment_bytes, self.fsdp_weight_bytes,
                                     self.fsdp_grad_bytes, self.offloaded_bytes)

    def shard_ranks(self, dp: int) -> int:
        """The ranks a data-parallel group of ``dp`` shards the state over: dp less
        HSDP's replicas (each keeps its own copy), where they divide it."""
        return dp // self.dp_replicate if self.dp_replicate > 1 and dp % self.dp_replicate == 0 \
            else dp

    def working(self, sharding: Sharding, reshard: bool, device_params: float,
                largest_layer_params: float, buckets: bool = True) -> float:
        """Unsharded working copies (sharding.working_bytes) at the request's widths;
        ``buckets`` False: without Megatron-FSDP's queued gradient buckets, which are not
        linear in a stage's parameters (a lower bound: splitting.py's budgets and bounds)."""
        return working_bytes(sharding, reshard, device_params, largest_layer_params,
                             self.fsdp_reduce_bytes, self.fsdp_grad_queue_elements, buckets)

    def per_stage_recompute(self) -> bool:
        return (self.stage_recompute and Recompute.FULL in self.recomputes
                and Recompute.NONE in self.recomputes)

    def keys(self) -> tuple[CostKey, ...]:
        return tuple(self.cost_keys) if self.cost_keys else (CostKey(tp=self.tp),)

    def key_of(self, spec: PlanSpec) -> CostKey:
        return spec.key if spec.key is not None else self.keys()[0]

    def layout(self, spec: PlanSpec) -> Layout:
        """The plan's ranks: ``gpus = pp x tp x cp x dp`` (layout.py does the arithmetic)."""
        k = self.key_of(spec)
        return _layout(spec.pp, self.gpus // (spec.pp * k.tp * k.cp), k.tp, k.cp, k.ep, k.etp,
                       self.gpus_per_node, spec.rank_order)


@dataclass(frozen=True)
class PlanSpec:
    """Everything one plan chooses."""

    schedule: Schedule
    pp: int
    micro_batch_size: int
    num_microbatches: int
    stage_layers: tuple[int, ...]
    virtual_stages: int = 1  # chunks per device: v for interleaved, 2 for zbv, else 1
    rank_order: RankOrder = RankOrder.DP_INNER
    sharding: Sharding = Sharding.NONE
    recompute: Recompute = Recompute.NONE
    key: CostKey | None = None  # None: the request's first (PlanRequest.key_of)
    # the expert all-to-all hidden behind another micro-batch's compute: the
    # DualPipes' F&B pairs, or Megatron-LM's combined 1F1B order for 1f1b and
    # interleaved-1f1b (--overlap-moe-expert-parallel-comm); False without MoE
    a2a_overlap: bool = False
    # blocks recomputed in full on each stage (memory.stage_recomputed_layers), which
    # replaces ``recompute``'s uniform choice; None: ``recompute`` on every block
    recompute_layers: tuple[int, ...] | None = None

    @property
    def combined(self) -> bool:
        """Whether the op order is the combined one (schedules.COMBINABLE)."""
        return self.a2a_overlap and self.schedule in COMBINABLE

    @property
    def a2a_stream(self) -> bool:
        """Whether the all-to-alls stay on the communication stream, where an F&B
        pair can hide them (table.stage_costs); without the overlap the DualPipes'
        pairs run their forward and backward one after the other."""
        return self.a2a_overlap or self.schedule not in OVERLAPPED

    @staticmethod
    def unsplit(schedule: Schedule, pp: int, micro_batch_size: int, num_microbatches: int,
                virtual_stages: int, rank_order: RankOrder, sharding: Sharding,
                recompute: Recompute, key: CostKey | None, a2a_overlap: bool) -> PlanSpec:
        """``PlanSpec(schedule, pp, micro_batch_size, num_microbatches, (), virtual_stages,
        rank_order, sharding, recompute, key, a2a_overlap)``, its fields set at once (as
        StageCost.longer copies): the search makes one a candidate (121,384 for
        DeepSeek-V3 on 2,048 GPUs), and a frozen dataclass's ``__init__`` sets each field
        through ``object.__setattr__``."""
        spec = object.__new__(PlanSpec)
        spec.__dict__.update(
            schedule=schedule, pp=pp, micro_batch_size=micro_batch_size,
            num_microbatches=num_microbatches, stage_layers=(),
            virtual_stages=chunks_per_device(schedule, virtual_stages), rank_order=rank_order,
            sharding=sharding, recompute=recompute, key=key, a2a_overlap=a2a_overlap,
            recompute_layers=None)
        return spec

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage_layers", tuple(self.stage_layers))
        object.__setattr__(self, "virtual_stages",
                           chunks_per_device(self.schedule, self.virtual_stages))
        if self.recompute_layers is not None:
            object.__setattr__(self, "recompute_layers", tuple(self.recompute_layers))


@dataclass(frozen=True)
class Plan:
    pp: int
    dp: int
    tp: int
    schedule: Schedule
    virtual_stages: int
    micro_batch_size: int
    num_microbatches: int
    stage_layers: list[int]  # per model chunk (pp * virtual_stages; dualpipe: pp)
    step_time_s: float
    bubble_rate: float
    tokens_per_s: float
    peak_memory_bytes: list[float]  # per device (pipeline rank)
    memory_capacity_bytes: float
    ideal_step_s: float
    sim: SimResult = field(repr=False)
    exposed_p2p_s: float | None = None
    exposed_allreduce_s: float | None = None
    exposed_amax_s: float | None = None  # FP8 delayed scaling's amax reductions (amax.py)
    exposed_cp_s: float | None = None  # the context-parallel K/V exchange (breakdown.py)
    rank_order: RankOrder = RankOrder.DP_INNER
    sharding: Sharding = Sharding.NONE
    recompute: Recompute = Recompute.NONE
    memory: tuple[DeviceMemory, ...] = field(default=(), repr=False)
    key: CostKey = field(default_factory=CostKey)
    optimizer_s: float = 0.0  # the optimizer step, part of step_time_s (optimizer.py)
    a2a_overlap: bool = False
    recompute_layers: tuple[int, ...] | None = None  # per stage (PlanSpec.recompute_layers)
    # Recompute.MODULES: the modules it recomputes (CostTable.recompute_modules)
    recompute_modules: tuple[str, ...] = ()

    @property
    def spec(self) -> PlanSpec:
        return PlanSpec(self.schedule, self.pp, self.micro_batch_size, self.num_microbatches,
                        tuple(self.stage_layers), self.virtual_stages, self.rank_order,
                        self.sharding, self.recompute, self.key, self.a2a_overlap,
                        self.recompute_layers)

    @property
    def cp(self) -> int:
        return self.key.cp

    @property
    def world(self) -> int:
        """GPUs the plan runs on: pp x dp x tp x cp."""
        return self.pp * self.dp * self.tp * self.key.cp

    @property
    def ep(self) -> int:
        return self.key.ep

    @property
    def etp(self) -> int:
        return self.key.etp

    @property
    def precision(self) -> Precision:
        return self.key.precision

    @property
    def grad_accum_steps(self) -> int:
        return self.num_microbatches

    @property
    def aligned(self) -> bool:
        return self.num_microbatches % self.pp == 0

    @property
    def efficiency(self) -> float:
        # at most 1: the step is never shorter than the ideal (float rounding aside)
        return min(1.0, self.ideal_step_s / self.step_time_s) if self.step_time_s > 0 else 0.0

    @property
    def headroom_bytes(self) -> float:
        return self.memory_capacity_bytes - max(self.peak_memory_bytes)


# one Layout per shape: the search asks for a plan's ranks many times over, and the
# caches keyed by a layout hash it each time
_layout = functools.lru_cache(maxsize=4096)(Layout)
