"""A launch script whose ``srun`` starts the pretrain_*.py processes itself: the job's GPU
count and processes per node, from srun's options over the script's ``#SBATCH`` ones.

Megatron-LM takes its world size from the environment (megatron/training/arguments.py
``args.world_size = int(os.getenv("WORLD_SIZE", '1'))``): under srun, with no torchrun
between, that is the job step's task count, each task one rank driving one GPU (NVIDIA's
MoE recipes launch so: Megatron-Bridge scripts/moe_model_zoo/sbatch_benchmarking.sh,
``#SBATCH --nodes`` and ``--ntasks-per-node=8`` then ``srun ... python``). Slurm's own
rules (srun(1), sbatch(1)): ``-N``/``--nodes`` takes ``min[-max]`` nodes, ``-n``/
``--ntasks`` the tasks in all, ``--ntasks-per-node`` the tasks a node, one task a node
when neither says more; srun inside an allocation inherits the batch script's options
and its own win; sbatch reads ``#SBATCH`` lines only before the script's first command,
and expands no variable in them. A torchrun (or ``python -m torch.distributed.run``,
``deepspeed``) under srun states the shape itself (reader._launcher).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from pptune.frameworks.common.fields import MAX_DEVICES, Ctx, whole_text
from pptune.frameworks.common.shell_state import holds_unresolved

# the options read, by the name used here: (long option, short option)
OPTIONS = {"nodes": ("--nodes", "-N"), "tasks": ("--ntasks", "-n"),
           "per_node": ("--ntasks-per-node", None), "gpus_per_node": ("--gpus-per-node", None)}
TORCH_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch",
                   "deepspeed")
_SBATCH = re.compile(r"^#SBATCH[ \t]+(.*)$")


def srun_launch(text: str, launcher: list[str], ctx: Ctx) -> dict[str, Any] | None:
    """``gpus`` and ``gpus_per_node`` where srun starts the ranks itself (the empty dict
    where their count is not known, with a note); None where srun does not launch them."""
    starts = [i for i, w in enumerate(launcher) if w.rpartition("/")[2] == "srun"]
    if not starts:
        return None
    after = launcher[starts[0] + 1:]
    if any(w.rpartition("/")[2] in TORCH_LAUNCHERS for w in after):
        return None
    given = _options(after)
    batch = _options(sbatch_words(text))
    if ("nodes" in given or "per_node" in given) and "tasks" not in given:
        batch.pop("tasks", None)  # srun's own shape replaces the allocation's task count
    said = {**batch, **given}
    values = {}
    for name, value in said.items():
        number = _count(ctx, name, value)
        if number is None:
            return {}
        values[name] = number
    return _shape(ctx, values)


def sbatch_words(text: str) -> list[str]:
    """The options of the ``#SBATCH`` lines before the script's first command."""
    words: list[str] = []
    for line in text.splitlines()[1:] if text.startswith("#!") else text.splitlines():
        stripped = line.strip()
        found = _SBATCH.match(stripped)
        if found is not None:
            try:
                words += shlex.split(found.group(1), comments=True)
            except ValueError:  # an unclosed quote: sbatch would refuse the line too
                continue
        elif stripped and not stripped.startswith("#"):
            break
    return words


def _options(words: list[str]) -> dict[str, str]:
    """The last value of each option read (``--opt=V``, ``--opt V``, ``-N V``, ``-NV``)."""
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        for name, (long, short) in OPTIONS.items():
            nxt = words[i + 1] if i + 1 < len(words) else None
            if word.startswith(long + "="):
                out[name] = word[len(long) + 1:]
            elif word == long and nxt is not None:
                out[name] = nxt
            elif short is not None and word == short and nxt is not None:
                out[name] = nxt
            elif short is not None and word.startswith(short) and len(word) > 2 \
                    and word[2:3].isdigit():
                out[name] = word[2:]
    return out


def _count(ctx: Ctx, name: str, value: str) -> int | None:
    """A whole count; None, with a note, where it is a variable, a node range or a GPU type
    pptune cannot turn into one."""
    option = OPTIONS[name][0]
    text = value.rpartition(":")[2] if name == "gpus_per_node" else value  # [type:]count
    if holds_unresolved(text):
        ctx.note(f"srun/#SBATCH {option} {value[:40]} is not a number pptune can resolve; "
                 "GPU count left unset (pass --gpus N)")
        return None
    low, dash, high = text.partition("-")
    if name == "nodes" and dash and low != high:
        ctx.note(f"srun/#SBATCH --nodes {value[:40]} is a range: Slurm allocates {low} to "
                 f"{high} nodes, so the GPU count is not known; pass --gpus N")
        return None
    return whole_text(ctx, f"srun/#SBATCH {option}", low if dash else text,
                      maximum=MAX_DEVICES)


def _shape(ctx: Ctx, said: dict[str, int]) -> dict[str, Any]:
    nodes, tasks, per_node = said.get("nodes"), said.get("tasks"), said.get("per_node")
    gpus_per_node = said.get("gpus_per_node")
    if tasks is None and nodes is None:
        ctx.note("srun launches the ranks, but neither srun nor an #SBATCH line states "
                 "--nodes or --ntasks: the GPU count is the allocation's; pass --gpus N")
        return {}
    if per_node is None and tasks is not None and nodes is not None and tasks % nodes == 0:
        per_node = tasks // nodes
    if tasks is None and nodes is not None:
        if per_node is None and gpus_per_node is not None and gpus_per_node > 1:
            ctx.note(f"srun starts one task a node (no --ntasks-per-node or --ntasks): "
                     f"Megatron-LM runs one rank a node, on one of its --gpus-per-node "
                     f"{gpus_per_node} GPUs; add --ntasks-per-node {gpus_per_node}")
        tasks = nodes * (per_node or 1)
    out: dict[str, Any] = {"gpus": tasks}
    if per_node is not None:
        out["gpus_per_node"] = per_node
    ctx.note(f"gpus {tasks} from srun's tasks (one rank a GPU): "
             + ", ".join(f"{OPTIONS[k][0]} {v}" for k, v in said.items()))
    return out
