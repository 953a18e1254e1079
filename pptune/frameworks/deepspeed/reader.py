"""DeepSpeed JSON config -> TrainingConfig.

DeepSpeed's batch identity (deepspeed/runtime/config.py,
``_batch_assertion``): ``train_batch_size = train_micro_batch_size_per_gpu
* gradient_accumulation_steps * dp``. A JSON config states at most these
three and the ZeRO stage; the pipeline depth lives in the model code
(``PipelineModule(num_stages=...)``) and the GPU count in the launcher, so
``--pp`` and ``--gpus`` usually supply them. ``"auto"`` (filled in by the
Hugging Face Trainer at run time) is noted and left unset.

DeepSpeed's PipelineEngine runs ``TrainSchedule``, a 1F1B schedule
(deepspeed/runtime/pipe/schedule.py), with gradient_accumulation_steps
micro-batches per step: schedule is always 1f1b.

Rules follow DeepSpeed 0.19.8 (``partition.py``; AutoEP's expert parallelism,
``"expert_parallel"``, in ``experts.py``; the ``pipeline`` section in ``pipeline.py``;
the keys nested in every section, refused, ignored or read, in ``keys.py``). Absent settings take DeepSpeed's defaults: the batch trio is completed as
``DeepSpeedConfig._set_batch_related_parameters`` does (train_batch_size
alone: GA 1, micro = train_batch_size // dp); the partition method is
PipelineModule's default "parameters"; activation checkpointing is off
(PipelineModule activation_checkpoint_interval 0); attention is whatever
the model code runs: sdpa (PyTorch's scaled_dot_product_attention, which
Hugging Face Transformers models run unless told otherwise since 4.36; torch 2.13 runs
cuDNN's kernel on Hopper and Blackwell, FlashAttention-2's elsewhere, ops.Attention)
unless the file states
``"pptune": {"attention": "eager"}``, a key DeepSpeed ignores (checked by
``make peers``) that ``recommend --emit deepspeed`` writes, with the model
preset (``"model"``), sequence length (``"seq_len"``) and GPU preset
(``"gpu"``) it planned for, and, without a pipeline, ``"recompute": "full"``
where the model code checkpoints every block.
"""

from __future__ import annotations

from typing import Any

from pptune.costmodel.ops import Attention
from pptune.costmodel.presets import GPUS
from pptune.frameworks.common.fields import (
    CAPS,
    MAX_DEVICES,
    Ctx,
    apply_flags,
    build,
    show,
    whole,
)
from pptune.frameworks.common.planned import held_note
from pptune.frameworks.deepspeed.engine import gradient_width, overlap
from pptune.frameworks.deepspeed.experts import SECTION as EXPERT_SECTION
from pptune.frameworks.deepspeed.experts import read_experts
from pptune.frameworks.deepspeed.keys import nested_keys, removed_keys, top_level_typos
from pptune.frameworks.deepspeed.offload import read_offload
from pptune.frameworks.deepspeed.pipeline import assumed_pp, partition, pipeline_size, recompute
from pptune.limits import MAX_SEQ_LEN
from pptune.schemas import TrainingConfig
from pptune.schemas.limits import HELD, Limits

DEEPSPEED_KEYS = frozenset(
    {
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "zero_optimization",
    }
)

_READ = DEEPSPEED_KEYS | {"pipeline", "pipeline_parallel_size", "bf16", "bfloat16", "fp16",
                          "data_types", "communication_data_type",
                          "tensor_parallel", "activation_checkpointing", "pptune",
                          EXPERT_SECTION,
                          "sequence_parallel_size"}
_SHARDING = {0: "none", 1: "zero1", 2: "zero2", 3: "zero3"}


def read_deepspeed(data: dict[str, Any], ctx: Ctx) -> TrainingConfig:
    global_batch = _count_or_auto(ctx, data, "train_batch_size")
    micro = _count_or_auto(ctx, data, "train_micro_batch_size_per_gpu")
    accum = _count_or_auto(ctx, data, "gradient_accumulation_steps")
    zero_stage = _zero_stage(ctx, data.get("zero_optimization"))
    fields: dict[str, Any] = {
        "global_batch": global_batch,
        "grad_accum_steps": accum,
        "zero_stage": zero_stage,
        "sharded_optimizer": zero_stage >= 1,
        "sharding": _SHARDING[zero_stage],
        "pp": pipeline_size(ctx, data),
        "partition_method": partition(ctx, data.get("pipeline")),
        "tp": _tensor_size(ctx, data.get("tensor_parallel")),
        "precision": _precision(ctx, data),
        **_pptune_section(ctx, data.get("pptune")),
        "schedule": "1f1b",
        "source_format": "deepspeed",
    }
    fields["micro_batch_size"] = micro
    apply_flags(ctx, fields, {"pp": "a pipeline size", "gpus": "a GPU count",
                              "tp": "a tensor-parallel size",
                              "micro_batch_size": "train_micro_batch_size_per_gpu",
                              "global_batch": "train_batch_size"})
    micro = fields["micro_batch_size"]
    if fields["pp"] is None:
        assumed_pp(ctx, data)
    read_experts(ctx, data, fields)
    # PipelineModule runs the model code's layers; DeepSpeed has no multi-token-prediction
    # module (nor has the Hugging Face DeepSeek-V3 code): a preset's MTP layers are not built
    fields["mtp_layers"] = 0
    section = data.get("zero_optimization")
    said = section.get("overlap_comm") if isinstance(section, dict) else None
    fields["overlap_grad_reduce"], fields["overlap_param_gather"] = overlap(
        said if isinstance(said, bool) else None, zero_stage, fields["pp"] or 1)
    fields.update(read_offload(ctx, section, zero_stage))
    types = data.get("data_types")
    width = gradient_width(fields["precision"], types.get("grad_accum_dtype")
                           if isinstance(types, dict) else None, zero_stage, fields["pp"] or 1)
    if width is not None:
        fields["main_grads_dtype"] = width
    fields["grad_reduce_dtype"] = _communication_type(ctx, data)
    fields.update(_sequence_parallel(ctx, data, fields["pp"] or 1))
    _batch_trio(ctx, fields, micro, data)
    fields["recompute"], fields["recompute_uniform_layers"] = recompute(ctx, data, fields["pp"])
    top_level_typos(ctx, data, _READ)
    removed_keys(ctx, data)
    ignored = sorted([str(k) for k in data if k not in _READ] + nested_keys(ctx, data))
    if ignored:
        ctx.semantics.ignored = ignored
        shown = ", ".join(ignored[:8]) + (f" and {len(ignored) - 8} more" if len(ignored) > 8 else "")
        ctx.note(f"ignored keys: {shown}")
    return build(ctx, fields)


def _communication_type(ctx: Ctx, data: dict[str, Any]) -> str | None:
    """communication_data_type: the dtype the engine casts gradient buckets to for their
    reduction (runtime/config.py get_communication_data_type: fp16, bf16 or fp32; None:
    the gradients' own)."""
    value = data.get("communication_data_type")
    if value is None:
        return None
    if not isinstance(value, str) or value.lower() not in ("fp16", "bf16", "fp32"):
        raise ctx.bad(f"communication_data_type is {str(value)[:40]!r}; expected \"fp16\", "
                      "\"bf16\" or \"fp32\"")
    return value.lower()


def _count_or_auto(ctx: Ctx, data: dict[str, Any], key: str) -> int | None:
    if key not in data:
        return None
    value = data[key]
    if value == "auto":
        ctx.note(f"{key} is \"auto\" (set by the Hugging Face Trainer at run time); left unset")
        return None
    return whole(ctx, key, value, fix=f"set {key} to a positive integer or \"auto\"")


def _zero_stage(ctx: Ctx, section: Any) -> int:
    if section is None:
        return 0
    if not isinstance(section, dict):
        raise ctx.bad(f"zero_optimization is {show(section)}; expected a mapping such as "
                      "{\"stage\": 1}")
    stage = section.get("stage", 0)
    if stage == "auto":
        ctx.note("zero_optimization.stage is \"auto\"; assumed 0 (no sharding)")
        return 0
    return whole(ctx, "zero_optimization.stage", stage, minimum=0, maximum=3,
                 fix="ZeRO stages are 0, 1, 2 or 3")


def _pptune_section(ctx: Ctx, section: Any) -> dict[str, Any]:
    """What ``"pptune"`` (a key DeepSpeed ignores) states: the attention kernel, and the
    model preset, sequence length, GPU preset and NVLink domain (``gpus_per_node``)
    ``recommend --emit deepspeed`` planned for and the sizes it held (``held``: Limits),
    which DeepSpeed's own keys do not hold."""
    if section is not None and not isinstance(section, dict):
        raise ctx.bad(f"pptune is {show(section)}; expected a mapping such as "
                      '{"attention": "flash", "model": "llama3-8b"}')
    fields: dict[str, Any] = {"attention": _attention(ctx, section)}
    if section is None:
        return fields
    model = section.get("model")
    if model is not None:
        if not isinstance(model, str) or not model.strip() or len(model) > 200:
            raise ctx.bad(f"pptune.model is {show(model)}; expected a model preset name "
                          "(pptune presets lists them)")
        fields["model"] = model.strip()
    hf = section.get("hf_config")
    if hf is not None:
        if not isinstance(hf, str) or not hf.strip() or len(hf) > 4096:
            raise ctx.bad(f"pptune.hf_config is {show(hf)}; expected the path of a Hugging "
                          "Face config.json")
        fields["hf_config"] = hf
    gpu = section.get("gpu")
    if gpu is not None:
        if not isinstance(gpu, str) or gpu not in GPUS:
            raise ctx.bad(f"pptune.gpu is {show(gpu)}; expected one of {', '.join(GPUS)}")
        fields["gpu"] = gpu
    if section.get("seq_len") is not None:
        fields["seq_len"] = whole(ctx, "pptune.seq_len", section["seq_len"],
                                  maximum=MAX_SEQ_LEN)
    if section.get("gpus_per_node") is not None:
        fields["gpus_per_node"] = whole(ctx, "pptune.gpus_per_node", section["gpus_per_node"],
                                        maximum=MAX_DEVICES)
    held = section.get("held")
    if held is not None:
        if not isinstance(held, list) or not held or any(n not in HELD for n in held):
            raise ctx.bad(f"pptune.held is {show(held)}; expected a list of the parallel "
                          f"sizes the best-plan comparison keeps, of {', '.join(HELD)}")
        fields["limits"] = Limits.model_validate({"held": [n for n in HELD if n in held]})
        ctx.note(held_note(fields["limits"].held, "pptune.held"))
    return fields


def _attention(ctx: Ctx, section: Any) -> str:
    """The model code's attention kernel: DeepSpeed's config does not say, so sdpa
    (the Hugging Face default, module docstring) unless ``"pptune": {"attention": ...}``
    states it."""
    stated = section.get("attention") if isinstance(section, dict) else None
    kinds = [a.value for a in Attention]
    if stated in kinds:
        return str(stated)
    if stated is not None:
        raise ctx.bad(f"pptune.attention is {show(stated)}; expected one of "
                      + ", ".join(f'"{k}"' for k in kinds))
    ctx.note("attention is the model code's choice; predicted as sdpa (PyTorch's "
             "scaled_dot_product_attention, Hugging Face Transformers' default since 4.36): "
             "state \"pptune\": {\"attention\": \"eager\"} when the model runs eager "
             "attention (attn_implementation=\"eager\", Megatron-DeepSpeed without "
             "--use-flash-attn)")
    return "sdpa"


def _tensor_size(ctx: Ctx, section: Any) -> int | None:
    """DeepSpeed AutoTP (``"tensor_parallel": {"autotp_size": N}``), when present."""
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ctx.bad(f"tensor_parallel is {show(section)}; expected a mapping such as "
                      "{\"autotp_size\": 2}")
    for key in ("autotp_size", "tp_size"):
        if key in section:
            return whole(ctx, f"tensor_parallel.{key}", section[key], cap=CAPS["tp"])
    return None


def _precision(ctx: Ctx, data: dict[str, Any]) -> str | None:
    enabled: dict[str, bool] = {}
    for key, name in (("bf16", "bf16"), ("bfloat16", "bf16"), ("fp16", "fp16")):
        section = data.get(key)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ctx.bad(f"{key} is {show(section)}; expected a mapping such as "
                          "{\"enabled\": true}")
        flag = section.get("enabled", False)
        if flag == "auto":
            ctx.note(f"{key}.enabled is \"auto\"; precision left unset")
            return None
        if not isinstance(flag, bool):
            raise ctx.bad(f"{key}.enabled is {show(flag)}; expected true, false or \"auto\"")
        enabled[name] = enabled.get(name, False) or flag
    on = [name for name, flag in enabled.items() if flag]
    if len(on) > 1:
        ctx.refuse("deepspeed-bf16-fp16",
                   "bf16 and fp16 are both enabled: DeepSpeed asserts 'bfloat16 and fp16 modes "
                   "cannot be simultaneously enabled' (deepspeed/runtime/config.py "
                   "DeepSpeedConfig._initialize_params); enable one")
        return None
    if on:
        return on[0]
    return "fp32"  # neither enabled nor stated: DeepSpeed trains in FP32 (its default)


def _sequence_parallel(ctx: Ctx, data: dict[str, Any], pp: int) -> dict[str, Any]:
    """DeepSpeed-Ulysses: ``sequence_parallel_size`` splits the sequence over ranks that
    exchange Q/K/V by all-to-all over the heads (pptune's cp with the a2a exchange).
    The JSON key divides the data-parallel world when no model-parallel unit builds the
    groups (deepspeed/runtime/config.py, DeepSpeedConfig); a PipelineModule's grid has
    no sequence dimension, so with a pipeline it is not read. DeepSpeed's JSON has no
    FP8 setting: FP8 comes from the model code (Transformer Engine), not this file."""
    if "sequence_parallel_size" not in data:
        return {}
    sp = whole(ctx, "sequence_parallel_size", data["sequence_parallel_size"], cap=CAPS["cp"])
    if sp == 1:
        return {}
    if pp > 1:
        ctx.unmodelled("deepspeed-unmodelled",
                       f"sequence_parallel_size {sp} with a {pp}-stage pipeline: DeepSpeed's "
                       "PipelineModule grid has no sequence-parallel dimension; not modelled, "
                       "predicted without it")
        return {}
    ctx.note(f"sequence_parallel_size {sp} read as DeepSpeed-Ulysses context parallelism "
             "(all-to-all over the heads, cp a2a)")
    return {"cp": sp, "cp_comm": "a2a"}


def _batch_trio(ctx: Ctx, fields: dict[str, Any], micro: int | None,
                data: dict[str, Any]) -> None:
    """Complete the batch trio as deepspeed/runtime/config.py
    ``_set_batch_related_parameters`` does (integer division, dp = the
    data-parallel world size), refusing what ``_batch_assertion`` refuses."""
    batch, accum = fields["global_batch"], fields["grad_accum_steps"]
    gpus = fields.get("gpus")
    model_parallel = (fields["pp"] or 1) * (fields["tp"] or 1) * (fields.get("cp") or 1)
    dp = gpus // model_parallel if gpus is not None and gpus % model_parallel == 0 else None
    trio = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    if any(data.get(k) == "auto" for k in trio):  # the HF Trainer fills these at run time
        if micro is not None and (data.get("gradient_accumulation_steps") == "auto"
                                  or data.get("train_batch_size") == "auto"):
            fields["micro_batch_size"] = micro  # GA and the batch are the Trainer's arguments
            return
    if micro is None and any(data.get(k) == "auto" for k in trio) and (dp is None
                                                                        or batch is None):
        raise ctx.bad("train_micro_batch_size_per_gpu is 'auto' (filled in by the Hugging "
                      "Face Trainer at run time) and cannot be derived without --gpus and "
                      "train_batch_size: pass --micro-batch-size (and --gpus), or set it to "
                      "a number")
    if dp is None and micro is None:
        ctx.note("dp unknown (pass --gpus): DeepSpeed's batch derivation assumed with dp 1")
    world = dp or 1
    if micro is None and batch is not None:
        accum = accum or 1
        derived = batch // world // accum
        how = ("train_batch_size // dp // gradient_accumulation_steps"
               if "gradient_accumulation_steps" in data else "train_batch_size // dp (GA 1)")
        if derived < 1:
            ctx.refuse("deepspeed-batch",
                       f"train_batch_size {batch} gives a micro-batch of {derived} ({how}); "
                       "DeepSpeed asserts 'Micro batch size per gpu: 0 has to be greater than "
                       "0' (deepspeed/runtime/config.py _batch_assertion)")
            derived = 1
        ctx.note(f"micro-batch size {derived} derived as DeepSpeed does: {how}")
        micro = derived
    elif micro is not None and batch is not None and accum is None and dp is None:
        pass  # GA = train_batch_size // micro // dp: check-config derives it at its dp
    elif micro is not None and batch is not None and accum is None:
        accum = batch // micro // world
        ctx.note(f"gradient_accumulation_steps {accum} derived as DeepSpeed does: "
                 "train_batch_size // micro // dp")
        if accum < 1:
            ctx.refuse("deepspeed-batch",
                       f"train_batch_size {batch} < micro-batch {micro} x dp {world}: DeepSpeed "
                       "asserts 'Gradient accumulation steps: 0 has to be greater than 0' "
                       "(deepspeed/runtime/config.py _batch_assertion)")
            accum = 1
    elif micro is not None and batch is None:
        accum = accum or 1
        if dp is not None:
            batch = micro * accum * dp
        ctx.note("train_batch_size not stated: DeepSpeed sets it to micro x GA x dp")
    elif micro is None:
        ctx.refuse("deepspeed-batch",
                   "neither train_batch_size nor train_micro_batch_size_per_gpu is set: DeepSpeed "
                   "asserts 'Either train_batch_size or train_micro_batch_size_per_gpu needs to "
                   "be provided' (deepspeed/runtime/config.py _set_batch_related_parameters)")
        micro, accum = 1, accum or 1
    fields.update(micro_batch_size=micro, grad_accum_steps=accum, global_batch=batch)
