"""Predictions against published H100, H200, B200, GB200, B300 and GB300 runs that no other benchmark
here uses:
bench/results/published_holdout.json.

The rows come from two sources, each read as published, none used to set anything
in pptune (nothing is fitted anywhere), so they test the model on runs it was not
developed against:

1. torchtitan's own benchmark pages (pytorch/torchtitan, benchmarks/ and
   docs/performance.md). The Trainy/WhiteFiber H200 rows (benchmarks/
   llama3-8b_h200_202506_trainy-whitefiber.md, torchtitan e7c0cae): Llama 3.1 8B
   with FSDP over 32 and 64 H200, local batch 2 of 8,192 tokens, torch.compile,
   float8 tensorwise linears with FP8 all-gather, torchtitan's default per-op
   selective checkpointing. Each is priced as a user would: its TOML through
   pptune's torchtitan reader and check-config, with the attention kernel the run's
   torch (2.8.0a0) dispatched SDPA to, FlashAttention-2 (the reader prices torch
   2.13's, cuDNN's on Hopper). The PyTorch team's Grand Teton rows
   (docs/performance.md Tables 1-6 at commit 820504e^, asyncTP_llama3_h100_2025-06)
   ran H100s with 96 GB HBM2e at a 500 W power limit, whose peak the page itself
   says is "between SXM and NVL, and we don't know its exact value" (its footnote
   2): no preset states that GPU, so they are listed as not expressible.
2. Dubey et al. 2024 ("The Llama 3 Herd of Models", arXiv 2407.21783), table 4,
   the two 8,192-token rows: Llama 3.1 405B in BF16 on 8,192 and 16,384 H100 (700 W,
   80 GB HBM3; sec. 3.3.1) with TP 8, CP 1, PP 16 and DP 64 / 128, 16M tokens a
   batch, 430 and 400 TFLOP/s per GPU. Meta's own framework, with the schedule and
   sharding the paper states (sec. 3.3.2: an interleaved schedule, its virtual
   stages unstated; data parallelism as FSDP, which pptune prices without
   resharding after forward under a pipeline, as the paper runs it): pptune
   searches the virtual stages, the split and recomputation at the published TP,
   CP and PP (micro-batch 1), and its best plan's model FLOPs per second per GPU
   are compared, counted by the
   formula of bench/published_modern.model_flops_per_token (full attention; the
   paper does not state its count). The table's 131,072-token row is in
   published_modern's long-context check, so it is not repeated here.
3. NVIDIA Megatron-Bridge's performance summary for the 26.02 NeMo container: every
   DGX-H100 row (Llama 3 70B and Llama 3.1 405B in FP8; the mixture-of-experts GPT OSS
   120B, Qwen3-30B-A3B and Qwen3-235B-A22B), the DGX-B200, DGX-GB200, DGX-B300 and
   DGX-GB300 rows of the mixture-of-experts models (DeepSeek-V3 as well) and the
   GB200 and GB300 dense rows pptune can state, each with the settings its
   performance recipe at the same tag applies, priced by the dense and MoE benchmarks'
   machinery (bench/published_holdout_bridge.py says what each ran); and the same
   summary for the 26.08 container: its DGX-GB300 and DGX-GB200 MXFP8 rows of those
   mixture-of-experts models, with the 26.08 recipes.

Per row: configuration, published figure, predicted, ratio (predicted over
published: above 1 is optimistic).

Run: python -m bench.published_holdout  (prints the markdown table)
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import published_holdout_bridge
from bench.published_modern import long_context
from bench.published_modern_data import LongRun
from pptune.check.rules import CheckOptions, check
from pptune.frameworks.read import read_config
from pptune.options import CostOptions

GIB = 2**30
TORCHTITAN_PAGES = "pytorch/torchtitan benchmarks/ and docs/performance.md"
TRAINY = ("pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md "
          "(torchtitan e7c0cae, torch 2.8.0a0, June 2025)")
META = "Dubey et al. 2024 (arXiv 2407.21783), table 4"

# The Trainy run: torchtitan's llama3_8b.toml at e7c0cae with the command line's
# overrides (local batch 2, compile, float8 with FP8 all-gather and precomputed
# scales, weights recomputed in the backward); [activation_checkpoint] as the toml
# has it.
TRAINY_TOML = """\
[model]
name = "llama3"
flavor = "8B"
converters = ["float8"]

[training]
local_batch_size = 2
seq_len = 8192
compile = true

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
context_parallel_degree = 1

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[float8]
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true
force_recompute_fp8_weight_in_bwd = true
filter_fqns = ["output"]
"""


@dataclass(frozen=True)
class TitanRun:
    """A torchtitan run priced through check-config."""

    name: str
    toml: str
    gpus: int
    gpu: str
    published_tokens_per_gpu: float
    published_memory_gib: float  # torchtitan logs max reserved memory
    source: str
    # the torchtitan release the run's commit belongs to (e7c0cae, 2025-06-11: before
    # v0.2.0 renamed the float8 converter), whose rules read its file
    release: str = "0.1.0"


TITAN_RUNS = [
    TitanRun("llama3.1-8b fsdp32 float8 (H200)", TRAINY_TOML, 32, "h200", 10938.0, 47.96, TRAINY),
    TitanRun("llama3.1-8b fsdp64 float8 (H200)", TRAINY_TOML, 64, "h200", 10753.0, 46.97, TRAINY),
]

# Dubey et al. 2024 table 4, 8,192-token rows: (GPUs, DP, TFLOP/s per GPU); 16M tokens
# a batch = 2,048 sequences
META_RUNS = [
    LongRun("llama3.1-405b 8k (Meta)", "llama3.1-405b", "h100-sxm", "bf16", 8192, gpus,
            2048, 8, 16, 1, META, tflops, schedule="interleaved-1f1b", sharding="fsdp",
            attention="flash")
    for gpus, tflops in ((8192, 430.0), (16384, 400.0))
]

# Grand Teton rows (H100 96 GB HBM2e at 500 W, peak unknown): (page, table, rows)
NOT_EXPRESSIBLE = [
    ("docs/performance.md (820504e^)", "Table 1: Llama 3.1 8B, FSDP 8", 3),
    ("docs/performance.md (820504e^)", "Table 2: Llama 3.1 8B, FSDP + CP 1-8, 32k-262k", 4),
    ("docs/performance.md (820504e^)", "Table 3: Llama 3.1 8B, FSDP 128", 3),
    ("docs/performance.md (820504e^)", "Table 4: Llama 3.1 70B, FSDP 32 x TP 8", 2),
    ("docs/performance.md (820504e^)", "Table 5: Llama 3.1 405B, FSDP 8 x TP 8 x PP 8", 2),
    ("docs/performance.md (820504e^)", "Table 6: Llama 3.1 405B, 4D with CP 1-8", 4),
    ("benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md", "70B and 8B, vanilla and async TP",
     12),
]
WHY_NOT = ("H100 96 GB HBM2e at a 500 W power limit: the page gives no peak ('between SXM "
           "and NVL, and we don't know its exact value'), and no preset states that GPU")


def titan_row(run: TitanRun) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.toml"
        path.write_text(run.toml)
        read = read_config(path, None, gpus=run.gpus,
                           framework_versions=[f"torchtitan={run.release}"])
        # the run's torch (2.8.0a0) dispatched SDPA to FlashAttention-2 first: cuDNN's
        # kernel went first on sm90 and sm100 from torch 2.9 (pytorch/pytorch pull 162073,
        # "Enable cuDNN SDPA by default for SM 9.0, SM 10.0"), which the reader's "sdpa"
        # (torch 2.13's dispatch) prices
        ran = read.config.model_copy(update={"attention": "flash"})
        report = check(ran, path.parent,
                       CheckOptions(costs=CostOptions(gpu=run.gpu), compare_best=False),
                       read.semantics)
    d, cfg = report.derived, read.config
    tokens = cfg.global_batch * cfg.seq_len if cfg.global_batch else 0
    predicted = tokens / d["step_time_s"] / run.gpus
    peak = max(d["peak_memory_bytes"]) / GIB
    return {
        "name": run.name, "source": run.source, "gpu": run.gpu, "gpus": run.gpus,
        "framework": "torchtitan", "precision": cfg.precision, "dp": d["dp"],
        "micro_batch": cfg.micro_batch_size, "global_batch": cfg.global_batch,
        "seq_len": cfg.seq_len, "recompute_modules": cfg.recompute_modules,
        "findings": sorted(f.id for f in report.findings if f.severity != "info"),
        "cost_source": d["cost_source"],
        "published": run.published_tokens_per_gpu, "predicted": round(predicted, 1),
        "unit": "tokens/s per GPU", "ratio": round(predicted / run.published_tokens_per_gpu, 3),
        "published_memory_gib": run.published_memory_gib,
        "predicted_memory_gib": round(peak, 1),
    }


def meta_row(run: LongRun) -> dict[str, Any]:
    row = long_context(run)
    pub = run.published_tflops_per_gpu or 0.0
    pred = row.get("predicted_model_tflops_per_gpu")
    return {
        "name": run.name, "source": run.source, "gpu": run.gpu, "gpus": run.gpus,
        "framework": "Meta's (interleaved, FSDP)",
        "precision": run.precision, "tp": run.tp, "pp": run.pp, "cp": run.cp,
        "dp": run.gpus // (run.tp * run.pp * run.cp), "global_batch": run.global_batch,
        "seq_len": run.seq_len, "fits": row["fits"],
        "plan": {k: row.get(k) for k in ("schedule", "virtual_stages", "recompute", "sharding",
                                         "peak_memory_gib")},
        "published": pub, "predicted": pred, "unit": "model TFLOP/s per GPU",
        "ratio": round(pred / pub, 3) if pred else None,
    }


def main() -> dict[str, Any]:
    rows = ([titan_row(r) for r in TITAN_RUNS] + [meta_row(r) for r in META_RUNS]
            + published_holdout_bridge.rows())
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    return {
        "description": "Predictions against published H100, H200, B200, GB200, B300 and "
                       "GB300 runs "
                       "that no other "
                       "benchmark here uses, none of them used to set anything in pptune "
                       "(dense and mixture-of-experts).",
        "rows": rows, "predicted": len(ratios),
        "within_10pct": sum(abs(x - 1) <= 0.10 for x in ratios),
        "not_expressible": [{"page": p, "table": t, "rows": n, "why": WHY_NOT}
                            for p, t, n in NOT_EXPRESSIBLE],
        "not_expressible_rows": sum(n for *_, n in NOT_EXPRESSIBLE),
        "sources": {"torchtitan": TORCHTITAN_PAGES, "meta": META,
                    "megatron_bridge": published_holdout_bridge.BRIDGE,
                    "megatron_bridge_recipes": published_holdout_bridge.RECIPES},
    }


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| run | GPUs | framework | published | predicted | ratio | memory GiB "
             "(published / predicted) |", "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        mem = (f"{r['published_memory_gib']} / {r['predicted_memory_gib']}"
               if "published_memory_gib" in r else f"- / {r['plan']['peak_memory_gib']}")
        lines.append(f"| {r['name']} | {r['gpus']} | {r['framework']} | {r['published']:g} "
                     f"| {r['predicted']:g} | {r['ratio']:.3f} | {mem} |")
    lines += ["", f"Not expressible: {doc['not_expressible_rows']} rows "
              f"({'; '.join(x['table'] for x in doc['not_expressible'])}): "
              f"{doc['not_expressible'][0]['why']}."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(main()))
