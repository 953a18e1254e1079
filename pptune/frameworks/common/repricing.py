"""A job's analytic costs priced again: with the kernels, exchange, modules or shape a
framework's files run (express.priced_as_run, torchtitan's cp_fp8.py and converters.py).

The tables are kept by what they were priced from (``analytic_table``): a framework
runs many plans of one cost key with the same kernels (torchtitan: every zero-bubble or
DualPipeV plan with its SwiGLU eager), and ``recommend --framework`` prices each of its
fastest plans so (plan/framework_search.py)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from pptune.costmodel import presets
from pptune.costmodel.models import ModelShape
from pptune.costmodel.table import CostTable
from pptune.costs.resolve import analytic_costs
from pptune.frameworks.common.adapter import Job
from pptune.options import CostOptions

_KEPT = 32  # tables kept at most; all are dropped when one more is priced
_tables: dict[Hashable, CostTable] = {}


def analytic(job: Job) -> bool:
    """Whether pptune can price the job's shape again (analytic costs of a GPU preset)."""
    return job.shape is not None and str(job.device) in presets.GPUS and job.attention is not None


def repriced(job: Job, shape: ModelShape | None) -> Job:
    """The job with ``shape``'s analytic costs at its kernels, links and cost key."""
    assert shape is not None
    table = analytic_table(job, shape)
    return replace(job, table=table, shape=shape, layer_names=tuple(table.names))


def analytic_table(job: Job, shape: ModelShape | None = None, **changed: object) -> CostTable:
    """``shape``'s (None: the job's) analytic costs priced as the job's were: its GPU and
    GPU count, kernels, links, cost key, GEMM efficiency and calibration; ``changed``
    replaces options of ``profiles.analytic_profile`` (an exchange, modules recomputed).
    The same inputs give the same table (shared: callers never change it)."""
    c = job.cost_options or CostOptions()
    options: dict[str, object] = dict(
        sequence_parallel=job.sequence_parallel, attention=str(job.attention),
        tp_comm_overlap=job.tp_comm_overlap, cp_comm=c.cp_comm, fp8_params=c.fp8_params,
        gpus_per_node=job.request.gpus_per_node, gpus=job.request.gpus,
        gpu_spread=c.gpu_spread, cross_entropy=c.loss_kernels, swiglu=c.swiglu_kernels,
        fp8_kernels=c.fp8_linears(), factors=job.factors, recompute_modules=job.layer_modules,
        efficiency=c.efficiency, wgrad_accum=c.wgrad, torchao_recipe=c.torchao_recipe,
        fp8_recipe=c.recipe, main_grad_bytes=c.main_grad_bytes, fp8_casts=c.fp8_casts)
    options.update(changed)
    priced = shape or job.shape
    assert priced is not None
    sizes, key, experts = sorted(job.table.by_mb), job.request.keys()[0], c.experts()
    kept: Hashable = (priced, str(job.device), tuple(sizes), key, experts,
                      tuple(sorted(options.items())))
    try:
        return _tables[kept]
    except TypeError:  # an option that cannot be hashed: priced every time
        kept = None
    except KeyError:
        pass
    table, _ = analytic_costs(priced, str(job.device), sizes, key, experts,
                              **options)  # type: ignore[arg-type]
    if kept is not None:
        if len(_tables) >= _KEPT:
            _tables.clear()
        _tables[kept] = table
    return table
