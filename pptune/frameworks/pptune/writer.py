"""``pptune.yaml``: the plan in pptune's own config, every field stated.

pptune's own runs (``pptune validate``, ``tune``) state every plan, so
``express`` hands the plan over as it is; the file carries the node shape
it launches, and the model, GPU and profile the costs came from.
"""

from __future__ import annotations

from pptune.costmodel import presets
from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.partition import mtp_count, strip_ends
from pptune.costmodel.precision import Fp8Kernels
from pptune.costmodel.rates import Swiglu, WgradAccum
from pptune.costmodel.search import Recompute, Sharding
from pptune.files import dumps_json
from pptune.frameworks.common.adapter import Stated
from pptune.frameworks.common.compression import sixteen_bit
from pptune.frameworks.common.writing import header, node_size
from pptune.options import CostOptions

FILE = "pptune.yaml"


def _blocks(stated: Stated) -> list[int]:
    """Blocks per stage, as ``stage_layers`` states them: without the embedding and head,
    and without the MTP layers, which the reader puts on the last stage (check/split.py)."""
    blocks = list(strip_ends(stated.plan.stage_layers))
    blocks[-1] -= mtp_count(stated.job.layer_names)
    return blocks


def _compression(compression: str) -> list[str]:
    """``--grad-compression`` as the file states it: a 16-bit reduction as
    ``grad_reduce_dtype`` (gradients held at their width, reduced at 2 bytes, as pptune
    prices the flag: costmodel/comm.py ``compression_factor``); top-k has no key, so a
    comment says the step assumed it."""
    if sixteen_bit(compression):
        return [f"grad_reduce_dtype: {compression}"]
    if compression != "none":
        return [f"# --grad-compression {compression}: priced in the step above; no key states it"]
    return []


def write(stated: Stated) -> dict[str, str]:
    job, plan = stated.job, stated.plan
    costs = job.cost_options or CostOptions()
    low = plan.precision in (Precision.FP8, Precision.MXFP8, Precision.NVFP4)
    lines = [
        *header(plan, job, "#"),
        f"gpus: {plan.world}",
        f"gpus_per_node: {node_size(plan, job)}",
        f"tp: {plan.tp}",
        *([f"cp: {plan.cp}", f"cp_comm: {costs.cp_comm.value}"] if plan.cp > 1 else []),
        *([f"precision: {plan.precision.value}"] if plan.precision is not Precision.BF16 else []),
        *([f"fp8_recipe: {costs.recipe.value}"] if plan.precision is Precision.FP8 else []),
        *(["fp8_param_gather: true"] if low and costs.fp8_params else []),
        *([f"fp8_kernels: {costs.fp8_linears().value}"]
          if low and costs.fp8_linears() is not Fp8Kernels.TE else []),
        *([f"cross_entropy: {costs.loss_kernels.value}"]
          if costs.loss_kernels is not CrossEntropy.FUSED else []),
        *([f"swiglu: {costs.swiglu_kernels.value}"]
          if costs.swiglu_kernels is not Swiglu.FUSED else []),
        *([f"wgrad_accum: {costs.wgrad.value}"] if costs.wgrad is not WgradAccum.BF16 else []),
        f"pp: {plan.pp}",
        f"dp: {plan.dp}",
        f"schedule: {plan.schedule.value}",
        f"virtual_stages: {plan.virtual_stages}",
        f"micro_batch_size: {plan.micro_batch_size}",
        f"global_batch: {job.global_batch}",
        f"grad_accum_steps: {plan.num_microbatches}",
        f"stage_layers: [{', '.join(map(str, _blocks(stated)))}]  # blocks a stage (the "
        "table's layers/stage counts the embedding and head too)",
        f"sharded_optimizer: {'true' if plan.sharding is Sharding.ZERO1 else 'false'}",
        f"sharding: {plan.sharding.value}",
        *([f"exp_avg_dtype: {job.moments[0]}", f"exp_avg_sq_dtype: {job.moments[1]}"]
          if job.moments != ("fp32", "fp32") else []),
        *_compression(job.grad_compression),
        f"recompute: {plan.recompute.value}",
        *([f"recompute_layers_per_stage: [{', '.join(map(str, plan.recompute_layers))}]"]
          if plan.recompute_layers is not None else []),
        *([f"recompute_every: {job.request.recompute_every}"]
          if plan.recompute is Recompute.SELECTIVE and job.request.recompute_every else []),
        *([f"recompute_modules: [{', '.join(plan.recompute_modules)}]"]
          if plan.recompute is Recompute.MODULES else []),
        f"rank_order: {plan.rank_order.value}",
        *([f"ep: {plan.ep}", f"etp: {plan.etp}"] if plan.ep > 1 or plan.etp > 1 else []),
        *(["a2a_overlap: true"] if plan.a2a_overlap else []),
        *([f"moe_dispatcher: {costs.dispatcher.value}"]
          if plan.ep * plan.etp > 1 and costs.dispatcher is not Dispatcher.ALLTOALL else []),
        *([f"moe_routing_imbalance: {costs.moe_imbalance:g}"]
          if job.shape is not None and job.shape.moe and costs.moe_imbalance != 1.0 else []),
        f"sequence_parallel: {'true' if job.sequence_parallel else 'false'}",
        *(["tp_comm_overlap: true"] if job.tp_comm_overlap and plan.tp > 1 else []),
    ]
    if job.attention:  # analytic costs only: a profile measured its kernel
        lines.append(f"attention: {job.attention}")
    if job.model in presets.MODELS:
        lines.append(f"model: {job.model}")
    elif job.hf_config is not None:  # the model as read (a profile's path, or --hf-config)
        lines.append(f"hf_config: {dumps_json(job.hf_config)}")
    if job.shape is not None:  # the sequence the costs priced (a preset's may differ)
        lines.append(f"seq_len: {job.shape.seq_len}")
    if str(job.device) in presets.GPUS:
        lines.append(f"gpu: {job.device}")
    if job.origin.startswith("profile "):
        lines.append(f"profile: {job.origin.split()[1]}")
    return {FILE: "\n".join(lines) + "\n"}
