"""docs/accuracy.md's sections for today's published runs and the GEMM kernel table.

Rendered from bench/results/published_modern.json, published.json and
published_gemm.json (bench/docs_results.py calls these). Every family is summed up
the same way: the speed ratio of each row, predicted over published throughput (for
a benchmark that states times: published over predicted time), so above 1 means the
model is optimistic; how many rows are within 10%, and the median.
"""

from __future__ import annotations

import statistics
from typing import Any

TOLERANCE = 0.10


def _family_of(table: str) -> str:
    """"dgxc llama3.1-8b bf16" -> "dgxc llama3.1-8b"; a NeMo table is one family."""
    source, rest = table.split(" ", 1)
    if source == "dgxc":
        return f"dgxc {rest.split()[0]}"
    return f"{source} {'B200' if rest.endswith('b200') else 'H100'} FP8"


def family_ratios(modern: dict[str, Any] | None,
                  published: dict[str, Any] | None) -> dict[str, list[float]]:
    """Each family's speed ratios, in the order the benchmarks list them."""
    out: dict[str, list[float]] = {}
    for r in (modern or {}).get("rows", []):
        out.setdefault(_family_of(r["table"]), []).append(r["ratio"])
    if published is not None:
        out["Megatron-LM SC21 Table 1 (A100)"] = [
            r["ratio"] for r in published["megatron_table1"]["rows"]]
        out["Korthikanti Table 4 layer (A100)"] = [
            r["combined_ms_published"] / r["combined_ms_predicted"]
            for r in published["korthikanti_table4_layer"]["rows"]]
        out["Zero Bubble Table 9 F (A100)"] = [
            r["f_ms_published"] / r["f_ms_predicted"] for r in published["zb_analytic"]["rows"]]
        out["Zero Bubble Table 9 W (A100)"] = [
            r["w_ms_published"] / r["w_ms_predicted"] for r in published["zb_analytic"]["rows"]]
    return out


def _within(ratios: list[float]) -> int:
    return sum(abs(r - 1) <= TOLERANCE + 1e-9 for r in ratios)


def family_table(families: dict[str, list[float]]) -> list[str]:
    lines = ["| family | rows | within 10% | median speed ratio | range |", "|---|---|---|---|---|"]
    for name, ratios in families.items():
        lines.append(f"| {name} | {len(ratios)} | {_within(ratios)} "
                     f"| {statistics.median(ratios):.3f} "
                     f"| {min(ratios):.3f}-{max(ratios):.3f} |")
    return lines


def movement_table(before: dict[str, list[float]], after: dict[str, list[float]]) -> list[str]:
    """Two runs of the same rows side by side, family by family."""
    lines = ["| family | rows | within 10% before | after | median before | after |",
             "|---|---|---|---|---|---|"]
    for name, new in after.items():
        old = before.get(name)
        if old is None or len(old) != len(new):
            continue
        lines.append(f"| {name} | {len(new)} | {_within(old)} | {_within(new)} "
                     f"| {statistics.median(old):.3f} | {statistics.median(new):.3f} |")
    return lines


def gemm_lines(doc: dict[str, Any]) -> list[str]:
    from bench.published_gemm import markdown

    return [
        "### The GEMM model against measured H100 kernels", "",
        f"From `bench/results/published_gemm.json`, run {doc.get('date')}; `python -m "
        "bench.published_gemm` prints the same table. " + doc["description"]
        + f" Source: {doc['source']}.", "",
        markdown(doc), "",
    ]


def modern_section(modern: dict[str, Any] | None, published: dict[str, Any] | None,
                   gemm: dict[str, Any] | None, analysis: list[str]) -> list[str]:
    from bench.published_modern import markdown

    lines = ["## Today's published runs: tokens/s per GPU", ""]
    if modern is None:
        return [*lines, "(`bench/results/published_modern.json` is missing.)", ""]
    lines += [
        f"From `bench/results/published_modern.json`, run {modern.get('date')}; `python -m "
        "bench.published_modern` prints the same tables. " + modern["description"], "",
        "Per family (this table and the next include the A100 benchmarks of the section "
        "above): the speed ratio is predicted over published throughput, or published over "
        "predicted time, so above 1 the model is optimistic.", "",
        *family_table(family_ratios(modern, published)), "",
        markdown(modern), "",
    ]
    if gemm is not None:
        lines += gemm_lines(gemm)
    return [*lines, *analysis, ""]


# A dated reading (docs_results._analysis flags it when the results are of another run):
# the same rows through main's model at aa92167, before the kernel terms, then with the
# terms added one at a time (the branch's model with the later ones switched off).
MOVEMENT = [
    "What issue 20's kernel terms moved, family by family: the same rows priced by the "
    "model before them (main at aa92167) and by this one (speed ratio, above 1 optimistic).",
    "",
    "| family | rows | within 10% before | after | median before | after | per-row change |",
    "|---|---|---|---|---|---|---|",
    "| dgxc llama3.1-8b | 10 | 6 | 10 | 1.088 | 1.059 | -2.2% to -3.0% |",
    "| dgxc llama3.1-70b | 12 | 0 | 0 | 1.197 | 1.137 | -4.0% to -5.7% |",
    "| dgxc llama3.1-405b | 12 | 6 | 6 | 1.137 | 1.092 | -2.6% to -5.4% |",
    "| dgxc gpt3-175b | 10 | 0 | 0 | 1.337 | 1.227 | -7.8% to -8.6% |",
    "| dgxc nemotron4-15b | 6 | 0 | 0 | 1.183 | 1.191 | -0.5% to +2.0% |",
    "| dgxc nemotron4-340b | 10 | 0 | 0 | 1.297 | 1.199 | -4.5% to -9.6% |",
    "| nemo24.07 H100 FP8 | 12 | 1 | 1 | 1.194 | 1.173 | -0.1% to -4.2% |",
    "| nemo25.02 B200 FP8 | 6 | 0 | 0 | 1.454 | 1.384 | -0.1% to -5.8% |",
    "| Megatron-LM SC21 Table 1 (A100) | 10 | 0 | 0 | 1.231 | 1.234 | -0.2% to +0.5% |",
    "| Korthikanti Table 4 layer (A100) | 5 | 3 | 3 | 1.098 | 1.096 | -0.2% |",
    "| Zero Bubble Table 9 F (A100) | 12 | 0 | 0 | 1.278 | 1.274 | -0.4% to +0.3% |",
    "| Zero Bubble Table 9 W (A100) | 12 | 6 | 6 | 1.094 | 1.092 | -0.3% to -0.2% |",
    "",
    "Term by term (median speed ratio, rows within 10% in brackets), each column adding one:",
    "",
    "| family | before | + TP overlap as TE runs it | + split-K and the epilogue "
    "| + CP merge kernels |",
    "|---|---|---|---|---|",
    "| dgxc llama3.1-8b | 1.088 (6) | 1.088 (6) | 1.086 (6) | 1.059 (10) |",
    "| dgxc llama3.1-70b | 1.197 (0) | 1.151 (0) | 1.151 (0) | 1.137 (0) |",
    "| dgxc llama3.1-405b | 1.137 (6) | 1.096 (6) | 1.102 (6) | 1.092 (6) |",
    "| dgxc gpt3-175b | 1.337 (0) | 1.230 (0) | 1.227 (0) | 1.227 (0) |",
    "| dgxc nemotron4-15b | 1.183 (0) | 1.194 (0) | 1.191 (0) | 1.191 (0) |",
    "| dgxc nemotron4-340b | 1.297 (0) | 1.108 (5) | 1.202 (0) | 1.199 (0) |",
    "| nemo24.07 H100 FP8 | 1.194 (1) | 1.191 (1) | 1.188 (1) | 1.173 (1) |",
    "| nemo25.02 B200 FP8 | 1.454 (0) | 1.395 (0) | 1.397 (0) | 1.384 (0) |",
    "",
    "Today's runs: 13 of 78 rows within 10% before, 17 after. The TP communication overlap "
    "as Transformer Engine runs it (tp_overlap.py) moves the tensor-parallel families "
    "towards the published figures: the old rule hid each forward reduce-scatter behind the "
    "GEMM before it for free; the chunks, the SMs the communication kernels hold and the "
    "exposed last chunk now cost throughput. Nemotron-4 15B moves the other way (its FP8 "
    "rows 1.13-1.17 to 1.16-1.19): the old rule exposed the backward all-gathers in full, "
    "and Transformer Engine hides them behind the data-gradient GEMMs (ring exchange). "
    "Nemotron-4 340B's five BF16 rows came within 10% with the overlap alone (1.00-1.04) "
    "and left again with split-K (1.17-1.21): at cp 2 and tp 8 each ring-exchange chunk is "
    "a 256-row GEMM, 54 output tiles "
    "on 132 SMs, which the model without split-K priced at 41% of the SMs; XLA's measured "
    "H100 table (above) shows cuBLAS running such shapes (256 x 1024-4096 x 1024-4096) "
    "1.1-2.1x faster than that and within 0.96-1.23x of the split-K model, so the 5 rows "
    "were right for a wrong reason. The context-parallel ring's merge kernels move the cp 2 "
    "rows (all of Llama 3.1 8B, which runs tp 1). The A100 benchmarks (fp16, no Transformer "
    "Engine overlap, no context parallelism) move by less than 0.5%. A check none of the "
    "terms was shaped on: calibrated on each model's smallest dgxc run and predicting the "
    "other models' runs (the calibration section below), the median error falls from 7.9% "
    "to 4.6% in BF16 (worst 19.1% to 12.2%) and from 10.7% to 10.0% in FP8 (worst 28.8% to "
    "22.6%).",
    "",
    "Every family is still optimistic. Terms this model does not price, none with a source "
    "that fixes its size at these shapes: the SMs and HBM bandwidth NCCL's data-parallel "
    "collectives take from the overlapped compute, Transformer Engine's FP8 casts and amax "
    "reductions beyond the bytes counted, sustained clocks under the 700 W limit, attention "
    "rates on Blackwell, and the stragglers of thousand-GPU jobs (the weak-scaling trends "
    "above stay flat where the published fall 1-9%).",
]
