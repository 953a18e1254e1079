"""The models torchtitan 0.2.2 registers (its TrainSpecs and their flavors), and what
their parallelize functions refuse.

torchtitan 0.2.2's Trainer (torchtitan/train.py) imports ``[experimental]
custom_import`` first, then looks the model up: ``get_train_spec(job_config.model.name)``
(torchtitan/protocols/train_spec.py) returns a TrainSpec registered by such a module
(``register_train_spec``), else one of ``_supported_models`` (torchtitan/models/__init__.py)
or ``_supported_experiments`` (torchtitan/experiments/__init__.py), else raises
"TrainSpec {name} is not registered."; then ``self.train_spec.model_args[
job_config.model.flavor]`` raises KeyError for a flavor its dict lacks (a case-sensitive
key). ``FLAVORS`` are those dicts' keys (torchtitan/models/<name>/__init__.py; the
experiments that reuse llama3's and deepseek_v3's). Other releases register other sets
(0.2.0 had no gpt_oss, 0.2.1 kept it under experiments), so these are errors for 0.2.2
only.

Async tensor parallelism needs the model compiled: with ``tensor_parallel_degree`` above 1
and ``enable_async_tensor_parallel``, the llama3, llama3_ft, llama4 and deepseek_v3
parallelize functions call ``maybe_enable_async_tp`` (torchtitan/distributed/
tensor_parallel.py), which raises "Async TP requires 'model' in --compile.components and
--compile.enable" (0.2.1 and 0.2.2; 0.2.0: "Async TP requires --training.compile"
there, as 0.1.0's parallelize_llama did), and qwen3's and gpt_oss's raise "Async TP
requires torch.compile" (models/<name>/infra/parallelize.py).
"""

from __future__ import annotations

import difflib
from typing import Any

from pptune.costmodel.presets import MODELS
from pptune.frameworks.common.fields import Ctx, show
from pptune.frameworks.torchtitan.fqns import TORCHTITAN, reads_toml
from pptune.frameworks.torchtitan.table import Table, compiles

# torchtitan/models/__init__.py _supported_models
SUPPORTED = ("deepseek_v3", "flux", "gpt_oss", "llama3", "llama3_ft", "llama4", "qwen3")
_LLAMA3 = ("debugmodel", "debugmodel_flex_attn", "debugmodel_varlen_attn", "8B", "8B_flex",
           "8B_varlen", "70B", "405B")
_DEEPSEEK_V3 = ("debugmodel", "debugmodel_flex_attn", "16B", "236B", "671B")
# model name -> its flavors (None: a registered experiment whose flavors pptune does not list)
FLAVORS: dict[str, tuple[str, ...] | None] = {
    "deepseek_v3": _DEEPSEEK_V3,
    "flux": ("flux-dev", "flux-schnell", "flux-debug"),
    "gpt_oss": ("debugmodel", "20b", "120b"),
    "llama3": _LLAMA3,
    "llama3_ft": _LLAMA3,
    "llama4": ("debugmodel", "17bx16e", "17bx128e", "debugmodel_irope", "17bx16e_irope",
               "17bx128e_irope"),
    "qwen3": ("debugmodel", "0.6B", "1.7B", "4B", "8B", "14B", "32B", "debugmodel_moe",
              "30B-A3B", "235B-A22B"),
    "simple_fsdp.llama3": _LLAMA3, "simple_fsdp.deepseek_v3": _DEEPSEEK_V3,
    "compiler_toolkit.llama3": _LLAMA3, "compiler_toolkit.deepseek_v3": _DEEPSEEK_V3,
    "autoparallel.llama3": _LLAMA3, "vlm": ("debugmodel",),
    "transformers_modeling_backend": ("debugmodel", "full"),
    "autoparallel.deepseek_v3": None, "autoparallel.local_map_deepseek_v3": None,
}
SPECS = "torchtitan/protocols/train_spec.py get_train_spec"
# the models whose parallelize function raises for async TP without a compiled model, and
# its words (module docstring); those of 0.1.0 - 0.2.0 in OLD_ASYNC
ASYNC_TP = {**{n: ("Async TP requires 'model' in --compile.components and --compile.enable",
                   "torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp")
               for n in ("llama3", "llama3_ft", "llama4", "deepseek_v3", "simple_fsdp.llama3",
                         "simple_fsdp.deepseek_v3", "transformers_modeling_backend")},
            **{n: ("Async TP requires torch.compile",
                   f"torchtitan/models/{n}/infra/parallelize.py") for n in ("qwen3", "gpt_oss")}}
OLD_ASYNC = "Async TP requires --training.compile"
# the flavor recommend --emit torchtitan names for a pptune preset torchtitan does not ship,
# beside [model] name = the preset (writer.py: a TrainSpec the user registers)
CUSTOM = "custom"


def custom_preset(ctx: Ctx, name: str, flavor: str) -> str | None:
    """The pptune preset of a file that names it as recommend --emit torchtitan writes a
    model torchtitan does not ship ([model] name the preset, flavor "custom"), with a
    note; None for any other name or flavor."""
    if flavor != CUSTOM or name not in MODELS:
        return None
    ctx.note(f"model {name} flavor {CUSTOM} read as pptune's {name} preset (the TrainSpec "
             "recommend --emit torchtitan names for a model torchtitan does not ship); "
             "--model or --hf-config names another")
    return name


def read_model(ctx: Ctx, data: dict[str, Any], name: str, flavor: str) -> None:
    """torchtitan 0.2.2's refusal of a model name or flavor it does not register, a
    warning where ``[experimental] custom_import`` may register it."""
    versions = ctx.semantics.versions
    if not (versions.at_least(TORCHTITAN, 0, 2, 2) and reads_toml(versions)):
        return  # the sets are 0.2.2's
    known = FLAVORS.get(name, ())
    if name in FLAVORS and (known is None or flavor in known):
        return
    custom = Table(ctx, "experimental", data).data.get("custom_import")
    if name not in FLAVORS:
        said = (f"model.name {show(name)}: torchtitan 0.2.2 registers no such TrainSpec: "
                f"{SPECS} raises 'TrainSpec {name[:40]} is not registered.' (it registers "
                f"{', '.join(SUPPORTED)} and the experiments of "
                "torchtitan/experiments/__init__.py)"
                + _close(name, list(FLAVORS)))
    else:
        said = (f"model.flavor {show(flavor)}: torchtitan 0.2.2's {name} has no such flavor: "
                "train.py's train_spec.model_args[job_config.model.flavor] raises KeyError "
                f"(its flavors, torchtitan/models/{name.split('.')[-1]}/__init__.py: "
                f"{', '.join(known or ())})" + _close(flavor, list(known or ())))
    if isinstance(custom, str) and custom:
        ctx.unmodelled("torchtitan-model", f"{said}; [experimental] custom_import "
                       f"{show(custom)} may register it (pptune does not load it)")
    else:
        ctx.refuse("torchtitan-model", f"{said}; a TrainSpec of your own is registered by the "
                   "module [experimental] custom_import names (register_train_spec)")


def _close(text: str, names: list[str]) -> str:
    """"; did you mean X?" for a name that differs in case or a letter or two."""
    exact = [n for n in names if n.lower() == text.lower()]
    close = exact or difflib.get_close_matches(text, names, n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def async_tp_rules(ctx: Ctx, data: dict[str, Any], par: Table, name: str, tp: int) -> None:
    """Async tensor parallelism without the model compiled: the model's parallelize raises
    (module docstring) where tp is above 1; a model pptune does not know is left alone."""
    if tp == 1 or not par.flag("enable_async_tensor_parallel", False) or name not in ASYNC_TP:
        return
    if compiles(ctx, data, "model"):
        return
    said, where = ASYNC_TP[name]
    versions = ctx.semantics.versions
    if said != "Async TP requires torch.compile" and not versions.at_least(TORCHTITAN, 0, 2, 1):
        said, where = OLD_ASYNC, f"torchtitan {versions.of(TORCHTITAN)}'s parallelize functions"
    ctx.refuse("torchtitan-async-tp",
               f"parallelism.enable_async_tensor_parallel with tensor_parallel_degree {tp} and "
               "the model not compiled ([compile] enable with \"model\" in components): "
               f"torchtitan raises '{said}' ({where}); compile the model or set "
               "enable_async_tensor_parallel = false")
