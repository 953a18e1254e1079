"""The pure parts of calibrate's checks on a job: its GPU against its log
(pptune.tune.jobgpu) and the yardsticks of its doubts (pptune.tune.jobdoubts)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from pptune.costmodel.calibration import RateGroup
from pptune.errors import BadInput
from pptune.frameworks.common.joblog import GIB, JobLog, LoggedStep
from pptune.tune import jobs
from pptune.tune.jobdoubts import part_group, reserve_bound
from pptune.tune.jobflops import another_job
from pptune.tune.jobgpu import JobGpu, capacity_bytes, job_gpu

CONFIG = Path("job.sh")
LOG = Path("t.log")


def _log(device: str | None = None, peak_gib: float | None = None) -> JobLog:
    return JobLog("torchtitan", "torchtitan", (LoggedStep(1, step_s=1.0),),
                  peak_gib * GIB if peak_gib is not None else None,
                  "peak reserved" if peak_gib is not None else "", device=device)


def test_the_gpu_named_must_be_the_one_the_log_names() -> None:
    with pytest.raises(BadInput) as err:
        job_gpu(CONFIG, LOG, _log("NVIDIA H200"), "b200", None)
    assert str(err.value) == (
        "--log t.log ran on NVIDIA H200 (h200), but --gpu b200 names another GPU: factors "
        "fitted against b200's rates from a run on h200 are off by their ratio; pass --gpu "
        "h200, or give the log of the job on b200")
    with pytest.raises(BadInput, match="but the config's gpu h100-sxm names another GPU"):
        job_gpu(CONFIG, LOG, _log("NVIDIA H200"), None, "h100-sxm")
    assert job_gpu(CONFIG, LOG, _log("NVIDIA B200"), "b200", None) == JobGpu("b200")
    # a device no preset states cannot be compared: the named GPU stands
    assert job_gpu(CONFIG, LOG, _log("NVIDIA RTX 9000"), "b200", None) == JobGpu("b200")
    with pytest.raises(BadInput, match="--gpu 'b900' is not a preset"):
        job_gpu(CONFIG, LOG, _log("NVIDIA B200"), "b900", None)


def test_nothing_named_is_the_default_and_said_to_be_assumed() -> None:
    assert job_gpu(CONFIG, LOG, _log(), None, None) == JobGpu("h100-sxm", assumed=True)
    assert job_gpu(CONFIG, None, None, None, None) == JobGpu("h100-sxm", assumed=True)
    got = job_gpu(CONFIG, LOG, _log("NVIDIA H200"), None, None)
    assert got == JobGpu("h200", note="job.sh: the log names the GPU, NVIDIA H200: "
                                      "calibrating h200")


def test_capacity_is_the_total_nvidia_smi_reports() -> None:
    # h100-sxm 81,559 MiB, h200 143,771 MiB, b200 183,359 MiB (presets.py)
    assert capacity_bytes("h100-sxm") == 81559 * 2**20
    assert capacity_bytes("h200") == 143771 * 2**20
    assert capacity_bytes("b200") == 183359 * 2**20
    # an H200's torchtitan capacity line says 139.83 GiB; a peak under it is the GPU's own
    assert job_gpu(CONFIG, LOG, _log(peak_gib=139.0), "h200", None) == JobGpu("h200")
    with pytest.raises(BadInput) as err:
        job_gpu(CONFIG, LOG, _log(peak_gib=142.0), "h200", None)
    assert str(err.value) == (
        "--log t.log: the log's peak 142.00 GiB (peak reserved) exceeds h200's 140.4 GiB: "
        "the run was not on this GPU; pass --gpu with the GPU it ran on")


def test_each_part_of_a_step_has_its_rate_group() -> None:
    assert {p: part_group(p) for p in (
        "gemm", "attention", "memory-bound", "launch", "expert all-to-all",
        "tp communication", "data-parallel communication", "pipeline sends",
        "FP8 amax reductions", "cp communication", "optimizer step", "pipeline bubble")} == {
        "gemm": RateGroup.COMPUTE, "attention": RateGroup.COMPUTE,
        "memory-bound": RateGroup.MEMORY, "launch": None,
        "expert all-to-all": RateGroup.COMMUNICATION,
        "tp communication": RateGroup.COMMUNICATION,
        "data-parallel communication": RateGroup.COMMUNICATION,
        "pipeline sends": RateGroup.COMMUNICATION,
        "FP8 amax reductions": RateGroup.COMMUNICATION,
        "cp communication": RateGroup.COMMUNICATION,
        "optimizer step": RateGroup.MEMORY, "pipeline bubble": None}


def test_the_reserve_bound_is_a_third_of_the_peak_and_two_gib(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("model: gpt3-1.3b\ngpu: a100-80gb\ngpus: 8\ntp: 1\npp: 2\n"
                      "micro_batch_size: 4\nglobal_batch: 512\n")
    job = jobs.load(jobs.Measurement(config, step_s=10.0), None, None, None)
    # 90 GiB: 30 GiB of fragmentation (GMLake's up to 33%) and 2 GiB context and NCCL
    assert reserve_bound(dataclasses.replace(job, peak_memory_bytes=90 * GIB)) == 32 * GIB
    assert reserve_bound(job) == 2 * GIB  # no peak printed


def test_a_log_whose_flops_overflow_is_asked_about_in_words() -> None:
    # a step of 1e305 s times a logged TFLOP/s overflows to inf: no "infx" in the message
    said = another_job(math.inf, Path("run.sh"))
    assert "make far more than the model FLOPs of the job run.sh describes" in said
    assert "2.5x the model FLOPs" in another_job(2.5, Path("run.sh"))
