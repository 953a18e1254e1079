"""DeepSpeed's ZeRO-Offload settings: what a config keeps off the GPU.

``zero_optimization.offload_optimizer`` (ZeRO stage 1 and up) and ZeRO-3's
``offload_param``, with ``device`` none, cpu or nvme (deepspeed/runtime/zero/
offload_config.py ``OffloadDeviceEnum``), and the deprecated ``cpu_offload`` /
``cpu_offload_param`` (read as DeepSpeed reads them, ``DEPRECATED`` below). Where the
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
# DeepSpeedZeroConfig's deprecated fields (deepspeed/runtime/zero/config.py, DeepSpeed
# 0.19.8) -> the field each sets ("": none). DeepSpeedConfigModel._process_deprecated_field
# (runtime/config_utils.py) logs "Config parameter K is deprecated use NEW instead" for a
# key present (null too; "auto" is dropped before); then sets NEW from it, true ->
# {"device": "cpu"} and false or null -> none, and asserts "Cannot provide deprecated
# parameter 'K' and replacing parameter 'NEW' together" when the file states NEW as well.
DEPRECATED = {"cpu_offload": "offload_optimizer", "cpu_offload_param": "offload_param",
              "cpu_offload_use_pin_memory": ""}
# what pydantic 2 takes for a bool outside strict mode (DeepSpeedZeroConfig's Optional[bool])
_LAX_BOOLS = {**dict.fromkeys(("1", "on", "t", "true", "y", "yes"), True),
              **dict.fromkeys(("0", "off", "f", "false", "n", "no"), False)}


def read_offload(ctx: Ctx, section: Any, stage: int) -> dict[str, bool]:
    """zero_optimization.offload_optimizer / offload_param (and the deprecated cpu_offload
    / cpu_offload_param): what ZeRO-Offload keeps in host memory (deepspeed/runtime/zero/
    offload_config.py; offload_param is ZeRO-3's, the optimizer's needs a ZeRO stage)."""
    if not isinstance(section, dict):
        return {}
    section, said = _replace_deprecated(ctx, section)
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
            ctx.note(f"zero_optimization.{said.get(key, key)} ignored at ZeRO stage {stage} "
                     f"(it takes stage {least} or more)")
            continue
        out[field] = True
        devices[field] = str(device)
    if out:
        ctx.unmodelled("deepspeed-offload",
                       f"ZeRO-Offload ({_where(devices, stage)}): that state is not counted on "
                       "the GPU; the host's optimizer step and the copies each step (PCIe, and "
                       "NVMe reads and writes) are not priced, so the predicted step is a "
                       "lower bound")
    return out


def _replace_deprecated(ctx: Ctx, section: dict[str, Any]
                        ) -> tuple[dict[str, Any], dict[str, str]]:
    """The section as DeepSpeed's model holds it once its deprecated keys are processed
    (DEPRECATED), and which stated key each offload setting came from, for notes."""
    out, said = dict(section), {}
    for old, new in DEPRECATED.items():
        if old not in section or section[old] == "auto":
            continue
        value = section[old]
        on = False if value is None else _lax_bool(value)
        if on is None:
            raise ctx.bad(f"zero_optimization.{old} is {show(value)[:40]}; DeepSpeedZeroConfig "
                          "takes true or false (a pydantic bool): set true or false, or "
                          f"{'use ' + new + ' instead' if new else 'remove it'}")
        ctx.warn("deepspeed-deprecated-key",
                 f"zero_optimization.{old}: DeepSpeed logs 'Config parameter {old} is "
                 f"deprecated use {new or 'offload_param or offload_optimizer'} instead' "
                 "(deepspeed/runtime/zero/config.py DeepSpeedZeroConfig, runtime/"
                 "config_utils.py _process_deprecated_field)"
                 + (f"; read as {new} {{\"device\": \"cpu\"}}" if new and on else ""))
        if not new:
            continue
        if new in section:
            ctx.refuse("deepspeed-deprecated-key",
                       f"zero_optimization.{old} with zero_optimization.{new}: DeepSpeed "
                       f"asserts 'Cannot provide deprecated parameter '{old}' and replacing "
                       f"parameter '{new}' together' (runtime/config_utils.py "
                       f"_process_deprecated_field); keep {new} alone")
            continue  # read the new key
        out[new] = {"device": "cpu"} if on else None
        said[new] = old
    return out, said


def _lax_bool(value: Any) -> bool | None:
    """The bool pydantic 2 makes of ``value`` outside strict mode, None where it refuses it
    (pydantic's "Input should be a valid boolean")."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _LAX_BOOLS.get(value.lower())
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    return None


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
