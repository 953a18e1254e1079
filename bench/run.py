"""`make bench`: speed and quality figures, written to bench/results/*.json.

Each figure is measured in this run; ratios compare alternatives measured
side by side in the same process. Run: python -m bench.run [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.write import write_result
from pptune.costmodel import presets
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.partition import min_bottleneck_split
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import (
    CostTable,
    LayerCosts,
    PlanRequest,
    PlanSpec,
    Recompute,
    Sharding,
    divisors,
    evaluate,
    search,
)
from pptune.costmodel.simulate import Link, simulate, uniform_stages
from pptune.costs.profiles import analytic_profile, cost_table


def _timed(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_simulator(repeats: int) -> None:
    rows = []
    for schedule, p, m, v in [
        ("1f1b", 64, 512, 1), ("gpipe", 64, 512, 1), ("interleaved-1f1b", 64, 512, 2),
        ("zb-h1", 64, 512, 1), ("zbv", 64, 512, 2), ("1f1b", 8, 64, 1),
    ]:
        chunks = {"interleaved-1f1b": v, "zbv": 2}.get(schedule, 1)
        stages = uniform_stages(p * chunks, 1.0, 2.0, 1.0)
        for keep in (True, False):
            t = _timed(lambda s=schedule, p=p, m=m, st=stages, v=v, k=keep: simulate(
                s, p, m, st, v=v, keep_events=k), repeats)
            ops = p * chunks * m * (3 if schedule in ("zb-h1", "zbv") else 2)
            rows.append({"schedule": schedule, "pp": p, "microbatches": m, "virtual_stages": v,
                         "keep_events": keep, "ops": ops, "median_s": round(t, 4),
                         "us_per_op": round(t / ops * 1e6, 2)})
    write_result("simulator_speed", {"repeats": repeats, "results": rows})


def _random_table(rng: random.Random, n: int) -> CostTable:
    base = [rng.uniform(0.5, 3.0) for _ in range(n)]
    by = {}
    for b in (1, 2):
        f = [x * b * rng.uniform(0.9, 1.1) for x in base]
        by[b] = LayerCosts(f, [2 * x for x in f], [0.5 * x for x in f], [1e6 * b] * n, [1e5 * b] * n)
    return CostTable([f"l{i}" for i in range(n)], [1e6] * n, 2, by, 128, 1e12,
                     Link(1e-3, 1e9), Link(5e-3, 1e8), AllReduceLink(1e-3, 1e9),
                     AllReduceLink(1e-3, 1e8))


def bench_optimality(instances: int) -> None:
    scheds = (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1)
    ratios = []
    for seed in range(instances):
        rng = random.Random(1000 + seed)
        n = rng.randint(4, 8)
        gpus = rng.choice([2, 4])
        gb = rng.choice([8, 16])
        table = _random_table(rng, n)
        req = PlanRequest(gpus=gpus, global_batch=gb, schedules=scheds, reserve_bytes=0, top=1,
                          shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,))
        got = search(table, req).plans[0].step_time_s
        best = float("inf")
        for p in divisors(gpus):
            if p > n:
                continue
            dp = gpus // p
            for b in (1, 2):
                if gb % (b * dp):
                    continue
                m = gb // (b * dp)
                for s in scheds:
                    if s is Schedule.ONE_F_ONE_B and m < p:
                        continue
                    for cuts in itertools.combinations(range(1, n), p - 1):
                        bounds = (0, *cuts, n)
                        split = [bounds[i + 1] - bounds[i] for i in range(p)]
                        best = min(best, evaluate(table, req, PlanSpec(s, p, b, m, tuple(split))).step_time_s)
        ratios.append(got / best)
    write_result("planner_optimality", {
        "instances": instances,
        "description": "chosen plan's simulated step time / best of exhaustive enumeration "
                       "of every pp, micro-batch size, schedule and contiguous split",
        "ratio_max": round(max(ratios), 6), "ratio_median": round(statistics.median(ratios), 6),
        "instances_at_1.000": sum(1 for r in ratios if r <= 1 + 1e-9),
    })


def _fixed_depth_rows(instances: int) -> list[dict[str, Any]]:
    rows = []
    for p in (2, 4, 8):
        for m in (p, 2 * p, 4 * p):
            for sched in (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1):
                ratios = []
                for seed in range(instances):
                    rng = random.Random(7000 + 100 * p + seed)
                    n = rng.randint(p + 1, p + 4)
                    table = _random_table(rng, n)
                    req = PlanRequest(gpus=p, global_batch=m, schedules=(sched,), pp=(p,),
                                      micro_batch_sizes=(1,), reserve_bytes=0, top=1,
                                      shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,),
                                      with_best_pp1=False)
                    got = search(table, req).plans[0].step_time_s
                    best = min(
                        evaluate(table, req, PlanSpec(sched, p, 1, m, split)).step_time_s
                        for split in _compositions(n, p))
                    ratios.append(got / best)
                rows.append({"pp": p, "microbatches": m, "schedule": sched.value,
                             "instances": instances, "ratio_max": round(max(ratios), 6),
                             "instances_at_1.000": sum(1 for r in ratios if r <= 1 + 1e-9)})
    return rows


def bench_fixed_depth_optimality(instances: int) -> None:
    """pp fixed at 2, 4, 8 with m in {p, 2p, 4p}: the chosen split vs every contiguous split."""
    from pptune.costmodel import refine

    rows = _fixed_depth_rows(instances)
    saved = refine.EXHAUSTIVE_MAX_SPLITS
    refine.EXHAUSTIVE_MAX_SPLITS = 0  # the hill climb alone, as on models with many layers
    try:
        climb = _fixed_depth_rows(instances)
    finally:
        refine.EXHAUSTIVE_MAX_SPLITS = saved
    write_result("planner_optimality_fixed_depth", {
        "description": "chosen split's simulated step / best of all contiguous splits, "
                       "pp and m fixed (random per-layer costs, one micro-batch size); "
                       "these instances are small enough for the exact refinement, "
                       "hill_climb_only repeats them with the hill climb alone",
        "worst_ratio": max(r["ratio_max"] for r in rows), "results": rows,
        "worst_ratio_hill_climb_only": max(r["ratio_max"] for r in climb),
        "hill_climb_only": climb,
    })


def _compositions(n: int, k: int) -> list[tuple[int, ...]]:
    out = []
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = (0, *cuts, n)
        out.append(tuple(bounds[i + 1] - bounds[i] for i in range(k)))
    return out


def bench_published_memory() -> None:
    from bench import memory

    write_result("published_memory", memory.main())


def _baseline_splits(table: CostTable, p: int) -> dict[str, list[int]]:
    n = len(table.names)
    blocks = n - 2
    q, r = divmod(blocks, p)
    per = [q + (1 if i < r else 0) for i in range(p)]
    megatron = per[:]  # Megatron-LM: blocks evenly; embedding on the first stage, head on the last
    megatron[0] += 1
    megatron[-1] += 1
    params = [x / table.param_dtype_bytes for x in table.param_bytes]
    deepspeed = min_bottleneck_split(params, p)  # partition_method="parameters"
    return {"megatron_even": megatron, "deepspeed_parameters": deepspeed}


def bench_baselines() -> None:
    rows = []
    for model, gpu, gpus, p in [("llama3-8b", "h100-sxm", 8, 4), ("llama3-8b", "h100-sxm", 8, 8),
                                ("gpt3-1.3b", "a100-80gb", 8, 4), ("gpt3-1.3b", "a100-80gb", 8, 8)]:
        prof = analytic_profile(model, gpu, [1])
        table = cost_table(prof)
        gb = prof.model.global_batch or 512
        for schedule in (Schedule.ONE_F_ONE_B, Schedule.ZB_H1):
            req = PlanRequest(gpus=gpus, global_batch=gb, schedules=(schedule,), pp=(p,),
                              micro_batch_sizes=(1,), top=1, reserve_bytes=0,
                              shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,),
                              with_best_pp1=False)
            res = search(table, req)
            dp = gpus // p
            m = gb // dp
            ours = res.plans[0] if res.plans else None
            row: dict[str, Any] = {"model": model, "gpu": gpu, "gpus": gpus, "pp": p,
                                   "schedule": schedule.value, "microbatches": m}
            if ours is None:
                row["note"] = "no feasible pptune plan (memory)"
                rows.append(row)
                continue
            row["pptune_split"] = ours.stage_layers
            row["pptune_step_s"] = round(ours.step_time_s, 4)
            for name, split in _baseline_splits(table, p).items():
                base = evaluate(table, req, PlanSpec(schedule, p, 1, m, tuple(split)))
                row[f"{name}_split"] = split
                row[f"{name}_step_s"] = round(base.step_time_s, 4)
                row[f"ratio_vs_{name}"] = round(ours.step_time_s / base.step_time_s, 4)
            rows.append(row)
    write_result("planner_vs_baselines", {
        "description": "pptune's split vs Megatron-LM's even block split and DeepSpeed's "
                       "parameter-balanced split, same pp, schedule, micro-batch size 1 and m; "
                       "analytic costs; ratio < 1 means pptune's plan is faster "
                       "(memory limits not applied to the baselines)",
        "results": rows,
    })


def bench_planner_speed(repeats: int) -> None:
    rows = []
    big = dataclasses.replace(presets.MODELS["gpt3-175b"], name="gpt3-175b-126", num_blocks=126)
    presets.MODELS[big.name] = big
    try:
        for model, gpus, tp in [("llama3-8b", 8, 1), ("llama3-8b", 64, 1), ("llama3-70b", 64, 8),
                                ("llama3-70b", 512, 8), ("gpt3-175b-126", 512, 8),
                                ("gpt3-175b-126", 4096, 8)]:
            table = cost_table(analytic_profile(model, "h100-sxm", [1, 2, 4, 8], tp=tp))
            gb = presets.MODELS[model].global_batch
            req = PlanRequest(gpus=gpus, global_batch=gb, tp=tp)
            t = _timed(lambda t=table, r=req: search(t, r), repeats)
            res = search(table, req)
            rows.append({"model": model, "layers": len(table.names), "gpus": gpus, "tp": tp,
                         "candidates": res.candidates, "simulated": res.simulated,
                         "feasible_plans_found": len(res.plans), "median_s": round(t, 3)})
    finally:
        del presets.MODELS[big.name]
    write_result("planner_speed", {"repeats": repeats, "results": rows, "cli": bench_cli_speed(repeats)})


# The planner's speed targets (issues 19 and 20): whole-CLI runs, with their targets.
CLI_TARGETS = [
    (["--gpus", "8"], 1.0),
    (["--gpus", "2048", "--hf-config", "tests/data/hf/deepseek-v3-config.json", "--gpu",
      "h100-sxm", "--seq-len", "4096", "--global-batch", "15360"], 10.0),
    # the issue's own command: the config's pre-training length, the default batch
    (["--gpus", "2048", "--hf-config", "tests/data/hf/deepseek-v3-config.json", "--gpu",
      "h100-sxm"], 10.0),
    (["--gpus", "4096", "--model", "llama3-70b", "--precision", "bf16,fp8"], 5.0),
    # a search over the plans Megatron-LM's files state, each priced as they run it (a
    # user's trial: 35 s on 2 cores); 10 s as the DeepSeek-V3 search above, the README's
    # "seconds". Not within it yet: the as-run allowance (frameworks/common/as_run.py
    # as_run_faster) admits the pipelined FSDP plans to simulation, and the
    # --fp8-param-gather what-if searches again (plan/what_if.py)
    (["--gpus", "256", "--model", "qwen3-235b-a22b", "--gpu", "b200", "--precision", "fp8",
      "--framework", "megatron"], 10.0),
]


REFERENCE_LOOP = 2_000_000  # additions in the reference loop (reference_loop_s)


def reference_loop_s(repeats: int = 3) -> float:
    """The fastest of ``repeats`` runs of a plain Python loop of REFERENCE_LOOP
    additions: this machine's interpreter speed at the moment, so that runs of the
    same code on other days (or machines) can be compared."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(REFERENCE_LOOP):
            total += i
        best = min(best, time.perf_counter() - t0)
    return best


def bench_cli_speed(repeats: int = 3) -> list[dict[str, Any]]:
    """Each target command ``repeats`` times as its own process, after byte-compiling
    pptune (as an installed package is): the fastest and the median wall clock, the
    user CPU seconds of the fastest, the 1-minute load average and, just before, the
    reference loop (reference_loop_s). This machine's speed drifts by up to 1.5x within
    minutes and more between days, so the fastest run is the figure for the code, the
    median and the reference loop for the machine."""
    rows = []
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", "pptune"], check=True, cwd=root)
    for args, target in CLI_TARGETS:
        load = os.getloadavg()[0]
        reference = reference_loop_s()
        runs = []
        for _ in range(repeats):
            used = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pptune", "recommend", *args], check=True,
                           cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            runs.append((wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - used))
        fastest = min(runs)
        rows.append({"command": "pptune recommend " + " ".join(args), "target_s": target,
                     "wall_s": round(fastest[0], 2), "user_s": round(fastest[1], 2),
                     "median_wall_s": round(statistics.median(w for w, _ in runs), 2),
                     "runs": repeats, "load_average": round(load, 2),
                     "reference_loop_s": round(reference, 3)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repeats and instances")
    ap.add_argument("--only", choices=["planner_speed"], help="run this part alone")
    args = ap.parse_args()
    repeats = 1 if args.quick else 3
    if args.only == "planner_speed":
        bench_planner_speed(repeats)
        return
    bench_simulator(repeats)
    bench_optimality(10 if args.quick else 40)
    bench_fixed_depth_optimality(3 if args.quick else 10)
    bench_published_memory()
    bench_baselines()
    bench_planner_speed(repeats)
    from bench import (
        calibrate,
        published,
        published_gemm,
        published_holdout,
        published_modern,
        published_moe,
        published_scaling,
        stage_recompute,
    )

    write_result("published", published.main())
    write_result("published_gemm", published_gemm.main())
    write_result("published_moe", published_moe.main())
    write_result("published_modern", published_modern.main(quick=args.quick))
    write_result("published_holdout", published_holdout.main())
    write_result("published_scaling", published_scaling.main())
    write_result("stage_recompute", stage_recompute.main())
    write_result("calibrate", calibrate.main())
    try:
        from bench import accuracy
    except ImportError:
        return
    accuracy.main(quick=args.quick)
    from bench import tune_bench

    tune_bench.main(quick=args.quick)


if __name__ == "__main__":
    main()
