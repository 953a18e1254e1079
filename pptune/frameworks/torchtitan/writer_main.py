"""``torchtitan_config.py``: the plan as torchtitan main's config function (main after
0.2.2, pptune's "0.3.0": ``--framework-version torchtitan=0.3.0``).

Main reads no TOML job file: a run is a Python function returning ``Trainer.Config``
(torchtitan/config/README.md), named by ``--module`` and ``--config``
(config/manager.py). The file defines one, ``pptune_plan``: it starts from main's own
config function of the model where one matches the preset's flavor (its data,
optimizer, checkpoints: torchtitan/models/<name>/config_registry.py at b5bcd76), else
its family's with the model replaced, and ``dataclasses.replace``-s what the plan
decides, so ``Trainer.Config.__post_init__`` checks the result:

- the model: ``model_registry(flavor, attn_backend="flex", converters=[...])``
  (main_plan.py: flex is what every language model and cp runs on main), its loss
  sized by ``decoder_vocab_size`` as main's functions size it;
- the token batch (torchtitan/trainer.py ``Trainer.__init__``; dump_batch.py reads it
  back): ``num_tokens_per_microbatch_per_dp_rank`` = micro-batch x seq,
  ``max_context_length`` = seq, ``parallelism.num_pp_microbatches`` = the pipeline's
  micro-batches (pp > 1 only: main ignores it without a pipeline),
  ``num_tokens_per_train_step`` = global batch x seq, so the runs of the schedule a
  step (gradient accumulation) are what the plan runs;
- a fresh ``ParallelismConfig``: the dp replicate / shard, tp, cp, ep and pp degrees,
  the schedule, and the split as 0.2.2's writer states it (placement.py's options, else
  each stage's modules with main's head ``lm_head``);
- ``activation_checkpoint``: ``SelectiveAC.Config()`` (per-op), ``FullAC.Config()`` or
  None; ``compile``: ``CompileConfig`` as the plan was priced (cp_fp8.compiled);
- ``disable_cuda_graphs`` where main's CUDA graphs refuse the plan (a pipeline; expert
  parallelism with a dispatcher that syncs with the host: trainer.py
  ``_validate_cuda_graphs``).

What main's configs cannot state is refused before this is written (main_plan.py).
"""

from __future__ import annotations

import re

from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import Precision
from pptune.costmodel.op_sac import OP_SAC
from pptune.costmodel.partition import mtp_count
from pptune.costmodel.search import Plan, Recompute, Sharding
from pptune.files import dumps_json
from pptune.frameworks.common.adapter import Job, Stated
from pptune.frameworks.common.writing import header, plan_launch
from pptune.frameworks.torchtitan.cp_fp8 import compiled, uncompiled
from pptune.frameworks.torchtitan.fqns import head
from pptune.frameworks.torchtitan.main_plan import MAIN_ATTENTION
from pptune.frameworks.torchtitan.models import CUSTOM
from pptune.frameworks.torchtitan.placement import stage_options
from pptune.frameworks.torchtitan.reader import flavor_of
from pptune.frameworks.torchtitan.writer import SCHEDULES, stage_modules
from pptune.options import CostOptions

FILE = "torchtitan_config.py"
FUNCTION = "pptune_plan"
# main's config function of a (model, flavor) (torchtitan/models/<name>/config_registry.py
# at b5bcd76); another flavor main registers starts from its family's (FAMILY)
CONFIGS = {("llama3", "8B"): "llama3_8b", ("llama3", "70B"): "llama3_70b",
           ("llama3", "405B"): "llama3_405b", ("qwen3", "30B-A3B"): "qwen3_30b_a3b",
           ("deepseek_v3", "671B"): "deepseek_v3_671b", ("gpt_oss", "120b"): "gpt_oss_120b"}
FAMILY = {"llama3": "llama3_8b", "qwen3": "qwen3_30b_a3b", "deepseek_v3": "deepseek_v3_671b",
          "gpt_oss": "gpt_oss_120b"}
# the flavors main's model_registry builds (the config dicts of torchtitan/models/<name>/
# __init__.py at b5bcd76; main has no llama4)
MAIN_FLAVORS = {
    "llama3": ("debugmodel", "1B", "3B", "8B", "70B", "405B"),
    "qwen3": ("debugmodel", "0.6B", "1.7B", "4B", "8B", "14B", "32B", "debugmodel_moe",
              "30B-A3B", "235B-A22B"),
    "deepseek_v3": ("debugmodel", "16B", "236B", "671B"),
    "gpt_oss": ("debugmodel", "20b", "120b")}
COMM_BACKEND = ("qwen3", "deepseek_v3", "gpt_oss")  # model_registry takes moe_comm_backend
INDENT = "    "


def write(stated: Stated) -> dict[str, str]:
    job, plan = stated.job, stated.plan
    flavor = flavor_of(job.model, job.shape)
    known = flavor is not None and flavor[1] in MAIN_FLAVORS.get(flavor[0], ())
    name, kind = flavor if flavor is not None and known else (str(job.model), CUSTOM)
    seq = job.shape.seq_len if job.shape else job.table.seq_len
    parts = compiled(plan, job.cost_options)
    converters, imports = _converters(job, plan, "model" in parts)
    nodes, per_node = plan_launch(plan, job)
    module = re.sub(r"\W", "_", name) + "_spec"
    if known:
        base = CONFIGS.get((name, kind), FAMILY[name])
        imports += [f"from torchtitan.models.{name} import model_registry",
                    f"from torchtitan.models.{name}.config_registry import {base}"]
        start = f"{base}()  # main's own config of {'the' if (name, kind) in CONFIGS else 'a'}"\
            f" {name} model: data, optimizer, checkpoints; the plan replaces the rest"
    else:
        imports += [f"from {module} import model_registry  # yours: a ModelSpec named "
                    f"\"{name}\" of the shape priced"]
        start = "Trainer.Config()  # torchtitan main has no such model: yours, below"
    registry = [f'"{kind}",', f'attn_backend="{MAIN_ATTENTION}",  # main\'s language models: '
                'flex, flex_flash or varlen (no sdpa); priced as flash attention']
    c = job.cost_options or CostOptions()
    if plan.ep > 1 and c.dispatcher is Dispatcher.DEEPEP and name in COMM_BACKEND:
        registry.append('moe_comm_backend="deepep",')
    if converters:
        registry += ["converters=[", *(INDENT + line for line in converters), "],"]
    ac, ac_import = _checkpointing(plan)
    lines = [
        f'"""torchtitan main (after 0.2.2) config of pptune\'s plan: {FUNCTION}() returns its '
        "Trainer.Config.",
        "",
        f"launch: PYTHONPATH=. torchrun --nnodes {nodes} --nproc_per_node {per_node} -m "
        f"torchtitan.train --module {FILE[:-3]} --config {FUNCTION}",
        "check: python -c \"import json, torchtitan_config as c; "
        f"print(json.dumps(c.{FUNCTION}().to_dict()))\" > plan.json",
        f"       pptune check-config plan.json --gpus {plan.world}"
        + (f" --gpu {job.device}" if job.device else "")
        + (f" --precision {plan.precision.value}" if plan.precision is not Precision.BF16
           else "") + "  (a dump states neither; nor its converters)",
        '"""',
        *[line for line in header(plan, job, "#") if "check-config prices" not in line],
        "",
        "from dataclasses import replace",
        "",
        *sorted({*imports, *ac_import, "from torchtitan.config import CompileConfig, "
                 "ParallelismConfig", "from torchtitan.trainer import Trainer",
                 "from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss",
                 "from torchtitan.models.common.config_utils import decoder_vocab_size"}),
        "",
        "",
        f"def {FUNCTION}() -> Trainer.Config:",
        f"{INDENT}base = {start}",
        f"{INDENT}model_spec = model_registry(",
        *(f"{INDENT * 2}{arg}" for arg in registry),
        f"{INDENT})",
        f"{INDENT}return replace(",
        f"{INDENT * 2}base,",
        f"{INDENT * 2}model_spec=model_spec,",
        f"{INDENT * 2}loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(",
        f"{INDENT * 3}global_vocab_size=decoder_vocab_size(model_spec))),",
        f"{INDENT * 2}training=replace(",
        f"{INDENT * 3}base.training,",
        *(f"{INDENT * 3}{line}" for line in training_lines(job, plan, seq)),
        f"{INDENT * 2}),",
        f"{INDENT * 2}parallelism=ParallelismConfig(",
        *(f"{INDENT * 3}{line}" for line in parallelism_lines(job, plan, known)),
        f"{INDENT * 2}),",
        f"{INDENT * 2}activation_checkpoint={ac}",
        f"{INDENT * 2}compile={_compile(plan, parts)},",
        f"{INDENT})",
        "",
    ]
    return {FILE: "\n".join(lines)}


def tokens(job: Job, plan: Plan, seq: int) -> dict[str, int]:
    """Main's token batch of the plan (module docstring; dump_batch.py is its inverse)."""
    out = {"num_tokens_per_microbatch_per_dp_rank": plan.micro_batch_size * seq,
           "max_context_length": seq, "num_tokens_per_train_step": job.global_batch * seq}
    if plan.pp > 1:
        out["num_pp_microbatches"] = plan.num_microbatches
    return out


def training_lines(job: Job, plan: Plan, seq: int) -> list[str]:
    said = tokens(job, plan, seq)
    runs = job.global_batch // (plan.micro_batch_size * plan.dp
                                * (plan.num_microbatches if plan.pp > 1 else 1))
    lines = [f"num_tokens_per_microbatch_per_dp_rank={said['num_tokens_per_microbatch_per_dp_rank']},"
             f"  # micro-batch {plan.micro_batch_size} x seq {seq}",
             f"max_context_length={seq},",
             f"num_tokens_per_train_step={said['num_tokens_per_train_step']},  # global batch "
             f"{job.global_batch} x seq {seq}: {runs} run{'s' * (runs > 1)} of "
             + ("the pipeline" if plan.pp > 1 else "a micro-batch") + " a step"]
    why = ("a pipeline" if plan.pp > 1 else
           "expert parallelism with a dispatcher that syncs with the host" if plan.ep > 1
           else None)
    if why:
        lines.append(f"disable_cuda_graphs=True,  # main's CUDA graphs refuse {why} "
                     "(trainer.py _validate_cuda_graphs)")
    return lines


def parallelism_lines(job: Job, plan: Plan, known: bool) -> list[str]:
    """The ParallelismConfig arguments of the plan (0.2.2's [parallelism], main's names)."""
    fsdp = plan.sharding is Sharding.FSDP
    lines = [f"data_parallel_replicate_degree={1 if fsdp else plan.dp},",
             f"data_parallel_shard_degree={plan.dp if fsdp else 1},",
             f"tensor_parallel_degree={plan.tp},"]
    if plan.cp > 1:
        lines.append(f"context_parallel_degree={plan.cp},  # K/V all-gathered: main states no "
                     "rotate method")
    if plan.ep > 1:
        lines.append(f"expert_parallel_degree={plan.ep},  # experts not split by tp: main has "
                     "no expert_tensor_parallel_degree")
    lines.append(f"pipeline_parallel_degree={plan.pp},")
    if plan.pp == 1:  # no pipeline: main reads no schedule, micro-batch count or split
        return lines
    lines += [f'pipeline_parallel_schedule="{SCHEDULES[plan.schedule]}",',
              f"num_pp_microbatches={plan.num_microbatches},"]
    # the options need the model's layer count, which main knows for its own flavors only
    built = stage_options(plan, mtp_count(job.layer_names)) if known else None
    if built is not None:
        return lines + [line.replace(" = ", "=") + "," for line in built]
    parts = stage_modules(job, plan, head(job.versions))
    return [*lines, "module_fqns_per_model_part=[",
            *(f"{INDENT}{dumps_json(part)}," for part in parts), "],"]


def _checkpointing(plan: Plan) -> tuple[str, list[str]]:
    """Main's activation_checkpoint as the plan recomputes (writer.py's for 0.2.2; a
    layer-wise selective one is refused: main_plan.py)."""
    imports = ["from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC"]
    if plan.recompute is Recompute.MODULES and plan.recompute_modules == (OP_SAC,):
        return "SelectiveAC.Config(),  # per-op: main's policy by aten op", imports
    if plan.recompute is Recompute.FULL:
        return "FullAC.Config(),", imports
    # Megatron's selective (core attention) keeps nothing more under flash attention
    return "None,  # no recomputation (main's default is SelectiveAC)", []


def _compile(plan: Plan, parts: tuple[str, ...]) -> str:
    if not parts:
        why = uncompiled(plan)
        return "CompileConfig(enable=False)" + (f"  # {why}" if why else "")
    return f"CompileConfig(enable=True, components={dumps_json(list(parts))})"


def _converters(job: Job, plan: Plan, model_compiled: bool) -> tuple[list[str], list[str]]:
    """(main's converter configs, their imports) for the plan's FP8 or MXFP8 GEMMs
    (torchtitan/components/quantization at b5bcd76): the linears' converter, the LM head
    kept BF16 as priced, and the routed experts' grouped GEMMs where they were priced
    low too (converters.fp8_lines for 0.2.2)."""
    if plan.precision not in (Precision.FP8, Precision.MXFP8):
        return [], []
    c = job.cost_options or CostOptions()
    moe = job.shape is not None and job.shape.moe
    experts = moe and (c.expert_precision or plan.precision) is plan.precision
    flag = f"model_compile_enabled={model_compiled}"
    if plan.precision is Precision.MXFP8:
        names = ["MXFP8LinearConverter", *(["MXFP8GroupedExpertsConverter"] * experts)]
        said = [f'MXFP8LinearConverter.Config(fqns=["layers"], {flag}),  # the blocks\' '
                "linears: the LM head stays BF16, as priced"]
    else:
        names = ["Float8LinearConverter", *(["Float8GroupedExpertsConverter"] * experts)]
        said = [f'Float8LinearConverter.Config(filter_fqns=["lm_head"], {flag}),  # rowwise, '
                "main's default recipe; the LM head stays BF16, as priced"]
    if experts:
        said.append(f"{names[1]}.Config({flag}),  # the routed experts' grouped GEMMs, as "
                    "priced")
    return said, [f"from torchtitan.components.quantization import {', '.join(names)}"]
