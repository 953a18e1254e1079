"""How torchtitan splits a model into pipeline stages, re-stated from its source.

torchtitan 0.2.2 (its latest release, the last that reads TOML job files; its head
module is ``output``) and the main branch after it (configs are Python; the head is
``lm_head``): ``torchtitan/distributed/pipeline_parallel.py`` (``pipeline_llm``,
``generate_llm_fqn_per_model_part``, ``pipeline_module_split``). No 0.3.0 has been
released (pytorch/torchtitan's tags end at v0.2.2, and main's assets/version.txt still
reads 0.2.2): ``--framework-version torchtitan=0.3.0`` is pptune's name for main after
0.2.2.
"""

from __future__ import annotations

import math

from pptune.frameworks.common.versions import FrameworkRefusal, VersionKey, Versions

TORCHTITAN = VersionKey(
    "torchtitan", ("torchtitan",), "0.2.2",
    "torchtitan 0.2.2 torchtitan/distributed/pipeline_parallel.py and "
    "torchtitan/config/job_config.py; main after 0.2.2 (named 0.3.0, unreleased) for the "
    "head's module name", newest="0.3.0")
TOML_RELEASE = TORCHTITAN.default  # the last release that reads TOML job files


def head(versions: Versions) -> str:
    """The LM head's module name: ``output`` up to 0.2.2, ``lm_head`` on main after it,
    "0.3.0" (torchtitan/distributed/pipeline_parallel.py, generate_llm_fqn_per_model_part)."""
    return "lm_head" if versions.at_least(TORCHTITAN, 0, 3) else "output"


def reads_toml(versions: Versions) -> bool:
    """torchtitan's main branch replaced TOML job files by Python config functions after
    0.2.2 (PR #2386), which "0.3.0" names (no release has it yet)."""
    return not versions.at_least(TORCHTITAN, 0, 3)


def torchtitan_stage_count(num_layers: int, layers_per_stage: int, input_weight: int = 1,
                           output_weight: int = 1) -> int:
    """Stages from pipeline_parallel_layers_per_stage (torchtitan pipeline_llm):
    ceil((layers + input_weight + output_weight) / layers_per_stage)."""
    return math.ceil((num_layers + input_weight + output_weight) / layers_per_stage)


def torchtitan_fqns(num_stages: int, num_layers: int, head: str = "output",
                    input_weight: int = 1, output_weight: int = 1, *,
                    main: bool = False) -> list[list[str]]:
    """Module names per stage as torchtitan's ``generate_llm_fqn_per_model_part``
    builds them: the embedding and the head (with the norm) count as
    input_weight / output_weight layers, the first ``effective % stages``
    stages get one layer more. FrameworkRefusal with torchtitan's message (``main``: in
    main's words, naming the keys a dump states, ``_main_refusal``)."""
    if num_stages == 1:
        return [["tok_embeddings", *(f"layers.{i}" for i in range(num_layers)), "norm", head]]
    effective = num_layers + input_weight + output_weight
    per, extra = divmod(effective, num_stages)
    if main:
        _main_refusal(num_stages, num_layers, input_weight, output_weight)
    if num_stages > effective:
        raise FrameworkRefusal(
            "torchtitan-too-many-stages",
            f"Number of stages ({num_stages}) cannot be greater than effective layers "
            f"({effective}) (torchtitan generate_llm_fqn_per_model_part)")
    if input_weight > per or output_weight > per:
        raise FrameworkRefusal(
            "torchtitan-weights",
            f"input/output weight ({input_weight}/{output_weight}) exceeds minimum layers per "
            f"stage ({per}) (torchtitan generate_llm_fqn_per_model_part)")
    parts, layer = [], 0
    for stage in range(num_stages):
        size = per + (stage < extra)
        names: list[str] = []
        if stage == 0:
            names.append("tok_embeddings")
            size -= input_weight
        elif stage == num_stages - 1:
            size -= output_weight
        names += [f"layers.{i}" for i in range(layer, layer + size)]
        layer += size
        if stage == num_stages - 1:
            names += ["norm", head]
        parts.append(names)
    return parts


MAIN_SPLIT = "(torchtitan/distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part)"
# main's keys of the input and output weights (torchtitan/config/configs.py
# ParallelismConfig; pipeline_parallel.py pipeline_llm passes them as the weights)
WEIGHT_KEYS = ("pipeline_parallel_first_stage_less_layers",
               "pipeline_parallel_last_stage_less_layers")


def _main_refusal(stages: int, layers: int, first: int, last: int) -> None:
    """main's ``_generate_llm_fqn_per_model_part`` refusals, in its order (the stage
    count, then the input weight, then the output weight) and words, with the keys that
    set the weights."""
    effective = layers + first + last
    if stages > effective:
        raise FrameworkRefusal(
            "torchtitan-too-many-stages",
            f"{stages} stages over {effective} effective layers ({layers} blocks + "
            f"{WEIGHT_KEYS[0]} {first} + {WEIGHT_KEYS[1]} {last}): torchtitan raises "
            f"'Number of stages ({stages}) cannot be greater than effective layers "
            f"({effective})' {MAIN_SPLIT}")
    per = effective // stages
    for key, name, weight in ((WEIGHT_KEYS[0], "input_weight", first),
                              (WEIGHT_KEYS[1], "output_weight", last)):
        if weight > per:
            raise FrameworkRefusal(
                "torchtitan-weights",
                f"parallelism.{key} {weight} exceeds the layers a stage, ({layers} blocks + "
                f"{first} + {last}) // {stages} stages = {per}: torchtitan raises '{name} "
                f"({weight}) exceeds minimum layers per stage ({per}).' {MAIN_SPLIT}")
