"""Costs from a calibrated profile: the analytic model on the GPU with its rates scaled.

A profile written by ``pptune calibrate --run`` carries a ``calibration``
section (schemas.Calibration): the model's shape, the GPU preset, the factors
on its rates (pptune.costmodel.calibration) and the memory the jobs' logs
showed beyond the modelled tensors. Its layers price the first job's own
configuration; any other configuration of that model and GPU is priced by
rebuilding the analytic costs on the scaled GPU (``tables``), so recommend,
simulate and check-config answer what-ifs (other tp, pp, batch, schedule,
sequence length) at the rates the jobs ran at.
"""

from __future__ import annotations

from collections.abc import Sequence

from pptune.costmodel.analytic import AnalyticLayer
from pptune.costmodel.calibration import Factors, scaled_gpu
from pptune.costmodel.keys import CostKey, TableSource
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.presets import GPUS, GpuSpec, ModelShape
from pptune.costmodel.variation import slowest_of
from pptune.costs.modelspec import with_seq_len
from pptune.costs.profiles import DEFAULT_MICRO_BATCH_SIZES, analytic_profile, preset_tables
from pptune.errors import BadInput
from pptune.schemas import Calibration, Profile


def factors(cal: Calibration) -> Factors:
    return Factors(**cal.factors)


def gpu(cal: Calibration, gpus: int = 1, spread: float | None = None) -> GpuSpec:
    """The calibration's GPU preset with its rates scaled by the factors, at the pace of
    the slowest of ``gpus`` (costmodel/variation.py; ``spread`` None: the preset's)."""
    return slowest_of(scaled_gpu(GPUS[cal.gpu], factors(cal)), gpus, spread)


def shape(cal: Calibration, seq_len: int | None = None) -> ModelShape:
    """The calibrated model, at ``seq_len`` (None: the jobs')."""
    return with_seq_len(ModelShape(**cal.model), seq_len)


def sizes_of(cal_profile: Profile, sizes: Sequence[int] | None) -> tuple[int, ...]:
    """The micro-batch sizes to price: those asked for, else the profile's and pptune's
    defaults (a calibrated model is priced at any size)."""
    if sizes:
        return tuple(sorted(set(sizes)))
    return tuple(sorted(set(DEFAULT_MICRO_BATCH_SIZES) | set(cal_profile.micro_batch_sizes())))


def profile(cal: Calibration, sizes: Sequence[int], *, tp: int = 1, seq_len: int | None = None,
            sequence_parallel: bool = False, attention: str | None = None,
            tp_comm_overlap: bool = False, ep: int = 1, etp: int = 1,
            layers_out: list[AnalyticLayer] | None = None, gpus: int = 1) -> Profile:
    """The analytic profile of the calibrated model on the calibrated GPU, for one
    configuration of ``gpus`` GPUs; the calibration rides along."""
    m = shape(cal, seq_len)
    experts = ExpertParallel(ep=ep, etp=etp) if m.moe else None
    if not m.moe and (ep, etp) != (1, 1):
        raise BadInput(f"--ep/--etp {ep}/{etp}: {m.name} has no experts to split")
    prof = analytic_profile(m, gpu(cal, gpus), tuple(sizes), tp=tp, efficiency=None,
                            sequence_parallel=sequence_parallel,
                            attention=attention or cal.attention, tp_comm_overlap=tp_comm_overlap,
                            experts=experts, layers_out=layers_out)
    return with_calibration(prof, cal)


def with_calibration(prof: Profile, cal: Calibration) -> Profile:
    """An analytic profile priced on the calibrated GPU, with the calibration and a note
    of its factors."""
    f = factors(cal)
    note = (f"calibrated: {cal.gpu}'s rates x compute {f.compute:.3g}, memory {f.memory:.3g}, "
            f"communication {f.communication:.3g} (fitted to {len(cal.runs)} job(s))")
    return prof.model_copy(update={"calibration": cal, "notes": [*prof.notes, note]})


def tables(cal: Calibration, sizes: Sequence[int], *, seq_len: int | None = None,
           sequence_parallel: bool = False, attention: str | None = None,
           tp_comm_overlap: bool = False, profiles: dict[CostKey, Profile] | None = None,
           experts: ExpertParallel | None = None, gpus: int = 1,
           gpu_spread: float | None = None, **options: object) -> TableSource:
    """A cost table per cost key (tp, cp, ep, etp, precision), built on first use (the
    search walks keys): the presets' own per-key tables (``preset_tables``), on the
    calibrated GPU at the slowest of ``gpus``' pace; ``options`` as ``analytic_profile``
    takes them."""
    return preset_tables(shape(cal, seq_len), gpu(cal, gpus, gpu_spread), tuple(sizes),
                         experts=experts,
                         profiles=profiles, sequence_parallel=sequence_parallel,
                         attention=attention or cal.attention, tp_comm_overlap=tp_comm_overlap,
                         **options)
