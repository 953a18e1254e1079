"""Live GPU sampling through NVML (pynvml, from the nvidia-ml-py package).

pynvml is imported inside the functions that need it, so importing this module
costs nothing on a machine without it. Every NVML failure becomes a
``PptuneError`` (exit 2) with one line of text; on a machine without an
NVIDIA driver ``nvmlInit`` raises ``NVMLError_LibraryNotFound`` ("NVML Shared
Library Not Found", docs/measured.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pptune.errors import PptuneError
from pptune.launch.deps import import_pynvml
from pptune.observe.monitor import GpuReading


def _text(x: object) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


@dataclass
class NvmlGpus:
    """The GPUs NVML sees: names, memory sizes and a ``read_sample`` for ``collect``."""

    names: list[str]
    mem_total_bytes: list[int]
    _handles: list[Any]
    _nvml: ModuleType

    def read_sample(self) -> list[GpuReading]:
        nvml = self._nvml
        out = []
        for i, h in enumerate(self._handles):
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(h)
                mem = nvml.nvmlDeviceGetMemoryInfo(h)
            except nvml.NVMLError as exc:
                raise PptuneError(
                    f"NVML could not read GPU {i} ({self.names[i]}): {_text(exc)}"
                ) from None
            out.append(GpuReading(util_share=util.gpu / 100.0, mem_used_bytes=int(mem.used)))
        return out


@contextmanager
def nvml_gpus() -> Iterator[NvmlGpus]:
    """Initialise NVML, yield the GPUs, shut NVML down; ``PptuneError`` without one."""
    nvml = import_pynvml("monitor", "to sample the GPUs")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise PptuneError(
            f"no NVIDIA GPU to monitor: NVML is not available here ({_text(exc)}); "
            "run pptune monitor on a machine with an NVIDIA driver"
        ) from None
    try:
        try:
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            names = [_text(nvml.nvmlDeviceGetName(h)) for h in handles]
            totals = [int(nvml.nvmlDeviceGetMemoryInfo(h).total) for h in handles]
        except nvml.NVMLError as exc:
            raise PptuneError(f"NVML could not list the GPUs: {_text(exc)}") from None
        if count == 0:
            raise PptuneError("NVML found no GPUs on this machine: nothing to monitor")
        yield NvmlGpus(names=names, mem_total_bytes=totals, _handles=handles, _nvml=nvml)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
