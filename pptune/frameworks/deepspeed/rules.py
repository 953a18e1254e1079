"""DeepSpeed's pipeline rules, as check-config applies them (0.19.8).

``TrainSchedule`` (deepspeed/runtime/pipe/schedule.py) runs any number of
micro-batches (GA) on any number of stages: no micro-batch rule. The
PipelineEngine (deepspeed/runtime/pipe/engine.py) refuses ZeRO-2/3, and AutoTP
builds its own data x tensor-parallel mesh with no pipeline dimension; before
0.19.4 AutoTP also refused ZeRO-3 (``autotp_zero3``).
"""

from __future__ import annotations

import json

from pptune.frameworks.common.adapter import Add
from pptune.frameworks.common.source import Repeated
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.deepspeed.partition import DEEPSPEED
from pptune.schemas import TrainingConfig

# deepspeed/runtime/engine.py _configure_tensor_parallel_states, up to v0.19.3
AUTOTP_ZERO3_ASSERT = ("Currently, the compatibility between 'autotp' and 'zero_stage = 3' "
                       "has not been validated")


def autotp_zero3(versions: Versions | None) -> bool:
    """Whether the release trains AutoTP (autotp_size > 1) with ZeRO stage 3: from 0.19.4,
    where PR #8167 dropped the engine's ``zero_optimization_stage() <= 2`` assert
    (AUTOTP_ZERO3_ASSERT) and PR #8168 made ZeRO-3 training with AutoTP supported
    (engine.py: "AutoTP + ZeRO stage 3 is supported for both inference and training")."""
    return (versions or Versions()).at_least(DEEPSPEED, 0, 19, 4)


def zero_rule(cfg: TrainingConfig, add: Add, versions: Versions | None = None) -> None:
    """DeepSpeed PipelineEngine.__init__ asserts 'ZeRO-2 and ZeRO-3 are incompatible with
    pipeline parallelism' (deepspeed/runtime/pipe/engine.py); AutoTP has no pipeline
    dimension, and before 0.19.4 no ZeRO-3 (``autotp_zero3``)."""
    if cfg.zero_stage >= 2 and cfg.pp > 1:
        add("deepspeed-zero-pp", "error",
            f"ZeRO stage {cfg.zero_stage} with pipeline parallelism (pp={cfg.pp}): DeepSpeed's "
            "PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline "
            "parallelism' (deepspeed/runtime/pipe/engine.py); use stage 0 or 1",
            zero_stage=cfg.zero_stage)
    if cfg.tp > 1 and cfg.pp > 1:
        # engine.py _configure_tensor_parallel_states: self.mpu = groups, whose
        # _init_tp_mesh_device builds a (world / tp, tp) mesh: the pipeline's topology is
        # replaced, its dp becomes world / tp and the batch no longer adds up
        add("deepspeed-autotp-pp", "error",
            f"AutoTP (tensor_parallel.autotp_size {cfg.tp}) with pipeline parallelism "
            f"(pp={cfg.pp}): DeepSpeed's engine replaces the pipeline's topology with AutoTP's "
            "data x tensor-parallel mesh (deepspeed/utils/groups.py _init_tp_mesh_device), "
            "which has no pipeline dimension; use AutoTP without a pipeline, or pp with tp 1",
            tp=cfg.tp, pp=cfg.pp)
    if cfg.tp > 1 and cfg.zero_stage >= 3 and not autotp_zero3(versions):
        release = (versions or Versions()).of(DEEPSPEED)
        add("deepspeed-autotp-zero3", "error",
            f"AutoTP (tensor_parallel.autotp_size {cfg.tp}) with ZeRO stage "
            f"{cfg.zero_stage}: DeepSpeed {release}'s engine asserts "
            f'"{AUTOTP_ZERO3_ASSERT}" (deepspeed/runtime/engine.py '
            "_configure_tensor_parallel_states; 0.19.4 trains it, PRs #8167 and #8168); "
            "use ZeRO stage 2 or lower, or DeepSpeed 0.19.4 or later",
            tp=cfg.tp, zero_stage=cfg.zero_stage)


def duplicate_keys(found: Repeated) -> str:
    """DeepSpeedConfig loads a config file with ``hjson.load(..., object_pairs_hook=
    dict_raise_error_on_duplicate_keys)`` (deepspeed/runtime/config.py), which raises
    ``ValueError("Duplicate keys in DeepSpeed config: {}".format(keys))`` for the first
    object with a repeated key, listing that object's repeated keys
    (deepspeed/runtime/config_utils.py)."""
    key = json.dumps(found.keys[0], ensure_ascii=False)[:40]
    return (f"{key} {found.written(' in one object')}: DeepSpeedConfig raises ValueError: "
            f"Duplicate keys in DeepSpeed config: {list(found.keys)} (deepspeed/runtime/"
            "config.py loads the file with object_pairs_hook=dict_raise_error_on_duplicate_keys, "
            "deepspeed/runtime/config_utils.py); keep one")
