"""Calibrate on jobs: fit the factors, refuse the unphysical, price the memory, write it down.

``calibrate`` takes one or more jobs of one model on one GPU type
(``jobs.load``), fits the factors on the analytic model's rates that their
step times determine (pptune.costmodel.fit: one run, one factor common to
every rate; several runs, as many as they separate within the physical range,
else fewer, down to one common factor, said in a note: ``jobnotes``), refuses
a common factor outside the physical range
(pptune.costmodel.calibration.problems) with what looks
wrong in the jobs' description, splits each job's step into its parts at the
factors (pptune.costmodel.breakdown), and, where a log printed the peak
memory, takes what the allocator held beyond pptune's tensors as the reserve
(the median over the jobs, at least 0). The result is a profile of the
existing schema whose ``calibration`` section records all of it, the GEMM
precision and the kernels the jobs ran among it (their attention, loss and
SwiGLU kernels, tensor-parallel overlap and weight-gradient accumulation, as
check-config priced them; recommend prices them by default); its layers
are the first job's configuration.

With two runs or more each is also predicted from the others alone (leave one
out, ``fit.held_out``), and a residual or held-out error beyond
``RESIDUAL_WARN`` is a warning: the factors are written, but doubtful. Where
the runs differ in node count and those on more nodes are the ones the model
under-prices (residual or held out), the warning names inter-node
communication as the likely missing term; otherwise it names what to check.
A value pptune's schemas refuse on the way is one line (``unpriced``), never
pydantic's text. The refusal and the other
warnings (a step one part dominates, a reserve beyond what fragmentation and
the CUDA context account for, a GPU nobody named) are ``pptune.tune.jobdoubts``';
a factor within 2x of the floor is a note.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from pydantic import ValidationError

from pptune.check.costs import layout_options
from pptune.check.profile_match import same_model
from pptune.check.rules import CheckReport
from pptune.costmodel import presets
from pptune.costmodel.breakdown import StepParts, step_parts
from pptune.costmodel.calibration import Factors, physical_range
from pptune.costmodel.fit import FitResult, Observed, fit, held_out
from pptune.costmodel.step_timers import measured_parts
from pptune.costs import calibrated
from pptune.costs.profiles import DEFAULT_MICRO_BATCH_SIZES
from pptune.errors import BadInput
from pptune.options import CostOptions
from pptune.schemas import CalibrationRun, Profile
from pptune.schemas.base import one_line
from pptune.tune import jobnotes
from pptune.tune.jobdoubts import doubts, refusal
from pptune.tune.jobs import Job, calibration, simulated, step_at


@dataclass(frozen=True)
class Outcome:
    profile: Profile  # the calibrated profile to write
    fit: FitResult
    parts: tuple[StepParts, ...]  # per job, at the factors


def calibrate(jobs: list[Job]) -> Outcome:
    """The calibration the jobs give (module docstring); BadInput when unphysical."""
    _one_model(jobs)
    first = jobs[0]
    if any(j.precision == "nvfp4" for j in jobs):  # its rate is no GpuSpec field to scale
        raise BadInput("calibrate: NVFP4 runs are not calibrated (their GEMM fraction is one "
                       "published constant, costmodel/nvfp4.py); the job(s): "
                       + "; ".join(j.describe() for j in jobs if j.precision == "nvfp4"))
    obs = [Observed(str(j.config), j.measured_step_s, step_at(j)) for j in jobs]
    limits = physical_range(presets.GPUS[first.gpu])
    try:
        res = fit(obs, limits)
    except ValidationError as exc:
        raise unpriced(exc) from None
    except (ValueError, ArithmeticError) as exc:
        raise BadInput(f"calibrate: {exc}") from None
    reports = [simulated(j, res.factors) for j in jobs]
    parts = tuple(_parts(j, res.factors, r) for j, r in zip(jobs, reports, strict=True))
    req = reports[0].request
    node = req.gpus_per_node if req is not None else presets.GPUS[first.gpu].gpus_per_node
    wrong = refusal(presets.GPUS[first.gpu], res, jobs, parts, node,
                    lambda: [_alone(o) for o in obs])
    if wrong:
        raise BadInput(f"calibrate: {wrong}; the job(s): "
                       + "; ".join(j.describe() + f", {_measured_by(j)}" for j in jobs))
    try:
        held = held_out(obs, limits)
    except BadInput:  # pptune cannot simulate a run at another run's factors
        held = (None,) * len(jobs)
    runs, reserves = [], []  # reserves: (job, its log's peak beyond pptune's tensors)
    for j, r, p, pred, resid, el, h in zip(jobs, reports, parts, res.predicted_s,
                                           res.residuals, res.elasticity, held, strict=True):
        tensors = None
        if r.plan is not None and r.plan.memory:
            # what PyTorch's caching allocator holds, which a log's peak counts: not the
            # reserve, nor DeepEP's buffers (cudaMalloc'd and NVSHMEM's, deepep.py)
            tensors = max(m.total_bytes - m.reserve_bytes - m.dispatch_buffer_bytes
                          for m in r.plan.memory)
            if j.peak_memory_bytes is not None:
                reserves.append((j, j.peak_memory_bytes - tensors))
        runs.append(CalibrationRun(
            config=str(j.config), framework=j.read.format.value, step_source=j.step_source,
            measured_step_s=j.measured_step_s, predicted_step_s=pred, residual=resid,
            peak_memory_bytes=j.peak_memory_bytes, predicted_memory_bytes=tensors,
            parts={name: s for name, s in p.parts}, elasticity={g.value: v for g, v in el.items()},
            measured_parts=measured_parts(dict(j.timers_ms), j.measured_step_s),
            gpus=j.size.gpus, precision=j.precision, held_out_residual=h))
    reserve = max(0.0, statistics.median(r for _, r in reserves)) if reserves else None
    notes = jobnotes.notes(res, jobs, [r for _, r in reserves])
    low = first.precision in ("fp8", "mxfp8")
    ran = CostOptions(**layout_options(first.read.config))  # its kernels, as check prices them
    # the model with the job's batch: recommend's default on this profile (not the model's)
    model = dataclasses.replace(first.shape, global_batch=first.size.global_batch)
    cal = calibration(model, first.gpu, first.read.config.attention, res.factors,
                      [[g.value for g in tie] for tie in res.fitted], runs, reserve, notes,
                      precision=first.precision,
                      fp8_kernels=(first.read.config.fp8_kernels or "te") if low else None,
                      fp8_recipe=first.read.config.fp8_recipe if low else None,
                      fp8_param_gather=first.read.config.fp8_param_gather if low else None,
                      tp_comm_overlap=ran.overlaps_tp, cross_entropy=ran.loss_kernels.value,
                      swiglu=ran.swiglu_kernels.value, wgrad_accum=ran.wgrad.value,
                      moe_dispatcher=(first.read.config.moe_dispatcher or "alltoall")
                      if first.shape.moe else None,
                      main_grads_dtype=first.read.config.main_grads_dtype or "fp32",
                      warnings=doubts(jobs, res, held, parts, reserves, reserve))
    c = first.read.config
    sizes = tuple(sorted(set(DEFAULT_MICRO_BATCH_SIZES) | {c.micro_batch_size}))
    prof = calibrated.profile(cal, sizes, tp=c.tp, seq_len=c.seq_len,
                              sequence_parallel=c.sequence_parallel, attention=c.attention,
                              gpus=first.size.gpus)
    return Outcome(prof, res, parts)


def unpriced(exc: ValidationError) -> BadInput:
    """A value pptune's schemas refuse, met while pricing or writing the runs: one line,
    pydantic's own text left out."""
    return BadInput(f"calibrate: pptune cannot price the runs as described ({one_line(exc)}); "
                    "check each run's step (in seconds) and its description (GPUs, batch, "
                    "sequence)")


def _alone(o: Observed) -> Factors | None:
    """The one factor a run fits alone (None where it cannot be fitted)."""
    try:
        return fit([o]).factors
    except (ValueError, ArithmeticError, BadInput):
        return None


def _measured_by(job: Job) -> str:
    """Where the job's step came from, with the value given on the command line."""
    if job.step_source == "--step-s":
        return f"--step-s {job.measured_step_s:g}"
    return job.step_source


def _one_model(jobs: list[Job]) -> None:
    a = jobs[0]
    for b in jobs[1:]:
        if b.gpu != a.gpu:
            raise BadInput(f"--run {b.config} ran on {b.gpu}, --run {a.config} on {a.gpu}: a "
                           "calibration is for one GPU type; calibrate them apart")
        if b.shape.name != a.shape.name or not same_model(a.shape, b.shape):
            raise BadInput(f"--run {b.config} trains {b.shape.name}, --run {a.config} "
                           f"{a.shape.name}: a calibration is for one model; calibrate them apart")


def _parts(job: Job, f: Factors, report: CheckReport) -> StepParts:
    """The job's step at ``f`` split into parts (breakdown.step_parts), from the layers'
    parts of the very table check-config priced it with (its context parallelism,
    precision, expert layout and recomputed modules included)."""
    b = job.read.config.micro_batch_size
    table = report.table
    if report.plan is None or table is None or report.request is None:
        raise BadInput(f"--run {job.config}: pptune no longer simulates its step at {f}")
    if table.layer_parts is None or b not in table.layer_parts:
        raise BadInput(f"--run {job.config}: its costs are measured, not split by part; "
                       "calibrate a job priced analytically (--model, --gpu)")
    return step_parts(table, report.request, report.plan, table.layer_parts[b])
