"""torchtitan's context-parallel and float8 settings: read, checked by its own rules,
stated.

Names and defaults follow torchtitan 0.2.2 (torchtitan/config/job_config.py):
``[parallelism] context_parallel_rotate_method`` is ``allgather`` (the default:
every rank gathers the K/V shards) or ``alltoall`` (torch's ring: each step passes
the shard to the next rank, torch/distributed/tensor/experimental/_context_parallel
``_AllToAllRotater``), pptune's ``all-gather`` and ``p2p``; Ulysses and the
hierarchical exchange have no torchtitan setting. FP8 is a model converter
(``[model] converters``), read and stated by converters.py; here the float8 recipe and
the [compile] table as the plans that use them are priced.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pptune.costmodel import amax, presets
from pptune.costmodel.context import CpComm
from pptune.costmodel.keys import Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.op_sac import OP_SAC, unpriced
from pptune.costmodel.precision import TorchaoRecipe, is_low
from pptune.costmodel.rates import Swiglu
from pptune.costmodel.schedules import SPLIT_BACKWARD
from pptune.costmodel.search import Plan, Recompute, evaluate
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.baseline import ratio
from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.common.repricing import analytic_table
from pptune.frameworks.torchtitan.fqns import reads_toml
from pptune.frameworks.torchtitan.table import Table
from pptune.options import CostOptions
from pptune.report.fmt import fmt_seconds

ROTATE = {"allgather": "all-gather", "alltoall": "p2p"}
ROTATE_NAME = {comm: name for name, comm in ROTATE.items()}
TABLES = ("quantize", "float8")  # the converters' tables (converters.py)


def read_cp_fp8(ctx: Ctx, data: dict[str, Any], par: Table, fields: dict[str, Any],
                seq_rule: bool = True) -> None:
    """Fill cp_comm (the FP8 converters: converters.py read_converters); ``seq_rule``:
    0.2.2's check of the sequence (main checks the micro-batch's tokens: dump_batch.py)."""
    cp, tp = fields.get("cp") or 1, fields.get("tp") or 1
    method = par.text("context_parallel_rotate_method", "allgather")
    if method not in ROTATE:
        ctx.refuse("torchtitan-cp-rotate",
                   f"parallelism.context_parallel_rotate_method {method[:40]!r}: torchtitan "
                   "takes allgather or alltoall (job_config.py) and torch raises 'Context "
                   "Parallel does not support using ... for kv shards rotation'")
        method = "allgather"
    if cp > 1:
        fields["cp_comm"] = ROTATE[method]
    seq = fields.get("seq_len")
    why = seq_problem(seq, tp, cp) if seq is not None and seq_rule else None
    if why:
        ctx.refuse("torchtitan-cp-seq", f"training.seq_len {why}")


def seq_problem(seq: int, tp: int, cp: int) -> str | None:
    """What torchtitan says of a sequence of ``seq`` tokens under tensor parallelism
    ``tp`` and context parallelism ``cp`` (None: it runs): every model's parallelize
    asserts ``seq_len % parallel_dims.seq_len_divisor == 0``, tp x 2 x cp whatever the
    sizes (distributed/parallel_dims.py; sequence parallelism splits each rank's tokens
    over tp, causal load balancing cuts the sequence into 2 x cp chunks)."""
    if seq % (tp * 2 * cp) == 0:
        return None
    return (f"{seq} with tensor parallel {tp} and context parallel {cp}: torchtitan asserts "
            "the sequence length 'must be divisible by the product of TP degree and 2 * CP "
            "degree' (torchtitan/models/llama3/infra/parallelize.py, "
            f"ParallelDims.seq_len_divisor); use a multiple of {tp * 2 * cp}")


def stateable_exchange(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan]:
    """The job and plan priced with the faster of torchtitan's two rotate methods,
    allgather (its default) and alltoall (torch's ring, pptune's p2p), when the plan's
    exchange (a2a, a2a+p2p) has no torchtitan setting; unchanged otherwise. torchtitan
    main states no rotate method (``Job.versions``, main_plan.py): allgather only."""
    c = job.cost_options or CostOptions()
    main = not reads_toml(job.versions)
    if plan.cp == 1 or c.cp_comm.value in (("all-gather",) if main else ROTATE_NAME):
        return job, plan
    gpu = str(job.device)
    if job.shape is None or gpu not in presets.GPUS or job.attention is None:
        notes.append(f"torchtitan has no {c.cp_comm.value} context-parallel exchange: the file "
                     "runs allgather, which pptune did not price with these costs")
        return job, plan
    if main:  # its one exchange (the writer's comment says so)
        ran = replace(job, table=analytic_table(job, cp_comm=CpComm.ALL_GATHER),
                      cost_options=replace(c, cp_comm=CpComm.ALL_GATHER))
        alt = evaluate(ran.table, ran.request, plan.spec)
        notes.append(f"torchtitan main has no {c.cp_comm.value} context-parallel exchange (no "
                     "rotate method: every rank gathers the K/V shards): predicted step "
                     f"{fmt_seconds(alt.step_time_s)} ({ratio(alt.step_time_s, plan.step_time_s)})")
        return ran, alt
    priced = []
    for comm in (CpComm.ALL_GATHER, CpComm.P2P):  # the default first: it wins a tie
        table = analytic_table(job, cp_comm=comm)
        ran = replace(job, table=table, cost_options=replace(c, cp_comm=comm))
        priced.append((evaluate(ran.table, ran.request, plan.spec), comm, ran))
    if priced[1][0].step_time_s < priced[0][0].step_time_s:
        priced.reverse()
    (alt, comm, job), (other, other_comm, _) = priced
    what = {CpComm.ALL_GATHER: "every rank gathers the K/V shards",
            CpComm.P2P: "torch's ring passes each K/V shard to the next rank"}
    notes.append(f"torchtitan has no {c.cp_comm.value} context-parallel exchange: emitting it "
                 f"with context_parallel_rotate_method {ROTATE_NAME[comm.value]} "
                 f"({what[comm]}), the faster of its two: predicted step "
                 f"{fmt_seconds(alt.step_time_s)} ({ratio(alt.step_time_s, plan.step_time_s)}) "
                 f"against {fmt_seconds(other.step_time_s)} with "
                 f"{ROTATE_NAME[other_comm.value]}")
    return job, alt


def per_op_checkpointing(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan]:
    """The job and plan with torchtitan's per-op selective checkpointing
    (``selective_ac_option = "op"``; costmodel/op_sac.py) in place of the plan's full or
    every-Nth-block recomputation, when it fits and is faster; unchanged otherwise: when
    the search was not asked to recompute by module (``--recompute modules``, on by
    default: the per-op policy is torchtitan's recomputation by op), for a model whose
    blocks the policy is not priced on (op_sac.unpriced), measured costs, or a shape or
    GPU pptune cannot price."""
    gpu = str(job.device)
    if (plan.recompute not in (Recompute.FULL, Recompute.SELECTIVE)
            or Recompute.MODULES not in job.request.recomputes or job.shape is None
            or unpriced(job.shape) or gpu not in presets.GPUS
            or job.attention is None):
        return job, plan
    table = analytic_table(job, recompute_modules=frozenset({OP_SAC}))
    table = replace(table, recompute_modules=(OP_SAC,))
    alt = evaluate(table, job.request, replace(plan.spec, recompute=Recompute.MODULES,
                                              recompute_layers=None))
    if max(alt.peak_memory_bytes) > table.memory_bytes or alt.step_time_s >= plan.step_time_s:
        return job, plan
    said = "SelectiveAC" if not reads_toml(job.versions) else 'selective_ac_option "op"'
    notes.append(f"torchtitan's per-op selective checkpointing ({said}) "
                 f"fits in place of {plan.recompute.value} recomputation and is faster: "
                 f"predicted step {fmt_seconds(alt.step_time_s)} "
                 f"({ratio(alt.step_time_s, plan.step_time_s)})")
    return replace(job, table=table), alt


def stateable_recipe(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan]:
    """The job and plan priced with torchtitan's float8 scaling, tensorwise: its scales
    come from each tensor itself, so no amax reduction over the stage (costmodel/amax.py)
    after each chunk pass, which an FP8 plan priced with delayed scaling pays. torchtitan
    main's Float8LinearConverter has no tensorwise recipe: rowwise, its default
    (components/quantization/float8.py at b5bcd76), priced so (``Job.versions``)."""
    c = job.cost_options or CostOptions()
    if (plan.precision is Precision.FP8 and not reads_toml(job.versions) and job.shape
            and job.attention is not None and str(job.device) in presets.GPUS
            and c.torchao_recipe is not TorchaoRecipe.ROWWISE):
        job = replace(job, table=analytic_table(job, torchao_recipe=TorchaoRecipe.ROWWISE),
                      cost_options=replace(c, torchao_recipe=TorchaoRecipe.ROWWISE))
        alt = evaluate(job.table, job.request, plan.spec)
        notes.append("torchtitan main's float8 linears scale rowwise (its default recipe; it "
                     f"has no tensorwise): predicted step {fmt_seconds(alt.step_time_s)} "
                     f"({ratio(alt.step_time_s, plan.step_time_s)})")
        plan = alt
    if not amax.applies(plan.precision, job.request.fp8_amax_reduction):
        return job, plan
    job = replace(job, request=replace(job.request, fp8_amax_reduction=False))
    alt = evaluate(job.table, job.request, plan.spec)
    recipe = (job.cost_options or CostOptions()).torchao_recipe.value
    notes.append(f"torchtitan's float8 scales {recipe}, without delayed scaling's amax "
                 f"reductions: predicted step {fmt_seconds(alt.step_time_s)} "
                 f"({ratio(alt.step_time_s, plan.step_time_s)})")
    return job, alt


def uncompiled(plan: Plan) -> str | None:
    """Why torchtitan cannot run the plan with its model compiled (None: it can): a
    schedule that splits the backward (torch's zero-bubble and DualPipeV schedules refuse
    compiled stage modules: schedules.py ``_check_torch_compile_compatibility``), or MXFP8
    linears with tensor parallelism (torchtitan 0.2.2's MXLinearConverter asserts 'TP not
    yet supported with torch.compile for mxfp8', components/quantization/mx.py)."""
    if plan.pp > 1 and plan.schedule in SPLIT_BACKWARD:
        return ("torch's zero-bubble and DualPipeV schedules refuse compiled stage modules "
                "(torch/distributed/pipelining/schedules.py)")
    if plan.precision is Precision.MXFP8 and plan.tp > 1:
        return (f"torchtitan asserts 'TP not yet supported with torch.compile for mxfp8' at "
                f"tp {plan.tp} (torchtitan/components/quantization/mx.py MXLinearConverter)")
    return None


def compiled(plan: Plan, options: CostOptions | None, *, float8: bool = True
             ) -> tuple[str, ...]:
    """What torchtitan is to compile (``[compile] components``) for a plan priced with
    ``options``' kernels: the model, where its SwiGLU was priced fused or (``float8``: as
    emit writes a plan) its linears are float8 or MXFP8 (torchtitan docs/float8.md:
    torch.compile is "required for competitive performance", fusing the casts), unless
    torchtitan refuses the model compiled for the plan (``uncompiled``); and the loss,
    where it was priced other than PyTorch's eager cross-entropy (costmodel/loss.py)."""
    c = options or CostOptions()
    model = uncompiled(plan) is None and ((float8 and is_low(plan.precision))
                                          or c.swiglu_kernels is not Swiglu.EAGER)
    loss = c.loss_kernels is not CrossEntropy.EAGER
    return ("model",) * model + ("loss",) * loss


def compile_lines(plan: Plan, job: Job) -> list[str]:
    """The [compile] table as the plan was priced (``compiled``); none when nothing is."""
    parts = compiled(plan, job.cost_options)
    if not parts:
        return []
    casts = "MXFP8" if plan.precision is Precision.MXFP8 else "float8"
    # a GeLU MLP's activation is one kernel each way compiled or eager (ops.activation_ops)
    gated = job.shape is None or job.shape.gated_mlp
    model = ["the SwiGLU"] * gated + [f"{casts} casts"] * is_low(plan.precision)
    fused = [*(model if "model" in parts else []), *(["the loss"] if "loss" in parts else [])]
    said = f"fuses {' and '.join(fused)}, as priced" if fused else ""
    if "model" in parts and not model:  # compiled as torchtitan's recipes do; priced alike
        said += (("; the model is compiled too" if said else "compiles the model")
                 + " (no SwiGLU: its GeLU is one kernel each way either way)")
    why = uncompiled(plan) if "model" not in parts else None
    return ["", "[compile]", f"enable = true  # {said}",
            *([] if len(parts) == 2 else [f'components = ["{parts[0]}"]']),
            *([f"# the model is not compiled: {why}"] if why else [])]
