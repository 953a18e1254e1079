"""torchtitan TOML job config -> TrainingConfig.

Key names and defaults follow torchtitan's ``torchtitan/config/job_config.py``
(``[parallelism]``, ``[training]``, ``[model]``; older releases kept the
pipeline keys under ``[experimental]`` and called local_batch_size
``batch_size``).

torchtitan's batch semantics (train.py): local_batch_size is per
data-parallel rank; global_batch_size defaults to local_batch_size * dp and
otherwise must be a multiple of it, the quotient being gradient-accumulation
steps, each of which runs the whole pipeline schedule once over
local_batch_size / pipeline_parallel_microbatch_size micro-batches. So:
grad_accum_steps (micro-batches per optimizer step) = that count times the
runs, and pipeline_flushes = the runs.

Stages per rank (torchtitan/distributed/pipeline_parallel.py): single-stage
schedules (1F1B, GPipe) hold 1; looped ones 2 unless
pipeline_parallel_layers_per_stage is set, in which case the stage count is
ceil((layers + first_stage_less_layers + last_stage_less_layers) /
layers_per_stage) over the pp ranks (both "less layers" default to 1).

Rules and defaults follow torchtitan 0.2.2, the last release that reads
TOML job files (``--framework-version torchtitan=0.3.0`` checks module names
against torchtitan's main branch after 0.2.2, unreleased, whose LM head is
``lm_head``), running on
torch 2.13's schedules. Absent settings take torchtitan's defaults from its
own config definitions (torchtitan/config/job_config.py):
``[activation_checkpoint] mode = "selective"``, ``selective_ac_option =
"2"`` (every second block checkpointed); ``data_parallel_shard_degree = -1``
(FSDP over the remaining ranks); ``fsdp_reshard_after_forward = "default"``
(reshard only without pipeline parallelism); attention through SDPA (flash).
What torchtitan or torch refuses is an error finding, not an unreadable file.
"""

from __future__ import annotations

from typing import Any

from pptune.costmodel.models import ModelShape, preset_of
from pptune.costmodel.op_sac import OP_SAC
from pptune.costmodel.presets import MODELS
from pptune.frameworks.common.fields import (
    CAPS,
    MAX_DEVICES,
    Ctx,
    apply_flags,
    build,
    show,
)
from pptune.frameworks.torchtitan.attention import attn_type, priced_kernel, read_attention
from pptune.frameworks.torchtitan.converters import read_converters
from pptune.frameworks.torchtitan.cp_fp8 import TABLES as CP_FP8_TABLES
from pptune.frameworks.torchtitan.cp_fp8 import read_cp_fp8
from pptune.frameworks.torchtitan.dump import MainRun
from pptune.frameworks.torchtitan.dump_batch import main_attention, main_batch
from pptune.frameworks.torchtitan.dump_model import (
    attention_kind,
    converters_unseen,
    dump_dispatcher,
    dump_precision,
    main_model,
)
from pptune.frameworks.torchtitan.experts import read_dualpipev_overlap, read_experts
from pptune.frameworks.torchtitan.facts import facts
from pptune.frameworks.torchtitan.fqns import TORCHTITAN, reads_toml
from pptune.frameworks.torchtitan.keys import check_keys
from pptune.frameworks.torchtitan.models import CUSTOM, async_tp_rules, custom_preset, read_model
from pptune.frameworks.torchtitan.stages import default_split, schedule, split_backward_name
from pptune.frameworks.torchtitan.table import Table, compiles
from pptune.frameworks.torchtitan.widths import state_widths
from pptune.frameworks.torchtitan.world import FLAG_MEANS, data_parallel, is_rest, launched_gpus
from pptune.schemas import TrainingConfig

# pptune preset -> torchtitan's ([model] name, flavor) (torchtitan 0.2.2 torchtitan/models:
# llama3, qwen3, deepseek_v3, gpt_oss, llama4 and their flavors of these shapes)
# torchtitan's llama3 405B (dim 16384, 126 layers, 128 / 8 heads, FFN 1.2 x 8/3 x dim rounded
# up to 4096: 53248) is Llama 3.1 405B's shape
FLAVORS = {"llama3-8b": ("llama3", "8B"), "llama3-70b": ("llama3", "70B"),
           "llama3.1-405b": ("llama3", "405B"),
           "qwen3-30b-a3b": ("qwen3", "30B-A3B"), "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
           "deepseek-v3": ("deepseek_v3", "671B"), "gpt-oss-120b": ("gpt_oss", "120b"),
           "llama4-scout": ("llama4", "17bx16e")}  # its SDPA flavor (17bx16e_irope: flex)
# torchtitan's deepseek_v3 has no multi-token-prediction module (models/deepseek_v3/model)
NO_MTP = {"deepseek-v3"}
# TrainSpecs with pipelining_fn=None in torchtitan 0.2.2 (models/qwen3, gpt_oss, flux); on
# main only flux's ModelSpec has none (torchtitan/models/*/__init__.py at b5bcd76)
NO_PIPELINE = ("qwen3", "gpt_oss", "flux")
MAIN_NO_PIPELINE = ("flux",)
# (name, flavor) as the reader matches them (case-insensitively) -> pptune preset
PRESETS = {(name.lower(), flavor.lower()): preset for preset, (name, flavor) in FLAVORS.items()}


def flavor_of(model: str | None, shape: ModelShape | None = None) -> tuple[str, str] | None:
    """torchtitan's ([model] name, flavor) of a preset, or of the preset whose
    architecture ``shape`` is (a Hugging Face config of that model); None for others."""
    preset = str(model) if str(model) in FLAVORS else (
        preset_of(shape) if shape is not None else None)
    return FLAVORS.get(preset) if preset is not None else None


MAIN_BUDGET = ("MemoryBudgetAC without the model compiled: torchtitan raises 'Memory budget "
               "activation checkpointing requires the model to be compiled: set "
               "--compile.enable and include 'model' in --compile.components.' "
               "(torchtitan/trainer.py Trainer.Config.__post_init__); compile the model or "
               "choose another policy")
_READ_TABLES = {"parallelism", "training", "model", "experimental", "activation_checkpoint",
                "compile", *CP_FP8_TABLES}


def read_torchtitan(data: dict[str, Any], ctx: Ctx, main: MainRun | None = None
                    ) -> TrainingConfig:
    """A job file's tables, or those dump.py makes of a main dump (``main``: what only
    main states, read by its rules: the token batch, the model, the attention)."""
    if main is None and not reads_toml(ctx.semantics.versions):
        ctx.unmodelled("torchtitan-toml",
                       f"torchtitan {ctx.semantics.versions.of(TORCHTITAN)} does not read TOML job "
                       "files (torchtitan's main branch replaced them by Python config "
                       "functions after 0.2.2, PR #2386; no release has that yet); checked "
                       "with main's module names")
    if main is None:
        check_keys(ctx, data)
    par = _parallelism(ctx, data)
    train = Table(ctx, "training", data)
    model = Table(ctx, "model", data)
    fields: dict[str, Any] = {  # the parallel sizes: over pptune's caps said as such
        "pp": par.count("pipeline_parallel_degree", None, cap=CAPS["pp"]),
        "tp": par.count("tensor_parallel_degree", None, cap=CAPS["tp"]),
        "cp": par.count("context_parallel_degree", None, cap=CAPS["cp"]),
        "source_format": "torchtitan",
    }
    launched_gpus(ctx, fields)  # a launch comment's count, where --gpus gives none
    apply_flags(ctx, fields, {"pp": "parallelism.pipeline_parallel_degree",
                              "tp": "parallelism.tensor_parallel_degree",
                              "gpus": FLAG_MEANS})
    pp = fields["pp"] or 1
    name, flavor = model.text("name", "llama3"), model.text("flavor", "debugmodel")
    if main is None:
        preset, blocks = _preset(ctx, model), None
        sizes: dict[str, Any] = {}
        # torch's SDPA; flex and varlen priced as FlashAttention-2 (attention.py)
        fields["attention"] = priced_kernel(attn_type(name, flavor))
        read_model(ctx, data, name, flavor)
        async_tp_rules(ctx, data, par, name, fields["tp"] or 1)
        read_attention(ctx, name, flavor, fields["cp"] or 1)
    else:
        preset, sizes, blocks = main_model(ctx, name, flavor, main.model, PRESETS)
        kind = attention_kind(ctx, main.model)
        fields["attention"] = priced_kernel(kind)
        main_attention(ctx, main, kind, fields["cp"] or 1, pp)
        converters_unseen(ctx, main.model)
    if pp > 1 and name in (NO_PIPELINE if main is None else MAIN_NO_PIPELINE):
        ctx.refuse("torchtitan-no-pipelining",
                   f"pipeline_parallel_degree {pp} with model {name}: torchtitan raises "
                   f"'Pipeline Parallel is enabled but {name} does not support pipelining' "
                   f"({'train.py' if main is None else 'trainer.py'}; its "
                   f"{'TrainSpec' if main is None else 'ModelSpec'} has no pipelining_fn); "
                   "use pp 1 or another model")
    fields["model"] = preset
    fields.update(sizes)
    # torchtitan's tensor-parallel plan shards the norms and dropout along the sequence
    # (torch.distributed.tensor.parallel SequenceParallel): sequence parallelism with tp,
    # unless main's enable_sequence_parallel is false
    fields["sequence_parallel"] = (fields["tp"] or 1) > 1 and (
        main is None or main.sequence_parallel)
    fields["dp"], sharded = data_parallel(ctx, par, fields)
    fields["sharding"] = "fsdp" if sharded else "none"
    replicate = par.count("data_parallel_replicate_degree", 1, maximum=MAX_DEVICES) or 1
    shard = fields["dp"] // replicate if fields["dp"] is not None else None
    if sharded:
        fields["sharded_optimizer"] = True
        fields["zero_stage"], fields["fsdp_reshard_after_forward"] = _fsdp_stage(
            ctx, par, pp, replicate, shard)
    if sharded and replicate > 1:  # HSDP: the state shards within a replica only
        fields["dp_replicate"] = replicate
    read_experts(ctx, par, fields, shard, bool(preset and MODELS[preset].moe), name)
    if main is None and (preset in NO_MTP or flavor == CUSTOM):  # torchtitan builds none
        fields["mtp_layers"] = 0  # (Adapter.builds_mtp): a custom flavor's model too
    layers = blocks or (MODELS[preset].num_blocks if preset else None)
    fields.update(schedule(ctx, par, pp, layers))
    default_split(ctx, par, fields, layers)
    if main is not None:
        fields.update(main_batch(ctx, main, pp, fields["dp"], fields["tp"] or 1,
                                 fields["cp"] or 1))
    else:
        fields.update(_batch(ctx, par, train, pp, fields["dp"]))
        seq = train.count("seq_len", None)
        if seq is None:
            seq = 2048
            ctx.note("training.seq_len not given: torchtitan's default 2048")
        fields["seq_len"] = seq
    fields["precision"] = {"bfloat16": "bf16", "float32": "fp32"}.get(
        train.text("mixed_precision_param", "") or "")
    fields.update(state_widths(ctx, train, sharded))
    read_cp_fp8(ctx, data, par, fields, seq_rule=main is None)  # main's: dump_batch.py
    shape = MODELS[preset] if preset else None
    read_converters(ctx, data, fields, moe_layers=None if shape is None else [
        i for i in range(shape.num_blocks) if shape.moe_block(i)])
    if main is not None:
        dump_precision(ctx, fields, bool(shape.moe if shape else fields.get("num_experts")))
        fields["moe_dispatcher"] = dump_dispatcher(  # with main's refusal at ep 1
            ctx, main.model, fields.get("ep") or 1) or fields.get("moe_dispatcher")
    split_name = split_backward_name(par, fields["schedule"])
    if (pp or 1) > 1 and split_name and compiles(ctx, data, "model"):
        ctx.refuse("torchtitan-compile-split-backward",
                   f"{split_name} with [compile] on the model: torch's zero-bubble "
                   "and DualPipeV schedules raise 'not supported with stage modules that have "
                   "used torch.compile' (torch/distributed/pipelining/schedules.py "
                   "_check_torch_compile_compatibility); compile the loss only "
                   "(components = [\"loss\"]) or use 1F1B or Interleaved1F1B")
    fields["cross_entropy"] = _loss(ctx, data, train)
    fields["swiglu"] = _swiglu(ctx, data, train)
    fields["recompute"], fields["recompute_every"] = _recompute(
        ctx, Table(ctx, "activation_checkpoint", data))
    if main is None:  # main dropped the overlap key and its refusal (dual_pipe_v.py)
        read_dualpipev_overlap(ctx, par, fields, Table(ctx, "activation_checkpoint", data))
    if Table(ctx, "activation_checkpoint", data).text("mode", None) == "memory_budget":
        fields["memory_budget_ac"] = True
        if not compiles(ctx, data, "model"):
            ctx.refuse("torchtitan-ac-memory-budget", MAIN_BUDGET if main else
                       "activation_checkpoint.mode \"memory_budget\" without [compile] enable: "
                       "torchtitan asserts 'Memory budget mode requires model to be compiled' "
                       "(torchtitan/distributed/activation_checkpoint.py apply_ac); enable "
                       "compile or choose another mode")
    if fields["recompute"] == "selective" and fields["recompute_every"] is None:
        fields["recompute_modules"] = [OP_SAC]  # selective_ac_option "op" (op_sac.py)
    ignored = sorted(str(k) for k in data if k not in _READ_TABLES)
    if ignored:
        ctx.semantics.ignored += [t for t in (f"[{k}]" for k in ignored)
                                  if t not in ctx.semantics.ignored]
        ctx.note(f"ignored tables: {', '.join(ignored[:10])}")
    return build(ctx, fields)


def _loss(ctx: Ctx, data: dict[str, Any], train: Table) -> str:
    """The loss's kernels (costmodel/loss.py): torchtitan compiles its cross-entropy
    (components/loss.py ``build_cross_entropy_loss``, 0.2) or PyTorch runs it eagerly
    on the logits cast to fp32."""
    return "fused" if compiles(ctx, data, "loss") else "eager"


def _swiglu(ctx: Ctx, data: dict[str, Any], train: Table) -> str:
    """A gated MLP's activation (costmodel/rates.py Swiglu): torchtitan's FeedForward is
    ``w2(F.silu(w1(x)) * w3(x))``, which torch.compile fuses into one kernel each way
    (its partitioner reruns the SiLU in the backward) and eager PyTorch runs as silu
    then mul, keeping the SiLU's output too."""
    return "fused" if compiles(ctx, data, "model") else "eager"


def _parallelism(ctx: Ctx, data: dict[str, Any]) -> Table:
    """[parallelism], plus what older torchtitan kept elsewhere: pipeline keys
    under [experimental], parallel degrees under [training]."""
    par = Table(ctx, "parallelism", data)
    for table, wanted in (("experimental", "pipeline_parallel"), ("training", "_parallel_")):
        old = Table(ctx, table, data)
        moved = {k: v for k, v in old.data.items()
                 if str(k).startswith(wanted) or (wanted[0] == "_" and wanted in str(k)
                                                  and str(k).endswith("_degree"))}
        moved = {k: v for k, v in moved.items() if k not in par.data}
        if moved:
            ctx.note(f"read {', '.join(sorted(moved))} from [{table}] (older torchtitan)")
            par.data = {**par.data, **moved}
    return par


def _preset(ctx: Ctx, model: Table) -> str | None:
    name, flavor = model.text("name", "llama3"), model.text("flavor", "debugmodel")
    preset = (PRESETS.get(((name or "").lower(), (flavor or "").lower()))
              or custom_preset(ctx, name, flavor))
    if preset is None:  # dropped where a flag or the plan line names the model (read.py)
        ctx.semantics.unknown_model = ctx.note(
            f"model {name[:40] if name else name} flavor {flavor[:40] if flavor else flavor} "
            "has no pptune preset; give --model, --hf-config (its Hugging Face config.json) "
            "or a profile for the cost model")
    return preset


def _fsdp_stage(ctx: Ctx, par: Table, pp: int, replicate: int, shard: int | None
                ) -> tuple[int, bool]:
    """(ZeRO stage kept for the contract, reshard after forward?): FSDP2 shards
    weights, gradients and optimizer state (HSDP with a replicate degree above 1: within
    each replica); zero_stage 3 when it reshards after forward, else 2.

    torchtitan's fsdp_reshard_after_forward "default" reshards only without
    pipeline parallelism (parallelize.py: ``reshard_after_forward = not pp_enabled``).
    """
    policy = par.text("fsdp_reshard_after_forward", "default")
    if policy not in ("default", "always", "never"):
        ctx.refuse("torchtitan-reshard-policy",
                   f"parallelism.fsdp_reshard_after_forward is {policy[:40]!r}: torchtitan "
                   "raises 'Invalid reshard_after_forward_policy' (parallelize.py); use "
                   "default, always or never")
        policy = "default"
    reshard = policy == "always" or (policy == "default" and pp == 1)
    how = ("FSDP full sharding" if replicate == 1 else f"HSDP (replicate {replicate} x shard "
           f"{shard or 'the remaining ranks'}: each replica shards the state over its ranks)")
    ctx.note(f"{how}, reshard after forward {'on' if reshard else 'off'} "
             f"(fsdp_reshard_after_forward {policy}, pp {pp})")
    return (3 if reshard else 2), reshard


def _batch(ctx: Ctx, par: Table, train: Table, pp: int, dp: int | None) -> dict[str, Any]:
    key = "local_batch_size" if train.has("local_batch_size") or not train.has(
        "batch_size") else "batch_size"
    local = train.count(key, None)
    if local is None:
        local = 8
        ctx.note("training.local_batch_size not given: torchtitan's default 8")
    stated_global = train.data.get("global_batch_size", -1)
    facts(ctx.semantics).global_batch_stated = not is_rest(stated_global)
    global_batch = None if is_rest(stated_global) else train.count("global_batch_size", None)
    runs = 1
    if global_batch is None:
        global_batch = local * dp if dp is not None else None
        if dp is None:
            ctx.note("global batch left unset: it is local_batch_size x dp and dp is unknown")
    elif dp is not None and global_batch % (local * dp) == 0:
        runs = global_batch // (local * dp)
    elif dp is not None:
        ctx.refuse("torchtitan-global-batch",
                   f"global_batch_size {global_batch} is not a multiple of local_batch_size "
                   f"{local} x dp {dp}: torchtitan asserts 'global batch size must be multiple "
                   "of local batch size times data-parallel degree' (train.py)")
    if pp == 1:  # no pipeline: each local batch is one micro-batch
        accum = runs if dp is not None or global_batch is None else None
        return {"micro_batch_size": local, "grad_accum_steps": accum, "pipeline_flushes": 1,
                "global_batch": global_batch}
    micro = par.count("pipeline_parallel_microbatch_size", None)
    count = par.count("pipeline_parallel_microbatches", None)  # older torchtitan: the count
    if micro is None and count is not None:
        if local % count:
            raise ctx.bad(f"training.{key} {local} is not a multiple of "
                          f"pipeline_parallel_microbatches {count}; change either")
        micro = local // count
    if micro is not None and local % micro:
        ctx.refuse("torchtitan-microbatch-size",
                   f"training.{key} {local} is not a multiple of "
                   f"parallelism.pipeline_parallel_microbatch_size {micro}: torchtitan raises "
                   f"'Batch size {local} must be divisible by microbatch_size {micro}' "
                   "(build_pipeline_schedule); change either")
        micro, ctx.semantics.batch_refused = local, True  # no micro-batch count to judge
    if micro is None:
        micro = 1
        ctx.note("pipeline_parallel_microbatch_size not given: torchtitan's default 1")
    per_run = local // micro
    known_runs = dp is not None or is_rest(stated_global)
    return {
        "micro_batch_size": micro,
        "grad_accum_steps": per_run * runs if known_runs else None,
        "pipeline_flushes": runs,
        "global_batch": global_batch,
    }


def _recompute(ctx: Ctx, table: Table) -> tuple[str | None, int | None]:
    """(recompute, every Nth block) from [activation_checkpoint], with torchtitan's
    defaults (job_config.py ActivationCheckpoint: mode "selective",
    selective_ac_option "2": every second block checkpointed; "op": per-op)."""
    mode = table.text("mode", None)
    if mode is None:
        mode = "selective"
        ctx.note("activation_checkpoint.mode not given: torchtitan's default \"selective\"")
    if mode == "memory_budget":
        ctx.unmodelled("torchtitan-unmodelled",
                       "activation_checkpoint.mode \"memory_budget\" is not modelled; predicted "
                       "as no recomputation, and a predicted memory overflow is a warning "
                       "(torch's solver recomputes to fit the budget)")
        return "none", None
    if mode not in ("none", "selective", "full"):
        ctx.refuse("torchtitan-ac-mode",
                   f"activation_checkpoint.mode {mode[:40]!r}: torchtitan accepts selective, "
                   "full, memory_budget or none (job_config.py ActivationCheckpoint)")
        return None, None
    if mode != "selective":
        return mode, None
    option = table.data.get("selective_ac_option", "2")
    if option == "op":
        return "selective", None
    text = str(option).strip()
    if not isinstance(option, (bool, float)) and text.isdigit() and int(text) == 0:
        # apply_ac's layer SAC: ``if not ac_freq or count % ac_freq == 0`` checkpoints
        ctx.note("activation_checkpoint.selective_ac_option \"0\": torchtitan checkpoints "
                 "every block (apply_ac: 'if not ac_freq'); priced so")
        return "selective", 1
    if isinstance(option, (bool, float)) or not text.isdigit() or int(text) < 1:
        ctx.refuse("torchtitan-ac-option",
                   f"activation_checkpoint.selective_ac_option {show(option)}: torchtitan "
                   "expects 'op' or a positive integer as a string (apply_ac)")
        return "selective", None
    return "selective", int(text)
