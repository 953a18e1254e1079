"""A job's analytic costs priced again: with the kernels, exchange, modules or shape a
framework's files run (express.priced_as_run, torchtitan's cp_fp8.py and converters.py).

The tables are kept by what they were priced from (``analytic_table``): a framework
runs many plans of one cost key with the same kernels (torchtitan: every zero-bubble or
DualPipeV plan with its SwiGLU eager), and ``recommend --framework`` prices each of its
fastest plans so (plan/framework_search.py)."""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import replace

from pptune.costmodel import presets
from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.models import ModelShape
from pptune.costmodel.precision import Fp8Casts, Fp8Kernels, is_low
from pptune.costmodel.rates import Swiglu, WgradAccum
from pptune.costmodel.table import CostTable
from pptune.costs.resolve import analytic_costs
from pptune.frameworks.common.adapter import Job
from pptune.options import CostOptions

# tables kept at most, the oldest dropped first: recommend --framework prices a table a
# cost key, sharding, depth and micro-batch size it bounds (as_run.as_run_faster), 144
# distinct among 505 asks for DeepSeek-V3 on 256 GPUs in FP8, which 32 kept re-priced
_KEPT = 256
_tables: dict[Hashable, CostTable] = {}


def analytic(job: Job) -> bool:
    """Whether pptune can price the job's shape again (analytic costs of a GPU preset)."""
    return job.shape is not None and str(job.device) in presets.GPUS and job.attention is not None


def repriced(job: Job, shape: ModelShape | None) -> Job:
    """The job with ``shape``'s analytic costs at its kernels, links and cost key."""
    assert shape is not None
    table = analytic_table(job, shape)
    return replace(job, table=table, shape=shape, layer_names=tuple(table.names))


def kernels_job(job: Job, precision: Precision, *, attention: str | None,
                sequence_parallel: bool, cross_entropy: CrossEntropy | None = None,
                dispatcher: Dispatcher | None = None, swiglu: Swiglu | None = None,
                fp8_kernels: Fp8Kernels | None = None, fp8_casts: Fp8Casts | None = None,
                tp_comm_overlap: bool | None = None,
                wgrad_accum: WgradAccum | None = None) -> Job | None:
    """The job priced again with these kernels for plans of ``precision`` (each None: the
    job's; express.priced_as_run says what they are); None where nothing changes, or for
    costs pptune cannot price again (measured, a shape or GPU it has no preset of)."""
    c = job.cost_options or CostOptions()
    loss = c.loss_kernels if cross_entropy is None else cross_entropy
    act = c.swiglu_kernels if swiglu is None or job.shape is None or not job.shape.gated_mlp \
        else swiglu
    route = c.dispatcher if dispatcher is None or job.shape is None \
        or not job.shape.moe else dispatcher
    fp8 = c.fp8_linears() if fp8_kernels is None or not is_low(precision) else fp8_kernels
    casts = c.fp8_casts if fp8_casts is None else fp8_casts
    overlap = job.tp_comm_overlap if tp_comm_overlap is None else tp_comm_overlap
    accum = c.wgrad if wgrad_accum is None else wgrad_accum
    if ((job.attention, job.sequence_parallel, c.loss_kernels, c.dispatcher,
         c.swiglu_kernels, c.fp8_linears(), c.fp8_casts, job.tp_comm_overlap, c.wgrad)
            == (attention, sequence_parallel, loss, route, act, fp8, casts, overlap, accum)
            or not analytic(job)):
        return None
    job = replace(job, attention=attention, sequence_parallel=sequence_parallel,
                  tp_comm_overlap=overlap,
                  cost_options=replace(c, cross_entropy=loss, moe_dispatcher=route, swiglu=act,
                                       fp8_kernels=fp8, tp_comm_overlap=overlap,
                                       wgrad_accum=accum, fp8_casts=casts))
    return repriced(job, job.shape)


def table_saving_s(searched: CostTable, ran: CostTable, micro_batch_size: int) -> float:
    """The most seconds one micro-batch of ``micro_batch_size`` runs faster on ``ran``
    than on ``searched`` over all the layers: each layer's forward (twice: recomputed),
    backward and weight gradient, split or not, and all-to-alls, where ``ran`` prices them
    lower (its modules' table's too). A plan simulated on ``ran`` with the same ops in the
    same order per device steps in no less than its step on ``searched`` less m times
    this: the step is the longest path through the ops, which passes each of the m
    micro-batches' ops of each layer at most once (a recomputed forward twice), and the
    sends, collectives and optimizer step, which the kernels do not change. How much
    faster a framework may run a plan than the search priced it (Adapter.as_run_saving_s),
    which the search's cut-offs allow for, so it still prunes safely."""
    a, b = searched.by_mb.get(micro_batch_size), ran.by_mb.get(micro_batch_size)
    if a is not None and b is None:
        return math.inf  # nothing known of it: any
    saved = 0.0
    if a is not None and b is not None:
        for field, times in (("fwd_s", 2), ("bwd_s", 1), ("wgrad_s", 1), ("fwd_a2a_s", 2),
                             ("bwd_a2a_s", 1), ("split_bwd_s", 1), ("split_wgrad_s", 1)):
            saved += times * sum(max(0.0, was - now) for was, now in zip(
                getattr(a, field), getattr(b, field), strict=False))
    if searched.modules_table is not None and ran.modules_table is not None:
        saved += table_saving_s(searched.modules_table, ran.modules_table, micro_batch_size)
    return saved


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
            del _tables[next(iter(_tables))]
        _tables[kept] = table
    return table
