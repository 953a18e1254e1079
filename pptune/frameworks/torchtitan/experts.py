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

``expert_parallel_comm_backend`` (0.2.1 on; "standard": PyTorch's all-to-all, or
"deepep") is pptune's alltoall or deepep dispatcher. The deepseek_v3 and llama4
models read it (their infra/parallelize.py) and refuse DeepEP without expert
parallelism ("DeepEP requires expert parallelism (ep_degree > 1)") and with expert
tensor parallelism ("DeepEP with Expert Tensor Parallelism (ETP) is not supported
yet"); the other models ignore it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import CostKey
from pptune.costmodel.search import Plan
from pptune.costmodel.sharding import Sharding
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.fields import CAPS, Ctx
from pptune.frameworks.torchtitan.fqns import TORCHTITAN, reads_toml
from pptune.frameworks.torchtitan.table import Table
from pptune.options import CostOptions

CITE = "(torchtitan/distributed/parallel_dims.py ParallelDims)"


DEEPEP_MODELS = ("deepseek_v3", "llama4")  # the models whose parallelize reads the backend
BACKENDS = {"standard": "alltoall", "deepep": "deepep"}


def read_experts(ctx: Ctx, par: Table, fields: dict[str, Any], shard: int | None,
                 moe: bool, model: str = "") -> None:
    """ep, etp and the dispatcher into ``fields`` (``moe``: the model has routed experts;
    ``model``: torchtitan's model name); torchtitan's refusals as error findings."""
    versions = ctx.semantics.versions
    _backend(ctx, par, fields, model)
    keys = [k for k in ("expert_parallel_degree", "expert_tensor_parallel_degree") if par.has(k)]
    if keys and not versions.at_least(TORCHTITAN, 0, 2):
        ctx.unmodelled("torchtitan-unmodelled",
                       f"parallelism.{keys[0]}: torchtitan {versions.of(TORCHTITAN)} has no "
                       "expert parallelism (the keys arrived in 0.2.0); read as ep 1")
        return
    ep = par.count("expert_parallel_degree", 1, cap=CAPS["ep"]) or 1
    etp = par.count("expert_tensor_parallel_degree", 1, cap=CAPS["etp"]) or 1
    tp, cp = fields["tp"] or 1, fields["cp"] or 1
    if ep == 1:
        if moe:
            fields["etp"] = tp  # the tensor-parallel plan shards the experts
        check_backend(ctx, fields)
        return
    fields.update(ep=ep, etp=etp)
    check_backend(ctx, fields)
    if etp not in (1, tp):
        ctx.refuse("torchtitan-etp",
                   f"parallelism.expert_tensor_parallel_degree {etp} with tensor parallel "
                   f"degree {tp}: torchtitan asserts 'Currently we only support ETP=TP or "
                   f"ETP=1' {CITE}; set it to 1 or {tp}")
        return
    if shard is None:
        return
    why = mesh_problem(ep, etp, shard, cp, tp)
    if why:
        ctx.refuse("torchtitan-ep-mesh", why)
    elif not versions.at_least(TORCHTITAN, 0, 2, 2):
        borrow = cp if etp == tp else cp * tp
        if ep % borrow:
            ctx.refuse("torchtitan-ep-mesh",
                       f"expert_parallel_degree {ep} is not a multiple of {borrow} (cp"
                       + ("" if etp == tp else " x tp") + f"): torchtitan "
                       f"{versions.of(TORCHTITAN)} asserts ep % {'cp' if etp == tp else '(cp * tp)'}"
                       f" == 0 {CITE}")


def key_shardings(key: CostKey, shardings: Sequence[Sharding]) -> tuple[Sharding, ...]:
    """Of ``shardings``, those a torchtitan file states at this cost key: FSDP alone with
    context parallelism (torchtitan shards over the cp ranks: distributed/parallel_dims.py
    fsdp_enabled, dp_shard or cp above 1) or where the expert mesh does not fit in cp x tp
    without it (``mesh_problem``)."""
    if key.cp > 1 or (key.ep > 1 and mesh_problem(key.ep, key.etp, 1, key.cp, key.tp)):
        return tuple(s for s in shardings if s is not Sharding.NONE)
    return tuple(shardings)


def mesh_problem(ep: int, etp: int, shard: int, cp: int, tp: int) -> str | None:
    """Why torchtitan 0.2.2 builds no expert mesh for these degrees (None: it does):
    ``ep x etp`` must divide ``dp_shard x cp x tp`` (module docstring)."""
    if (shard * cp * tp) % (ep * etp) == 0:
        return None
    return (f"expert_parallel_degree {ep} x expert_tensor_parallel_degree {etp} does not "
            f"divide data_parallel_shard_degree x cp x tp = {shard} x {cp} x {tp}: torchtitan's "
            "expert mesh is dp_replicate x efsdp x ep x etp with efsdp = dp_shard x cp x tp / "
            f"(etp x ep) {CITE}; expert parallelism borrows FSDP, context and tensor ranks, "
            "not replicas")


def _backend(ctx: Ctx, par: Table, fields: dict[str, Any], model: str) -> None:
    """parallelism.expert_parallel_comm_backend (module docstring); checked against ep
    and etp once read (``check``)."""
    key = "expert_parallel_comm_backend"
    if not par.has(key):
        return
    if not ctx.semantics.versions.at_least(TORCHTITAN, 0, 2, 1):
        ctx.unmodelled("torchtitan-unmodelled",
                       f"parallelism.{key}: torchtitan {ctx.semantics.versions.of(TORCHTITAN)} "
                       "has no such key (it arrived in 0.2.1); read as the standard all-to-all")
        return
    value = par.text(key, "standard")
    if value not in BACKENDS:
        raise ctx.bad(f"parallelism.{key} is {value[:40]!r}; torchtitan takes standard or "
                      "deepep")
    if model not in DEEPEP_MODELS:
        if value == "deepep":
            ctx.note(f"parallelism.{key} deepep ignored: torchtitan's {model} model runs the "
                     "standard all-to-all (only deepseek_v3 and llama4 read the key)")
        return
    fields["moe_dispatcher"] = BACKENDS[value]


def check_backend(ctx: Ctx, fields: dict[str, Any]) -> None:
    """torchtitan's refusals of DeepEP (module docstring)."""
    if fields.get("moe_dispatcher") != "deepep":
        return
    cite = "(torchtitan models/*/infra/parallelize.py)"
    if (fields.get("ep") or 1) == 1:
        ctx.refuse("torchtitan-deepep",
                   "expert_parallel_comm_backend deepep with expert_parallel_degree 1: "
                   "torchtitan raises 'DeepEP requires expert parallelism (ep_degree > 1)' "
                   f"{cite}; set expert_parallel_degree or the standard backend")
    elif (fields.get("etp") or 1) > 1:
        ctx.refuse("torchtitan-deepep",
                   "expert_parallel_comm_backend deepep with expert_tensor_parallel_degree "
                   f"{fields['etp']}: torchtitan raises 'DeepEP with Expert Tensor Parallelism "
                   f"(ETP) is not supported yet' {cite}; set it to 1")


def dispatcher_of(job: Job, plan: Plan, model: str) -> Dispatcher:
    """The MoE dispatcher a torchtitan file can state for the plan: DeepEP where the job
    asks for it and torchtitan's model runs it (deepseek_v3, llama4; ep > 1, etp 1:
    ``check_backend``), else the standard all-to-all."""
    asked = (job.cost_options or CostOptions()).dispatcher
    if asked is Dispatcher.DEEPEP and model in DEEPEP_MODELS and plan.ep > 1 and plan.etp == 1:
        return Dispatcher.DEEPEP
    return Dispatcher.ALLTOALL


def experts_run(job: Job, plan: Plan, route: Dispatcher) -> str:
    """How a torchtitan file's experts exchange their tokens, for the as-run note
    (closest.py): DeepEP asked of a plan without expert parallelism is stated as the
    standard dispatcher, a local permute at ep 1 (costmodel/dispatch.py runs_as), as
    both releases refuse DeepEP there (``check_backend``; main: main_rules.py)."""
    asked = (job.cost_options or CostOptions()).dispatcher
    if plan.ep > 1:
        return (", the experts' DeepEP kernels" if route is Dispatcher.DEEPEP
                else ", the experts' standard all-to-all")
    if asked is not Dispatcher.DEEPEP or not (job.shape and job.shape.moe):
        return ""
    why = ("torchtitan raises 'DeepEP requires expert parallelism (ep_degree > 1)' "
           "(models/*/infra/parallelize.py)" if reads_toml(job.versions) else
           "main raises 'DeepEPTokenDispatcher.Config requires expert parallelism "
           "(expert_parallel_degree > 1).' (torchtitan/models/common/token_dispatcher.py "
           "update_ep_token_dispatcher_config)")
    return (", the experts' standard dispatcher, not DeepEP (a local permute at ep 1: "
            f"{why}; plan with --ep > 1 for DeepEP)")


def read_dualpipev_overlap(ctx: Ctx, par: Table, fields: dict[str, Any], ac: Table) -> None:
    """DualPipeV with experts overlaps their all-to-all in its F&B pairs unless
    ``pipeline_parallel_expert_parallel_overlap`` is false (default true), and refuses
    that with activation checkpointing (torchtitan distributed/dual_pipe_v.py
    ``get_dual_pipe_v_flag``'s NotImplementedError)."""
    if (fields.get("schedule") != "dualpipev" or (fields.get("pp") or 1) == 1
            or (fields.get("ep") or 1) == 1):
        return
    overlap = par.flag("pipeline_parallel_expert_parallel_overlap", True)
    fields["a2a_overlap"] = overlap
    if overlap and ac.text("mode", "selective") != "none":
        ctx.refuse("torchtitan-dualpipev-ac",
                   "DualPipeV with expert parallelism and activation checkpointing: torchtitan "
                   "raises 'Expert Parallel with DualPipeV and Activation Checkpointing cannot "
                   "be used together' (distributed/dual_pipe_v.py get_dual_pipe_v_flag); set "
                   "[activation_checkpoint] mode = \"none\" or "
                   "pipeline_parallel_expert_parallel_overlap = false")
