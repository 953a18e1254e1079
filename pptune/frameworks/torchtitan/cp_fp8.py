"""torchtitan's context-parallel and float8 settings: read, checked by its own rules,
stated.

Names and defaults follow torchtitan 0.2.2 (torchtitan/config/job_config.py):
``[parallelism] context_parallel_rotate_method`` is ``allgather`` (the default:
every rank gathers the K/V shards) or ``alltoall`` (torch's ring: each step passes
the shard to the next rank, torch/distributed/tensor/experimental/_context_parallel
``_AllToAllRotater``), pptune's ``all-gather`` and ``p2p``; Ulysses and the
hierarchical exchange have no torchtitan setting. FP8 is a model converter
(``[model] converters``): ``quantize.linear.float8`` (torchao Float8Linear, table
``[quantize.linear.float8]``: ``recipe_name`` tensorwise | rowwise |
rowwise_with_gw_hp, unset = tensorwise; ``enable_fsdp_float8_all_gather``;
``emulate``) or ``quantize.linear.mx`` (MXFP8, ``[quantize.linear.mx]``); releases
before 0.2 named the converter ``float8`` with a ``[float8]`` table.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pptune.costmodel import amax, presets
from pptune.costmodel.context import CpComm
from pptune.costmodel.keys import Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.op_sac import OP_SAC, unpriced
from pptune.costmodel.precision import is_low
from pptune.costmodel.rates import Swiglu
from pptune.costmodel.schedules import SPLIT_BACKWARD
from pptune.costmodel.search import Plan, Recompute, Sharding, evaluate
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.baseline import ratio
from pptune.frameworks.common.express import analytic_table
from pptune.frameworks.common.fields import Ctx, show
from pptune.frameworks.torchtitan.facts import facts
from pptune.frameworks.torchtitan.fqns import TORCHTITAN
from pptune.frameworks.torchtitan.table import Table, compiles
from pptune.options import CostOptions
from pptune.report.fmt import fmt_seconds

ROTATE = {"allgather": "all-gather", "alltoall": "p2p"}
ROTATE_NAME = {comm: name for name, comm in ROTATE.items()}
FLOAT8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
FLOAT8, MX, OLD_FLOAT8 = "quantize.linear.float8", "quantize.linear.mx", "float8"
TABLES = ("quantize", "float8")  # the tables read here
# the converters each release registers (register_model_converter calls): others raise
# KeyError in ModelConvertersContainer (torchtitan/protocols/model_converter.py)
REGISTERED_0_1 = ("float8", "mx")
REGISTERED_0_2 = ("quantize.linear.float8", "quantize.grouped_mm.float8", "quantize.linear.mx",
                  "quantize.grouped_mm.mx")


def read_cp_fp8(ctx: Ctx, data: dict[str, Any], par: Table, fields: dict[str, Any]) -> None:
    """Fill cp_comm, precision (fp8 / mxfp8), fp8_recipe and fp8_param_gather."""
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
    why = seq_problem(seq, tp, cp) if seq is not None else None
    if why:
        ctx.refuse("torchtitan-cp-seq", f"training.seq_len {why}")
    _fp8(ctx, data, fields)


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


def _converters(ctx: Ctx, model: Table) -> list[str]:
    value = model.data.get("converters", [])
    if isinstance(value, str):  # the command line's comma-separated form
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ctx.bad(f"model.converters is {show(value)}; expected a list of converter names")
    return value


def _table(ctx: Ctx, data: dict[str, Any], path: str) -> dict[str, Any]:
    node: Any = data
    for part in path.split("."):
        node = node.get(part, {}) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise ctx.bad(f"{path} is {show(node)}; expected a [{path}] table")
    return dict(node)


def _registered(ctx: Ctx, converters: list[str]) -> None:
    """Converter names the release does not register: torchtitan refuses them at start."""
    versions = ctx.semantics.versions
    known = REGISTERED_0_2 if versions.at_least(TORCHTITAN, 0, 2) else REGISTERED_0_1
    for name in converters:
        if name not in known:
            renamed = dict(zip(REGISTERED_0_1, REGISTERED_0_2[::2], strict=True)).get(name)
            ctx.refuse("torchtitan-converter",
                       f"model.converters names {show(name)[:60]}, which torchtitan "
                       f"{versions.of(TORCHTITAN)} does not register: it raises KeyError "
                       "building the model converters (protocols/model_converter.py); "
                       + (f"torchtitan 0.2 renamed it {renamed}" if renamed else
                          f"it registers {', '.join(known)}"))


def _fp8(ctx: Ctx, data: dict[str, Any], fields: dict[str, Any]) -> None:
    converters = _converters(ctx, Table(ctx, "model", data))
    _registered(ctx, converters)
    low = [c for c in converters if c in (FLOAT8, MX, OLD_FLOAT8)]
    if not low:
        return
    if len(set(low)) > 1:
        ctx.unmodelled("torchtitan-unmodelled",
                       f"model.converters lists {', '.join(low)}; priced as the first, {low[0]}")
    if low[0] == MX:
        mx = _table(ctx, data, MX)
        fields["precision"], fields["fp8_recipe"] = "mxfp8", str(
            mx.get("recipe_name", "mxfp8_cublas"))[:40]
        fields["fp8_kernels"] = "torchao"
        _eager(ctx, data, MX)
        return
    # the old name's table, or the table of the name that replaced it where the file
    # renamed only the table
    name = FLOAT8 if low[0] == FLOAT8 or OLD_FLOAT8 not in data else OLD_FLOAT8
    table = _table(ctx, data, name)
    recipe, gather = table.get("recipe_name"), table.get("enable_fsdp_float8_all_gather", False)
    if recipe is not None and recipe not in FLOAT8_RECIPES:
        ctx.refuse("torchtitan-float8-recipe",
                   f"{name}.recipe_name {show(recipe)}: torchtitan takes "
                   f"{', '.join(FLOAT8_RECIPES)} (job_config.py Float8Linear)")
        recipe = None
    if recipe is not None and gather is True:
        ctx.refuse("torchtitan-float8-all-gather",
                   f"{name}.enable_fsdp_float8_all_gather with recipe_name {recipe}: torchtitan "
                   "asserts 'using float8_config.enable_fsdp_float8_all_gather together with "
                   "float8_config.recipe_name is not supported' "
                   "(torchtitan/components/quantization/float8.py)")
    if table.get("emulate") is True:
        ctx.unmodelled("torchtitan-unmodelled",
                       f"{name}.emulate runs float8 without FP8 tensor cores; priced as BF16")
        if compiles(ctx, data, "model"):  # refused on GPUs before SM89 (facts.py)
            facts(ctx.semantics).float8_emulate_compiled = name
        return
    kept = table.get("filter_fqns")
    if not (isinstance(kept, list) and "output" in kept):
        # Float8LinearConverter converts every nn.Linear whose FQN filter_fqns does not
        # name (default []: torchtitan 0.2.2 job_config.py); its reference configs keep
        # the LM head out with ["output"]
        ctx.unmodelled("torchtitan-unmodelled",
                       f'{name}.filter_fqns without "output": torchtitan runs the LM head in '
                       'float8 too; pptune prices it in BF16 (set filter_fqns = ["output"], '
                       "as torchtitan's own configs do)")
    _eager(ctx, data, name)
    fields["precision"], fields["fp8_recipe"] = "fp8", recipe or "tensorwise"
    fields["fp8_kernels"] = "torchao"  # torchao's float8: no cached weights (precision.py)
    # the float8 all-gather runs only over FSDP shards (Float8LinearConverter: dp_shard_enabled)
    fields["fp8_param_gather"] = gather is True and recipe is None and (
        fields.get("sharding") == "fsdp")


def _eager(ctx: Ctx, data: dict[str, Any], name: str) -> None:
    """A warning for float8 linears with the model not compiled: torchao's casts then run
    as separate kernels (torchtitan docs/float8.md: torch.compile is needed for
    competitive performance), where pptune prices them at the traffic torchao's own
    roofline counts with the abs-max fused under torch.compile (costmodel/precision.py)."""
    if compiles(ctx, data, "model"):
        return
    ctx.unmodelled("torchtitan-float8-eager",
                   f"{name} with the model not compiled ([compile] enable with \"model\" in "
                   "components): torchao's float8 linears run eager, their casts and "
                   "abs-max as separate kernels; pptune prices the FP8 GEMMs with the casts "
                   "as compiled (torchao's roofline traffic, abs-max fused), so the step is "
                   "predicted faster than it runs; compile the model (torchtitan's "
                   "docs/float8.md: required for competitive performance)")


def stateable_exchange(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan]:
    """The job and plan priced with the faster of torchtitan's two rotate methods,
    allgather (its default) and alltoall (torch's ring, pptune's p2p), when the plan's
    exchange (a2a, a2a+p2p) has no torchtitan setting; unchanged otherwise."""
    c = job.cost_options or CostOptions()
    if plan.cp == 1 or c.cp_comm.value in ROTATE_NAME:
        return job, plan
    gpu = str(job.device)
    if job.shape is None or gpu not in presets.GPUS or job.attention is None:
        notes.append(f"torchtitan has no {c.cp_comm.value} context-parallel exchange: the file "
                     "runs allgather, which pptune did not price with these costs")
        return job, plan
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
    notes.append("torchtitan's per-op selective checkpointing (selective_ac_option \"op\") "
                 f"fits in place of {plan.recompute.value} recomputation and is faster: "
                 f"predicted step {fmt_seconds(alt.step_time_s)} "
                 f"({ratio(alt.step_time_s, plan.step_time_s)})")
    return replace(job, table=table), alt


def stateable_recipe(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan]:
    """The job and plan priced with torchtitan's float8 scaling, tensorwise: its scales
    come from each tensor itself, so no amax reduction over the stage (costmodel/amax.py)
    after each chunk pass, which an FP8 plan priced with delayed scaling pays."""
    if not amax.applies(plan.precision, job.request.fp8_amax_reduction):
        return job, plan
    job = replace(job, request=replace(job.request, fp8_amax_reduction=False))
    alt = evaluate(job.table, job.request, plan.spec)
    notes.append("torchtitan's float8 scales tensorwise, without delayed scaling's amax "
                 f"reductions: predicted step {fmt_seconds(alt.step_time_s)} "
                 f"({ratio(alt.step_time_s, plan.step_time_s)})")
    return job, alt


def compiled(plan: Plan, options: CostOptions | None, *, float8: bool = True
             ) -> tuple[str, ...]:
    """What torchtitan is to compile (``[compile] components``) for a plan priced with
    ``options``' kernels: the model, where its SwiGLU was priced fused or (``float8``: as
    emit writes a plan) its linears are float8 (torchtitan docs/float8.md: torch.compile
    is "required for competitive performance", fusing the casts), unless the plan's
    schedule splits the backward (torch's zero-bubble and DualPipeV schedules refuse
    compiled stage modules: schedules.py ``_check_torch_compile_compatibility``); and the
    loss, where it was priced other than PyTorch's eager cross-entropy
    (costmodel/loss.py)."""
    c = options or CostOptions()
    split = plan.pp > 1 and plan.schedule in SPLIT_BACKWARD
    model = not split and ((float8 and is_low(plan.precision)) or c.swiglu is not Swiglu.EAGER)
    loss = c.cross_entropy is not CrossEntropy.EAGER
    return ("model",) * model + ("loss",) * loss


def compile_lines(plan: Plan, job: Job) -> list[str]:
    """The [compile] table as the plan was priced (``compiled``); none when nothing is."""
    parts = compiled(plan, job.cost_options)
    if not parts:
        return []
    what = {"model": "the SwiGLU" + " and float8 casts" * is_low(plan.precision),
            "loss": "the loss"}
    return ["", "[compile]", f"enable = true  # fuses {' and '.join(what[p] for p in parts)}"
            ", as priced", *([] if len(parts) == 2 else [f'components = ["{parts[0]}"]'])]


def fp8_lines(plan: Plan, job: Job) -> tuple[list[str], list[str]]:
    """([model] lines, the tables after it) stating the plan's FP8 GEMMs as priced."""
    if plan.precision not in (Precision.FP8, Precision.MXFP8):
        return [], []
    if plan.precision is Precision.MXFP8:
        return ([f'converters = ["{MX}"]'], ["", f"[{MX}]", 'recipe_name = "mxfp8_cublas"'])
    c = job.cost_options or CostOptions()
    gather = c.fp8_params and plan.sharding is Sharding.FSDP
    tables = ["", f"[{FLOAT8}]", "# tensorwise scaling (recipe_name unset)",
              'filter_fqns = ["output"]  # the LM head stays BF16, as priced']
    if gather:
        tables += ["enable_fsdp_float8_all_gather = true",
                   "precompute_float8_dynamic_scale_for_fsdp = true"]
    return [f'converters = ["{FLOAT8}"]'], tables
