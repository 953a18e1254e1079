"""The planner's per-layer cost table and the per-stage sums it feeds the simulator."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from pptune.costmodel.collectives import Fabric
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.memo import ByIdentity
from pptune.costmodel.partition import is_mtp, stage_bounds
from pptune.costmodel.parts import PartTimes
from pptune.costmodel.simulate import Link, StageCost


@dataclass(frozen=True)
class LayerCosts:
    """Per-layer costs at one micro-batch size (plain lists, same length).

    ``fwd_a2a_s`` / ``bwd_a2a_s``: the expert dispatch and combine all-to-all of
    MoE layers, kept apart from ``fwd_s`` / ``bwd_s`` (empty: none) so that a
    schedule that overlaps them can hide them; ``stage_costs`` puts them on the
    stage's communication stream (``StageCost.fwd_comm_s`` / ``bwd_comm_s``):
    a plain op waits for them (exposed), an overlapped F&B pair hides them
    behind the other chunk's compute (sim_records.overlapped_pair_s)."""

    fwd_s: Sequence[float]
    bwd_s: Sequence[float]
    wgrad_s: Sequence[float]
    act_bytes: Sequence[float]
    out_bytes: Sequence[float]
    fwd_a2a_s: Sequence[float] = ()
    bwd_a2a_s: Sequence[float] = ()
    # B and W as a split backward runs them (StageCost.split_bwd_s; empty: as
    # bwd_s / wgrad_s), from a probe that timed torch's split
    split_bwd_s: Sequence[float] = ()
    split_wgrad_s: Sequence[float] = ()
    # recomputation's backward: the bytes a checkpointed run's rerun forward re-creates
    # at once beyond what it kept, on the run's first layer (memory.with_groups_recomputed;
    # empty: nothing recomputed)
    rerun_bytes: Sequence[float] = ()

    def compute_s(self) -> list[float]:
        """Each layer's F + B + W, without its all-to-alls (what no overlap hides)."""
        return [self.fwd_s[i] + self.bwd_s[i] + self.wgrad_s[i] for i in range(len(self.fwd_s))]

    @property
    def has_a2a(self) -> bool:
        """Whether any layer has an expert all-to-all."""
        return any(self.fwd_a2a_s) or any(self.bwd_a2a_s)

    def work_s(self) -> list[float]:
        """Each layer's F + B + W, its exposed all-to-alls included."""
        work = [self.fwd_s[i] + self.bwd_s[i] + self.wgrad_s[i] for i in range(len(self.fwd_s))]
        if self.fwd_a2a_s or self.bwd_a2a_s:
            work = [w + self.fwd_a2a_s[i] + self.bwd_a2a_s[i] for i, w in enumerate(work)]
        return work


def block_layers(names: Sequence[str]) -> list[int]:
    """Indices of the transformer blocks: the layers named ``block*``, or every layer of
    a table that names none (a measured profile's own names)."""
    named = named_blocks(names)
    return [i for i, b in enumerate(named) if b] if any(named) else list(range(len(names)))


def named_blocks(names: Sequence[str]) -> tuple[bool, ...]:
    """Whether each layer is named ``block*`` (the search asks per plan; computed once a
    list of names)."""
    return _named_blocks(tuple(names))


@functools.lru_cache(maxsize=256)
def _named_blocks(names: tuple[str, ...]) -> tuple[bool, ...]:
    return tuple(n.startswith("block") for n in names)


@dataclass(frozen=True)
class CostTable:
    names: Sequence[str]
    param_bytes: Sequence[float]
    param_dtype_bytes: int
    by_mb: dict[int, LayerCosts]
    seq_len: int
    memory_bytes: float
    p2p_intra: Link
    p2p_inter: Link
    ar_intra: AllReduceLink
    ar_inter: AllReduceLink  # one member a node: one NIC's cross-node bus bandwidth
    # What NCCL achieves (collectives.py): with it the data-parallel collectives take
    # NCCL's algorithm for their size and group; None: ar_intra / ar_inter (comm.group_link)
    fabric: Fabric | None = None
    hbm_bytes_per_s: float | None = None  # achieved; prices the optimizer step (optimizer.py)
    # per layer, bytes held all step outside the training state (FP8 weight copies and
    # transposes, precision.py); None: nothing
    cache_bytes: Sequence[float] | None = None
    # the routed experts' part of each layer's param_bytes (empty: none), whose
    # gradients and optimizer state are sharded over expert data parallelism
    expert_param_bytes: Sequence[float] = ()
    # the same layers with Megatron-LM's --recompute-modules priced in (analytic
    # tables of MoE and MLA models, recompute_modules.py), and on that twin the
    # modules it recomputes; None / (): none
    modules_table: CostTable | None = None
    recompute_modules: tuple[str, ...] = ()
    # analytic tables: each layer's times by part (parts.py) at each micro-batch size,
    # what breakdown.step_parts splits a step into; None: measured costs
    layer_parts: dict[int, tuple[tuple[PartTimes, ...], ...]] | None = None
    # the share of the SMs the MoE dispatch kernels hold while they run beside compute
    # (DeepEP's, dispatch.DEEPEP_SMS); None: one NCCL collective's (fabric.sm_share)
    a2a_sm_share: float | None = None
    # bytes the MoE dispatcher holds all step on each rank with an expert layer (DeepEP's
    # buffers, deepep.py); 0: none beyond the reserve (NCCL's all-to-all, allgather)
    dispatch_buffer_bytes: float = 0.0
    # bytes of the last layer's param_bytes that are the first's too (an LM head tied to
    # the embedding): held once by a stage with both (one stage: no pipeline); a pipeline
    # keeps a copy on its last stage (megatron-core LanguageModule
    # setup_embeddings_and_output_layer), whose gradient all-reduce with the first
    # stage's (finalize_model_grads, _allreduce_word_embedding_grads) is not priced
    tied_param_bytes: float = 0.0

    def params(self, start: int, end: int) -> float:
        """Parameter count of layers [start, end)."""
        held = sum(self.param_bytes[start:end])
        if self.tied_param_bytes and start == 0 and end >= len(self.param_bytes):
            held -= self.tied_param_bytes
        return held / self.param_dtype_bytes

    @functools.cached_property
    def blocks_before(self) -> tuple[int, ...]:
        """How many transformer blocks (``block_layers``) precede each layer index, and
        the end."""
        blocks = frozenset(block_layers(self.names))
        counts = [0]
        for i in range(len(self.names)):
            counts.append(counts[-1] + (i in blocks))
        return tuple(counts)

    @functools.cached_property
    def mtp_before(self) -> tuple[int, ...]:
        """How many multi-token-prediction layers precede each layer index, and the end."""
        counts = [0]
        for name in self.names:
            counts.append(counts[-1] + is_mtp(name))
        return tuple(counts)

    @functools.cached_property
    def layer_params(self) -> tuple[float, ...]:
        """Each layer's parameter count (``params(i, i + 1)``), computed once."""
        return tuple(self.params(i, i + 1) for i in range(len(self.param_bytes)))

    @functools.cached_property
    def layer_expert_params(self) -> tuple[float, ...]:
        """Each layer's routed-expert parameter count (``expert_params(i, i + 1)``)."""
        return tuple(self.expert_params(i, i + 1) for i in range(len(self.param_bytes)))

    def expert_params(self, start: int, end: int) -> float:
        """Routed-expert parameter count of layers [start, end) (in ``params``)."""
        if not self.expert_param_bytes:
            return 0.0
        return sum(self.expert_param_bytes[start:end]) / self.param_dtype_bytes


# stage_costs' results by (table, b, split, a2a_stream): the search sums the same split
# for every sharding, rank order and micro-batch count
_SUMS: ByIdentity[list[StageCost]] = ByIdentity(16384)


def stage_costs(table: CostTable, b: int, stage_layers: Sequence[int],
                a2a_stream: bool = True) -> list[StageCost]:
    """Per-stage sums of the per-layer costs at micro-batch size ``b`` (a new list of
    shared StageCosts).

    The MoE all-to-alls go to each stage's communication stream
    (``fwd_comm_s`` / ``bwd_comm_s``), or with ``a2a_stream=False`` into its
    compute (a runtime that does not overlap them: every op pays them either
    way, but an F&B pair then hides nothing)."""
    return list(_SUMS.of((table,), (b, tuple(stage_layers), a2a_stream),
                         lambda: _stage_sums(table, b, stage_layers, a2a_stream)))


def _stage_sums(table: CostTable, b: int, stage_layers: Sequence[int],
                a2a_stream: bool) -> list[StageCost]:
    c = table.by_mb[b]
    a2a = bool(c.fwd_a2a_s or c.bwd_a2a_s)
    share = 0.0
    if a2a and a2a_stream:
        share = table.a2a_sm_share if table.a2a_sm_share is not None else (
            table.fabric.sm_share if table.fabric is not None else 0.0)
    out = []
    for s, e in stage_bounds(stage_layers):
        fwd_s, bwd_s = sum(c.fwd_s[s:e]), sum(c.bwd_s[s:e])
        fwd_comm_s = sum(c.fwd_a2a_s[s:e]) if a2a else 0.0
        bwd_comm_s = sum(c.bwd_a2a_s[s:e]) if a2a else 0.0
        if not a2a_stream:
            fwd_s, bwd_s, fwd_comm_s, bwd_comm_s = fwd_s + fwd_comm_s, bwd_s + bwd_comm_s, 0.0, 0.0
        out.append(
            StageCost.summed(
                fwd_s=fwd_s,
                bwd_s=bwd_s,
                wgrad_s=sum(c.wgrad_s[s:e]),
                act_bytes=sum(c.act_bytes[s:e]),
                # an empty stage passes on what it received
                out_bytes=c.out_bytes[e - 1] if e > 0 else 0.0,
                fwd_comm_s=fwd_comm_s,
                bwd_comm_s=bwd_comm_s,
                split_bwd_s=sum(c.split_bwd_s[s:e]) if c.split_bwd_s else None,
                split_wgrad_s=sum(c.split_wgrad_s[s:e]) if c.split_wgrad_s else None,
                comm_sm_share=share,
                rerun_bytes=max(c.rerun_bytes[s:e], default=0.0) if c.rerun_bytes else 0.0,
            )
        )
    return out


def built_params(table: CostTable, tp: int = 1, ep: int = 1, etp: int = 1) -> list[float]:
    """Relative parameter counts of the layers as a model builds them, before tensor and
    expert parallelism shard them (what a partition by parameter counts sees: DeepSpeed's
    PipelineModule partitions at construction, and AutoTP / AutoEP shard afterwards): a
    rank's routed experts count ``ep x etp`` times their share, its other weights ``tp``
    times; only the ratios matter."""
    experts = table.expert_param_bytes or [0.0] * len(table.param_bytes)
    scale = ep * etp / tp
    return [(b - e + e * scale) / table.param_dtype_bytes
            for b, e in zip(table.param_bytes, experts, strict=True)]


def within_share(table: CostTable, share: float) -> CostTable:
    """The table with ``share`` of its GPU's memory to fill (``--max-memory``), its
    module-recomputed twin too: every memory check of a plan is against it."""
    twin = table.modules_table
    return dataclasses.replace(
        table, memory_bytes=table.memory_bytes * share,
        modules_table=None if twin is None else within_share(twin, share))
