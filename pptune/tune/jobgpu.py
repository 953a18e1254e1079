"""Which GPU a job ran on, checked against what its log says.

The factors calibrate fits are the job's speed over the named GPU's rates, so
a job calibrated as another GPU gives factors off by the ratio of the two
GPUs' rates, and every plan priced from the profile with them. The GPU is
``--gpu``, else the config's, else the one the log names (torchtitan's
``CUDA capacity: NVIDIA B200 with 178.35GiB memory`` line), else
``presets.DEFAULT_GPU`` (h100-sxm, as ``--gpu``'s help documents) with a
warning stored in the profile. Two checks against the log, each a refusal:

- a GPU named by ``--gpu`` or the config that is not the one the log names;
- a log peak memory above the GPU's capacity: the job cannot have run on it.
  The capacity is the preset's memory, the total nvidia-smi reports (presets.py):
  no process of the job can hold more (an H200's 143,771 MiB shows as 139.83 GiB
  in torchtitan's capacity line once the driver has taken its share).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pptune.costmodel import presets
from pptune.errors import BadInput
from pptune.frameworks.common.joblog import GIB, JobLog


@dataclass(frozen=True)
class JobGpu:
    name: str  # the GPU preset
    assumed: bool = False  # nothing named one: pptune's default
    note: str = ""  # how it was found, where that is worth a line


def capacity_bytes(gpu: str) -> float:
    """The most memory a job on ``gpu`` can show (module docstring)."""
    return presets.GPUS[gpu].memory_bytes


def job_gpu(config: Path, log_path: Path | None, log: JobLog | None, flag: str | None,
            stated: str | None) -> JobGpu:
    """The job's GPU (module docstring); BadInput (one line) when the log contradicts it."""
    named, source = (flag, f"--gpu {flag}") if flag else (stated, f"the config's gpu {stated}")
    if named is not None and named not in presets.GPUS:
        raise BadInput(f"--gpu {named!r} is not a preset; choose one of "
                       f"{', '.join(presets.GPUS)}")
    device = log.device[:60] if log is not None and log.device else None
    logged = presets.gpu_key_for(device) if device else None
    if named is not None and logged is not None and logged != named:
        raise BadInput(f"--log {log_path} ran on {device} ({logged}), but {source} names "
                       f"another GPU: factors fitted against {named}'s rates from a run on "
                       f"{logged} are off by their ratio; pass --gpu {logged}, or give the log "
                       f"of the job on {named}")
    if named is not None:
        found = JobGpu(named)
    elif device is not None:
        if logged is None:
            raise BadInput(f"--log {log_path}: the job ran on {device}, which no GPU preset "
                           f"states; pass --gpu (one of {', '.join(presets.GPUS)})")
        found = JobGpu(logged, note=f"{config}: the log names the GPU, {device}: calibrating "
                                    f"{logged}")
    else:
        found = JobGpu(presets.DEFAULT_GPU, assumed=True)
    peak = log.peak_memory_bytes if log is not None else None
    if peak is not None and peak > capacity_bytes(found.name):
        how = (f" (no GPU named: {found.name} is pptune's default)" if found.assumed
               else "")
        what = f" ({log.memory_what})" if log is not None and log.memory_what else ""
        raise BadInput(f"--log {log_path}: the log's peak {peak / GIB:.2f} GiB{what} exceeds "
                       f"{found.name}'s {presets.GPUS[found.name].memory_bytes / GIB:.4g} GiB"
                       f"{how}: the run was not on this GPU; pass --gpu with the GPU it ran on")
    return found


def assumed_warning(config: Path, gpu: str) -> str:
    """What calibrating at the default GPU means, for the profile's warnings."""
    return (f"{config}: no GPU named (--gpu, the config or its log): calibrated as {gpu}, "
            "pptune's default; if the job ran on another GPU, the factors hold that GPU's "
            f"speed over {gpu}'s rates, off by the ratio of the two, and so is every plan "
            "priced from this profile; pass --gpu")
