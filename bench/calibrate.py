"""Calibrated predictions against published runs: leave one out, family by family.

What ``pptune calibrate --run`` does with a user's job, done with published
rows: calibrate on one row (its published seconds per step; one run fits
one factor common to every rate, pptune.costmodel.fit), predict every other
row of the same family with that calibration, and compare with what was
published. Every row is the calibration row once, so a family of n rows
gives n (n - 1) predictions; all are reported.

A family is a list of ``Row``: a label, the published seconds per step, and
``step_at(factors)``, the row's simulated step on the GPU with its rates
scaled (pptune.costmodel.calibration.scaled_gpu). Families:

- Megatron-LM SC21 Table 1 on A100 (Narayanan et al. 2021), each row as
  bench/published_megatron.py runs it, its step from eq. 3's FLOPs at the
  published TFLOP/s per GPU;
- the modern H100 rows (NVIDIA dgxc-benchmarking v25.02, each as bench/
  published_modern.py runs it, ``step_s``): the weak-scaling series of each
  model and precision (calibrate on one GPU count, predict the others) and
  across models (calibrate on one model's smallest run, predict every run of
  the other models of the same precision).

Targets (issue 22): median |error| <= 5%, worst <= 10%, every row reported.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.published_data import MEGATRON_TABLE1
from bench.published_megatron import megatron_step_s, published_step_s
from pptune.costmodel.calibration import Factors
from pptune.costmodel.fit import Observed, fit

MEDIAN_TARGET = 0.05
WORST_TARGET = 0.10


@dataclass(frozen=True)
class Row:
    label: str
    published_step_s: float
    step_at: Callable[[Factors], float]
    detail: dict[str, Any] = field(default_factory=dict)


def megatron_family() -> tuple[str, str, list[Row]]:
    rows = [Row(f"{r.params_billion:g}B tp{r.tensor_parallel} pp{r.pipeline_parallel} "
                f"{r.num_gpus} GPUs", published_step_s(r),
                lambda f, r=r: megatron_step_s(r, f),
                {"published_tflops_per_gpu": r.tflops_per_gpu})
            for r in MEGATRON_TABLE1]
    return ("megatron_sc21_table1", "Narayanan et al. 2021 (SC21) Table 1, A100 80 GB; rows "
            "as bench/published_megatron.py runs them", rows)


def _modern_row(run: Any) -> Row:
    from bench import published_modern

    label = f"{run.recipe.model} {run.precision} {run.gpus} {run.gpu}"
    published = run.global_batch * published_modern.shape_of(
        run.recipe.model, run.tp, run.recipe.kv_heads, run.layers,
        run.recipe.seq_len).seq_len / (run.published_tokens_per_gpu * run.gpus)
    return Row(label, published, lambda f, run=run: published_modern.step_s(run, f),
               {"table": run.table, "published_tokens_per_gpu": run.published_tokens_per_gpu})


def modern_families() -> list[tuple[str, str, list[Row]]]:
    """The dgxc-benchmarking v25.02 H100 rows (bench/published_modern_data.py):
    each weak-scaling series (one model and precision over GPU counts) on its own,
    and across models (each model's smallest run calibrates, the other models'
    runs of that precision are predicted: ``across``)."""
    try:
        from bench.published_modern_data import RUNS
    except ImportError:
        return []
    dgxc = [r for r in RUNS if r.table.startswith("dgxc") and r.gpu == "h100-sxm"]
    series: dict[str, list[Any]] = {}
    for r in dgxc:
        series.setdefault(r.table, []).append(r)
    out = [(f"weak scaling: {name}", "NVIDIA dgxc-benchmarking v25.02, H100 (one series)",
            [_modern_row(r) for r in sorted(runs, key=lambda r: r.gpus)])
           for name, runs in series.items() if len(runs) > 1]
    for precision in sorted({r.precision for r in dgxc}):
        runs = sorted((r for r in dgxc if r.precision == precision),
                      key=lambda r: (r.recipe.model, r.gpus))
        out.append((f"across models: dgxc {precision}",
                    "NVIDIA dgxc-benchmarking v25.02, H100: calibrated on each model's smallest "
                    "run, every run of the other models predicted",
                    [_modern_row(r) for r in runs]))
    return out


def _smallest_of_each_model(rows: list[Row]) -> list[int]:
    """The index of each model's smallest run (rows sorted by model, then GPUs)."""
    seen: dict[str, int] = {}
    for i, r in enumerate(rows):
        seen.setdefault(r.label.split()[0], i)
    return list(seen.values())


def leave_one_out(name: str, source: str, rows: list[Row]) -> dict[str, Any]:
    """Calibrate on each row in turn; predict the others (module docstring). Across
    models, only each model's smallest run calibrates and the other models' runs
    are predicted."""
    across = name.startswith("across models")
    rounds = []
    errors = []
    for i in (_smallest_of_each_model(rows) if across else range(len(rows))):
        cal = rows[i]
        res = fit([Observed(cal.label, cal.published_step_s, cal.step_at)])
        f = res.factors
        preds = []
        for j, other in enumerate(rows):
            if j == i or (across and other.label.split()[0] == cal.label.split()[0]):
                continue
            predicted = other.step_at(f)
            err = predicted / other.published_step_s - 1
            errors.append(abs(err))
            preds.append({"row": other.label, "published_step_s": round(other.published_step_s, 4),
                          "predicted_step_s": round(predicted, 4), "error": round(err, 4)})
        rounds.append({"calibrated_on": cal.label, "factor": round(f.compute, 4),
                       "uncalibrated_ratio": round(cal.published_step_s / cal.step_at(Factors()), 4),
                       "predictions": preds,
                       "median_abs_error": round(statistics.median(abs(p["error"]) for p in preds), 4),
                       "worst_abs_error": round(max(abs(p["error"]) for p in preds), 4)})
    median, worst = statistics.median(errors), max(errors)
    return {
        "family": name, "source": source, "rows": len(rows), "predictions": len(errors),
        "median_abs_error": round(median, 4), "worst_abs_error": round(worst, 4),
        "within": {"median": median <= MEDIAN_TARGET, "worst": worst <= WORST_TARGET},
        "rounds": rounds,
    }


def main() -> dict[str, Any]:
    t0 = time.perf_counter()
    families = [megatron_family(), *modern_families()]
    results = [leave_one_out(*fam) for fam in families]
    return {
        "method": "leave one out: one published row calibrates (one common factor on the "
                  "analytic model's rates), every other row of its family is predicted",
        "targets": {"median_abs_error": MEDIAN_TARGET, "worst_abs_error": WORST_TARGET},
        "families": results,
        "modern_rows": "included" if len(families) > 1 else
        "not available: bench/published_modern_data.py is missing",
        "total_s": round(time.perf_counter() - t0, 1),
    }
