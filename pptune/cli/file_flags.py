"""The flags that fill what a training config leaves open: check-config and calibrate.

A file may leave its GPU count open (a torchtitan ``data_parallel_shard_degree =
-1``, a DeepSpeed JSON, a launch script that takes its node count from the
scheduler), or its pipeline or tensor-parallel size, its node size or its batch.
These flags fill them where the file is silent (the file wins:
``pptune.frameworks.common.fields.apply_flags``); ``--env`` gives a launch script
the variables it reads from its environment. Declared once here: check-config
takes one value of each, calibrate one per ``--run`` (pptune/cli/calibrate.py);
``--framework-version`` is check-config's and recommend's (with --framework or --emit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import typer

from pptune import limits

# parameter -> (flag, help, largest value); the order check-config lists them in
SIZES: dict[str, tuple[str, str, int]] = {
    "pp": ("--pp", "pipeline size when the file lacks it", limits.MAX_GPUS),
    "gpus": ("--gpus", "GPU count when the file lacks it", limits.MAX_GPUS),
    "tp": ("--tp", "tensor-parallel size when the file lacks it", limits.MAX_TP),
    "gpus_per_node": ("--gpus-per-node", "GPUs per node (NVLink domain) when the file lacks "
                      "it [default: the GPU's]", limits.MAX_GPUS),
    "micro_batch_size": ("--micro-batch-size", "micro-batch size when the file lacks it (a "
                         "DeepSpeed \"auto\", an unresolved --micro-batch-size $MBS)",
                         limits.MAX_MICRO_BATCH),
    "global_batch": ("--global-batch", "global batch (samples a step) when the file lacks it",
                     limits.MAX_GLOBAL_BATCH),
}
FRAMEWORK_VERSION_HELP = (
    "rules of another release: NAME=VERSION (deepspeed, megatron-core, torchtitan, torch) or "
    "a bare version for the config's framework; repeatable")
ENV_HELP = ("NAME=VALUE: a variable a launch script takes from its environment "
            "(${NNODES:-1}, $SLURM_NNODES); repeatable; the script's own assignments win")


def size_option(name: str, more: str = "") -> Any:
    """The typer option of one size flag (``more``: a clause the command adds to its help)."""
    flag, text, _ = SIZES[name]
    return typer.Option(None, flag, help=text + more, metavar="<int>")


def env_option(more: str = "") -> Any:
    return typer.Option(None, "--env", help=ENV_HELP + more, metavar="<NAME=VALUE>")


def framework_version_option(more: str = "") -> Any:
    """``--framework-version NAME=VERSION``, repeatable: check-config's rules of another
    release, recommend's ranking and --emit's files for one (parsed by frameworks/read.py versions_of)."""
    return typer.Option(None, "--framework-version", metavar="<NAME=VERSION>",
                        help=FRAMEWORK_VERSION_HELP + more)


def size_problems(values: Mapping[str, int | None]) -> list[str]:
    """One clause per size flag out of its range (``values``: parameter -> value)."""
    return limits.problems(*(
        limits.problem(flag, value, 1, most) for name, (flag, _, most) in SIZES.items()
        if (value := values.get(name)) is not None))
