"""Recomputation per stage against uniform recomputation where memory binds ->
bench/results/stage_recompute.json.

Two jobs whose plan does not fit without recomputation, each on one fixed plan
(schedule, split, micro-batches) priced five ways: no recomputation; Megatron-LM's
selective (core attention: no change with flash attention, which the analytic
costs assume); torchtitan's default selective (every second block
checkpointed); full recomputation of every block; and per stage
(stage_recompute.py: the fewest blocks per stage with which every rank fits);
and that per-stage plan as Megatron-LM states it (``--recompute-method block
--recompute-num-layers N`` applies one N, the largest, to every stage). The
step-time ratio is per stage over each other choice that fits.

- llama3-70b on 32 H100: TP 4, PP 8, DP 1, 1F1B, ZeRO-1, micro-batch 1, global
  batch 128 (128 micro-batches), seq 8192, Megatron-LM's even split (10 blocks
  per stage, the embedding first, the head last).
- deepseek-v3 as NVIDIA's H100 recipe lays it out (NVIDIA-NeMo/Megatron-Bridge
  src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py,
  deepseek_v3_pretrain_1024gpu_h100_bf16_config): 1,024 GPUs, TP 2, PP 8, VP 4,
  EP 64, micro-batch 1, global batch 16384, layout Et|(tt|)*30mL; here without
  the recipe's selective recompute modules (mla_up_proj, mlp), so that
  recomputation is the question, and with the modules recommend searches
  (mla_up_proj, mlp, moe_act: recompute_modules.py) as one more choice.

Nothing is fitted; these are predictions of the model, not measurements.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pptune.costmodel import presets
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.recompute_modules import searched_modules
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import CostTable, PlanRequest, PlanSpec, Recompute, Sharding, evaluate
from pptune.costmodel.stage_recompute import fit_stage_recompute, stage_blocks
from pptune.costs.profiles import analytic_profile, cost_table

GIB = 1024**3
UNIFORM = (("none", Recompute.NONE, None), ("selective (core attention)", Recompute.SELECTIVE, None),
           ("selective (every 2nd block)", Recompute.SELECTIVE, 2),
           ("full", Recompute.FULL, None))


def _llama() -> tuple[str, CostTable, PlanRequest, PlanSpec]:
    tp, pp, gpus, mbs, gbs = 4, 8, 32, 1, 128
    prof = analytic_profile(presets.MODELS["llama3-70b"], "h100-sxm", [mbs], tp=tp,
                            sequence_parallel=True)
    table = cost_table(prof, tp=tp, tp_in_costs=tp)
    split = [10] * pp
    split[0] += 1
    split[-1] += 1
    m = gbs // (mbs * (gpus // (tp * pp)))
    spec = PlanSpec(Schedule.ONE_F_ONE_B, pp, mbs, m, tuple(split), sharding=Sharding.ZERO1)
    return ("llama3-70b, 32 x h100-sxm, tp 4 pp 8 dp 1, 1f1b, zero1, mbs 1, m 128",
            table, PlanRequest(gpus=gpus, global_batch=gbs, tp=tp), spec)


def _deepseek() -> tuple[str, CostTable, PlanRequest, PlanSpec]:
    gpus, tp, pp, vp, ep, mbs, gbs = 1024, 2, 8, 4, 64, 1, 16384
    prof = analytic_profile(presets.MODELS["deepseek-v3"], "h100-sxm", [mbs], tp=tp,
                            sequence_parallel=True,
                            experts=ExpertParallel(ep=ep, etp=1, grouped_gemm=True))
    table = cost_table(prof, tp=tp, tp_in_costs=tp)
    # its twin with every module megatron-core accepts recomputed (recommend's "modules")
    modules = searched_modules(presets.MODELS["deepseek-v3"], Precision.BF16)
    twin = analytic_profile(presets.MODELS["deepseek-v3"], "h100-sxm", [mbs], tp=tp,
                            sequence_parallel=True, recompute_modules=frozenset(modules),
                            experts=ExpertParallel(ep=ep, etp=1, grouped_gemm=True))
    table = dataclasses.replace(table, modules_table=dataclasses.replace(
        cost_table(twin, tp=tp, tp_in_costs=tp), recompute_modules=modules))
    key = CostKey(tp=tp, ep=ep)
    m = gbs // (mbs * (gpus // (tp * pp)))
    split = (2,) * 32  # Et|(tt|)*30mL over the table's embedding, 61 blocks, mtp0, head
    spec = PlanSpec(Schedule.INTERLEAVED, pp, mbs, m, split, vp, sharding=Sharding.ZERO1, key=key)
    return ("deepseek-v3, 1024 x h100-sxm, tp 2 pp 8 vp 4 ep 64, interleaved-1f1b, zero1, "
            "mbs 1, m 256, layout Et|(tt|)*30mL",
            table, PlanRequest(gpus=gpus, global_batch=gbs, tp=tp, cost_keys=(key,)), spec)


def _row(job: str, table: CostTable, req: PlanRequest, spec: PlanSpec) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    plans = {}
    for label, recompute, every in UNIFORM:
        plan = evaluate(table, dataclasses.replace(req, recompute_every=every),
                        dataclasses.replace(spec, recompute=recompute))
        plans[label] = plan
        rows[label] = _figures(table, plan)
    if table.modules_table is not None:
        label = f"modules ({', '.join(table.modules_table.recompute_modules)})"
        plans[label] = evaluate(table, req, dataclasses.replace(spec, recompute=Recompute.MODULES))
        rows[label] = _figures(table, plans[label])
    staged, _ = fit_stage_recompute(table, req, plans["full"])
    rows["per stage"] = {**_figures(table, staged),
                         "blocks_recomputed_per_stage": list(staged.recompute_layers or ())}
    if staged.recompute_layers is not None:  # Megatron-LM's block method: one N for all
        n = max(staged.recompute_layers)
        block = tuple(min(n, b) for b in stage_blocks(list(table.names), staged.stage_layers))
        as_run = evaluate(table, req, dataclasses.replace(staged.spec, recompute_layers=block))
        rows[f"megatron block method (N = {n} on every stage)"] = _figures(table, as_run)
        plans[f"megatron block method (N = {n} on every stage)"] = as_run
    ratios = {label: round(staged.step_time_s / plan.step_time_s, 3)
              for label, plan in plans.items() if rows[label]["fits"]}
    return {"job": job, "memory_gib": round(table.memory_bytes / GIB, 1), "plans": rows,
            "per_stage_step_ratio": ratios}


def _figures(table: CostTable, plan: Any) -> dict[str, Any]:
    peak = max(plan.peak_memory_bytes)
    return {"step_time_s": round(plan.step_time_s, 3), "peak_memory_gib": round(peak / GIB, 1),
            "fits": peak <= table.memory_bytes}


def main() -> dict[str, Any]:
    return {"results": [_row(*_llama()), _row(*_deepseek())]}


if __name__ == "__main__":
    from bench.write import write_result

    write_result("stage_recompute", main())
