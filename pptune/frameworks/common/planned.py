"""The ``# pptune-plan:`` line ``recommend --emit`` writes into a Megatron-LM script or a
torchtitan file: the GPU preset (and a Hugging Face config, for a model no preset names)
the plan was made for, the GPUs a node holds where that is not the GPU's own, and the
routing imbalance a mixture of experts was priced with, and the parallel sizes the
command held (``held=tp,pp``: check-config's best-plan comparison keeps the file's), which
the framework's own keys do not state. check-config takes
each where the file states none (the command line's --gpu, --model and --hf-config
still win), with a note; an unknown GPU or a malformed value is left out with a note."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from pptune.costmodel.presets import GPUS
from pptune.frameworks.common.fields import MAX_DEVICES, Ctx
from pptune.schemas import TrainingConfig
from pptune.schemas.limits import HELD

PLAN_LINE = "pptune-plan:"
_LINE = re.compile(r"^\s*#\s*pptune-plan:[ \t]*(.*)$", re.MULTILINE)
MAX_HF_PATH = 4096
MAX_IMBALANCE = float(1 << 20)  # TrainingConfig.moe_routing_imbalance's bound


def planned_for(text: str, config: TrainingConfig, ctx: Ctx,
                gpu_flag: str | None = None) -> TrainingConfig:
    """``config`` with the GPU and Hugging Face config of the file's plan line where it
    states neither; ``gpu_flag`` (check-config's --gpu), when it names another GPU than
    the line, is the one priced, and the config and the note say so."""
    found = _LINE.search(text)
    if found is None:
        return config
    pairs = dict(word.split("=", 1) for word in found.group(1).split() if "=" in word)
    update: dict[str, str | int | float] = {}
    gpu = pairs.get("gpu")
    said = ""
    if gpu is not None and config.gpu is None:
        if gpu_flag is not None and gpu_flag != gpu:
            update["gpu"] = gpu_flag
            said = (f"gpu {gpu_flag} from --gpu, which overrides gpu {gpu[:40]} of the file's "
                    f"'# {PLAN_LINE}' line (what recommend --emit planned for)")
        elif gpu in GPUS:
            update["gpu"] = gpu
        else:
            ctx.note(f"'# {PLAN_LINE}' names gpu {gpu[:40]!r}, not a preset: left out")
    per_node = pairs.get("gpus_per_node", "")
    if per_node and "gpus_per_node" not in config.model_fields_set:
        if per_node.isdigit() and 1 <= int(per_node) <= MAX_DEVICES:
            update["gpus_per_node"] = int(per_node)
        else:
            ctx.note(f"'# {PLAN_LINE}' names gpus_per_node {per_node[:20]!r}, not a count: "
                     "left out")
    imbalance = pairs.get("moe_imbalance", "")
    if imbalance and config.moe_routing_imbalance is None:
        try:
            value = float(imbalance)
        except ValueError:
            value = math.nan
        if 1.0 <= value <= MAX_IMBALANCE:
            update["moe_routing_imbalance"] = value
        else:
            ctx.note(f"'# {PLAN_LINE}' names moe_imbalance {imbalance[:20]!r}, not a ratio "
                     f"from 1 to {MAX_IMBALANCE:g}: left out")
    hf = pairs.get("hf_config")
    if hf is not None and config.model is None and config.hf_config is None:
        if 0 < len(hf) <= MAX_HF_PATH:
            update["hf_config"] = hf
    config = _held(pairs.get("held", ""), config, ctx)
    if not update:
        return config
    if said:
        ctx.note(said)
    rest = {k: v for k, v in update.items() if not (said and k == "gpu")}
    if rest:
        ctx.note(", ".join(f"{k} {v}" for k, v in rest.items())
                 + f" from the file's '# {PLAN_LINE}' line (what recommend --emit planned for"
                 + _imbalance_replaces(ctx, "moe_routing_imbalance" in update) + ")")
    return config.model_copy(update=update)


def _imbalance_replaces(ctx: Ctx, given: bool) -> str:
    """Where the line's imbalance is priced, the reader's note that routing is priced
    balanced (the file's flags state none) is dropped, and the line's note says why."""
    balanced = ctx.semantics.balanced_routing
    if not given or balanced is None or balanced not in ctx.notes:
        return ""
    ctx.notes.remove(balanced)
    return "; the file's flags state no routing imbalance"


def _held(said: str, config: TrainingConfig, ctx: Ctx) -> TrainingConfig:
    """``config`` with the line's ``held=tp,pp`` as its ``limits.held`` (where the file's
    limits state none), said in a note; a size pptune does not hold is left out, said."""
    if not said:
        return config
    if "held" in config.limits.model_fields_set:  # pptune's own format: its limits win
        ctx.note(f"'# {PLAN_LINE}' holds {said[:40]}; the file's limits.held wins")
        return config
    names = said.lower().split(",")
    held = [n for n in HELD if n in names]
    odd = [n[:20] for n in names if n not in HELD]
    if odd:
        ctx.note(f"'# {PLAN_LINE}' holds {', '.join(map(repr, odd[:3]))}, not a parallel "
                 f"size ({', '.join(HELD)}): left out")
    if not held:
        return config
    ctx.note(held_note(held, f"the file's '# {PLAN_LINE}' line"))
    limits = config.limits.model_copy(update={"held": held})
    return config.model_copy(update={"limits": limits})


HELD_NOTE = "the best-plan comparison keeps the file's "  # how held_note begins


def held_note(held: Sequence[str], where: str) -> str:
    """The note that the best-plan comparison keeps the ``held`` sizes, stated ``where``
    (check-config drops it under --no-compare: no comparison runs)."""
    them = "it" if len(held) == 1 else "them"
    return (f"{HELD_NOTE}{', '.join(held)}: {where} holds "
            f"{them} (recommend --emit writes the sizes a flag held; delete held to compare "
            "every size)")
