"""FP8 delayed scaling's amax reductions: one small all-reduce per chunk pass.

Under Transformer Engine's delayed-scaling recipe (``DelayedScaling``, Megatron-LM's
default ``--fp8-recipe delayed``; NeMo's ``fp8: hybrid``) every FP8 GEMM records the
absolute maxima (amaxes) of its tensors, and the scales of the next iteration come
from their history. The amaxes are reduced (MAX) over the ``fp8_group``, which
Megatron-core sets to its amax-reduction group: every tensor-, context- and
data-parallel rank of one pipeline stage (``get_amax_reduction_group(
with_context_parallel=True)`` returns ``_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP``
unless ``tp_only_amax_red`` is set).
Megatron-core opens one ``fp8_autocast`` around a model chunk's transformer block,
and Transformer Engine reduces (``reduce_and_update_fp8_tensors``,
transformer_engine/pytorch/fp8.py in v1.13, commit e5edd6cc3d5a868b):

- forward: when the autocast region exits, once per chunk and micro-batch;
- backward: in the backward of the region's first FP8 module, the end of the
  chunk's input-gradient pass.

Each is one ``torch.distributed.all_reduce(..., async_op=False)`` of the chunk's
concatenated amaxes on the compute stream's order: the next kernel waits on it,
so nothing hides it. Its size: FP32 amaxes, 3 per FP8 GEMM forward (input,
weight, output) and 2 backward (output and input gradients), 4 GEMMs a block;
a few hundred bytes, so the time is NCCL's latency for the group
(collectives.py: the low-latency ring inside a node, the low-latency tree across
nodes). Tensorwise (current) scaling, block scaling (DeepSeek-V3's, Megatron-LM
``--fp8-recipe blockwise``) and MXFP8 compute their scales locally: no reduction
over the stage (PlanRequest.fp8_amax_reduction False, or precision mxfp8).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from pptune.costmodel import collectives
from pptune.costmodel.collectives import Fabric
from pptune.costmodel.comm import AllReduceLink, allreduce_s, group_link
from pptune.costmodel.keys import Precision
from pptune.costmodel.layout import Group
from pptune.costmodel.sim_records import StageCost

AMAX_BYTES = 4  # FP32
FWD_AMAXES_PER_GEMM = 3  # input, weight, output (TE's forward fp8_meta)
BWD_AMAXES_PER_GEMM = 2  # output gradient, input gradient
FP8_GEMMS_PER_BLOCK = 4  # QKV, attention output, the two MLP GEMMs (precision.py)


def applies(precision: Precision, delayed: bool) -> bool:
    """Whether a plan's chunks reduce amaxes: FP8 GEMMs under delayed scaling
    (``delayed``: PlanRequest.fp8_amax_reduction)."""
    return delayed and precision is Precision.FP8


def reduction_bytes(blocks: int, forward: bool) -> float:
    """The amaxes one pass of a chunk of ``blocks`` transformer blocks reduces."""
    per_gemm = FWD_AMAXES_PER_GEMM if forward else BWD_AMAXES_PER_GEMM
    return float(AMAX_BYTES * per_gemm * FP8_GEMMS_PER_BLOCK * blocks)


@functools.lru_cache(maxsize=4096)
def reduction_s(nbytes: float, group: Group, fabric: Fabric | None,
                intra: AllReduceLink, inter: AllReduceLink) -> float:
    """One all-reduce of ``nbytes`` over the stage's ranks: NCCL's pick on the fabric
    (collectives.py), else the table's links (comm.group_link). Cached: a search asks
    for the same few sizes on the same group for every plan it prices."""
    if group.size <= 1 or nbytes <= 0:
        return 0.0
    if fabric is not None:
        return collectives.collective_s(collectives.Collective.ALL_REDUCE, nbytes, group,
                                        fabric)
    return allreduce_s(nbytes, group.size, group_link(group, intra, inter))


def block_counts(blocks_before: Sequence[int], bounds: Sequence[tuple[int, int]]) -> list[int]:
    """Transformer blocks per stage, from the table's running count of blocks
    (``CostTable.blocks_before``)."""
    return [blocks_before[e] - blocks_before[s] for s, e in bounds]


def with_reductions(stages: Sequence[StageCost], blocks: Sequence[int],
                    pass_s: Callable[[float], float]) -> list[StageCost]:
    """Each stage's forward and input-gradient pass longer by its reduction
    (``pass_s(bytes)``); a stage without blocks reduces nothing."""
    seconds = {n: (pass_s(reduction_bytes(n, True)), pass_s(reduction_bytes(n, False)))
               for n in set(blocks) if n}
    out = []
    for s, n in zip(stages, blocks, strict=True):
        if n == 0:
            out.append(s)
            continue
        out.append(s.longer(*seconds[n]))
    return out
