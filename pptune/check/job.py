"""The job check-config prices a config as, in the adapters' terms (``Job``): its costs
and what they were priced with, so that the plans a file is compared with are priced
again as its framework runs them (``Adapter.as_run``, where ``--emit`` starts too)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pptune.costmodel.calibration import Factors
from pptune.costmodel.keys import CostKey, TableSource
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.search import CostTable, PlanRequest
from pptune.costs.dims import KvHeads
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.versions import Versions
from pptune.options import CostOptions
from pptune.schemas import TrainingConfig


@dataclass(frozen=True)
class ConfigCosts:
    """The per-layer costs of a config (check/costs.py ``costs``) and their inputs."""

    table: CostTable | None  # None: no costs (a finding says why)
    origin: str  # where they came from ("none" without costs)
    key: CostKey  # the layout the table prices
    reserve_bytes: float | None = None  # the memory reserve a calibrated profile measured
    # analytic or calibrated costs: what they were priced with, to price them again;
    # None for measured costs, which are priced as measured
    options: CostOptions | None = None
    shape: ModelShape | None = None
    gpu: str | None = None  # the GPU preset
    attention: str | None = None  # the attention kernel priced
    modules: frozenset[str] = frozenset()  # recomputed modules priced into every layer
    factors: Factors | None = None  # a calibrated profile's rate factors
    # analytic or calibrated costs: a table a cost key, built on first use (the other
    # layouts the best-plan comparison searches, check/layouts.py)
    tables: TableSource | None = None
    # the tensor-parallel sizes its framework's attention takes (costs/dims.py KvHeads)
    kv_heads: KvHeads = KvHeads.REPLICATE
    # the framework releases the config is read by (Semantics.versions): the plans the
    # best-plan comparison prices run as that release runs them (torchtitan main: no SDPA)
    versions: Versions = field(default_factory=Versions)


def config_job(cfg: TrainingConfig, costs: ConfigCosts, req: PlanRequest) -> Job:
    """The config's costs as the job of ``req``'s plans (measured costs: a job its adapter
    does not price again, ``attention`` None)."""
    assert costs.table is not None
    c = costs.options
    return Job(
        table=costs.table, request=req, layer_names=tuple(costs.table.names),
        global_batch=req.global_batch, origin=costs.origin, shape=costs.shape,
        model=cfg.model, device=costs.gpu, attention=costs.attention if c else None,
        # sequence parallelism splits nothing without tensor parallelism (profiles.py)
        sequence_parallel=c is not None and c.splits_sequence and costs.key.tp > 1,
        tp_comm_overlap=c is not None and c.overlaps_tp, cost_options=c,
        hf_config=cfg.hf_config, factors=costs.factors, layer_modules=costs.modules,
        versions=costs.versions)
