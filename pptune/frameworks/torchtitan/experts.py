"""torchtitan's expert parallelism: ``[parallelism]`` expert_parallel_degree and
expert_tensor_parallel_degree, with the rules its ``ParallelDims`` applies.

Both keys exist from torchtitan 0.2.0 (torchtitan/config/job_config.py; 0.1.0 has
neither) and default to 1. torchtitan 0.2.2's ParallelDims
(torchtitan/distributed/parallel_dims.py) asserts "Currently we only support
ETP=TP or ETP=1" when ep > 1 and builds the experts' mesh of
``dp_replicate x efsdp x ep x etp`` with ``efsdp = dp_shard x cp x tp / (etp x ep)``:
expert parallelism borrows from the FSDP, context and tensor ranks, never from
the replicas, so ``ep x etp`` must divide ``dp_shard x cp x tp``. torchtitan 0.2.0
and 0.2.1 also asserted ``ep % cp == 0`` (etp = tp) or ``ep % (cp x tp) == 0``
(etp = 1). With ep = 1 the experts are sharded by the tensor-parallel plan
(llama4/infra/parallelize.py ``apply_moe_ep_tp``: ``TensorParallel()`` when there is
no ep mesh), so their tensor-parallel degree is tp.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.fields import MAX_DEVICES, Ctx
from pptune.frameworks.torchtitan.fqns import TORCHTITAN
from pptune.frameworks.torchtitan.table import Table

CITE = "(torchtitan/distributed/parallel_dims.py ParallelDims)"


def read_experts(ctx: Ctx, par: Table, fields: dict[str, Any], shard: int | None,
                 moe: bool) -> None:
    """ep and etp into ``fields`` (``moe``: the model has routed experts); torchtitan's
    refusals as error findings."""
    versions = ctx.semantics.versions
    keys = [k for k in ("expert_parallel_degree", "expert_tensor_parallel_degree") if par.has(k)]
    if keys and not versions.at_least(TORCHTITAN, 0, 2):
        ctx.unmodelled("torchtitan-unmodelled",
                       f"parallelism.{keys[0]}: torchtitan {versions.of(TORCHTITAN)} has no "
                       "expert parallelism (the keys arrived in 0.2.0); read as ep 1")
        return
    ep = par.count("expert_parallel_degree", 1, maximum=MAX_DEVICES) or 1
    etp = par.count("expert_tensor_parallel_degree", 1, maximum=MAX_DEVICES) or 1
    tp, cp = fields["tp"] or 1, fields["cp"] or 1
    if ep == 1:
        if moe:
            fields["etp"] = tp  # the tensor-parallel plan shards the experts
        return
    fields.update(ep=ep, etp=etp)
    if etp not in (1, tp):
        ctx.refuse("torchtitan-etp",
                   f"parallelism.expert_tensor_parallel_degree {etp} with tensor parallel "
                   f"degree {tp}: torchtitan asserts 'Currently we only support ETP=TP or "
                   f"ETP=1' {CITE}; set it to 1 or {tp}")
        return
    if shard is None:
        return
    borrowed = shard * cp * tp
    if borrowed % (ep * etp):
        ctx.refuse("torchtitan-ep-mesh",
                   f"expert_parallel_degree {ep} x expert_tensor_parallel_degree {etp} does "
                   f"not divide data_parallel_shard_degree x cp x tp = {shard} x {cp} x {tp}: "
                   "torchtitan's expert mesh is dp_replicate x efsdp x ep x etp with efsdp = "
                   f"dp_shard x cp x tp / (etp x ep) {CITE}; expert parallelism borrows FSDP, "
                   "context and tensor ranks, not replicas")
    elif not versions.at_least(TORCHTITAN, 0, 2, 2):
        borrow = cp if etp == tp else cp * tp
        if ep % borrow:
            ctx.refuse("torchtitan-ep-mesh",
                       f"expert_parallel_degree {ep} is not a multiple of {borrow} (cp"
                       + ("" if etp == tp else " x tp") + f"): torchtitan "
                       f"{versions.of(TORCHTITAN)} asserts ep % {'cp' if etp == tp else '(cp * tp)'}"
                       f" == 0 {CITE}")
