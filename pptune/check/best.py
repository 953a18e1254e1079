"""check-config's comparison with the best plan the config's framework states: the
search over the same GPUs and batch, at the parallel sizes recommend searches
(check.layouts), and the ``slower-than-best`` finding, which names the best plan and
every setting in which it differs from the file's."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from pptune.check.framework import stateable_requests
from pptune.check.job import ConfigCosts, config_job
from pptune.check.layouts import own_first, searched_keys
from pptune.costmodel.keys import CostKey
from pptune.costmodel.listing import Ran
from pptune.costmodel.search import (
    CostTable,
    Plan,
    PlanRequest,
    PlanSpec,
    Recompute,
    Sharding,
    search,
)
from pptune.costmodel.stage_recompute import summary_blocks
from pptune.frameworks.common.adapter import Adapter, Add, Job
from pptune.frameworks.common.as_run import as_itself, as_run_faster
from pptune.frameworks.common.batch_words import TokenBatch
from pptune.frameworks.registry import adapter_of
from pptune.report.fmt import (
    blocks_text,
    compact_split,
    fmt_microbatches,
    fmt_over_limit,
    fmt_seconds,
    fmt_sizes,
)
from pptune.schemas import TrainingConfig


@dataclass(frozen=True)
class Best:
    """The best plan as the config's framework runs it, and what the file's plan and it
    set beyond their layouts (``Adapter.run_settings``: torchtitan's [compile])."""

    plan: Plan
    runs: tuple[dict[str, str], dict[str, str]]  # (the file's plan's, the best plan's)


def best_plan(cfg: TrainingConfig, costs: ConfigCosts, req: PlanRequest, plan: Plan
              ) -> Best | None:
    """The fastest plan the config's framework states for the request's GPUs and batch
    (every micro-batch size the table prices, every sharding and recomputation, and for
    analytic or calibrated costs every tensor, context and expert parallel size
    recommend searches, at the config's precision: check.layouts), each timed as the
    framework runs it (``Adapter.as_run``: torchtitan runs a split-backward schedule
    with its model uncompiled); None when none fits so. ``plan``: the file's."""
    assert costs.table is not None
    # a file that states counts per stage (pptune's) is compared with the search's own fits
    counted = cfg.recompute_layers_per_stage is not None
    held = cfg.limits.held  # sizes the config holds at its own (Limits.held)
    wide = dataclasses.replace(
        req, micro_batch_sizes=tuple(sorted(costs.table.by_mb)), with_best_pp1=False,
        shardings=tuple(Sharding),
        recompute_group=1,  # the search states one block a checkpoint (or N per stage)
        recomputes=(Recompute.FULL, Recompute.NONE) if counted else tuple(Recompute),
        cost_keys=searched_keys(costs, req, held), pp=(plan.pp,) if "pp" in held else req.pp)
    adapter = adapter_of(cfg.source_format)
    tables = costs.tables if costs.tables is not None else costs.table
    jobs: dict[PlanSpec, Job] = {}  # the job each plan so priced ran as

    def as_run(part: PlanRequest, plan: Plan) -> Ran | None:
        ran = _as_run(adapter, cfg, costs, part, plan)
        if ran is None:
            return None
        jobs[plan.spec] = ran[0]
        return Ran(ran[1], ran[0].table, ran[0].request)

    best: Plan | None = None
    for part in (p for within in stateable_requests(cfg, wide, costs.table.seq_len,
                                                          costs.versions)
                 for p in own_first(within, req.keys()[0])):
        # the fastest plan of the part as the framework runs it (search's as_run)
        found = search(tables, dataclasses.replace(part, top=1),
                       functools.partial(as_run, part), as_run_faster(
                           adapter, functools.partial(_key_job, cfg, costs, part))).plans
        if found and (best is None or found[0].step_time_s < best.step_time_s):
            best = found[0]
    if best is None:
        return None
    return Best(best, (adapter.run_settings(config_job(cfg, costs, req), plan),
                       adapter.run_settings(jobs[best.spec], best)))


def _as_run(adapter: Adapter, cfg: TrainingConfig, costs: ConfigCosts, req: PlanRequest,
            plan: Plan) -> tuple[Job, Plan] | None:
    """The plan priced as the framework runs it, as the job of its own cost key
    (``_key_job``); None where it runs no such plan (as_run.as_itself)."""
    return as_itself(adapter, _key_job(cfg, costs, req, plan.key), plan)


def _key_job(cfg: TrainingConfig, costs: ConfigCosts, req: PlanRequest, key: CostKey) -> Job:
    """The job of a plan of ``key``: its table, ``req`` for it alone (as emit's
    ``job_of``)."""
    if key != costs.key:
        assert costs.tables is not None
        costs = dataclasses.replace(costs, table=costs.tables(key), key=key)
    return config_job(cfg, costs, dataclasses.replace(req, cost_keys=(key,), tp=key.tp))


def recompute_text(table: CostTable, plan: Plan, every: int | None,
                   modules: tuple[str, ...] = ()) -> str:
    """What a plan recomputes: whole blocks (``full``, per stage where it states counts;
    ``selective``: every Nth block), megatron-core's modules, or nothing. ``modules``: those
    the table prices into every layer (a Megatron-LM file's --recompute-modules), which a
    plan recomputing no whole block runs."""
    if plan.recompute is Recompute.MODULES:
        return f"modules {','.join(plan.recompute_modules)}"
    if not any(summary_blocks(table, plan, every)):
        return f"modules {','.join(modules)}" if modules else "none"
    rest = f" and modules {','.join(modules)}" if modules else ""  # of the other blocks
    counts = plan.recompute_layers
    if plan.recompute is Recompute.FULL:
        return "full" if counts is None else (
            f"full (blocks per stage {compact_split(counts)}){rest}")
    return f"selective (1 block in {every}){rest}"


def settings(table: CostTable, plan: Plan, every: int | None,
             modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """What a plan sets, by the names the finding gives them (JSON values)."""
    return {"tp": plan.tp, "cp": plan.cp, "ep": plan.ep, "etp": plan.etp, "pp": plan.pp,
            "schedule": plan.schedule.value, "v": plan.virtual_stages,
            "micro-batch size": plan.micro_batch_size,
            "recompute": recompute_text(table, plan, every, modules),
            "sharding": plan.sharding.value, "a2a overlap": "on" if plan.a2a_overlap else "off",
            "rank order": plan.rank_order.value}


def differences(table: CostTable, file: Plan, best: Plan, every: int | None = None,
                modules: tuple[str, ...] = (),
                runs: tuple[dict[str, str], dict[str, str]] = ({}, {})) -> dict[str, list[Any]]:
    """Each setting in which ``best`` differs from ``file``: name -> [file's, best's]
    (``runs``: their framework's own settings, ``Best.runs``)."""
    mine, theirs = ({**settings(table, x, every, modules), **own}
                    for x, own in zip((file, best), runs, strict=True))
    return {k: [mine[k], theirs[k]] for k in mine if mine[k] != theirs.get(k)}


def slower_than_best(table: CostTable, plan: Plan, best: Plan, *, gpus: int, limit: float,
                     severity: str, add: Add, every: int | None = None,
                     modules: tuple[str, ...] = (),
                     runs: tuple[dict[str, str], dict[str, str]] = ({}, {}),
                     words: TokenBatch | None = None) -> None:
    """The ``slower-than-best`` finding when ``plan`` runs over ``limit`` times ``best``
    (``every``, ``modules``: the request's selective interval and the modules the table
    prices, as ``recompute_text`` takes them; ``runs`` as ``differences`` takes it;
    ``words``: the file's own batch keys, Semantics.batch_words, for the text alone)."""
    ratio = plan.step_time_s / best.step_time_s
    if ratio <= limit:
        return
    differs = differences(table, plan, best, every, modules, runs)
    split = plan.stage_layers != best.stage_layers
    said = ("; it differs from the file in " + ", ".join(
        words.size_change(a, b) if words and k == "micro-batch size" else f"{k} {a} -> {b}"
        for k, (a, b) in differs.items()) + (" and the split" if split else "")
        if differs else "; it differs from the file in the split alone" if split else "")
    batches = (words.plan(best.num_microbatches, best.micro_batch_size, best.dp, best.pp)
               if words else fmt_microbatches(best.num_microbatches, best.micro_batch_size))
    over, most = fmt_over_limit(ratio, limit)  # 1.105x, not 1.10x, over a limit of 1.10x
    add("slower-than-best", severity,
        f"predicted step {fmt_seconds(plan.step_time_s)} is {over} the best plan its "
        f"files state for the same {gpus} GPUs and batch (limit {most}): "
        f"{fmt_sizes(best.pp, best.dp, best.tp, best.cp, best.ep, best.etp)} "
        f"{best.schedule.value}"
        + (f" v={best.virtual_stages}" if best.virtual_stages > 1 else "")
        + f", {batches}, blocks per "
        f"stage {blocks_text(table.names, best.stage_layers)} at "
        f"{fmt_seconds(best.step_time_s)}{said}",
        slowdown=ratio, max_slowdown=limit, best_step_time_s=best.step_time_s, differs=differs)
