"""The keys DeepSpeed 0.19.8 takes inside a config's sections, and what it does with others.

Two kinds of section (``DeepSpeedConfig._initialize_params``, deepspeed/runtime/config.py):

- pydantic models, ``DeepSpeedConfigModel`` subclasses (deepspeed/runtime/config_utils.py:
  ``model_config = ConfigDict(extra="forbid", populate_by_name=True, ...)``): a key that
  is neither a field nor a field's alias raises pydantic's ValidationError ("Extra inputs
  are not permitted") when the engine is built, nested models included; an error finding
  here. Its ``__init__`` (``strict=False``) first drops every key whose value is
  ``"auto"``, so such a key is not refused. ``_reject_removed_config_keys`` refuses the
  keys of removed features first, top-level (``amp``, ``elasticity``, ...) and ZeRO
  ones, with its own message (``removed_keys``).
- plain dicts (``get_pipeline_config``, ``DeepSpeedActivationCheckpointingConfig``,
  ``get_data_types_params``, ``parse_autoep_config``): DeepSpeed reads the keys it
  knows and ignores the rest, as pptune then does; a warning where an unknown key is
  close to one pptune prices.

Every nested key pptune does not read is listed in ``Semantics.ignored`` as
``section.key`` (a table pptune does not read, whole). The field sets are 0.19.8's
(the classes named below): at another ``--framework-version deepspeed=`` release an
unknown key is a warning, since that release's models may have had it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from pptune.frameworks.common.fields import MAX_ERRORS, Ctx
from pptune.frameworks.common.versions import version_tuple
from pptune.frameworks.deepspeed.partition import DEEPSPEED

TOP_CUTOFF = 0.8  # top-level keys (top_level_typos)
CUTOFF = 0.7  # difflib ratio of a likely typo ("stgae"/"stage" 0.8, "partition_method" 0.72)
RELEASE = (0, 19)  # the release the field sets were read from (DEEPSPEED.default)
MODEL_CITE = ("a DeepSpeedConfigModel with extra=\"forbid\", "
              "deepspeed/runtime/config_utils.py")


@dataclass(frozen=True)
class Section:
    """One section: the class or function of DeepSpeed that reads it and its file, the
    keys it takes (fields and aliases), whether it refuses others, the keys pptune
    reads, and the nested sections of those keys."""

    owner: str
    where: str
    keys: frozenset[str]
    forbids: bool
    read: frozenset[str] = frozenset()
    tables: dict[str, Section] = field(default_factory=dict)


def _keys(text: str) -> frozenset[str]:
    return frozenset(text.split())


OFFLOAD = "deepspeed/runtime/zero/offload_config.py"
ZERO = Section(
    "DeepSpeedZeroConfig", "deepspeed/runtime/zero/config.py", _keys(
        "allgather_bucket_size allgather_partitions allgather_sequential compute_grad_norm "
        "contiguous_gradients cpu_offload cpu_offload_param cpu_offload_use_pin_memory "
        "elastic_checkpoint enable_sanity_checks gather_16bit_weights_on_model_save "
        "ignore_unused_parameters leaf_module legacy_stage1 load_from_fp32_weights "
        "log_trace_cache_warnings max_live_parameters max_reuse_distance "
        "memory_efficient_linear model_persistence_threshold module_granularity_threshold "
        "offload_optimizer offload_param overlap_comm override_module_apply "
        "param_persistence_threshold parameter_alignment pipeline_loading_checkpoint "
        "prefetch_bucket_size reduce_bucket_size reduce_scatter round_robin_gradients "
        "save_muon_momentum_buffer_in_memory stage stage3_allgather_sequential "
        "stage3_gather_16bit_weights_on_model_save stage3_gather_fp16_weights_on_model_save "
        "stage3_max_live_parameters stage3_max_reuse_distance "
        "stage3_model_persistence_threshold stage3_module_granularity_threshold "
        "stage3_param_persistence_threshold stage3_prefetch_bucket_size "
        "stage3_use_all_reduce_for_fetch_params sub_group_size "
        "use_all_reduce_for_fetch_params use_multi_rank_bucket_allreduce zenflow "
        "zero_hpz_partition_size zero_quantized_gradients "
        "zero_quantized_nontrainable_weights zero_quantized_weights"),
    True, _keys("stage overlap_comm offload_optimizer offload_param cpu_offload "
                "cpu_offload_param"), {
        "offload_param": Section(
            "DeepSpeedZeroOffloadParamConfig", OFFLOAD,
            _keys("buffer_count buffer_size device max_in_cpu nvme_path pin_memory"),
            True, _keys("device")),
        "offload_optimizer": Section(
            "DeepSpeedZeroOffloadOptimizerConfig", OFFLOAD, _keys(
                "buffer_count cpuadam_cores_perc device fast_init nvme_path pin_memory "
                "pipeline_read pipeline_write ratio super_offload"), True, _keys("device")),
        "zenflow": Section(
            "ZenFlowConfig", "deepspeed/runtime/zenflow/zenflow_config.py", _keys(
                "auto_ratio full_warm_up_rounds offload overlap_step pt_reserved_cores_perc "
                "select_interval select_strategy steps_per_epoch topk_ratio update_interval"),
            True),
        "leaf_module": Section(
            "DeepSpeedZeroLeafModuleConfig", "deepspeed/runtime/zero/leaf_module_config.py",
            _keys("classes name_suffixes names"), True),
    })
BF16 = Section("DeepSpeedBF16Config", "deepspeed/runtime/precision_config.py", _keys(
    "bf16_master_weights_and_grads bf16_optimizer_states check_grad_overflow enabled "
    "immediate_grad_update"), True, _keys("enabled"))
TP_CONFIG = Section("TPConfig", "deepspeed/runtime/tensor_parallel/config.py",
                    _keys("mpu tp_grain_size tp_group tp_size"), True)
SECTIONS = {
    "zero_optimization": ZERO,
    "bf16": BF16,
    "bfloat16": BF16,  # read by get_bfloat16_config when "bf16" is absent
    "fp16": Section("DeepSpeedFP16Config", "deepspeed/runtime/precision_config.py", _keys(
        "auto_cast consecutive_hysteresis enabled fp16_master_weights_and_grads hysteresis "
        "initial_scale_power loss_scale loss_scale_window min_loss_scale"), True,
        _keys("enabled")),
    "tensor_parallel": Section(
        "TPTrainingConfig", "deepspeed/runtime/tensor_parallel/config.py", _keys(
            "autotp_size dtype injection_policy_tuple keep_module_on_host kernel_inject "
            "partition_config preset_model replace_with_kernel_inject tensor_parallel tp "
            "tp_overlap_comm vocab_parallel_ce_backend vocab_parallel_lm_head"), True,
        _keys("autotp_size tp_size"), {"tensor_parallel": TP_CONFIG, "tp": TP_CONFIG}),
    # plain dicts: get_pipeline_config's defaults and PipelineEngine's use_reentrant
    # (deepspeed/runtime/pipe/engine.py)
    "pipeline": Section("get_pipeline_config", "deepspeed/runtime/config.py", _keys(
        "stages partition seed_layers activation_checkpoint_interval pipe_partitioned "
        "grad_partitioned use_reentrant"), False,
        _keys("stages partition activation_checkpoint_interval")),
    "activation_checkpointing": Section(
        "DeepSpeedActivationCheckpointingConfig",
        "deepspeed/runtime/activation_checkpointing/config.py", _keys(
            "partition_activations number_checkpoints contiguous_memory_optimization "
            "synchronize_checkpoint_boundary profile cpu_checkpointing"), False),
    "data_types": Section("get_data_types_params", "deepspeed/runtime/config.py",
                          _keys("grad_accum_dtype param_dtype buffer_dtype"), False,
                          _keys("grad_accum_dtype")),
    "expert_parallel": Section(
        "parse_autoep_config", "deepspeed/module_inject/auto_ep_config.py", _keys(
            "enabled autoep_size expert_tensor_parallel_size validate_folding_routing "
            "async_split_plan preset_model moe_layer_pattern expert_pattern router_pattern "
            "use_grouped_mm disable_triton_grouped_mm route_norm route_scale score_apply "
            "combine_impl row_weighting_impl gate_up_impl comm_backend comm_num_sm "
            "comm_qp_margin comm_max_tokens_per_rank num_expert_groups num_limited_groups "
            "score_func top_k load_balance_coeff routed_scaling_factor expert_w1 expert_w2 "
            "expert_w3 num_experts_attr top_k_attr has_shared_experts shared_experts_pattern "
            "shared_experts_gate_pattern expert_activation"), False,
        _keys("enabled autoep_size expert_tensor_parallel_size")),
    # pptune's own section, which DeepSpeed never reads (reader.py _pptune_section)
    "pptune": Section("pptune", "", frozenset(), False, _keys(
        "attention model hf_config gpu seq_len gpus_per_node recompute held")),
}
# Keys of removed features. DeepSpeedConfig.__init__ first calls
# _reject_removed_config_keys (deepspeed/runtime/config.py), which raises
# DeepSpeedConfigError for the first it finds, top-level keys before zero_optimization's,
# whatever the value: key -> (the first release that refuses it, DeepSpeed's message
# without its issue link; _REMOVED_TOP_LEVEL_CONFIG_KEYS and _REMOVED_ZERO_CONFIG_KEYS as
# read in the 0.19.6, 0.19.7 and 0.19.8 sources: 0.19.6 refuses none). Before that
# release DeepSpeed read the key (amp: NVIDIA Apex's amp.initialize; elasticity: the
# batch from compute_elastic_config at the world size), which pptune does not model.
_V7, _V8 = (0, 19, 7), (0, 19, 8)
REMOVED_TOP = {
    "nebula": (_V7, "Nebula checkpointing has been removed. A leftover 'nebula' block "
               "would be ignored and checkpoints would silently fall back to local "
               "torch.save."),
    "compression_training": (_V7, "The DeepSpeed compression library has been removed. A "
                             "leftover 'compression_training' block would be ignored and "
                             "the model would train unquantized."),
    "amp": (_V8, "NVIDIA Apex AMP integration has been removed. Use DeepSpeed 'fp16', "
            "'bf16', or 'torch_autocast' instead."),
    "quantize_training": (_V7, "Mixture-of-Quantization (MoQ) / 'quantize_training' has "
                          "been removed."),
    "sparse_gradients": (_V8, "Sparse compression of dense torch.nn.Embedding gradients "
                         "has been removed."),
    "eigenvalue": (_V8, "Eigenvalue-based Mixture-of-Quantization (MoQ) has been removed; "
                   "the standalone 'eigenvalue' configuration block is no longer supported."),
    "sparse_attention": (_V7, "DeepSpeed Sparse Attention has been removed; the "
                         "'sparse_attention' configuration block is no longer supported."),
    "elasticity": (_V8, "Elastic training has been removed; the 'elasticity' configuration "
                   "block is no longer supported. Set train_batch_size / "
                   "train_micro_batch_size_per_gpu / gradient_accumulation_steps directly."),
    "graph_harvesting": (_V8, "Graph harvesting has been removed; the 'graph_harvesting' "
                         "configuration option is no longer supported."),
    "curriculum_learning": (_V8, "Legacy top-level 'curriculum_learning' has been removed. "
                            "Use 'data_efficiency.data_sampling.curriculum_learning' "
                            "instead."),
    "progressive_layer_drop": (_V8, "Progressive Layer Dropping has been removed; the "
                               "'progressive_layer_drop' configuration block is no longer "
                               "supported."),
}
REMOVED = {
    "mics_shard_size": (_V7, "MiCS ZeRO-3 sharding has been removed; "
                        "'zero_optimization.mics_shard_size' is no longer supported."),
    "mics_hierarchical_params_gather": (
        _V7, "MiCS ZeRO-3 sharding has been removed; "
        "'zero_optimization.mics_hierarchical_params_gather' is no longer supported."),
    "zeropp_loco_param": (_V8, "LoCo-Zero++ has been removed; 'zero_optimization."
                          "zeropp_loco_param' is no longer supported."),
}


def removed_keys(ctx: Ctx, data: dict[str, Any]) -> None:
    """DeepSpeed's refusal of each key of a removed feature present (REMOVED_TOP, REMOVED),
    one error each, at the release that removed it and later; at an earlier
    ``--framework-version deepspeed=`` release DeepSpeed reads the key: a warning that
    pptune does not model it."""
    zero = data.get("zero_optimization")
    present = [(key, *REMOVED_TOP[key]) for key in REMOVED_TOP if key in data]
    if isinstance(zero, dict):
        present += [(f"zero_optimization.{key}", *REMOVED[key]) for key in REMOVED
                    if key in zero]
    release = ctx.semantics.versions.of(DEEPSPEED)
    for path, since, message in present:
        first = ".".join(map(str, since))
        if ctx.semantics.versions.at_least(DEEPSPEED, *since):
            ctx.refuse("deepspeed-unknown-key",
                       f"{path}: DeepSpeedConfig raises DeepSpeedConfigError '{message}' "
                       "(deepspeed/runtime/config.py _reject_removed_config_keys, from "
                       f"DeepSpeed {first} on); remove it")
        else:
            ctx.unmodelled("deepspeed-unmodelled",
                           f"{path}: DeepSpeed {release} reads it (DeepSpeed {first} and later "
                           f"refuse it: '{message}'); pptune does not model it, so the "
                           "prediction is made without it")


def nested_keys(ctx: Ctx, data: dict[str, Any]) -> list[str]:
    """The nested keys pptune does not read (``section.key``), with DeepSpeed's refusals
    of unknown keys (one finding per section, as its ValidationError lists a model's)
    and warnings for likely typos in the sections it ignores them in."""
    ignored: list[str] = []
    for name, section in SECTIONS.items():
        value = data.get(name)
        if not isinstance(value, dict) or (name == "bfloat16" and "bf16" in data):
            continue
        unknown: list[tuple[str, str]] = []  # (path, hint)
        removed = set(REMOVED) if name == "zero_optimization" else set()  # removed_keys's
        _walk(name, value, section, True, ignored, unknown, removed)
        if unknown:
            _report(ctx, name, section, unknown)
    return ignored


def top_level_typos(ctx: Ctx, data: dict[str, Any], read: frozenset[str] | set[str]) -> None:
    """A warning for each top-level key close to one pptune reads (``read``): DeepSpeedConfig
    reads its top-level keys one by one with defaults (``_initialize_params``) and ignores
    the rest, so a misspelt batch or section key runs at DeepSpeed's default. The cut-off
    is stricter than in the sections: no key DeepSpeed 0.19.8 reads at the top level comes
    within 0.8 of one pptune reads."""
    moved = misplaced(data, read)
    close = [(str(k), c[0]) for k in data if str(k) not in read and str(k) not in moved
             for c in [difflib.get_close_matches(str(k), sorted(read), n=1, cutoff=TOP_CUTOFF)]
             if c]
    close += [(k[:60], hint) for k, hint in moved.items()]
    if close:
        named = ", ".join(f"{k[:60]} (did you mean {c}?)" for k, c in sorted(close)[:MAX_ERRORS])
        ctx.unmodelled("deepspeed-ignored-key",
                       f"{named}: DeepSpeedConfig reads its top-level keys by name and ignores "
                       "others (deepspeed/runtime/config.py _initialize_params), so the run "
                       "takes DeepSpeed's default, as the prediction does")


def misplaced(data: dict[str, Any], read: frozenset[str] | set[str]) -> dict[str, str]:
    """Keys pptune reads, written one level off (``{where: the key meant}``): a section's
    key at the top level (``activation_checkpoint_interval`` for
    ``pipeline.activation_checkpoint_interval``), or a top-level key inside a section
    that reads its keys as a plain dict (``pipeline.pipeline_parallel_size``). DeepSpeed
    reads neither there, so the run takes the default."""
    out = {str(k): f"{name}.{k}" for k in data if str(k) not in read
           for name, section in SECTIONS.items() if str(k) in section.read}
    for name, section in SECTIONS.items():
        value = data.get(name)
        if isinstance(value, dict) and not section.forbids:
            out.update({f"{name}.{k}": f"the top-level {k}" for k in value
                        if str(k) in read and str(k) not in section.keys})
    return out


def _walk(path: str, value: dict[Any, Any], section: Section, listed: bool,
          ignored: list[str], unknown: list[tuple[str, str]], skip: set[str]) -> None:
    """Sort ``value``'s keys: read, known and left unread (listed when ``listed``), or
    unknown (collected with the close spelling); nested models walked for refusals."""
    for raw, item in value.items():
        key = str(raw)
        where = f"{path}.{key if len(key) <= 60 else key[:57] + '...'}"
        if key in skip:
            ignored.append(where)
            continue
        table = section.tables.get(key)
        read = key in section.read
        if table is not None and isinstance(item, dict):
            if listed and not read:
                ignored.append(where)
            _walk(where, item, table, listed and read, ignored, unknown, set())
            continue
        if listed and not read:
            ignored.append(where)
        if key in section.keys or (read and not section.forbids):
            continue
        if section.forbids and item == "auto":
            continue  # DeepSpeedConfigModel.__init__ drops it before validating
        choices = section.keys if section.forbids else section.read
        close = difflib.get_close_matches(key, sorted(choices), n=1, cutoff=CUTOFF)
        if section.forbids or close:
            unknown.append((where, close[0] if close else ""))


def _report(ctx: Ctx, name: str, section: Section, unknown: list[tuple[str, str]]) -> None:
    unknown.sort()
    named = ", ".join(where + (f" (did you mean {hint}?)" if hint else "")
                      for where, hint in unknown[:MAX_ERRORS])
    if len(unknown) > MAX_ERRORS:
        named += f", and {len(unknown) - MAX_ERRORS} more"
    if not section.forbids:
        where = (f"DeepSpeed reads {name} as a plain dict ({section.owner}, {section.where}) "
                 "and no code reads this key" if section.owner != "pptune" else
                 "not a key of pptune's own section (DeepSpeed ignores the whole section)")
        ctx.unmodelled("deepspeed-ignored-key",
                       f"{named}: {where}, so the run ignores it, as the prediction does")
        return
    release = ctx.semantics.versions.of(DEEPSPEED)
    said = (f"{section.owner} raises pydantic's ValidationError 'Extra inputs are not "
            f"permitted' for each ({section.where}, {MODEL_CITE})")
    if version_tuple(release)[:2] == RELEASE:
        ctx.refuse("deepspeed-unknown-key", f"{named}: {said}; read here without them")
    else:
        ctx.unmodelled("deepspeed-unknown-key",
                       f"{named}: DeepSpeed {DEEPSPEED.default}'s {said}; DeepSpeed {release} "
                       f"may have had them (pptune knows {DEEPSPEED.default}'s fields only); "
                       "read here without them")
