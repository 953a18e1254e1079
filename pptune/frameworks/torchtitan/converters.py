"""torchtitan's quantization converters: which parts of the model run FP8, read, checked
by torchtitan's (and torch's) own rules, and stated.

torchtitan 0.2.2 (torchtitan/components/quantization/) converts the model by the
``[model] converters`` it registers (``register_model_converter``):

- ``quantize.linear.float8`` (float8.py ``Float8LinearConverter``): torchao's
  Float8Linear for every ``nn.Linear`` that ``filter_fqns`` does not name: the attention,
  dense MLP, shared-expert and router projections. Not the routed experts: their weights
  are 3-D parameters multiplied by ``torch._grouped_mm`` (models/moe/moe.py
  ``GroupedExperts``), no ``nn.Linear``. Table ``[quantize.linear.float8]``:
  ``recipe_name`` tensorwise | rowwise | rowwise_with_gw_hp (unset: tensorwise),
  ``enable_fsdp_float8_all_gather``, ``emulate``.
- ``quantize.grouped_mm.float8`` (``Float8GroupedMMConverter``): torchao's
  ``MoETrainingConfig`` (FP8 rowwise scaled grouped GEMMs, prototype/moe_training) on the
  parameters of the modules whose name contains one of ``fqns`` (its
  ``moe_module_filter_fn``: ``target_fqn in cur_fqn``; the experts are
  ``layers.<i>.moe.experts``; ``fqns`` defaults to [], which converts none). It raises
  "Float8 MoE training only supported on SM89 or later." and asserts
  ``pipeline_parallel_degree == 1`` and ``context_parallel_degree == 1``. torch's FP8
  rowwise grouped GEMM (``torch._scaled_grouped_mm``) has SM90 kernels only
  (torch/testing/_internal/common_cuda.py ``evaluate_platform_supports_fp8_grouped_gemm``:
  ``SM90OrLater and not SM100OrLater``; torchao v0.16.0's
  test/prototype/moe_training tests skip it elsewhere: "requires sm90"): on Blackwell the
  experts' FP8 GEMMs do not run.
- ``quantize.linear.mx`` and ``quantize.grouped_mm.mx`` (mx.py): MXFP8, the latter
  asserting SM100 ("MXFP8 is only supported on SM100 or architectures").
- ``QuantizationConverter._validate`` (components/quantization/__init__.py) asserts
  "Cannot combine model converters with different quantization types" (float8 and mx).

Releases before 0.2 named the linear converter ``float8`` with a ``[float8]`` table.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pptune.costmodel import presets
from pptune.costmodel.keys import Precision
from pptune.costmodel.precision import TorchaoRecipe
from pptune.costmodel.search import Plan, Sharding, evaluate
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.baseline import ratio
from pptune.frameworks.common.fields import Ctx, show
from pptune.frameworks.common.repricing import analytic_table
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.torchtitan.facts import facts
from pptune.frameworks.torchtitan.fqns import TORCHTITAN, reads_toml
from pptune.frameworks.torchtitan.table import Table, compiles
from pptune.frameworks.torchtitan.unlisted import (
    FLOAT8,
    GMM_FLOAT8,
    GMM_MX,
    MX,
    OLD_FLOAT8,
    RENAMED_0_2,
    registered,
    unlisted_tables,
)
from pptune.options import CostOptions
from pptune.report.fmt import fmt_seconds

FLOAT8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
EXPERTS = "layers.{i}.moe.experts"  # the routed experts' module in torchtitan's MoE models
CITE = "(torchtitan/components/quantization/float8.py Float8GroupedMMConverter)"
MX_CITE = "(torchtitan/components/quantization/mx.py MXLinearConverter)"


def mx_tp_refused(versions: Versions) -> bool:
    """MXLinearConverter asserts ``not (model_compile_enabled and tensor_parallel_degree >
    1)`` in torchtitan 0.2.0 to 0.2.2 (added by PR #1427; 0.1.0's MXConverter had no such
    assert, and main dropped it after 0.2.2, PR #2520)."""
    return versions.at_least(TORCHTITAN, 0, 2) and reads_toml(versions)


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
    """Converter names the release does not register: torchtitan refuses them at start;
    0.2.2 refuses float8 and mx converters together."""
    versions = ctx.semantics.versions
    known = registered(versions)
    for name in converters:
        if name not in known:
            renamed = RENAMED_0_2.get(name)  # 0.1 names are unknown only to 0.2
            ctx.refuse("torchtitan-converter",
                       f"model.converters names {show(name)[:60]}, which torchtitan "
                       f"{versions.of(TORCHTITAN)} does not register: it raises KeyError "
                       "building the model converters (protocols/model_converter.py); "
                       + (f"torchtitan 0.2 renamed it {renamed}" if renamed else
                          f"it registers {', '.join(known)}"))
    kinds = {c.split(".")[-1] for c in converters if c.startswith("quantize.")}
    if len(kinds) > 1 and versions.at_least(TORCHTITAN, 0, 2, 2):
        ctx.refuse("torchtitan-converter",
                   f"model.converters mixes float8 and mx converters ({', '.join(converters)}"
                   "): torchtitan asserts 'Cannot combine model converters with different "
                   "quantization types' (components/quantization/__init__.py "
                   "QuantizationConverter._validate); use one type for the linears and the "
                   "experts")


def converted_layers(fqns: Any, layers: list[int]) -> int:
    """How many of the MoE ``layers`` (their indices) have their experts converted by
    ``fqns``: torchtitan tests each target as a substring of the module's name
    (``target_fqn in cur_fqn``), iterating a string by its characters as Python does."""
    targets = [str(t) for t in (fqns if isinstance(fqns, (list, str)) else [])]
    return sum(any(t in EXPERTS.format(i=i) for t in targets) for i in layers)


def _experts(ctx: Ctx, data: dict[str, Any], converters: list[str], fields: dict[str, Any],
             layers: list[int] | None) -> str | None:
    """The routed experts' precision by the grouped_mm converters (None: BF16), with
    torchtitan's refusals of them; ``layers``: the MoE layers' indices (None: unknown,
    [] a dense model)."""
    name = next((c for c in converters if c in (GMM_FLOAT8, GMM_MX)), None)
    if name is None:
        return None
    pp, cp = fields.get("pp") or 1, fields.get("cp") or 1
    if name == GMM_FLOAT8:
        facts(ctx.semantics).grouped_float8 = True  # SM89: the GPU decides (facts.py)
        for key, size in (("pipeline", pp), ("context", cp)):
            if size > 1:
                ctx.refuse("torchtitan-float8-moe",
                           f"{name} with {key}_parallel_degree {size}: torchtitan asserts "
                           f"'Float8 MoE training prototype does not yet support {key} "
                           f"parallelism' {CITE}; use {key}_parallel_degree 1 or drop {name}")
    fqns = _table(ctx, data, name).get("fqns", [])
    if layers == []:  # a dense model: nothing to convert
        return None
    moe = layers or [0]
    converted, count = converted_layers(fqns, moe), len(moe)
    if converted == 0:
        ctx.warn("torchtitan-moe-fqns",
                 f"{name} with fqns {show(fqns)}: no module of the routed experts "
                 f"({EXPERTS.format(i='<i>')}) matches, so torchtitan converts none and the "
                 f"experts run BF16 (priced so) {CITE}; set fqns = [\"experts\"]")
        return None
    if converted < count:
        ctx.unmodelled("torchtitan-unmodelled",
                       f"{name} fqns {show(fqns)} convert the experts of {converted} of "
                       f"{count} MoE layers; pptune prices every layer's experts in BF16")
        return None
    return "fp8" if name == GMM_FLOAT8 else "mxfp8"


def read_converters(ctx: Ctx, data: dict[str, Any], fields: dict[str, Any], *,
                    moe_layers: list[int] | None) -> None:
    """Fill precision (fp8 / mxfp8: the linears), expert_precision (the routed experts,
    where it differs), fp8_recipe, fp8_kernels and fp8_param_gather; ``moe_layers``: the
    indices of the model's MoE layers (None: unknown, [] a dense model); a note says
    which parts of a MoE model run low precision."""
    converters = _converters(ctx, Table(ctx, "model", data))
    _registered(ctx, converters)
    unlisted_tables(ctx, data, converters)
    linears = _linears(ctx, data, converters, fields)
    experts = _experts(ctx, data, converters, fields, moe_layers)
    if experts is not None or linears is not None:
        fields["fp8_kernels"] = "torchao"  # torchao's float8: no cached weights (precision.py)
    if experts != linears and moe_layers != []:
        fields["expert_precision"] = experts or "bf16"
    if not moe_layers or (experts is None and linears is None):
        return
    low = {"fp8": "FP8", "mxfp8": "MXFP8"}
    missing = GMM_FLOAT8 if linears == "fp8" else GMM_MX
    if experts == linears:
        ctx.note(f"the linears and the routed experts' grouped GEMMs run {low[str(linears)]} "
                 "(model.converters converts both); priced so")
    elif experts is not None:
        ctx.note(f"the routed experts run {low[experts]}, the linears (attention, shared "
                 "experts, router) BF16: only the experts' grouped GEMMs are converted; "
                 "priced so")
    else:
        ctx.note(f"the linears run {low[str(linears)]}, the routed experts BF16: "
                 f"model.converters has no {missing}, and the linear converter swaps "
                 "nn.Linear modules only, not the experts' grouped GEMMs "
                 "(torchtitan/components/quantization/float8.py); priced so"
                 + (f" ({GMM_FLOAT8} with fqns = [\"experts\"] runs them in FP8 on SM90 GPUs "
                    "at pipeline and context parallel degree 1)" if linears == "fp8" else ""))


def _linears(ctx: Ctx, data: dict[str, Any], converters: list[str],
             fields: dict[str, Any]) -> str | None:
    """The linears' precision by the linear converter (None: BF16)."""
    low = [c for c in converters if c in (FLOAT8, MX, OLD_FLOAT8)]
    if not low:
        return None
    if len(set(low)) > 1 and not ctx.semantics.versions.at_least(TORCHTITAN, 0, 2, 2):
        ctx.unmodelled("torchtitan-unmodelled",
                       f"model.converters lists {', '.join(low)}; priced as the first, {low[0]}")
    if low[0] == MX:
        mx = _table(ctx, data, MX)
        fields["precision"], fields["fp8_recipe"] = "mxfp8", str(
            mx.get("recipe_name", "mxfp8_cublas"))[:40]
        tp, versions = fields.get("tp") or 1, ctx.semantics.versions
        if tp > 1 and compiles(ctx, data, "model") and mx_tp_refused(versions):
            ctx.refuse("torchtitan-mx-tp-compile",
                       f"{MX} with tensor_parallel_degree {tp} and the model compiled "
                       "([compile] enable with \"model\" in components): torchtitan "
                       f"{versions.of(TORCHTITAN)} asserts 'TP not yet supported with "
                       f"torch.compile for mxfp8' {MX_CITE}; drop \"model\" from [compile] "
                       "components (the MXFP8 casts then run eager) or use "
                       "tensor_parallel_degree 1")
        _eager(ctx, data, MX, tp)
        return "mxfp8"
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
        return None
    kept = table.get("filter_fqns")
    if not (isinstance(kept, list) and "output" in kept):
        # Float8LinearConverter converts every nn.Linear whose FQN filter_fqns does not
        # name (default []: torchtitan 0.2.2 job_config.py); its reference configs keep
        # the LM head out with ["output"]
        ctx.unmodelled("torchtitan-unmodelled",
                       f'{name}.filter_fqns without "output": torchtitan runs the LM head in '
                       'float8 too; pptune prices it in BF16 (set filter_fqns = ["output"], '
                       "as torchtitan's own configs do)")
    _eager(ctx, data, name, priced=fields if recipe is None else None)
    _recipe_note(ctx, name, recipe)
    fields["precision"], fields["fp8_recipe"] = "fp8", recipe or "tensorwise"
    # the float8 all-gather runs only over FSDP shards (Float8LinearConverter: dp_shard_enabled)
    fields["fp8_param_gather"] = gather is True and recipe is None and (
        fields.get("sharding") == "fsdp")
    return "fp8"


def _recipe_note(ctx: Ctx, name: str, recipe: str | None) -> None:
    """How a rowwise recipe is priced (costmodel/precision.py, torchao's own roofline)."""
    if recipe == "rowwise":
        ctx.note(f"{name}.recipe_name rowwise: a scale per row (torchao's CUTLASS rowwise GEMM), "
                 "priced at the FP8 rate with torchao's roofline casts (each activation cast "
                 "along both dims, 6 bytes an element against tensorwise's 4; "
                 "torchao/testing/training/roofline_utils.py)")
    elif recipe == "rowwise_with_gw_hp":
        ctx.note(f"{name}.recipe_name rowwise_with_gw_hp: the weight-gradient GEMMs run BF16 "
                 "(torchao Float8LinearConfig.from_recipe_name: grad_weight = input_t_hp @ "
                 "grad_output_hp), priced at the BF16 rate; the forward and input-gradient "
                 "GEMMs at the FP8 rate, with torchao's roofline casts")


def _eager(ctx: Ctx, data: dict[str, Any], name: str, tp: int = 1,
           priced: dict[str, Any] | None = None) -> None:
    """A warning for float8 or MXFP8 linears with the model not compiled: torchao's casts
    then run as separate kernels (torchtitan docs/float8.md: torch.compile is needed for
    competitive performance). Tensorwise float8 (its fields ``priced``) is priced so
    (``fp8_casts`` eager: costmodel/precision.py); MXFP8 and the rowwise recipes at the
    traffic torchao's own roofline counts with the casts fused under torch.compile.
    MXFP8 with tensor parallelism cannot compile the model (``mx_tp_refused``)."""
    if compiles(ctx, data, "model"):
        return
    if priced is not None:
        priced["fp8_casts"] = "eager"
        ctx.warn("torchtitan-float8-eager",
                 f"{name} with the model not compiled ([compile] enable with \"model\" in "
                 "components): torchao's float8 linears run eager, each op of their casts "
                 "(abs-max, scale, cast) a kernel of its own, and are priced so; compile the "
                 "model (torchtitan's docs/float8.md: required for competitive performance)")
        return
    gemms, linears = ("MXFP8", "MXFP8") if name == MX else ("FP8", "float8")
    fix = (f"torchtitan refuses to compile the model with {MX} at tensor_parallel_degree "
           f"{tp} {MX_CITE}, so compiling needs tensor_parallel_degree 1"
           if name == MX and tp > 1 and mx_tp_refused(ctx.semantics.versions) else
           f"compile the model (torchtitan's docs/{linears.lower()}.md: required for "
           "competitive performance)")
    ctx.unmodelled("torchtitan-float8-eager",
                   f"{name} with the model not compiled ([compile] enable with \"model\" in "
                   f"components): torchao's {linears} linears run eager, their casts and "
                   f"abs-max as separate kernels; pptune prices the {gemms} GEMMs with the "
                   "casts as compiled (torchao's roofline traffic, abs-max fused), so the step "
                   f"is predicted faster than it runs; {fix}")


def fp8_experts_problem(gpu: str, pp: int, cp: int) -> str | None:
    """Why torchtitan 0.2.2 cannot run the routed experts in FP8 (None: it can, with
    quantize.grouped_mm.float8): the converter's pp and cp asserts, torch's SM90-only FP8
    grouped GEMM (module docstring; pptune's FP8 GPUs without microscaling tensor cores
    are Hopper's, SM90)."""
    spec = presets.GPUS.get(gpu)
    if spec is not None and (spec.fp8_peak_flops is None or spec.mxfp8):
        return (f"torch's FP8 grouped GEMM (torch._scaled_grouped_mm, which {GMM_FLOAT8} "
                f"runs) has SM90 kernels only, and {gpu} is not SM90")
    if pp > 1 or cp > 1:
        return (f"{GMM_FLOAT8} asserts pipeline and context parallel degree 1 (the plan: pp "
                f"{pp}, cp {cp}) {CITE}")
    return None


def stateable_experts(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan]:
    """The job and plan with the routed experts in BF16 where an FP8 plan's experts cannot
    run FP8 under torchtitan (``fp8_experts_problem``); unchanged otherwise, for measured
    costs or a dense model."""
    c = job.cost_options or CostOptions()
    if (job.shape is None or not job.shape.moe or job.attention is None
            or (c.expert_precision or plan.precision) is not Precision.FP8):
        return job, plan
    why = fp8_experts_problem(str(job.device), plan.pp, plan.cp)
    if why is None:
        return job, plan
    job = replace(job, cost_options=replace(c, expert_precision=Precision.BF16))
    job = replace(job, table=analytic_table(job))
    alt = evaluate(job.table, job.request, plan.spec)
    notes.append(f"torchtitan runs the routed experts in BF16 here: {why}; predicted with "
                 f"BF16 experts, step {fmt_seconds(alt.step_time_s)} "
                 f"({ratio(alt.step_time_s, plan.step_time_s)})")
    return job, alt


def expert_setting(job: Job, plan: Plan) -> dict[str, str]:
    """The routed experts' precision as a file states it, for a MoE plan in FP8 or MXFP8
    (check-config names it where the best plan differs)."""
    c = job.cost_options or CostOptions()
    experts = c.expert_precision or plan.precision
    if job.shape is None or not job.shape.moe or {experts, plan.precision} <= {
            Precision.BF16, Precision.FP16}:
        return {}
    return {"experts": experts.value}


def fp8_lines(plan: Plan, job: Job) -> tuple[list[str], list[str]]:
    """([model] lines, the tables after it) stating the plan's FP8 GEMMs as priced: the
    linears' converter and, for a MoE model whose experts were priced in FP8 or MXFP8,
    the grouped GEMMs' (fqns = ["experts"])."""
    if plan.precision not in (Precision.FP8, Precision.MXFP8):
        return [], []
    c = job.cost_options or CostOptions()
    moe = job.shape is not None and job.shape.moe
    experts = moe and (c.expert_precision or plan.precision) is plan.precision
    grouped = GMM_MX if plan.precision is Precision.MXFP8 else GMM_FLOAT8
    group_table = ["", f"[{grouped}]", 'fqns = ["experts"]  # the routed experts\' grouped '
                   "GEMMs, as priced"] if experts else []
    kept = ([f"# the routed experts run BF16, as priced: no {grouped}"]
            if moe and not experts else [])
    if plan.precision is Precision.MXFP8:
        names = [MX, GMM_MX] if experts else [MX]
        return ([f"converters = {_list(names)}", *kept],
                ["", f"[{MX}]", 'recipe_name = "mxfp8_cublas"', *group_table])
    gather = c.fp8_params and plan.sharding is Sharding.FSDP
    recipe = c.torchao_recipe
    said = ("# tensorwise scaling (recipe_name unset)" if recipe is TorchaoRecipe.TENSORWISE
            else f'recipe_name = "{recipe.value}"  # as priced (a calibrated job\'s recipe)')
    tables = ["", f"[{FLOAT8}]", said,
              'filter_fqns = ["output"]  # the LM head stays BF16, as priced']
    if gather and recipe is not TorchaoRecipe.TENSORWISE:  # float8.py asserts the pair
        tables.append("# no enable_fsdp_float8_all_gather: torchtitan allows it with "
                      "tensorwise scaling only (components/quantization/float8.py)")
    elif gather:
        tables += ["enable_fsdp_float8_all_gather = true",
                   "precompute_float8_dynamic_scale_for_fsdp = true"]
    names = [FLOAT8, GMM_FLOAT8] if experts else [FLOAT8]
    return [f"converters = {_list(names)}", *kept], [*tables, *group_table]


def _list(names: list[str]) -> str:
    return "[" + ", ".join(f'"{n}"' for n in names) + "]"
