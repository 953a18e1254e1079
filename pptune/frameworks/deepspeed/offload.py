"""DeepSpeed's ZeRO-Offload settings: what a config keeps off the GPU.

``zero_optimization.offload_optimizer`` (ZeRO stage 1 and up) and ZeRO-3's
``offload_param``, with ``device`` none, cpu or nvme (deepspeed/runtime/zero/
offload_config.py ``OffloadDeviceEnum``), and the older ``cpu_offload``. Where the
state goes: "cpu" keeps it in host memory; "nvme" swaps it to the NVMe drive under
``nvme_path`` at ZeRO-3 (runtime/zero/stage3.py ``_configure_tensor_swapping``,
runtime/zero/partition_parameters.py), while ZeRO-1/2's optimizer
(runtime/zero/stage_1_and_2.py ``DeepSpeedZeroOptimizer``) takes any device but none
as the CPU. Either way it is not counted on the GPU (``TrainingConfig.offload_optimizer``,
``offload_params``); the host's optimizer step and the PCIe and NVMe copies are not
priced.
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
    devices: dict[str, str] = {}
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
        devices[field] = str(device)
    if section.get("cpu_offload") is True and stage >= 1:  # DeepSpeed before 0.3.14
        out["offload_optimizer"] = True
        devices.setdefault("offload_optimizer", "cpu")
    if out:
        ctx.unmodelled("deepspeed-offload",
                       f"ZeRO-Offload ({_where(devices, stage)}): that state is not counted on "
                       "the GPU; the host's optimizer step and the copies each step (PCIe, and "
                       "NVMe reads and writes) are not priced, so the predicted step is a "
                       "lower bound")
    return out


def _where(devices: dict[str, str], stage: int) -> str:
    """Where each offloaded state goes, as the module docstring says DeepSpeed puts it."""
    names = {"offload_optimizer": "the optimizer state", "offload_params": "the parameters"}
    nvme = "NVMe, nvme_path"
    places = {field: nvme if device == "nvme" and stage == 3 else "host memory"
              for field, device in devices.items()}
    if len(set(places.values())) == 1 and len(places) > 1:
        return f"{' and '.join(names[f] for f in places)} to {next(iter(places.values()))}"
    said = ", ".join(f"{names[f]} to {place}" for f, place in places.items())
    if devices.get("offload_optimizer") == "nvme" and stage < 3:
        said += (f": at ZeRO stage {stage} DeepSpeed's optimizer takes device \"nvme\" as the "
                 "CPU, runtime/zero/stage_1_and_2.py DeepSpeedZeroOptimizer")
    return said
