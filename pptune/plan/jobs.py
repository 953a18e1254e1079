"""The jobs of one recommendation's plans as the framework adapters see them (``Job``):
what ``--emit`` expresses a plan from and what ``recommend --framework`` prices its
plans as the framework runs them with (plan/framework_search.py), built one way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pptune.costmodel import presets
from pptune.costmodel.calibration import Factors
from pptune.costmodel.keys import CostKey
from pptune.costmodel.ops import Attention
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.search import CostTable, PlanRequest
from pptune.costs import calibrated
from pptune.costs.modelspec import from_hf_config
from pptune.costs.resolve import Costs
from pptune.errors import PptuneError
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.versions import Versions
from pptune.options import CostOptions
from pptune.schemas.limits import HELD


@dataclass(frozen=True)
class Jobs:
    """What every job of a recommendation shares; called with a plan's cost table and
    request (the request it was searched with, for its one cost key), the plan's job."""

    options: CostOptions  # the cost options as resolved (the plan file's request's)
    names: tuple[str, ...]  # the layers: embedding, blocks, head
    origin: str  # where the costs came from
    shape: ModelShape | None  # the model's shape, where known
    costs: Costs | None  # the resolved costs (a profile's file, device and calibration)
    moments: tuple[str, str]  # Adam's moments' widths (fp32 for a file without them)
    held: tuple[str, ...] = ()  # the parallel sizes the command held (``held``)
    grad_compression: str = "none"  # --grad-compression (Job.grad_compression)
    versions: Versions = field(default_factory=Versions)  # --framework-version (Job.versions)

    @classmethod
    def of(cls, options: CostOptions, names: tuple[str, ...], origin: str,
           shape: ModelShape | None, costs: Costs | None, seq_len: int,
           moments: tuple[str, str], held: tuple[str, ...] = (),
           grad_compression: str = "none", versions: Versions | None = None) -> Jobs:
        """``shape``, else the preset ``options`` names, else the shape of the Hugging
        Face config a measured profile was probed from (its costs stay the measured
        ones), at ``seq_len``; ``versions``: the releases the jobs run (None: defaults)."""
        shape = shape or presets.MODELS.get(str(options.model)) or _hf_shape(options, seq_len)
        return cls(options, names, origin, shape, costs, moments, held, grad_compression,
                   versions or Versions())

    def __call__(self, table: CostTable, request: PlanRequest) -> Job:
        c, costs = self.options, self.costs
        return Job(
            table=table, request=request, layer_names=self.names,
            global_batch=request.global_batch, origin=self.origin, shape=self.shape,
            model=c.model, device=c.gpu,
            attention=c.attention.value if c.attention else None,
            sequence_parallel=c.splits_sequence, tp_comm_overlap=c.overlaps_tp,
            cost_options=c, hf_config=str(c.hf_config) if c.hf_config is not None else None,
            profile_file=costs.profile_file if costs is not None else None,
            profile_device=(costs.profile.device.name
                            if costs is not None and costs.measured else None),
            factors=calibration_factors(costs), moments=self.moments, held=self.held,
            grad_compression=self.grad_compression, versions=self.versions)


def held(flags: CostOptions, pp: Sequence[int] | None) -> tuple[str, ...]:
    """The parallel sizes the command held at one value (``--tp 8``, ``--pp 2``; not
    ``--cp 2,4``), which a file's best-plan comparison keeps at the file's (Limits.held)."""
    given = {n: getattr(flags, n) for n in ("tp", "cp", "ep", "etp")} | {"pp": pp}
    return tuple(n for n in HELD if given[n] is not None and len(given[n]) == 1)


def recorded(c: CostOptions, costs: Costs, keys: Sequence[CostKey]) -> CostOptions:
    """The cost options as resolved (``c``: the flags, a calibrated profile's jobs' choices
    filled in) for a search over ``keys``: the plan file's request's, and its plans'
    jobs' (``Jobs.options``)."""
    hf = c.hf_config.resolve() if c.hf_config is not None else costs.profile.model.hf_config

    def searched(values: list[int]) -> tuple[int, ...]:
        return tuple(sorted(set(values)))

    return replace(c, model=costs.profile.model.name, gpu=costs.profile.device.name,
                   sequence_parallel=c.splits_sequence if not costs.measured
                   else bool(c.sequence_parallel),
                   seq_len=costs.table.seq_len, hf_config=None if hf is None else Path(hf),
                   attention=None if costs.measured else c.attention or Attention(
                       costs.attention or Attention.SDPA.value),
                   tp_comm_overlap=c.overlaps_tp,
                   tp=searched([k.tp for k in keys]), cp=searched([k.cp for k in keys]),
                   ep=searched([k.ep for k in keys]), etp=searched([k.etp for k in keys]),
                   precision=tuple(dict.fromkeys(k.precision for k in keys)))


def calibration_factors(costs: Costs | None) -> Factors | None:
    """The rate factors of a calibrated profile the costs were priced with (None: none)."""
    cal = costs.profile.calibration if costs is not None else None
    return None if cal is None else calibrated.factors(cal)


def _hf_shape(options: CostOptions, seq_len: int) -> ModelShape | None:
    """The shape of the Hugging Face config a measured profile was probed from, for the
    files' model arguments; None without one."""
    hf = options.hf_config
    try:
        return None if hf is None else from_hf_config(hf, seq_len)
    except PptuneError:
        return None  # moved or changed since the probe: the files say the shape is missing
