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
