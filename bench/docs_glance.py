"""docs/accuracy.md's first section: every benchmark's headline, from bench/results/*.json.

The README's accuracy line points here; every figure below is computed from the
results files the later sections render in full, so a rerun of ``make bench``
moves them with the tables.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

Rows = list[dict[str, Any]]


def _x(v: float) -> str:
    return f"{v:.2f}x"


def _range(values: list[float], fmt: Callable[[float], str] = _x) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    unit = hi[-1] if hi[-1] in "x%" else ""
    return lo if lo == hi else f"{lo.removesuffix(unit)}-{hi}"


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _dense(modern: dict[str, Any] | None, published: dict[str, Any] | None) -> list[str]:
    if modern is None:
        return []
    from bench.docs_modern import family_ratios

    families = family_ratios(modern, None)
    dgxc = {k.removeprefix("dgxc "): statistics.median(v) for k, v in families.items()
            if k.startswith("dgxc ")}
    rest = {k: v for k, v in families.items() if not k.startswith("dgxc ")}
    lines = [
        f"- **NVIDIA's recipes on H100 and B200** "
        f"([below](#todays-published-runs-tokenss-per-gpu)): {modern['within']} of "
        f"{modern['of']} runs within 10%; the dgxc-benchmarking H100 families' medians "
        + ", ".join(f"{k} {_x(v)}" for k, v in dgxc.items())
        + "; " + ", ".join(f"{k} {_x(statistics.median(v))} ({_range(v)})"
                           for k, v in rest.items()) + "."]
    if published is not None:
        a100 = family_ratios(None, published)
        lines.append("- **The A100 papers** ([below](#published-runs-step-time-throughput-bubble)): "
                     + ", ".join(f"{k.removesuffix(' (A100)')} {_range(v)}"
                                 for k, v in a100.items())
                     + f"; fed Zero Bubble's profiled times, the simulator reproduces its "
                     f"1F1B and ZB-H1 bubble rates on "
                     f"{sum(r['within'] for r in _exact(published))} of "
                     f"{len(_exact(published))} runs to within 0.0005.")
    return lines


def _exact(published: dict[str, Any]) -> Rows:
    return [r for r in published["zb_bubble_rates"]["rows"] if r["schedule"] != "1F1B-I"]


def _scaling(doc: dict[str, Any] | None) -> list[str]:
    if doc is None:
        return []
    ratios = [r["ratio"] for r in doc["rows"] if r["ratio"] is not None]
    return [f"- **Megatron-LM's own H100 weak-scaling table** "
            f"([below](#megatron-lms-h100-weak-scaling-table)): {doc['within']} of "
            f"{doc['of']} rows within 10%, {_range(ratios)}."]


def _moe(doc: dict[str, Any] | None) -> list[str]:
    if doc is None:
        return []
    rows = doc["rows"]

    def of(model: str) -> list[float]:
        return [r["ratio"] for r in rows if r["model"] == model]

    named = {"grok-1": "Grok-1", "mixtral-8x7b": "Mixtral 8x7B", "mixtral-8x22b": "Mixtral 8x22B",
             "deepseek-v3": "DeepSeek-V3"}
    parts = [f"{label} {_range(of(model))}" for model, label in named.items() if of(model)]
    pair = {r["part"]: r for r in (doc.get("deepseek_pair") or {}).get("rows", [])}
    said = (f"; DeepSeek's published F&B pair runs {_x(pair['pair']['ratio'])} pptune's, its "
            f"attention kernels {_x(pair['attention']['ratio'])}, its FP8 GEMMs "
            f"{_x(pair['gemm']['ratio'])}") if {"pair", "attention", "gemm"} <= set(pair) else ""
    return [f"- **Published mixtures of experts** ([models.md](models.md#the-grok-1-miss)): "
            f"{doc['within']} of {doc['predicted']} within their target; "
            + ", ".join(parts) + said + "."]


def _holdout(doc: dict[str, Any] | None, moe: dict[str, Any] | None) -> list[str]:
    if doc is None:
        return []
    rows = doc["rows"]

    def pick(test: Callable[[dict[str, Any]], bool]) -> list[float]:
        return [r["ratio"] for r in rows if r["ratio"] is not None and test(r)]

    def bridge(r: dict[str, Any], container: str) -> bool:
        return f"(Megatron-Bridge {container})" in r["name"]

    groups = [
        ("torchtitan's H200 FSDP float8 rows", pick(lambda r: r["framework"] == "torchtitan")),
        ("Meta's Llama 3.1 405B 8k rows", pick(lambda r: "(Meta)" in r["name"])),
        ("Megatron-Bridge 26.02's dense H100 FP8 rows",
         pick(lambda r: bridge(r, "26.02") and not r.get("ep") and r["gpu"] == "h100-sxm")),
        ("its dense GB200 rows",
         pick(lambda r: bridge(r, "26.02") and not r.get("ep") and r["gpu"] == "gb200")),
        ("its dense GB300 rows",
         pick(lambda r: bridge(r, "26.02") and not r.get("ep") and r["gpu"] == "gb300")),
    ]
    dense = ", ".join(f"{label} {_range(v)}" for label, v in groups if v)
    moe_h100 = pick(lambda r: bridge(r, "26.02") and bool(r.get("ep")) and r["gpu"] == "h100-sxm")
    moe_bw = pick(lambda r: bridge(r, "26.02") and bool(r.get("ep")) and r["gpu"] != "h100-sxm")
    new = {gpu: pick(lambda r, g=gpu: bridge(r, "26.08") and r["gpu"] == g)
           for gpu in ("gb300", "gb200")}
    layer = (moe or {}).get("megatron_layer", {}).get("rows", [])
    alone = (f" (one megatron-core MoE layer at Qwen3-30B-A3B's shape, measured alone on 8 "
             f"H100s: {layer[0]['measured_ms']:.1f} ms where pptune prices "
             f"{layer[0]['predicted_ms']:.1f})") if layer else ""
    newest = "; ".join(f"on {gpu.upper()} {_range(v)}" for gpu, v in new.items() if v)
    return [
        f"- **Published runs no benchmark here was built from** "
        f"([below](#published-runs-outside-these-benchmarks)): {doc['within_10pct']} of "
        f"{doc['predicted']} within 10%; {dense}.",
        f"- **Fine-grained mixtures of experts** (GPT-OSS 120B, Qwen3-30B-A3B, "
        f"Qwen3-235B-A22B, DeepSeek-V3 on Megatron-Bridge 26.02): on H100 {_range(moe_h100)}, "
        f"on B200, GB200, B300 and GB300 {_range(moe_bw)}, the largest misses anywhere here"
        f"{alone}; its 26.08 rows, which capture whole iterations in CUDA graphs, "
        f"{newest}.",
    ]


def _calibration(doc: dict[str, Any] | None) -> list[str]:
    if doc is None:
        return []
    fams = doc["families"]
    series = [f["median_abs_error"] for f in fams if f["family"].startswith("weak scaling")]
    across = {f["family"].removeprefix("across models: dgxc "): f for f in fams
              if f["family"].startswith("across models")}
    parts = []
    if series:
        parts.append(f"the other GPU counts of a dgxc series come within a median "
                     f"{_range(series, _pct)} (each series)")
    if across:
        parts.append("the other models' runs within a median " + " and ".join(
            f"{_pct(f['median_abs_error'])} in {k.upper()} (worst {_pct(f['worst_abs_error'])})"
            for k, f in across.items()))
    return ["- **Calibrated on one published run** "
            "([below](#calibrated-on-one-published-row-predicting-the-others)): "
            + "; ".join(parts) + "."]


def _here(acc: dict[str, Any] | None, dv: dict[str, Any] | None) -> list[str]:
    parts = []
    if acc is not None:
        parts.append(f"`validate` on 2 gloo ranks predicts the step within a median "
                     f"{_pct(acc['median_abs_error'])} (worst {_pct(acc['worst_abs_error'])}, "
                     f"{len(acc['configs'])} configurations, {acc['date']})")
    if dv is not None and dv.get("dualpipev"):
        parts.append(f"DualPipeV through torch's runtime within a median "
                     f"{_pct(dv['dualpipev']['median_abs_error'])} (worst "
                     f"{_pct(dv['dualpipev']['worst_abs_error'])}, {dv['date']})")
    if not parts:
        return []
    return ["- **Runs on this machine** ([below](#runs-on-this-machine-2-cpu-cores-gloo)): "
            + "; ".join(parts) + "."]


def _peers(doc: dict[str, Any] | None) -> list[str]:
    if doc is None:
        return []
    s = doc["summary"]
    return [f"- **The frameworks' own code** "
            f"([below](#the-frameworks-own-code-as-referee-make-peers)): it agrees with "
            f"check-config on {s['agree']} of {s['cases']} files and accepts "
            f"{s['emitted_accepted']} of {s['emitted_files']} emitted ones; megatron-core's "
            f"layout parser agrees with pptune's on {s['layout_strings_agree']} of "
            f"{s['layout_strings']} strings."]


def glance_section(results: Path) -> list[str]:
    def get(name: str) -> dict[str, Any] | None:
        path = results / name  # read here: docs_results imports this module
        return json.loads(path.read_text()) if path.is_file() else None

    moe = get("published_moe.json")
    bullets = [
        *_dense(get("published_modern.json"), get("published.json")),
        *_scaling(get("published_scaling.json")),
        *_moe(moe),
        *_holdout(get("published_holdout.json"), moe),
        *_calibration(get("calibrate.json")),
        *_here(get("prediction_accuracy.json"), get("dualpipev_accuracy.json")),
        *_peers(get("peers.json")),
    ]
    if not bullets:
        return []
    return [
        "## At a glance", "",
        "Each benchmark's headline, computed from the same results as the sections below. "
        "Ratios are predicted over published throughput (or published over predicted time): "
        "above 1 the model is optimistic.", "",
        *bullets, "",
    ]
