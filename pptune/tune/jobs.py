"""A job the user already runs: its config, its measured step, and its simulated step.

``load`` reads one ``--run CONFIG`` with its ``--step-s`` or ``--log``: the
config through ``read_config`` (any file check-config reads, with the run's
own ``--gpus``, ``--env`` and other check-config flags filling what it leaves
open), the log through the config's framework adapter
(``pptune.frameworks.logs``), the step as the median over the steady
iterations. The model is the config's (``--model`` overrides, as in
check-config), the GPU ``--gpu``, else the config's, else the log's, else
h100-sxm with a warning, checked against the log (``pptune.tune.jobgpu``).

The job's GPU count must be known: where the config states neither it nor the
data-parallel size (check-config would assume one, ``dp-assumed``), the log's
world size fills it (torchtitan's device-mesh line, Megatron-LM's "using world
size"), else the run is refused: a job fitted at an assumed size gives factors
off by the ratio of the sizes. A log whose world size is not the config's is
refused too: the config does not describe the job that wrote it.

``simulated`` prices the job exactly as ``check-config --profile`` prices it
(``pptune.check.rules.check``, its own split, schedule, sharding and
recomputation), with the analytic costs rebuilt on the GPU scaled by the
given factors (``pptune.costs.calibrated``). So the calibrated profile
``calibrate`` writes gives back the fitted step when check-config reads the
job's config with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pptune.check.costs import layout_options, stated_model
from pptune.check.domain import FLAG_VALUE
from pptune.check.profile_match import describe
from pptune.check.rules import CheckOptions, CheckReport, check
from pptune.check.shape import config_shape, size_conflicts
from pptune.check.verdicts import DP_ASSUMED
from pptune.costmodel import presets
from pptune.costmodel.calibration import Factors
from pptune.costmodel.presets import ModelShape
from pptune.costs import calibrated
from pptune.costs.flops import shape_flops_per_token
from pptune.costs.names import model_preset
from pptune.errors import BadInput
from pptune.frameworks.common.fields import Flags
from pptune.frameworks.common.joblog import (
    JobLog,
    JobSize,
    steady_step_s,
    steady_timers_ms,
    warm_up_left_out,
)
from pptune.frameworks.deepspeed.pipeline import PP_ASSUMED
from pptune.frameworks.logs import read_log
from pptune.frameworks.read import ReadResult, read_config
from pptune.frameworks.registry import ADAPTERS
from pptune.options import CostOptions
from pptune.schemas import Calibration, CalibrationRun, Profile
from pptune.tune import jobflops
from pptune.tune.jobgpu import job_gpu


@dataclass(frozen=True)
class Measurement:
    """One ``--run CONFIG``, what measured it (``--step-s`` or ``--log``) and the
    check-config flags that fill what its file leaves open."""

    config: Path
    step_s: float | None = None
    log: Path | None = None
    flags: Flags = field(default_factory=Flags)  # --gpus, --pp, --tp, --gpus-per-node, batch
    env: tuple[str, ...] = ()  # --env NAME=VALUE


@dataclass(frozen=True)
class Job:
    """One job as calibrate sees it."""

    config: Path
    read: ReadResult
    shape: ModelShape
    gpu: str
    measured_step_s: float
    step_source: str
    size: JobSize
    peak_memory_bytes: float | None = None
    memory_what: str = ""
    notes: tuple[str, ...] = ()
    overflow: str = ""  # check-config's memory-overflow finding: the job ran, so it fit
    gpu_assumed: bool = False  # nothing named the GPU: pptune's default (jobgpu.py)
    # the log's own FLOPs a step (its TFLOP/s a GPU x GPUs x step) over the FLOPs its
    # framework counts for the config's job (jobflops.py); None where the log prints no
    # TFLOP/s
    flops_ratio: float | None = None
    throughput_warning: str = ""  # the log looks like another job's (jobflops.py); a doubt
    # the framework's timers, ms an iteration, medians over the steady lines (step_timers.py)
    timers_ms: tuple[tuple[str, float], ...] = ()

    @property
    def title(self) -> str:
        return ADAPTERS[self.read.format].title

    @property
    def precision(self) -> str:
        """The GEMM precision the job ran, as check-config prices it (fp32: bf16)."""
        return str(layout_options(self.read.config)["precision"][0].value)

    def describe(self) -> str:
        """The job's description, as a refusal names it."""
        c = self.read.config
        dp = self.size.gpus // max(1, c.tp * c.pp * c.cp)
        return (f"{self.config}: {self.size.gpus} x {self.gpu}, tp {c.tp} pp {c.pp} dp {dp}"
                + (f" cp {c.cp}" if c.cp > 1 else "")
                + f", global batch {self.size.global_batch} x {self.size.seq_len} tokens, "
                f"micro-batch {c.micro_batch_size}")


def load(m: Measurement, gpu: str | None, model: str | None, warmup: int | None,
         hf_config: Path | None = None) -> Job:
    """The job ``m`` names (module docstring); BadInput (one line) on any problem.
    ``model`` / ``hf_config``: calibrate's --model / --hf-config (absolute), over the
    config's own model."""
    read = _read(m, m.flags)
    log = read_log(m.log, read.format) if m.log is not None and m.step_s is None else None
    cfg = read.config
    notes: list[str] = []

    def add(id_: str, severity: str, message: str, **values: Any) -> None:
        """The shape's findings are check-config's to report; calibrate needs the shape."""

    shape = config_shape(cfg, m.config.parent, model, add, hf_config)
    if shape is not None and (model is not None or hf_config is not None):
        _named_is_stated(m, read, shape, model, hf_config)
    if shape is None:
        raise BadInput(f"--run {m.config}: the config names no model pptune can price (no "
                       "preset, hf_config or layer/hidden/head/sequence sizes); pass --model "
                       "or --hf-config")
    found = job_gpu(m.config, m.log, log, gpu, cfg.gpu)
    name = found.name
    notes += [found.note] if found.note else []
    trial = _trial_profile(shape, name, cfg.attention, Factors())
    report = _check(read, m.config, trial)
    if _assumed(report):
        read = _sized_by_log(m, read, log)
        report = _check(read, m.config, trial)
    assumed_pp = next((f for f in report.findings if f.id == PP_ASSUMED), None)
    if assumed_pp is not None:
        raise BadInput(f"--run {m.config}: {assumed_pp.message.split(': checked at')[0]}; give "
                       "--pp N after this --run: calibrate does not fit a job at an assumed size")
    errors = report.errors()
    if report.plan is None:  # the config cannot be simulated: structural errors
        why = errors[0].message if errors else "its step was not simulated"
        raise BadInput(f"--run {m.config}: pptune cannot price this config: {why}")
    # the job ran: a finding about its plan (a limit) is a note; memory over the GPU's
    # is a doubt on the factors (jobfit.doubts)
    notes += [f"{m.config}: check-config finds {e.id}: {e.message}" for e in errors
              if e.id != "memory-overflow"]
    # what became of --gpus-per-node where the file states its node (check/domain.py)
    notes += [f"{m.config}: {f.message}" for f in report.findings if FLAG_VALUE in f.values]
    overflow = next((e.message for e in errors if e.id == "memory-overflow"), "")
    size = _size(read, report, shape)
    inferred = next((f for f in report.findings if f.id == "dp-inferred"), None)
    if inferred is not None:  # a DeepSpeed JSON's batch trio: its GPU count, said
        c = read.config
        notes.append(f"{m.config}: {size.gpus} GPUs from the batch the config states: "
                     f"{inferred.message.split(';')[0]}, x tp {c.tp} x pp {c.pp}"
                     + (f" x cp {c.cp}" if c.cp > 1 else "") + " (--gpus overrides)")
    ratio, warning, timers = None, "", {}
    if m.step_s is not None:
        step, source, peak, what = m.step_s, "--step-s", None, ""
        if not step > 0 or not math.isfinite(step):
            raise BadInput(f"--step-s {step:g} for {m.config}: a step takes a positive, finite "
                           "number of seconds")
    elif log is None or m.log is None:
        raise BadInput(f"--run {m.config} has no --step-s or --log after it")
    else:
        _same_world(m, log, size, read)
        _same_sizes(m, log, size, read)
        _same_precision(m, log, read)
        steady = steady_step_s(log, size, f"--log {m.log}", warmup)
        timers = steady_timers_ms(log, steady.used)
        step, peak, what = steady.step_s, log.peak_memory_bytes, log.memory_what
        left = warm_up_left_out(steady.skipped, warmup, log.unit)
        first, last = steady.used[0], steady.used[-1]
        which = f"{log.unit} {first}" if first == last else f"{log.unit}s {first}-{last}"
        source = (f"log {m.log}: median of {len(steady.used)} {log.title} line(s), "
                  f"{which} ({left})")
        notes += [f"--log {m.log}: {n}" for n in (*log.notes, *steady.notes)]
        counts = ADAPTERS[read.format].log_flops
        flops = jobflops.logged_flops(log, steady.used, size, shape, counts)
        ratio = flops.ratio if flops is not None else None
        warning = jobflops.disagreement(m.log, flops, shape, size, log.title, log.unit)
        if flops is not None and flops.older:
            notes.append(f"--log {m.log}: its TFLOP/s a GPU make {flops.ratio:.2f}x the FLOPs "
                         f"a step counted as {flops.count.counts}: the log is likely of such "
                         "a release")
    job = Job(m.config, read, shape, name, step, source, size, peak, what, tuple(notes),
              overflow, found.assumed, ratio, warning, tuple(timers.items()))
    _refuse_faster_than_peak(job)
    return job


def _named_is_stated(m: Measurement, read: ReadResult, shape: ModelShape, model: str | None,
                     hf_config: Path | None) -> None:
    """BadInput when --model or --hf-config names a model whose sizes the file contradicts
    (check-config's model-mismatch warning, ``check.shape.size_conflicts``): calibrating
    it would fit the named model's name to another model's step."""
    differ = size_conflicts(read.config, shape)
    if not differ:
        return
    flag = f"--model {model}" if model is not None else f"--hf-config {hf_config}"
    named = model_preset(model) if model is not None else shape
    own = stated_model(read.config, m.config.parent, CostOptions())
    trains = f", {describe(own)}" if own is not None else ""
    raise BadInput(f"--run {m.config} states {', '.join(differ)}: {flag} "
                   f"{describe(named).removeprefix(named.name + ' ')} is not the model it "
                   f"trains{trains}; drop {flag.split(' ')[0]} (the file's model is read), or "
                   "give the config of the job that ran it")


def _read(m: Measurement, flags: Flags) -> ReadResult:
    f = flags
    return read_config(m.config, pp=f.pp, gpus=f.gpus, tp=f.tp, gpus_per_node=f.gpus_per_node,
                       micro_batch_size=f.micro_batch_size, global_batch=f.global_batch,
                       env=list(m.env), precision=f.precision)


def _assumed(report: CheckReport) -> bool:
    """check-config priced the job at an assumed data-parallel size (verdicts.unknown_dp)."""
    return any(f.id == DP_ASSUMED for f in report.findings)


def _sized_by_log(m: Measurement, read: ReadResult, log: JobLog | None) -> ReadResult:
    """The config read again with the GPU count its log states; BadInput when the log
    states none (module docstring)."""
    if log is None or log.world_size is None:
        env = (" (or --env NAME=VALUE for what its launch script takes from the environment)"
               if "text" in ADAPTERS[read.format].syntaxes else "")
        said = ", nor does its log state a world size" if log is not None else ""
        raise BadInput(f"--run {m.config}: the config states neither its GPU count nor its "
                       f"data-parallel size{said}; give --gpus N after this --run{env}: "
                       "calibrate does not fit a job at an assumed size")
    world = log.world_size
    again = _read(m, dataclasses.replace(m.flags, gpus=world))
    used = f"gpus {world} from --gpus"
    return dataclasses.replace(again, notes=[
        n.replace(used, f"gpus {world} from {log.world_what} (--gpus overrides)")
        for n in again.notes])


def _same_world(m: Measurement, log: JobLog, size: JobSize, read: ReadResult) -> None:
    if log.world_size is None or log.world_size == size.gpus:
        return
    c = read.config
    raise BadInput(f"--log {m.log} ran on {log.world_size} GPUs ({log.world_what}), but --run "
                   f"{m.config} describes {size.gpus} (tp {c.tp} x pp {c.pp} x cp {c.cp} x dp "
                   f"{size.gpus // max(1, c.tp * c.pp * c.cp)}); give the config of the job "
                   "that wrote the log, or --gpus where the file leaves the count open")


def _size(read: ReadResult, report: CheckReport, shape: ModelShape) -> JobSize:
    """The job's batch and GPUs as check-config derived them."""
    c = read.config
    dp, m = int(report.derived["dp"]), int(report.derived["microbatches"])
    return JobSize(c.micro_batch_size * m * c.pipeline_flushes * dp, shape.seq_len,
                   c.tp * c.pp * c.cp * dp)


def _check(read: ReadResult, config: Path, profile: Profile) -> CheckReport:
    opts = CheckOptions(compare_best=False, profile=profile)
    return check(read.config, config.parent, opts, read.semantics)


def calibration(shape: ModelShape, gpu: str, attention: str | None, f: Factors,
                fitted: list[list[str]] | None = None, runs: list[CalibrationRun] | None = None,
                reserve_bytes: float | None = None, notes: list[str] | None = None,
                **more: Any) -> Calibration:
    """The calibration section for these factors (validated when ``runs`` are given);
    ``more``: its other fields (the precision the jobs ran, warnings)."""
    values: dict[str, Any] = dict(
        gpu=gpu, model=dataclasses.asdict(shape), attention=attention or "sdpa",
        factors=f.as_dict(), fitted=fitted or [], reserve_bytes=reserve_bytes, runs=runs or [],
        notes=notes or [], **more)
    if runs:
        return Calibration(**values)
    return Calibration.model_construct(**values)  # a trial's: never written


def _trial_profile(shape: ModelShape, gpu: str, attention: str | None, f: Factors) -> Profile:
    """A profile that carries the calibration; its layers are never read (the resolver
    rebuilds the costs from the calibration)."""
    cal = calibration(shape, gpu, attention, f)
    base = calibrated.profile(cal, (1,), tp=1)
    return base.model_copy(update={"calibration": cal})


def simulated(job: Job, f: Factors) -> CheckReport:
    """The job priced as check-config prices it, at factors ``f`` (module docstring)."""
    prof = _trial_profile(job.shape, job.gpu, job.read.config.attention, f)
    return _check(job.read, job.config, prof)


def step_at(job: Job) -> Callable[[Factors], float]:
    """Seconds per step of the job as simulated at given factors."""
    def at(f: Factors) -> float:
        report = simulated(job, f)
        step = report.derived.get("step_time_s")
        if step is None:
            raise BadInput(f"--run {job.config}: at {f} pptune no longer simulates its step")
        return float(step)

    return at


def _refuse_faster_than_peak(job: Job) -> None:
    """A step shorter than the config's least model FLOPs at every GPU's highest peak.

    The least FLOPs: 6 per active parameter per token (Kaplan et al. 2020, sec.
    2.1; a mixture of experts counts the experts a token uses, top_k of them),
    the embedding table's left out and attention's products not counted; the
    peak: the dense peak of the GEMMs' precision the config states (BF16 and
    FP16 share one; FP8, or FP4 for nvfp4, where the config says so and the GPU has
    it), so the bound never refuses a step a job could take."""
    flops = (shape_flops_per_token(job.shape, job.size.seq_len, attention=False)
             * job.size.global_batch * job.size.seq_len)
    spec = presets.GPUS[job.gpu]
    stated = str(job.read.config.precision or "")
    low = stated.endswith("fp8")  # fp8, mxfp8
    peak = (spec.fp8_peak_flops or spec.peak_flops) if low else spec.peak_flops
    if stated == "nvfp4":
        peak = spec.fp4_peak_flops or spec.fp8_peak_flops or spec.peak_flops
    least = flops / (job.size.gpus * peak)
    if job.measured_step_s < least:
        raise BadInput(
            f"{job.step_source} gives {job.measured_step_s:.4g} s a step, but the config's "
            f"{flops:.3g} FLOPs a step (6 per active parameter and token, attention not "
            f"counted: a lower bound) need at least {least:.4g} s on {job.size.gpus} "
            f"{job.gpu} at their {peak / 1e12:g} TFLOP/s peak; check the description "
            f"({job.describe()}) and the step's units (seconds)"
            + (f"; {other}?" if (other := another_job(job)) else ""))


def another_job(job: Job) -> str:
    """The question a refusal asks when the log's own FLOPs are not the config's job's
    ("" when they are, or the log prints none; jobflops.another_job)."""
    return jobflops.another_job(job.flops_ratio, job.config)


SIZE_WORDS = {"tp": "tp", "pp": "pp", "cp": "cp", "seq_len": "sequence",
              "micro_batch_size": "micro-batch size"}


def _same_sizes(m: Measurement, log: JobLog, size: JobSize, read: ReadResult) -> None:
    """BadInput where the log states sizes of its job (JobLog.stated: Megatron-LM's
    argument dump and world-size line) that the config does not: calibrating the config's
    plan to another plan's step would fit the factors to the wrong job."""
    c = read.config
    ours = {"tp": c.tp, "pp": c.pp, "cp": c.cp, "seq_len": size.seq_len,
            "micro_batch_size": c.micro_batch_size}
    differ = [(k, v) for k, v in log.stated if k in ours and v != ours[k]]
    if not differ:
        return
    ran = ", ".join(f"{SIZE_WORDS[k]} {v}" for k, v in differ)
    says = ", ".join(f"{SIZE_WORDS[k]} {ours[k]}" for k, _ in differ)
    raise BadInput(f"--log {m.log} ran {ran} (what its log prints), but --run {m.config} "
                   f"describes {says}; give the config of the job that wrote the log")


def _same_precision(m: Measurement, log: JobLog, read: ReadResult) -> None:
    """BadInput where the log says the run was quantized (JobLog.quantized) and the config
    is priced in BF16: the factors would take FP8's speed for the model's error."""
    if not log.quantized or read.config.precision in ("fp8", "mxfp8", "nvfp4"):
        return
    raise BadInput(f"--log {m.log} prints mfu: N/A, as torchtitan does for a run with a "
                   f"quantization converter (FP8, MXFP8), but --run {m.config} is priced in "
                   "BF16; give the config of the job that wrote the log (a torchtitan main "
                   "dump records no converter: give --precision fp8 or mxfp8)")

