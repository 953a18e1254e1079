"""``ds_config.json`` and ``ds_partition.txt``: a DeepSpeed config and its pipeline.

The JSON states the batch trio, bf16 (fp16 for an FP16 plan), the ZeRO stage, the
pipeline (stages, partition method, full recomputation as activation_checkpoint_interval 1),
AutoTP, AutoEP (``expert_parallel``), and the attention kernel under ``"pptune"`` (a key DeepSpeed
ignores) for check-config; the text file says how to build the
PipelineModule, the stage boundaries DeepSpeed's partition gives, and the
launch on exactly the plan's GPUs.
"""

from __future__ import annotations

from pptune.costmodel.models import MODELS
from pptune.costmodel.partition import stage_bounds
from pptune.costmodel.presets import GPUS
from pptune.costmodel.search import Recompute
from pptune.files import dumps_json
from pptune.frameworks.common.adapter import Stated
from pptune.frameworks.common.compression import sixteen_bit
from pptune.frameworks.common.writing import header, node_size, plan_launch
from pptune.frameworks.deepspeed.engine import (
    ZERO_STAGE,
    gradient_width,
    sixteen_bit_mode,
    stated_overlap_comm,
)
from pptune.frameworks.deepspeed.partition import DEEPSPEED

CONFIG, PARTITION = "ds_config.json", "ds_partition.txt"


def write(stated: Stated, method: str) -> dict[str, str]:
    """Both files; ``express`` never hands it a selective-recompute plan."""
    job, plan = stated.job, stated.plan
    ds = {
        "train_batch_size": job.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.num_microbatches,
        # its 16-bit mode (fp16: DeepSpeed's default dynamic loss scaling)
        sixteen_bit_mode(plan.precision.value): {"enabled": True},
        "zero_optimization": {"stage": ZERO_STAGE.get(plan.sharding, 3)},
    }
    mode = sixteen_bit_mode(plan.precision.value)
    if sixteen_bit(job.grad_compression) and gradient_width(
            mode, None, ZERO_STAGE.get(plan.sharding, 3), plan.pp) is None:
        # FP32 gradients (BF16 pipeline at ZeRO-0): --grad-compression, reduced in 16 bits
        ds["communication_data_type"] = mode
    if stated_overlap_comm(stated.job.request.overlap_grad_reduce, plan.sharding, plan.pp):
        ds["zero_optimization"]["overlap_comm"] = True  # type: ignore[index]
    # Without pipeline parallelism the model is not a PipelineModule: no stages (the
    # PipelineEngine refuses ZeRO-2/3 even on one stage, deepspeed/runtime/pipe/engine.py)
    pipeline: dict[str, object] = {"stages": plan.pp, "partition": method} if plan.pp > 1 else {}
    # only the PipelineEngine reads activation_checkpoint_interval (deepspeed/runtime/pipe/
    # engine.py); a model given to deepspeed.initialize whole checkpoints in its own code
    in_code = plan.recompute is Recompute.FULL and plan.pp == 1
    if plan.recompute is Recompute.FULL and not in_code:
        pipeline["activation_checkpoint_interval"] = 1
    if pipeline:
        ds["pipeline"] = pipeline
    if plan.tp > 1:  # DeepSpeed AutoTP
        ds["tensor_parallel"] = {"autotp_size": plan.tp}
    if plan.ep > 1:  # DeepSpeed AutoEP (experts.py)
        ds["expert_parallel"] = {"enabled": True, "autoep_size": plan.ep,
                                 "expert_tensor_parallel_size": plan.etp}
    # for pptune check-config: the model code's kernel, and the preset, sequence length,
    # GPU and NVLink domain the plan was made for, the sizes the command held (DeepSpeed's
    # keys state none of them)
    ds["pptune"] = {**({"attention": job.attention} if job.attention else {}),
                    **({"model": job.model} if str(job.model) in MODELS else
                       {"hf_config": job.hf_config} if job.hf_config is not None else {}),
                    "seq_len": job.table.seq_len,
                    **({"recompute": "full"} if in_code else {}),
                    **({"gpu": job.device} if str(job.device) in GPUS else {}),
                    "gpus_per_node": node_size(plan, job),
                    **({"held": list(job.held)} if job.held else {})}
    bounds = [0] + [e for _s, e in stage_bounds(plan.stage_layers)]
    names = job.layer_names
    nodes, per_node = plan_launch(plan, job)
    side = [
        *header(plan, job, "#"),
        (f"# PipelineModule(layers=..., num_stages={plan.pp}, partition_method=\"{method}\")"
         if plan.pp > 1 else "# no pipeline: deepspeed.initialize(model=...) on the whole model"),
        *(["# recomputation of every block is the model code's: Hugging Face "
           "model.gradient_checkpointing_enable(), else deepspeed.checkpointing.checkpoint "
           "around each block (DeepSpeed's config turns it on for a PipelineModule only)"]
          if in_code else []),
        f"# DeepSpeed {DEEPSPEED.default}'s partition_{'uniform' if method == 'uniform' else 'balanced'}"
        f" over the {len(names)} layers (embedding, blocks, head) gives the boundaries {bounds}",
    ] + [
        f"#   stage {i}: {names[s]} .. {names[e - 1]} ({e - s} layers)"
        for i, (s, e) in enumerate(stage_bounds(plan.stage_layers))
    ] + [
        *([f"# tensor_parallel: AutoTP shards a Hugging Face model whose layers it has a "
           f"policy for over {plan.tp} ranks; another model needs an injection policy "
           f"(deepspeed/module_inject/auto_tp.py raises 'Not able to determine model policy "
           f"automatically')"] if plan.tp > 1 else []),
        *([f"# expert_parallel: AutoEP places the experts of a Hugging Face MoE model it has a "
           f"preset for over {plan.ep} ranks; deepspeed.moe.layer.MoE layers take "
           f"ep_size={plan.ep} in the model code instead"] if plan.ep > 1 else []),
        f"# launch: deepspeed --num_nodes {nodes} --num_gpus {per_node} train.py "
        "--deepspeed_config ds_config.json",
        "",
    ]
    return {CONFIG: dumps_json(ds, indent=2) + "\n", PARTITION: "\n".join(side)}
