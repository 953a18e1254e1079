"""DeepSpeed's ZeRO-Offload settings: what a config keeps in host memory.

``zero_optimization.offload_optimizer`` (ZeRO stage 1 and up) and ZeRO-3's
``offload_param``, with ``device`` none, cpu or nvme (deepspeed/runtime/zero/
offload_config.py ``OffloadDeviceEnum``), and the older ``cpu_offload``. What they
keep on the host is not counted on the GPU (``TrainingConfig.offload_optimizer``,
``offload_params``); the host's optimizer step and the PCIe copies are not priced.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.fields import Ctx, show

OFFLOAD_DEVICES = ("none", "cpu", "nvme")  # DeepSpeed's OffloadDeviceEnum


def read_offload(ctx: Ctx, section: Any, stage: int) -> dict[str, bool]:
    """zero_optimization.offload_optimizer / offload_param (and the older cpu_offload):
    what ZeRO-Offload keeps in host memory (deepspeed/runtime/zero/offload_config.py;
    offload_param is ZeRO-3's, the optimizer's needs a ZeRO stage)."""
    if not isinstance(section, dict):
        return {}
    out = {}
    for key, field, least in (("offload_optimizer", "offload_optimizer", 1),
                              ("offload_param", "offload_params", 3)):
        value = section.get(key)
        if value is None:
            continue
        device = value.get("device", "none") if isinstance(value, dict) else value
        if device not in OFFLOAD_DEVICES:
            ctx.refuse("deepspeed-offload-device",
                       f"zero_optimization.{key}.device is {show(device)[:40]}: DeepSpeed's "
                       f"offload config takes {', '.join(OFFLOAD_DEVICES)} (offload_config.py)")
            continue
        if device == "none":
            continue
        if stage < least:
            ctx.note(f"zero_optimization.{key} ignored at ZeRO stage {stage} (it takes "
                     f"stage {least} or more)")
            continue
        out[field] = True
    if section.get("cpu_offload") is True and stage >= 1:  # DeepSpeed before 0.3.14
        out["offload_optimizer"] = True
    if out:
        what = " and ".join(k.replace("_", " ") for k in out)
        ctx.unmodelled("deepspeed-offload",
                       f"ZeRO-Offload ({what} to the host): that state is not counted on the "
                       "GPU; the host's optimizer step and the PCIe copies each step are not "
                       "priced, so the predicted step is a lower bound")
    return out
