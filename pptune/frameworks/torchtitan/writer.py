"""``torchtitan.toml``: a torchtitan 0.2.2 job file (the last release that reads TOML).

It states the model flavor, the batch, the activation checkpointing (always:
torchtitan defaults to selective), the data-parallel replicate and shard
degrees, tensor, expert (0.2.0 and later) and pipeline degrees, the schedule and
the split: through the options torchtitan builds it from when they can
(``placement.py``: ``pipeline_parallel_layers_per_stage``, the first/last-stage
"less layers"), else each stage's modules (``module_fqns_per_model_part``; the
LM head is ``output`` there, ``lm_head`` on main after 0.2.2). The node shape is only in
the launch comment: a job file does
not carry it.
"""

from __future__ import annotations

import re

from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.op_sac import OP_SAC
from pptune.costmodel.partition import is_mtp, mtp_count, stage_bounds
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import Plan, Recompute, Sharding
from pptune.files import dumps_json
from pptune.frameworks.common.adapter import Job, Stated
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.common.writing import header, plan_launch
from pptune.frameworks.torchtitan.converters import fp8_lines
from pptune.frameworks.torchtitan.cp_fp8 import ROTATE_NAME, compile_lines
from pptune.frameworks.torchtitan.fqns import TOML_RELEASE, TORCHTITAN, head
from pptune.frameworks.torchtitan.models import CUSTOM
from pptune.frameworks.torchtitan.placement import stage_options
from pptune.frameworks.torchtitan.reader import flavor_of
from pptune.frameworks.torchtitan.widths import reduces_bf16
from pptune.options import CostOptions

FILE = "torchtitan.toml"
# torch.distributed.pipelining's class names, as pipeline_parallel_schedule takes them
SCHEDULES = {
    Schedule.GPIPE: "GPipe",
    Schedule.ONE_F_ONE_B: "1F1B",
    Schedule.INTERLEAVED: "Interleaved1F1B",
    Schedule.ZBV: "ZBVZeroBubble",
    Schedule.DUALPIPEV: "DualPipeV",  # torch's ScheduleDualPipeV (get_schedule_class)
}


def _ep_overlap(plan: Plan) -> list[str]:
    """DualPipeV with experts: torchtitan 0.2.2 overlaps the expert all-to-all in its
    F&B pairs by default (pipeline_parallel_expert_parallel_overlap = true) and refuses
    that with activation checkpointing (distributed/dual_pipe_v.py,
    get_dual_pipe_v_flag): a plan without the overlap states it off."""
    if plan.schedule is not Schedule.DUALPIPEV or plan.ep == 1:
        return []
    return [f"pipeline_parallel_expert_parallel_overlap = "
            f"{'true' if plan.a2a_overlap else 'false'}"]


def write(stated: Stated) -> dict[str, str]:
    job, plan = stated.job, stated.plan
    shape = job.shape
    names = stage_modules(job, plan, head(Versions({TORCHTITAN.name: TOML_RELEASE})))
    flavor = flavor_of(job.model, job.shape) or (str(job.model), CUSTOM)
    # with pp > 1 torchtitan splits local_batch_size into pipeline micro-batches; with
    # pp = 1 there is no pipeline, so the micro-batches are gradient-accumulation
    # steps: global_batch_size / (local_batch_size x dp)
    local = plan.micro_batch_size * (plan.num_microbatches if plan.pp > 1 else 1)
    fsdp = plan.sharding is Sharding.FSDP
    nodes, per_node = plan_launch(plan, job)
    fp8_model, fp8_tables = fp8_lines(plan, job)
    fp8_tables = [*compile_lines(plan, job), *fp8_tables]
    comm = (job.cost_options or CostOptions()).cp_comm.value
    lines = [
        *header(plan, job, "#"),
        f"# torchtitan {TOML_RELEASE} job file; launch: torchrun --nnodes {nodes} "
        f"--nproc_per_node {per_node} -m torchtitan.train --job.config_file torchtitan.toml",
        *([f"# torchtitan has no built-in {flavor[0]}: register a TrainSpec of that name with a "
           f"'{CUSTOM}' flavor of this shape"] if flavor[1] == CUSTOM else []),
        "",
        "[model]",
        f'name = "{flavor[0]}"',
        f'flavor = "{flavor[1]}"',
        *fp8_model,
        *_custom_import(flavor),
        "",
        "[training]",
        f"local_batch_size = {local}",
        f"global_batch_size = {job.global_batch}",
        f"seq_len = {shape.seq_len if shape else job.table.seq_len}",
        *(['mixed_precision_reduce = "bfloat16"  # --grad-compression: FSDP\'s reduce dtype']
          if reduces_bf16(job, plan) else []),
        "",
        "[activation_checkpoint]",
        *_checkpointing(job, plan),
        "",
        "[parallelism]",
        f"data_parallel_replicate_degree = {1 if fsdp else plan.dp}",
        f"data_parallel_shard_degree = {plan.dp if fsdp else 1}",
        f"tensor_parallel_degree = {plan.tp}",
        *([f"expert_parallel_degree = {plan.ep}",
           f"expert_tensor_parallel_degree = {plan.etp}"] if plan.ep > 1 else []),
        *(['expert_parallel_comm_backend = "deepep"']
          if plan.ep > 1 and (job.cost_options or CostOptions()).dispatcher
          is Dispatcher.DEEPEP else []),
        *([f"context_parallel_degree = {plan.cp}",
           f'context_parallel_rotate_method = "{ROTATE_NAME.get(comm, "allgather")}"']
          if plan.cp > 1 else []),
        f"pipeline_parallel_degree = {plan.pp}",
    ]
    if plan.pp == 1:  # no pipeline: torchtitan reads no schedule, micro-batch or split
        return {FILE: "\n".join([*lines, *fp8_tables, ""])}
    lines += [
        f'pipeline_parallel_schedule = "{SCHEDULES[plan.schedule]}"',
        *_ep_overlap(plan),
        f"pipeline_parallel_microbatch_size = {plan.micro_batch_size}",
    ]
    # the options need the model's layer count, which a reader knows only for the
    # flavors torchtitan ships (a custom TrainSpec's count is not in the file)
    built = stage_options(plan, mtp_count(job.layer_names)) if plan.pp > 1 and flavor[1] != CUSTOM else None
    if built is not None:  # torchtitan builds this split itself (placement.py)
        lines += [*built]
    else:
        lines += ["module_fqns_per_model_part = [",
                  *(f"    {dumps_json(part)}," for part in names), "]"]
    lines += [*fp8_tables, ""]
    return {FILE: "\n".join(lines)}


def stage_modules(job: Job, plan: Plan, head_name: str) -> list[list[str]]:
    """Each stage's modules (module_fqns_per_model_part): the embedding, the blocks
    (``layers.N``; no multi-token-prediction module, which torchtitan's models do not
    build), the norm and the head (``head_name``: fqns.head of the release)."""
    names = []
    for s, e in stage_bounds(plan.stage_layers):
        part = []
        for i in range(s, e):
            if i == 0:
                part.append("tok_embeddings")
            elif i == len(job.layer_names) - 1:
                part += ["norm", head_name]
            elif not is_mtp(job.layer_names[i]):
                part.append(f"layers.{i - 1}")
        names.append(part)
    return names


def _custom_import(flavor: tuple[str, str]) -> list[str]:
    """For a model torchtitan does not ship: the [experimental] custom_import its Trainer
    imports before it looks the TrainSpec up (torchtitan 0.2.2 train.py), named for the
    module the user writes to register it (models.py)."""
    if flavor[1] != CUSTOM:
        return []
    module = re.sub(r"\W", "_", flavor[0]) + "_spec"
    return ["", "[experimental]", f'custom_import = "{module}"  # your module: '
            f'register_train_spec of a TrainSpec "{flavor[0]}" with a "custom" flavor']


def _checkpointing(job: Job, plan: Plan) -> list[str]:
    """[activation_checkpoint] as the plan recomputes: per op (op_sac), every Nth block,
    full or none (mode stated: torchtitan defaults to selective)."""
    if plan.recompute is Recompute.MODULES and plan.recompute_modules == (OP_SAC,):
        return ['mode = "selective"  # per-op: torchtitan\'s policy by aten op',
                'selective_ac_option = "op"']
    if plan.recompute is Recompute.SELECTIVE and job.request.recompute_every:
        return ['mode = "selective"  # stated: torchtitan defaults to selective',
                f'selective_ac_option = "{job.request.recompute_every}"']
    # Megatron's selective (core attention) keeps nothing more under flash attention
    mode = "none" if plan.recompute is Recompute.SELECTIVE else plan.recompute.value
    return [f'mode = "{mode}"  # stated: torchtitan defaults to selective']
