"""torchtitan's training-state widths (job_config.py Training ``dtype`` and
``mixed_precision_reduce``, both "float32" by default) as torch FSDP2 and DDP keep them.

``dtype = "bfloat16"`` builds the model in BF16 (train.py ``set_default_dtype``): the
parameters, their gradients and the optimizer state in BF16, no FP32 copy.

Under FSDP (parallelize.py ``apply_fsdp``: ``MixedPrecisionPolicy(param_dtype=
mixed_precision_param, reduce_dtype=mixed_precision_reduce)``) torch 2.13's
torch/distributed/fsdp/_fully_shard/ keeps three widths apart:
- the reduce dtype is the unsharded gradient's: ``_fsdp_collectives.py foreach_reduce``
  copies the gradients into a reduce_scatter_input of ``reduce_dtype`` and reduce-scatters
  it, and without gradient sync (torch's pipeline stages) ``_fsdp_param.py
  FSDPParam.to_accumulated_grad_if_needed`` accumulates them in it (``init_dtype_attrs``
  clamps a reduce dtype equal to the param dtype to None: the gradients' own);
- the sharded gradient is cast back to the sharded parameter's dtype: ``foreach_reduce``
  ``reduce_output = _to_dtype_if_needed(reduce_output, orig_dtype)``, ``orig_dtype`` the
  sharded parameter's (``init_dtype_attrs``), FP32 unless ``dtype`` is bfloat16. So
  ``mixed_precision_reduce = "bfloat16"`` halves the reduce-scatter and the unsharded
  gradient, not the sharded one (check/widths.py prices FSDP's sharded gradients at
  ``main_params_dtype``'s width, its reduction at ``main_grads_dtype``'s).

Without FSDP (DDP over replicas, or one rank) mixed_precision_reduce "only takes effect
when data_parallel_shard_degree > 1" (job_config.py): the gradients all-reduced are the
parameters' own, FP32 under torch.autocast, BF16 under ``dtype = "bfloat16"``.

Every torchtitan release (0.1.0 to 0.2.2) and main declare ``mixed_precision_reduce:
Literal["float32"]``; a TOML's "bfloat16" reaches tyro as a default outside the choices,
which it warns about and keeps: priced as run, with a note.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pptune.costmodel.search import Plan, Sharding, evaluate
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.compression import reduction_widths, sixteen_bit
from pptune.frameworks.common.fields import Ctx, show
from pptune.frameworks.torchtitan.table import Table
from pptune.report.fmt import fmt_seconds

WIDTHS = ("float32", "bfloat16")


def state_widths(ctx: Ctx, train: Table, sharded: bool) -> dict[str, Any]:
    """TrainingConfig's widths for the [training] table: ``main_params_dtype`` (and the
    moments) from ``dtype``, ``main_grads_dtype`` (the width gradients are reduced in)
    from ``mixed_precision_reduce`` under FSDP (``sharded``), else from ``dtype``."""
    bf16 = {}
    for key in ("dtype", "mixed_precision_reduce"):
        value = train.text(key, "float32")
        if value not in WIDTHS:
            raise ctx.bad(f"training.{key} is {show(value)}; expected \"float32\" or "
                          "\"bfloat16\"")
        bf16[key] = value == "bfloat16"
    fields: dict[str, Any] = {}
    if bf16["dtype"]:
        fields.update(main_params_dtype="bf16", exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    if bf16["mixed_precision_reduce"] and not sharded:
        ctx.note("training.mixed_precision_reduce bfloat16 has no effect without FSDP "
                 "(job_config.py: 'only takes effect when data_parallel_shard_degree > 1'): "
                 "the gradients are reduced at the parameters' width")
    if bf16["mixed_precision_reduce"] and sharded:
        ctx.note("training.mixed_precision_reduce \"bfloat16\": torchtitan (0.1.0 to 0.2.2 "
                 "and main) declares Literal[\"float32\"], and its parser (tyro) warns of a "
                 "value outside the declared choices and keeps it; priced as the BF16 "
                 "reduction FSDP2 then runs")
    if bf16["mixed_precision_reduce" if sharded else "dtype"]:
        fields["main_grads_dtype"] = "bf16"
    return fields


def reduces_bf16(job: Job, plan: Plan) -> bool:
    """Whether the file written for ``plan`` states mixed_precision_reduce "bfloat16": where
    --grad-compression asks a 16-bit reduction and FSDP shards (over dp, or the cp ranks
    torchtitan shards over whatever the shard degree: world.py), where it takes effect."""
    fsdp = plan.sharding is Sharding.FSDP and (plan.dp > 1 or plan.cp > 1)
    return sixteen_bit(job.grad_compression) and fsdp


def reduce_as_run(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan]:
    """The job and plan priced at the reduce dtype the file states (``reduces_bf16``): a
    plan without FSDP all-reduces its FP32 gradients whatever --grad-compression asks (the
    search priced it with the BF16 reduction), said in a note. Unchanged where
    --grad-compression asks none (check-config's jobs: the file's own widths). Called again
    once the plan's sharding is one the files state (closest._stated): a ZeRO-3 plan
    priced with FP32 reductions is written with FSDP, whose BF16 reduction the file states."""
    if not sixteen_bit(job.grad_compression):
        return job, plan
    bf16 = reduces_bf16(job, plan)
    run = replace(job.request, **reduction_widths(bf16))
    if run == job.request:
        return job, plan
    ran = evaluate(job.table, run, plan.spec)
    notes.append("torchtitan's mixed_precision_reduce takes effect under FSDP only: "
                 + ("the plan written with FSDP states it, its gradients reduced in BF16 as "
                    f"--grad-compression asks, step {fmt_seconds(ran.step_time_s)}" if bf16
                    else "a plan without it all-reduces FP32 gradients, predicted so "
                    f"without --grad-compression, step {fmt_seconds(ran.step_time_s)}"))
    return replace(job, request=run), ran
