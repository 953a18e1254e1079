"""What hardware the probe runs on: GPUs through NVML, else the CPU.

NVML calls used (NVIDIA Management Library reference, nvml.h; Python
bindings from the nvidia-ml-py package, module ``pynvml``):
- ``nvmlDeviceGetCount``, ``nvmlDeviceGetName``, ``nvmlDeviceGetMemoryInfo``,
  ``nvmlSystemGetDriverVersion``, ``nvmlDeviceGetPciInfo``;
- ``nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK)``: is there a
  direct NVLink path between two GPUs (NVSwitch systems included);
- ``nvmlDeviceGetNvLinkState`` / ``nvmlDeviceGetNvLinkRemotePciInfo``: per
  link, used when the P2P query is not supported by the driver;
- ``nvmlDeviceGetTopologyCommonAncestor(a, b)``: the closest common PCIe
  ancestor, reported as nvidia-smi topo -m does (PIX, PXB, PHB, NODE, SYS).

Without NVML (no driver, no GPU: ``nvmlInit`` raises
``NVMLError_LibraryNotFound``, docs/measured.md) the inventory says so in
one line and describes the CPU instead.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from typing import Any

from pptune.costmodel.presets import GPUS, gpu_key_for

# nvidia-smi topo -m legend for nvmlGpuTopologyLevel_t values.
_TOPO_NAMES = {
    0: "same board (internal)",
    10: "PIX (one PCIe switch)",
    20: "PXB (several PCIe switches)",
    30: "PHB (PCIe host bridge)",
    40: "NODE (PCIe host bridges of one NUMA node)",
    50: "SYS (across NUMA nodes: SMP interconnect)",
}


@dataclass
class PairLink:
    a: int
    b: int
    kind: str  # "NVLink" or "PCIe"
    detail: str

    def to_raw(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "kind": self.kind, "detail": self.detail}


@dataclass
class Inventory:
    kind: str  # "gpu" or "cpu"
    name: str
    memory_bytes: float
    count: int
    driver: str | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    links: list[PairLink] = field(default_factory=list)
    nvml_error: str | None = None  # why NVML could not be used, one line

    def to_raw(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "memory_bytes": self.memory_bytes,
            "count": self.count,
            "driver": self.driver,
            "gpus": self.gpus,
            "links": [link.to_raw() for link in self.links],
            "nvml_error": self.nvml_error,
        }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_inventory() -> Inventory:
    """GPU inventory through NVML; raises the module's ``NVMLError`` when NVML fails."""
    from pptune.launch.deps import import_pynvml

    nv = import_pynvml("probe", "for the GPU inventory")
    nv.nvmlInit()
    try:
        count = nv.nvmlDeviceGetCount()
        if count < 1:
            raise nv.NVMLError(nv.NVML_ERROR_NOT_FOUND)
        driver = _text(nv.nvmlSystemGetDriverVersion())
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus: list[dict[str, Any]] = []
        for i, h in enumerate(handles):
            gpus.append(
                {
                    "index": i,
                    "name": _text(nv.nvmlDeviceGetName(h)),
                    "memory_bytes": float(nv.nvmlDeviceGetMemoryInfo(h).total),
                    "pci_bus_id": _bus_id(nv, h),
                }
            )
        links = [
            pair_link(nv, handles, gpus, a, b)
            for a in range(count)
            for b in range(a + 1, count)
        ]
        return Inventory(
            kind="gpu",
            name=gpus[0]["name"],
            memory_bytes=gpus[0]["memory_bytes"],
            count=count,
            driver=driver,
            gpus=gpus,
            links=links,
        )
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


def _bus_id(nv: Any, handle: Any) -> str:
    try:
        return _text(nv.nvmlDeviceGetPciInfo(handle).busId).lower()
    except nv.NVMLError:
        return ""


def pair_link(nv: Any, handles: list[Any], gpus: list[dict[str, Any]], a: int, b: int) -> PairLink:
    """NVLink when NVML reports a direct NVLink path, else PCIe with its topology level."""
    ha, hb = handles[a], handles[b]
    try:
        status = nv.nvmlDeviceGetP2PStatus(ha, hb, nv.NVML_P2P_CAPS_INDEX_NVLINK)
        if status == nv.NVML_P2P_STATUS_OK:
            return PairLink(a, b, "NVLink", "NVML P2P status: NVLink OK")
    except (nv.NVMLError, AttributeError):
        pass  # older drivers: ask link by link below
    if _nvlink_to(nv, ha, gpus[b]["pci_bus_id"]):
        return PairLink(a, b, "NVLink", "active NVLink to the peer's PCI bus id")
    try:
        level = nv.nvmlDeviceGetTopologyCommonAncestor(ha, hb)
        detail = _TOPO_NAMES.get(int(level), f"topology level {int(level)}")
    except nv.NVMLError as exc:
        detail = f"topology unknown ({_text(exc)})"
    return PairLink(a, b, "PCIe", detail)


def _nvlink_to(nv: Any, handle: Any, peer_bus_id: str) -> bool:
    if not peer_bus_id:
        return False
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if nv.nvmlDeviceGetNvLinkState(handle, link) != nv.NVML_FEATURE_ENABLED:
                continue
            remote = _text(nv.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId).lower()
        except nv.NVMLError:
            continue  # link not present (NVML_ERROR_INVALID_ARGUMENT / NOT_SUPPORTED)
        if remote.endswith(peer_bus_id[-12:]):
            return True
    return False


def cpu_inventory(nvml_error: str | None = None) -> Inventory:
    """This host's CPU: model name, physical memory, one device."""
    model = platform.processor() or platform.machine() or "cpu"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = os.cpu_count() or 1
    try:
        memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        memory = 8.0 * 1024**3  # sysconf unavailable (not POSIX): a laptop-sized guess
    return Inventory(
        kind="cpu",
        name=f"cpu: {model} ({cores} cores)",
        memory_bytes=memory,
        count=1,
        nvml_error=nvml_error,
    )


def gpu_inventory() -> Inventory:
    """NVML inventory, or a CPU inventory carrying NVML's one-line reason."""
    from pptune.launch.deps import import_pynvml

    nv = import_pynvml("probe", "for the GPU inventory")
    try:
        return nvml_inventory()
    except nv.NVMLError as exc:
        return cpu_inventory(nvml_error=f"NVML unavailable: {_text(exc)}")


def peak_flops_for(name: str) -> tuple[float | None, str | None]:
    """Peak dense bf16 FLOP/s of a known GPU (pptune.costmodel.presets), else None."""
    key = gpu_key_for(name)
    return (None, None) if key is None else (GPUS[key].peak_flops, key)
