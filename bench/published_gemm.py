"""The per-op GEMM model against measured H100 kernels: bench/results/published_gemm.json.

Every shape of XLA's measured H100 matmul table (bench/published_gemm_data.py, 125 BF16
GEMMs from 256 to 4096 in each dimension) priced by pptune's GEMM model (costmodel/
kernels.py: the h100-sxm preset's measured large-GEMM fraction, tile and wave
quantisation, split-K, the roofline and the last wave's epilogue) plus one kernel launch
(the preset's ``launch_s``: the table's smallest GEMMs take 5-6 us, a launch and a tail),
and priced again without split-K, without the epilogue term and without both (the model
before either), to show what each contributes. Per shape: measured and predicted time, ratio predicted / measured (above 1:
the model is slow). Nothing is fitted to the table.

Run: python -m bench.published_gemm  (prints the summary)
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench.published_gemm_data import XLA_H100, XLA_H100_SOURCE
from pptune.costmodel import presets
from pptune.costmodel.kernels import Phase, gemm
from pptune.costmodel.rates import Rates

GPU = "h100-sxm"


def _rates() -> Rates:
    return Rates.of(presets.GPUS[GPU])


def predicted_s(m: int, n: int, k: int, rates: Rates, split_k: bool = True,
                last_wave: bool = True) -> float:
    op = gemm("gemm", Phase.F, m, n, k, rates, split_k=split_k, last_wave=last_wave)
    return op.time_s + rates.launch_s


def _summary(ratios: list[float]) -> dict[str, Any]:
    return {
        "median_ratio": round(statistics.median(ratios), 3),
        "mean_abs_log_error": round(statistics.mean(abs(math.log(r)) for r in ratios), 3),
        "min_ratio": round(min(ratios), 3), "max_ratio": round(max(ratios), 3),
        "within_10pct": sum(abs(r - 1) <= 0.10 for r in ratios),
        "within_20pct": sum(abs(r - 1) <= 0.20 for r in ratios),
        "of": len(ratios),
    }


def main() -> dict[str, Any]:
    rates = _rates()
    rows = []
    ablations: dict[str, list[float]] = {"model": [], "without_split_k": [],
                                         "without_last_wave_epilogue": [],
                                         "tiles_and_waves_only": []}
    for m, n, k, tflops in XLA_H100:
        measured = 2.0 * m * n * k / (tflops * 1e12)
        pred = predicted_s(m, n, k, rates)
        no_split = predicted_s(m, n, k, rates, split_k=False)
        no_epi = predicted_s(m, n, k, rates, last_wave=False)
        ablations["model"].append(pred / measured)
        ablations["without_split_k"].append(no_split / measured)
        ablations["without_last_wave_epilogue"].append(no_epi / measured)
        ablations["tiles_and_waves_only"].append(
            predicted_s(m, n, k, rates, split_k=False, last_wave=False) / measured)
        rows.append({"m": m, "n": n, "k": k, "measured_tflops": tflops,
                     "measured_us": round(measured * 1e6, 2),
                     "predicted_us": round(pred * 1e6, 2), "ratio": round(pred / measured, 3)})
    large = [r["ratio"] for r in rows if min(r["m"], r["n"], r["k"]) >= 1024]
    return {
        "description": __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else "",
        "gpu": GPU, "source": XLA_H100_SOURCE,
        "summary": {name: _summary(v) for name, v in ablations.items()},
        "large_shapes": _summary(large),
        "rows": rows,
    }


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| model | median pred/meas | mean abs log error | range | within 10% | within 20% |",
             "|---|---|---|---|---|---|"]
    for name, s in doc["summary"].items():
        lines.append(f"| {name.replace('_', ' ')} | {s['median_ratio']:.3f} "
                     f"| {s['mean_abs_log_error']:.3f} | {s['min_ratio']:.2f}-{s['max_ratio']:.2f} "
                     f"| {s['within_10pct']} of {s['of']} | {s['within_20pct']} of {s['of']} |")
    s = doc["large_shapes"]
    lines += ["", f"Shapes with every dimension >= 1024: median {s['median_ratio']:.3f}, range "
              f"{s['min_ratio']:.2f}-{s['max_ratio']:.2f}, {s['within_10pct']} of {s['of']} "
              "within 10%."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(main()))
