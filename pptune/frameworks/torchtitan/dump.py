"""torchtitan main's resolved config, as it dumps it, read as the TOML reader's tables.

torchtitan's main branch after 0.2.2 (pptune's "0.3.0", fqns.py) reads no TOML job file:
a run is a Python function returning ``Trainer.Config`` (torchtitan/config/README.md).
What it serialises is that config resolved: ``Trainer.Config.to_dict()``
(torchtitan/trainer.py), which ``--debug.save_config_file PATH`` writes as JSON under
``dump_folder`` and ``--debug.print_config`` logs ("Running with configs: {json}").
Its sections are the Config's fields (``training``, ``parallelism``,
``activation_checkpoint``, ``compile``, ...); ``model_spec`` holds ``name``, ``flavor`` and
the model config's own ``to_dict()`` (``model``), every nested config as a mapping of its
dataclass fields (torchtitan/config/configurable.py ``Configurable.Config.to_dict``), with
no class names.

The sections whose meaning 0.2.2 shared become its tables, and reader.py reads them by
0.2.2's rules where main keeps them (the stage split, the schedules, FSDP, the expert
mesh, the state widths, compile); what main changed is ``MainRun``, read by its own rules
here and in dump_batch.py (the token batch) and dump_model.py (the model and its
attention). Sections pptune does not price (optimizer, checkpoint, dataloader, ...) are
named in a note, as the TOML reader names the tables it ignores.

``activation_checkpoint`` is one of main's policy configs or null
(torchtitan/distributed/activation_checkpoint.py ``ActivationCheckpointingConfig``),
told apart by their fields: ``SelectiveAC.Config`` has
``force_recompute_mm_shapes_by_fqns`` (per-op SAC: 0.2.2's selective_ac_option "op"),
``MemoryBudgetAC.Config`` ``memory_budget``, ``FullAC.Config`` only the base fields,
null none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pptune.frameworks.common.fields import Ctx, show, whole
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.torchtitan.fqns import TORCHTITAN
from pptune.frameworks.torchtitan.main_rules import parallelism_refusals

MAIN = "0.3.0"  # pptune's name for main after 0.2.2 (fqns.py)
SECTIONS = ("model_spec", "training", "parallelism")  # a dump without one is none
# the fields of main's dataclasses (torchtitan/config/configs.py TrainingConfig,
# ParallelismConfig, CompileConfig at b5bcd76): another key is another commit's
TRAINING = ("num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step",
            "max_context_length", "max_norm", "steps", "enable_cpu_offload",
            "disable_cuda_graphs", "dtype", "mixed_precision_param", "mixed_precision_reduce",
            "gc_freq", "gc_debug")
PARALLELISM = (
    "data_parallel_replicate_degree", "data_parallel_shard_degree",
    "fsdp_reshard_after_forward", "enable_fsdp_symm_mem", "tensor_parallel_degree",
    "enable_sequence_parallel", "spmd_backend", "pipeline_parallel_degree",
    "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
    "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage",
    "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv", "num_pp_microbatches",
    "context_parallel_degree", "context_parallel_load_balancer",
    "context_parallel_ptrr_mask_key", "expert_parallel_degree")
COMPILE = ("enable", "enable_async_tensor_parallel", "components", "backend")
# the parallelism keys 0.2.2's [parallelism] had with the same meaning (reader.py reads them)
SHARED = tuple(k for k in PARALLELISM if k not in (
    "enable_fsdp_symm_mem", "enable_sequence_parallel", "spmd_backend", "num_pp_microbatches",
    "context_parallel_load_balancer", "context_parallel_ptrr_mask_key"))
READ = ("model_spec", "training", "parallelism", "activation_checkpoint", "compile")
# settings main runs that pptune prices as their defaults: (section, key, default, what)
UNPRICED = (
    ("training", "enable_cpu_offload", False, "FSDP's CPU offload of the parameters, "
     "gradients and optimizer state (its transfers and the GPU memory it frees)"),
    ("parallelism", "enable_fsdp_symm_mem", False, "FSDP2's symmetric-memory collectives"),
    ("parallelism", "context_parallel_load_balancer", "headtail", "context parallelism "
     "without the head-tail balancer: pptune prices each rank's causal share as balanced"),
    ("parallelism", "spmd_backend", "spmd_types", "the partial_dtensor SPMD backend (DTensor "
     "on the model-parallel axes only: ParallelismConfig.spmd_backend, main_rules.py)"),
)
# what main raises for a count below 1 (key: its message, where): configs.py
# TrainingConfig.__post_init__, trainer.py Trainer.Config.__post_init__
_TRAINING = "torchtitan/config/configs.py TrainingConfig.__post_init__"
BELOW_ONE = {
    "num_tokens_per_microbatch_per_dp_rank": (
        "num_tokens_per_microbatch_per_dp_rank must be greater than 0.", _TRAINING),
    "num_tokens_per_train_step": ("num_tokens_per_train_step must be -1 or greater than 0.",
                                  _TRAINING),
    "max_context_length": ("max_context_length must be greater than 0.", _TRAINING),
    "num_pp_microbatches": ("parallelism.num_pp_microbatches must be greater than 0.",
                            "torchtitan/trainer.py Trainer.Config.__post_init__"),
}


# check-config's memory fixes in main's words (Adapter.memory_fixes names 0.2.2's keys)
MEMORY_FIXES = ("more pipeline stages (parallelism.pipeline_parallel_degree)",
                "FSDP over more ranks (parallelism.data_parallel_shard_degree)",
                "full activation checkpointing (activation_checkpoint=FullAC.Config())",
                "fewer tokens a micro-batch (training.num_tokens_per_microbatch_per_dp_rank)")


@dataclass(frozen=True)
class MainRun:
    """What a main dump states that no 0.2.2 key carries, with the model it names."""

    tokens: int  # training.num_tokens_per_microbatch_per_dp_rank
    step_tokens: int  # training.num_tokens_per_train_step (-1: derived)
    context: int  # training.max_context_length
    pp_microbatches: int  # parallelism.num_pp_microbatches
    sequence_parallel: bool  # parallelism.enable_sequence_parallel
    name: str  # model_spec.name and flavor
    flavor: str
    model: dict[str, Any] = field(default_factory=dict)  # model_spec.model
    spmd_backend: str = "spmd_types"  # parallelism.spmd_backend (main_rules.py)


def is_dump(data: Any) -> bool:
    """A mapping with main's ``model_spec`` section: a ``to_dict()`` dump."""
    return isinstance(data, dict) and "model_spec" in data


def read_dump(data: dict[str, Any], ctx: Ctx) -> tuple[dict[str, Any], MainRun]:
    """(the TOML reader's tables, MainRun) of a dump; BadInput (one line) where it is
    none: a missing section, a value of the wrong type."""
    _versions(ctx)
    for name in SECTIONS:
        if not isinstance(data.get(name), dict):
            raise ctx.bad(f"{_missing(name, data)}: not a torchtitan Trainer.Config dump "
                          "(main's to_dict(): --debug.save_config_file writes one)")
    spec, train, par = data["model_spec"], data["training"], data["parallelism"]
    name, flavor = (_text(ctx, spec, "model_spec", key) for key in ("name", "flavor"))
    if not isinstance(spec.get("model"), dict):
        raise ctx.bad(f"model_spec.model is {show(spec.get('model'))}; expected the model "
                      "config's mapping (its to_dict())")
    compiled = data.get("compile", {})
    if not isinstance(compiled, dict):
        raise ctx.bad(f"compile is {show(compiled)}; expected a mapping")
    for section, values, known in (("training", train, TRAINING),
                                   ("parallelism", par, PARALLELISM),
                                   ("compile", compiled, COMPILE)):
        _unknown(ctx, section, values, known)
    run = MainRun(
        tokens=_count(ctx, train, "training", "num_tokens_per_microbatch_per_dp_rank", 16384),
        step_tokens=_step_tokens(ctx, train), context=_count(
            ctx, train, "training", "max_context_length", 2048),
        pp_microbatches=_count(ctx, par, "parallelism", "num_pp_microbatches", 1),
        sequence_parallel=_flag(ctx, par, "parallelism", "enable_sequence_parallel", True),
        name=name, flavor=flavor, model=spec["model"],
        spmd_backend=str(par.get("spmd_backend", "spmd_types")))
    parallelism_refusals(ctx, par)
    shared = {k: v for k, v in par.items() if k in SHARED and v is not None}
    if shared.get("pipeline_parallel_degree", 1) == 1:  # every dump names a schedule
        shared.pop("pipeline_parallel_schedule", None)
    tables = {
        "parallelism": shared,
        "training": {k: v for k, v in train.items()
                     if k in ("dtype", "mixed_precision_param", "mixed_precision_reduce")},
        "model": {"name": name, "flavor": flavor},
        "compile": {k: v for k, v in compiled.items() if k in ("enable", "components")},
        "activation_checkpoint": _ac(ctx, data),
    }
    _async_tp(ctx, compiled)
    ctx.semantics.memory_fixes = MEMORY_FIXES
    for section, key, default, what in UNPRICED:
        value = data[section].get(key, default)
        if value != default:
            ctx.unmodelled("torchtitan-unmodelled",
                           f"{section}.{key} {show(value)}: {what} is not modelled; priced as "
                           f"{show(default)}")
    ignored = [str(k) for k in data if k not in READ]
    ctx.semantics.ignored += ignored
    _header(ctx, train, ignored)
    return tables, run


def _header(ctx: Ctx, train: dict[str, Any], ignored: list[str]) -> None:
    """One note for what every dump shares: main's rules read it; its linears are priced
    at mixed_precision_param (or --precision), a dump naming no quantization converter
    (dump_model.py converters_unseen); the sections not priced, every one (a dump has
    about 14)."""
    given = ctx.flags.precision
    linears = (f"--precision {given} (a dump names no quantization converter)" if given else
               f"training.mixed_precision_param {str(train.get('mixed_precision_param'))[:20]}"
               " (a dump names no quantization converter: --precision fp8 or mxfp8 states "
               "one)")
    shown = ", ".join(ignored[:24]) + (f" and {len(ignored) - 24} more" * (len(ignored) > 24))
    ctx.note(f"torchtitan main's Trainer.Config dump (pptune's torchtitan={MAIN}), read by "
             f"main's rules; linears priced at {linears}"
             + (f"; not priced: {shown}" if ignored else ""))


def _versions(ctx: Ctx) -> None:
    """A dump is main's: read by main's rules ("0.3.0", which ``_header`` says); a release
    before it writes none."""
    versions = ctx.semantics.versions
    if TORCHTITAN.name in versions.chosen and not versions.at_least(TORCHTITAN, 0, 3):
        raise ctx.bad(f"--framework-version torchtitan={versions.of(TORCHTITAN)}: that "
                      "release reads TOML job files and dumps no Trainer.Config; this is a "
                      f"dump of main's (pptune's torchtitan={MAIN}): drop the flag or give "
                      f"torchtitan={MAIN}")
    if TORCHTITAN.name not in versions.chosen:
        ctx.semantics.versions = Versions({**versions.chosen, TORCHTITAN.name: MAIN})


def _missing(name: str, data: dict[str, Any]) -> str:
    value = data.get(name)
    return f"no {name} section" if value is None else f"{name} is {show(value)}, not a mapping"


def _text(ctx: Ctx, values: dict[str, Any], section: str, key: str) -> str:
    value = values.get(key)
    if not isinstance(value, str) or not value:
        raise ctx.bad(f"{section}.{key} is {show(value)}; expected the model's "
                      f"{'name' if key == 'name' else 'flavor'} (a string)")
    return value


def _count(ctx: Ctx, values: dict[str, Any], section: str, key: str, default: int) -> int:
    if key not in values:
        ctx.note(f"{section}.{key} not in the dump: torchtitan main's default {default}")
        return default
    _below_one(ctx, section, key, values[key])
    return whole(ctx, f"{section}.{key}", values[key], maximum=1 << 40)


def _below_one(ctx: Ctx, section: str, key: str, value: Any) -> None:
    """BadInput in torchtitan's words for a whole number main refuses below 1 (BELOW_ONE);
    another wrong value is ``whole``'s."""
    if type(value) is int and value < 1:
        said, where = BELOW_ONE[key]
        raise ctx.bad(f"{section}.{key} is {show(value)}: torchtitan raises '{said}' ({where})")


def _flag(ctx: Ctx, values: dict[str, Any], section: str, key: str, default: bool) -> bool:
    value = values.get(key, default)
    if not isinstance(value, bool):
        raise ctx.bad(f"{section}.{key} is {show(value)}; expected true or false")
    return value


def _step_tokens(ctx: Ctx, train: dict[str, Any]) -> int:
    """num_tokens_per_train_step: -1 (derived, main's default) or a positive count
    (TrainingConfig.__post_init__ raises "must be -1 or greater than 0")."""
    value = train.get("num_tokens_per_train_step", -1)
    if type(value) is int and value == -1:
        return -1
    _below_one(ctx, "training", "num_tokens_per_train_step", value)
    return whole(ctx, "training.num_tokens_per_train_step", value, maximum=1 << 50,
                 fix="use -1 (derived) or a token count > 0")


def _unknown(ctx: Ctx, section: str, values: dict[str, Any], known: tuple[str, ...]) -> None:
    """Keys main's dataclass lacks: a dump of another commit, read without them."""
    extra = sorted(str(k) for k in values if k not in known)
    if extra:
        ctx.unmodelled("torchtitan-unknown-key",
                       f"{section} has {', '.join(extra[:6])}, which torchtitan main's "
                       f"{section} config (torchtitan/config/configs.py at b5bcd76) has not: a "
                       "dump of another commit; not read")


def _ac(ctx: Ctx, data: dict[str, Any]) -> dict[str, Any]:
    """The [activation_checkpoint] table 0.2.2's reader takes for main's policy config
    (module docstring); absent: main's default, SelectiveAC (trainer.py)."""
    if "activation_checkpoint" not in data:
        ctx.note("activation_checkpoint not in the dump: torchtitan main's default, "
                 "SelectiveAC (per-op selective checkpointing)")
        return {"mode": "selective", "selective_ac_option": "op"}
    value = data["activation_checkpoint"]
    if value is None:
        return {"mode": "none"}
    if not isinstance(value, dict):
        raise ctx.bad(f"activation_checkpoint is {show(value)}; expected a policy config's "
                      "mapping or null")
    if "memory_budget" in value:
        return {"mode": "memory_budget"}
    if "force_recompute_mm_shapes_by_fqns" in value:
        return {"mode": "selective", "selective_ac_option": "op"}
    return {"mode": "full"}


def _async_tp(ctx: Ctx, compiled: dict[str, Any]) -> None:
    """Main moved async TP to ``compile`` and refuses it without the model compiled, any
    model, any tp (configs.py CompileConfig.__post_init__)."""
    if not _flag(ctx, compiled, "compile", "enable_async_tensor_parallel", False):
        return
    components = compiled.get("components", ["model", "loss"])
    if _flag(ctx, compiled, "compile", "enable", False) and isinstance(
            components, list) and "model" in components:
        return
    ctx.refuse("torchtitan-async-tp",
               "compile.enable_async_tensor_parallel without the model compiled: torchtitan "
               "raises 'Async TP requires 'model' in --compile.components and "
               "--compile.enable' (torchtitan/config/configs.py CompileConfig.__post_init__); "
               "compile the model or turn async TP off")
