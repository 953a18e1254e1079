"""Memory per GPU: training state, working copies, activations, p2p buffers, reserve.

- Training state and working copies follow the sharding (sharding.py).
- Activations come from the simulated schedule: a micro-batch's saved
  tensors on a stage are held from its ``F`` until its backward completes
  (``B``; ``W`` for split-backward schedules, which keep the W-pending
  tensors, an upper bound), per chunk for interleaved-1f1b and zbv, in the
  schedule's real op order (simulate.py). The stage's output is not held:
  Megatron-LM frees a pipeline stage's output once sent and keeps only its
  autograd node (megatron/core/pipeline_parallel/schedules.py,
  ``deallocate_output_tensor``). The last stage's fp32 logits are part of
  the head's saved activations (analytic.py).
- p2p buffers: on each stage boundary a device holds one received tensor
  (activation or gradient) and one it is sending, ``out_bytes`` each.
- Dispatch buffers: what a MoE dispatcher allocates once and keeps, on every
  GPU holding an expert layer: DeepEP's NVLink and RDMA buffers and workspace
  (deepep.py). NCCL's all-to-all (the alltoall dispatcher) allocates its
  outputs per call, saved as the layer's activations where the backward keeps
  them, and its connection buffers are NCCL's, in the reserve.
- Reserve: a stated allowance per GPU for the CUDA context, NCCL buffers and
  allocator fragmentation (``--reserve-gib``, 2 GiB by default; an
  assumption, not a measurement).

Recomputation (activation checkpointing) trades the saved tensors of a block
for a second forward before its backward (Chen et al. 2016):

- ``full``: every block keeps only its input (Megatron-LM
  ``--recompute-granularity full``; torchtitan ``mode = "full"``);
- ``selective`` with ``every = N``: torchtitan's per-layer selective AC
  checkpoints every N-th block (``selective_ac_option = "2"`` is its default;
  torchtitan counts blocks from 1 and wraps those with ``count % N == 0``);
- per stage: the first N_k blocks of stage k, each stage its own N_k (what
  ``--recompute-method block --recompute-num-layers N`` does with one N for
  every stage); the memory-bound stages recompute, the others do not
  (``stage_recompute.py`` chooses the counts);
- ``selective`` without ``every``: Megatron-LM's selective recomputation of
  core attention (Korthikanti et al. 2022, sec. 4.2), which drops the
  attention-score tensors (their ``5 a s / h`` term). Flash attention, which
  the analytic costs assume, stores none of those, so it changes neither
  memory nor time here; a profile measured without flash attention keeps them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pptune.costmodel.memo import ByIdentity
from pptune.costmodel.partition import stage_bounds
from pptune.costmodel.table import CostTable, LayerCosts, block_layers, named_blocks

DEFAULT_RESERVE_BYTES = 2 * 1024**3  # CUDA context + NCCL buffers + fragmentation (assumed)
TORCHTITAN_SELECTIVE_EVERY = 2  # torchtitan [activation_checkpoint] selective_ac_option = "2"


class Recompute(str, Enum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"
    # Megatron-LM's selective recomputation by module (recompute_modules.py): the
    # table's module-recomputed twin (CostTable.modules_table)
    MODULES = "modules"


def recomputed_layers(
    names: Sequence[str], recompute: Recompute, every: int | None = TORCHTITAN_SELECTIVE_EVERY
) -> list[int]:
    """Indices of the layers that keep only their input and rerun their forward."""
    blocks = block_layers(names)
    if recompute is Recompute.FULL:
        return blocks
    if recompute is Recompute.SELECTIVE and every:
        return [i for k, i in enumerate(blocks, 1) if k % every == 0]
    return []


# with_recompute's tables by (table, recomputed layers): the search recomputes the same
# layers of the same table for every spec, and the caches keyed by a table (its
# per-stage sums) then carry over
_RECOMPUTED: ByIdentity[CostTable] = ByIdentity(1024)


def with_recompute(
    table: CostTable, recompute: Recompute, every: int | None = TORCHTITAN_SELECTIVE_EVERY,
    per_stage: tuple[Sequence[int], Sequence[int]] | None = None,
    groups: Sequence[Sequence[int]] | None = None,
) -> CostTable:
    """The table with recomputed layers: activations = the layer's input, backward += forward;
    ``Recompute.MODULES``: the table's module-recomputed twin (itself where it has none).

    ``per_stage``: (stage_layers, recomputed blocks per stage) for recomputation
    per stage (``stage_recomputed_layers``); it replaces ``recompute``'s choice.
    ``groups``: full recomputation checkpointing these runs of blocks each as one
    (``uniform_groups``); None: one block a checkpoint."""
    if recompute is Recompute.MODULES and per_stage is None:
        return table.modules_table or table
    if per_stage is not None:
        layers = stage_recomputed_layers(table.names, *per_stage)
    else:
        layers = recomputed_layers(table.names, recompute, every)
    if not layers:
        return table
    runs = (tuple(tuple(g) for g in groups) if groups is not None and per_stage is None
            and recompute is Recompute.FULL else tuple((i,) for i in layers))
    return _RECOMPUTED.of((table,), runs, lambda: with_groups_recomputed(table, runs))


def uniform_groups(names: Sequence[str], stage_layers: Sequence[int], n: int
                   ) -> list[tuple[int, ...]]:
    """The blocks of each stage in runs of ``n`` from its first, the last run of a stage
    shorter where ``n`` does not divide its blocks: Megatron-LM's ``--recompute-method
    uniform --recompute-num-layers N`` checkpoints each run of N transformer layers of a
    model chunk as one, keeping only the run's input
    (megatron/core/transformer/transformer_block.py ``_checkpointed_forward``)."""
    out: list[tuple[int, ...]] = []
    named = named_blocks(names)
    for s, e in stage_bounds(stage_layers):
        blocks = [i for i in range(s, e) if named[i]]
        out += [tuple(blocks[j:j + n]) for j in range(0, len(blocks), n)]
    return out


def stage_recomputed_layers(names: Sequence[str], stage_layers: Sequence[int],
                            per_stage: Sequence[int]) -> list[int]:
    """Indices of the first ``per_stage[k]`` blocks of each stage k: Megatron-LM's
    ``--recompute-method block --recompute-num-layers N`` recomputes the first N
    transformer layers of every stage and none of the rest
    (megatron/core/transformer/transformer_block.py ``_checkpointed_forward``);
    here each stage has its own count. MTP layers, the embedding and the head are
    never among them (megatron-core skips MTP under the block method)."""
    if len(per_stage) != len(stage_layers):
        raise ValueError(f"{len(per_stage)} recompute counts for {len(stage_layers)} stages")
    out: list[int] = []
    start = 0
    named = named_blocks(names)
    for n, want in zip(stage_layers, per_stage, strict=True):
        blocks = [i for i in range(start, start + n) if named[i]]
        if not 0 <= want <= len(blocks):
            raise ValueError(f"{want} recomputed blocks on a stage of {len(blocks)} blocks")
        out += blocks[:want]
        start += n
    return out


def recomputed_per_stage(names: Sequence[str], stage_layers: Sequence[int],
                         layers: Sequence[int]) -> list[int]:
    """How many of ``layers`` (indices) each stage holds."""
    chosen = set(layers)
    out, start = [], 0
    for n in stage_layers:
        out.append(sum(1 for i in range(start, start + n) if i in chosen))
        start += n
    return out


def with_groups_recomputed(table: CostTable, groups: Sequence[Sequence[int]]) -> CostTable:
    """The table with each run of ``groups`` checkpointed as one (Chen et al. 2016): the
    run keeps only its input (on its first layer), and each of its layers runs its
    forward again before its backward. That rerun re-creates every tensor the run saves
    at once, on top of what the stage holds, until its backward frees them: the
    run's saved tensors less the input it kept, its first layer's ``rerun_bytes``."""
    runs = [tuple(g) for g in groups if g]
    if not runs:
        return table
    first = {g[0]: g for g in runs}
    redo = {i for g in runs for i in g}
    by = {}
    for b, c in table.by_mb.items():
        n = len(c.fwd_s)
        again = [i in redo for i in range(n)]
        kept = [(min(c.act_bytes[i], c.out_bytes[i - 1] if i else 0.0) if i in first else 0.0)
                if again[i] else c.act_bytes[i] for i in range(n)]
        by[b] = LayerCosts(
            fwd_s=c.fwd_s,
            bwd_s=[c.bwd_s[i] + (c.fwd_s[i] if again[i] else 0.0) for i in range(n)],
            wgrad_s=c.wgrad_s,
            act_bytes=kept,
            out_bytes=c.out_bytes,
            fwd_a2a_s=c.fwd_a2a_s,
            # the rerun forward dispatches and combines its tokens again
            bwd_a2a_s=[c.bwd_a2a_s[i] + (c.fwd_a2a_s[i] if again[i] else 0.0)
                       for i in range(n)] if c.bwd_a2a_s else c.bwd_a2a_s,
            split_bwd_s=[c.split_bwd_s[i] + (c.fwd_s[i] if again[i] else 0.0)
                         for i in range(n)] if c.split_bwd_s else c.split_bwd_s,
            split_wgrad_s=c.split_wgrad_s,
            rerun_bytes=[max(0.0, sum(c.act_bytes[j] for j in first[i]) - kept[i])
                         if i in first else 0.0 for i in range(n)],
        )
    return dataclasses.replace(table, by_mb=by)


@dataclass(frozen=True)
class DeviceMemory:
    """One GPU's peak, by part (bytes)."""

    state_bytes: float
    working_bytes: float
    activation_bytes: float
    p2p_bytes: float
    reserve_bytes: float
    # of state_bytes: the FP8 weight copies Transformer Engine caches for the step
    # (costs/fp8_cache.py), whatever the sharding
    fp8_copies_bytes: float = 0.0
    dispatch_buffer_bytes: float = 0.0  # the MoE dispatcher's own (module docstring)

    @property
    def total_bytes(self) -> float:
        return (self.state_bytes + self.working_bytes + self.activation_bytes
                + self.p2p_bytes + self.reserve_bytes + self.dispatch_buffer_bytes)


def p2p_buffer_bytes(
    out_bytes: Sequence[float], device_of: Sequence[int], p: int
) -> list[float]:
    """Per device: one buffer per stage boundary it receives over, one per boundary it sends over."""
    buf = [0.0] * p
    last = len(out_bytes) - 1
    for k in range(last):
        a, z = device_of[k], device_of[k + 1]
        if a != z:
            buf[a] += out_bytes[k]  # activation sent, gradient received
            buf[z] += out_bytes[k]  # activation received, gradient sent
    return buf


def shared_embedding(device_of: Sequence[int], embedding: Sequence[float],
                     mtp_copies: Sequence[int], p: int) -> list[float]:
    """Per device, parameters it holds once, not twice: an MTP module embeds with the
    model's embedding, so where the device holds the embedding too (no pipeline;
    DualPipe's and the V schedules' first device holds the first and the last chunk) its
    copy is the same tensor: DeepSeek-V3 (arXiv 2412.19437) sec. 3.2.3, "Shared
    Embedding and Output Head for Multi-Token Prediction"; megatron-core's MTP block
    takes the model's embedding. Per stage: ``embedding`` the embedding's parameters
    where it holds it, ``mtp_copies`` its MTP modules; ``device_of`` the device of each
    stage, of ``p`` devices."""
    held, copies = [0.0] * p, [0] * p
    if not embedding or not mtp_copies or not any(mtp_copies):
        return held
    for k, d in enumerate(device_of):
        held[d] = max(held[d], embedding[k])
        copies[d] += mtp_copies[k]
    return [h * c for h, c in zip(held, copies, strict=True)]


def embedding_holders(table: CostTable, bounds: Sequence[tuple[int, int]]
                      ) -> tuple[list[float], list[int]]:
    """Per chunk of ``bounds``: the embedding's parameters where the chunk holds it, and
    the chunk's MTP modules (each embeds with a copy of it: shared_embedding)."""
    names = table.names
    emb = table.params(0, 1) if names and names[0] == "embedding" else 0.0
    mtp = table.mtp_before
    return ([emb if s == 0 < e else 0.0 for s, e in bounds],
            [mtp[e] - mtp[s] for s, e in bounds])

