"""The keys torchtitan's job files may hold, and its refusal of the others.

torchtitan 0.2.2's ConfigManager (torchtitan/config/manager.py
``_dict_to_dataclass``) builds its JobConfig dataclasses from the TOML tables and
raises ``ValueError: Invalid field names in <class ...> data: {...}`` for a key its
dataclass lacks: an unknown top-level table, an unknown key in a known table, keys
0.2.2 dropped (``[experimental] pipeline_parallel_degree``,
``[parallelism] pipeline_parallel_split_points``, ``[float8]``). ``FIELDS`` are its
dataclasses' fields (torchtitan/config/job_config.py at 0.2.2), one entry per table
(``quantize.linear.float8`` for the nested ``[quantize.linear.float8]``).

The reader also reads files of older releases (reader.py ``_parallelism``, converters.py):
``OLDER`` are the keys 0.1.0 to 0.2.1 had (their job_config.py / config_manager.py),
``BEFORE_0_1_KEYS`` those of the layout before 0.1.0 (pipeline keys under
``[experimental]``, degrees and ``batch_size`` under ``[training]``, which the reader
still takes). torchtitan before 0.2.0 dropped unknown keys without a word. Such a key is an
error where the file is plainly for 0.2.x (it uses a key only 0.2 has, ``MARKERS``, or
``--framework-version torchtitan=0.2.x`` says so), else a warning: torchtitan 0.2.2
refuses it, the release the file was written for may not. A key no documented release
has is an error, with the close spellings of the table's keys. A file naming a custom
config module (``job.custom_config_module``, ``experimental.custom_args_module``)
may extend the dataclasses: its unknown keys are warnings.
"""

from __future__ import annotations

import difflib
from typing import Any

from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.torchtitan.fqns import TORCHTITAN

FIELDS: dict[str, tuple[str, ...]] = {
    "": ("job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training",
         "parallelism", "checkpoint", "activation_checkpoint", "compile", "quantize", "comm",
         "memory_estimation", "fault_tolerance", "experimental", "validation", "debug"),
    "activation_checkpoint": (
        "debug", "determinism_check", "early_stop", "memory_budget", "mode",
        "per_op_sac_force_recompute_mm_shapes_by_fqns", "preserve_rng_state",
        "selective_ac_option", "visualize_memory_budget_pareto"),
    "checkpoint": (
        "async_mode", "create_seed_checkpoint", "enable", "enable_first_step_checkpoint",
        "enable_ft_dataloader_checkpoints", "exclude_from_loading", "export_dtype", "folder",
        "initial_load_in_hf", "initial_load_in_hf_quantized", "initial_load_model_only",
        "initial_load_path", "interval", "keep_latest_k", "last_save_in_hf",
        "last_save_model_only", "load_only", "load_step"),
    "comm": ("init_timeout_seconds", "mode", "save_traces_file_prefix", "save_traces_folder",
             "trace_buf_size", "train_timeout_seconds"),
    "compile": ("backend", "components", "enable"),
    "debug": ("deterministic", "deterministic_warn_only", "moe_force_load_balance", "seed"),
    "experimental": ("custom_args_module", "custom_import"),
    "fault_tolerance": ("enable", "group_size", "min_replica_size", "process_group",
                        "process_group_timeout_ms", "replica_id", "semi_sync_method"),
    "job": ("config_file", "custom_config_module", "description", "dump_folder",
            "print_config", "save_config_file"),
    "lr_scheduler": ("decay_ratio", "decay_type", "min_lr_factor", "total_steps",
                     "warmup_steps"),
    "memory_estimation": ("disable_fake_mode", "enable"),
    "metrics": ("disable_color_printing", "enable_tensorboard", "enable_wandb", "log_freq",
                "save_for_all_ranks", "save_tb_folder"),
    "model": ("converters", "flavor", "hf_assets_path", "name", "print_after_conversion",
              "tokenizer_path"),
    "optimizer": ("beta1", "beta2", "early_step_in_backward", "eps", "implementation", "lr",
                  "name", "weight_decay"),
    "parallelism": (
        "context_parallel_degree", "context_parallel_load_balancer",
        "context_parallel_rotate_method", "data_parallel_replicate_degree",
        "data_parallel_shard_degree", "disable_loss_parallel", "enable_async_tensor_parallel",
        "expert_parallel_comm_backend", "expert_parallel_degree",
        "expert_tensor_parallel_degree", "fsdp_reshard_after_forward",
        "module_fqns_per_model_part", "pipeline_parallel_degree",
        "pipeline_parallel_expert_parallel_overlap", "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_microbatch_size", "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv", "tensor_parallel_degree"),
    "profiling": ("enable_memory_snapshot", "enable_profiling", "profile_freq",
                  "profiler_active", "profiler_warmup", "save_memory_snapshot_folder",
                  "save_traces_folder"),
    "quantize": ("linear", "grouped_mm"),
    "quantize.linear": ("float8", "mx"),
    "quantize.grouped_mm": ("float8", "mx"),
    "quantize.grouped_mm.float8": ("fqns",),
    "quantize.grouped_mm.mx": ("fqns", "recipe_name"),
    "quantize.linear.float8": ("emulate", "enable_fsdp_float8_all_gather", "filter_fqns",
                               "precompute_float8_dynamic_scale_for_fsdp", "recipe_name"),
    "quantize.linear.mx": ("filter_fqns", "mxfp8_dim1_cast_kernel_choice", "recipe_name"),
    "training": ("dataloader", "dataset", "dataset_path", "dtype", "enable_cpu_offload",
                 "gc_debug", "gc_freq", "global_batch_size", "local_batch_size", "max_norm",
                 "mixed_precision_param", "mixed_precision_reduce", "seq_len", "steps"),
    "training.dataloader": ("num_workers", "persistent_workers", "pin_memory",
                            "prefetch_factor"),
    "validation": ("dataloader", "dataset", "dataset_path", "enable", "freq",
                   "local_batch_size", "seq_len", "steps"),
    "validation.dataloader": ("num_workers", "persistent_workers", "pin_memory",
                              "prefetch_factor"),
}
# the tables whose values are tables (dataclass-typed fields)
NESTED = frozenset(t for t in FIELDS if t)
# each table's dataclass in torchtitan 0.2.2 (as its message prints it)
CLASSES = {
    "": "JobConfig", "activation_checkpoint": "ActivationCheckpoint", "lr_scheduler":
    "LRScheduler", "memory_estimation": "MemoryEstimation", "fault_tolerance":
    "FaultTolerance", "quantize": "Quantize", "quantize.linear": "QuantizedLinear",
    "quantize.grouped_mm": "QuantizedGroupedMM", "quantize.linear.float8": "Float8Linear",
    "quantize.linear.mx": "MXLinear", "quantize.grouped_mm.float8": "Float8GroupedMM",
    "quantize.grouped_mm.mx": "MXGroupedMM", "training.dataloader": "DataLoader",
    "validation.dataloader": "DataLoader"}
# keys of 0.1.0 - 0.2.1 that 0.2.2 lacks: (table, key) -> the releases, what replaced it
OLDER: dict[tuple[str, str], tuple[str, str]] = {
    ("", "float8"): ("0.1.0", 'the [quantize.linear.float8] table (converter '
                     '"quantize.linear.float8")'),
    ("", "mx"): ("0.1.0", 'the [quantize.linear.mx] table (converter "quantize.linear.mx")'),
    ("parallelism", "pipeline_parallel_split_points"): (
        "0.1.0", "module_fqns_per_model_part or pipeline_parallel_layers_per_stage"),
    ("parallelism", "enable_compiled_autograd"): ("0.1.0 and 0.2.0", ""),
    ("training", "compile"): ("0.1.0", "[compile] enable"),
    ("training", "seed"): ("0.1.0 and 0.2.0", "[debug] seed"),
    ("training", "deterministic"): ("0.1.0 and 0.2.0", "[debug] deterministic"),
    ("training", "debug_moe_force_load_balance"): ("0.2.0", "[debug] moe_force_load_balance"),
    ("checkpoint", "enable_checkpoint"): ("0.1.0", "enable"),
    ("checkpoint", "initial_load_model_weights_only"): ("0.1.0", "initial_load_model_only"),
    ("checkpoint", "last_save_model_weights_only"): ("0.1.0", "last_save_model_only"),
    ("job", "print_args"): ("0.1.0", "print_config"),
    ("job", "use_for_integration_test"): ("0.1.0", ""),
    ("lr_scheduler", "lr_min"): ("0.1.0", "min_lr_factor"),
    ("memory_estimation", "enabled"): ("0.1.0", "enable"),
    **{("fault_tolerance", k): ("0.1.0", "") for k in (
        "fragment_sync_delay", "fragment_update_alpha", "should_quantize", "sync_steps")},
}
BEFORE_0_1 = "before 0.1.0"
# the keys of that layout 0.1.0 - 0.2.2 lack (every torchtitan/config_manager.py before the
# v0.1.0 tag, its argparse flags and its dataclasses)
BEFORE_0_1_KEYS: dict[str, tuple[str, ...]] = {
    "": ("estimate",),
    "checkpoint": ("interval_type", "model_weights_only"),
    "estimate": ("memory", "mode"),
    "experimental": (
        "context_parallel_degree", "context_parallel_rotate_method", "custom_model_path",
        "enable_async_tensor_parallel", "enable_compiled_autograd", "pipeline_parallel_degree",
        "pipeline_parallel_microbatches", "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv", "pipeline_parallel_split_mode",
        "pipeline_parallel_split_points", "torch_spmd"),
    "float8": ("enable_float8_linear", "scaling_type_grad_output", "scaling_type_input",
               "scaling_type_weight"),
    "metrics": ("disable_logging_from_checkpoint", "enable_color_printing", "rank_0_only"),
    "model": ("attn_mask_type", "norm_type", "use_flex_attn"),
    "optimizer": ("fused",),
    "parallelism": ("pipeline_parallel_microbatches",),
    "profiling": ("profile_every_x_iter", "run_profiler"),
    "training": (
        "batch_size", "data_parallel_degree", "data_parallel_replicate_degree",
        "data_parallel_shard_degree", "data_parallel_type", "disable_loss_parallel",
        "enable_float8_linear", "enable_fp8_linear", "enable_fsdp_float8_all_gather",
        "enable_fsdp_fp8_all_gather", "enable_loss_parallel", "float8_scaling_type_grad_output",
        "float8_scaling_type_input", "float8_scaling_type_weight", "fp8_linear",
        "fsdp_reshard_after_forward", "pipeline_parallel_degree",
        "precompute_float8_dynamic_scale_for_fsdp", "tensor_parallel_degree", "warmup_steps"),
}
# keys only 0.2.x has (0.1.0 lacks them): a file using one is written for 0.2.x
MARKERS: dict[str, tuple[str, ...]] = {
    "": ("compile", "quantize", "validation", "debug"),
    "model": ("hf_assets_path",),
    "checkpoint": ("enable", "initial_load_model_only", "last_save_model_only",
                   "initial_load_in_hf", "last_save_in_hf", "load_only"),
    "training": ("dtype", "dataloader"),
    "parallelism": ("expert_parallel_degree", "expert_tensor_parallel_degree",
                    "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers", "expert_parallel_comm_backend",
                    "pipeline_parallel_expert_parallel_overlap",
                    "context_parallel_load_balancer"),
    "activation_checkpoint": ("memory_budget", "early_stop", "preserve_rng_state",
                              "determinism_check"),
    "job": ("custom_config_module", "print_config", "save_config_file"),
    "lr_scheduler": ("min_lr_factor", "total_steps"),
    "memory_estimation": ("enable",),
}
CITE = "(torchtitan/config/manager.py ConfigManager._dict_to_dataclass)"


def looks_like_torchtitan(data: dict[str, Any]) -> bool:
    """A TOML file with a table named as one of JobConfig's sections (``[model]``,
    ``[training]``, ``[parallelism]``, ``[job]``, ...): torchtitan's. pptune's own files
    have no such table (their ``model`` is a preset's name, a string)."""
    return any(isinstance(value, dict) and key in FIELDS[""] for key, value in data.items())


def _older(table: str, key: str) -> tuple[str, str] | None:
    """(the releases that had it, what replaced it) for a key of an older torchtitan the
    reader documents; None for a key no release had."""
    if (table, key) in OLDER:
        return OLDER[(table, key)]
    if key == "pipeline_parallel_microbatches" and table in ("parallelism", "experimental"):
        return BEFORE_0_1, "[parallelism] pipeline_parallel_microbatch_size"
    if table == "experimental" and key.startswith("pipeline_parallel"):
        return BEFORE_0_1, f"[parallelism] {key}"
    if table == "training" and key == "batch_size":
        return BEFORE_0_1, "local_batch_size"
    if table == "training" and key in FIELDS["parallelism"]:
        return BEFORE_0_1, f"[parallelism] {key}"
    if key in BEFORE_0_1_KEYS.get(table, ()):
        return BEFORE_0_1, ""
    return None


def _walk(data: dict[str, Any], table: str = "") -> list[tuple[str, str]]:
    """Every (table, key) of the file, down the tables torchtitan 0.2.2 nests."""
    out = []
    for key, value in data.items():
        key = str(key)
        out.append((table, key))
        path = f"{table}.{key}" if table else key
        if isinstance(value, dict) and path in NESTED:
            out += _walk(value, path)
    return out


def _marked(found: list[tuple[str, str]]) -> str | None:
    """The first key of the file only torchtitan 0.2 has (``[checkpoint] enable``; a whole
    table, ``[compile]``, by its name alone), None."""
    return next((f"[{table}] {key}" if table else f"[{key}]" for table, key in found
                 if key in MARKERS.get(table, ())), None)


def check_keys(ctx: Ctx, data: dict[str, Any]) -> None:
    """torchtitan's refusal of keys its JobConfig lacks (module docstring), as findings;
    each such key is listed in ``ignored``."""
    found = _walk(data)
    versions = ctx.semantics.versions
    strict = versions.at_least(TORCHTITAN, 0, 2)  # 0.1.0 dropped unknown keys unsaid
    marker = _marked(found)
    new = strict and (TORCHTITAN.name in versions.chosen or marker is not None)
    # why the file is read as 0.2.2's: the version chosen, or a key only 0.2 has
    why = "" if TORCHTITAN.name in versions.chosen or marker is None else (
        f" (the file is read as torchtitan 0.2.2's: its {marker} is a key only 0.2 has)")
    custom = [f"{t}.{k}" for t, k in (("job", "custom_config_module"),
                                       ("experimental", "custom_args_module"))
              if isinstance(data.get(t), dict) and data[t].get(k)]
    olds: list[str] = []  # keys of older releases, in a file that may be for one
    for table, key in found:
        older = _older(table, key)
        if key in FIELDS.get(table, ()) or (older is not None and not strict):
            continue  # a key of the release the user chose (or of the layout before it)
        where = f"[{table}] {key}" if table else f"[{key}]"
        ctx.semantics.ignored.append(where)
        if not strict:
            ctx.unmodelled("torchtitan-unknown-key",
                           f"{where}: no torchtitan release has it; torchtitan "
                           f"{versions.of(TORCHTITAN)} drops keys it does not know without a "
                           "word" + _close(table, key))
            continue
        cls = CLASSES.get(table, table.title().replace("_", ""))
        said = ("torchtitan 0.2.2 raises 'Invalid field names in <class "
                f"'torchtitan.config.job_config.{cls}'> data: {{'{key}'}}' {CITE}")
        if older is not None:
            had, instead = older
            text = (f"{where} is a key of torchtitan {had}, not of 0.2.2{why}: {said}"
                    + (f"; use {instead}" if instead else "; remove it"))
            if new:
                ctx.refuse("torchtitan-unknown-key", text)
            else:
                olds.append(f"{where} ({had}" + (f"; now {instead})" if instead else ")"))
        elif custom:
            ctx.unmodelled("torchtitan-unknown-key",
                           f"{where}: not a key of torchtitan 0.2.2's JobConfig; {custom[0]} "
                           "may add it (pptune does not load it)" + _close(table, key))
        else:
            ctx.refuse("torchtitan-unknown-key",
                       f"{where}: no such key: {said}" + _close(table, key))
    _older_warning(ctx, olds)


def _older_warning(ctx: Ctx, olds: list[str]) -> None:
    if olds:
        ctx.unmodelled("torchtitan-older-key",
                       f"{len(olds)} key{'s' * (len(olds) > 1)} of older torchtitan releases, "
                       f"not of 0.2.2: {', '.join(olds[:8])}" + (", ..." if len(olds) > 8
                                                                  else "")
                       + ": torchtitan 0.2.2 raises 'Invalid field names in <class ...> data' "
                       f"for each {CITE}; the file uses no key only 0.2 has, so it may be for "
                       "an older release, and is read as that release did "
                       "(--framework-version torchtitan=0.2.2 makes each an error)")


def _close(table: str, key: str) -> str:
    close = difflib.get_close_matches(key, FIELDS.get(table, ()), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""
