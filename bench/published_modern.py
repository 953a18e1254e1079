"""Predictions against today's published runs: bench/results/published_modern.json.

Every row of bench/published_modern_data.py (dgxc-benchmarking v25.02, NeMo 24.07's
FP8 table, NeMo 25.02's B200 rows) is run as its recipe ran it: the published
micro-batch, global batch, TP, PP, CP and VP; sequence parallelism, TP
communication overlap, the distributed optimizer with its gradient dtype, FP8 with
FP8 parameters, NVLS off, megatron-core's fused loss where the file sets
cross_entropy_loss_fusion or NeMo 2.0 defaults to it (else pptune's one-pass
loss), as the recipe files state; Megatron-core's layer split
(blocks evenly over the pp x vp chunks, the embedding with the first, the LM head
with the last; NeMo 2.0's 405B recipe counts the embedding and the loss as one
layer each, ``account_for_*_in_pipeline_split``); megatron-core's rank order
(tp-cp-dp-pp). Nothing is fitted: the cost model is the one pptune ships, the same
for every row. Per row: configuration, published tokens/s per GPU, predicted,
ratio, predicted peak memory. Per series (one table, model and precision across
GPU counts): the weak-scaling trend, published and predicted, largest over smallest
count. Long-context runs: whether they fit.

``speed()`` times the search over cost keys (tp x cp x precision) for the issue's
speed targets, tables built per key from the presets.

Run: python -m bench.published_modern  (prints the markdown table)
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from bench.published_modern_data import LONG_RUNS, RUNS, LongRun, Run
from pptune.costmodel import presets
from pptune.costmodel.calibration import Factors, scaled_gpu
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import RankOrder
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.memory import Recompute
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.rates import WgradAccum
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import PlanRequest, PlanSpec, Sharding, evaluate, search
from pptune.costmodel.tp_overlap import GemmOverlap, Method, TpOverlap
from pptune.costmodel.variation import slowest_of
from pptune.costs.profiles import analytic_profile, cost_table, preset_tables
from pptune.frameworks.megatron.split import MegatronSplit, megatron_blocks

TOLERANCE = 0.10  # issue 20: dense rows within +-10%
TREND_TOLERANCE = 0.03  # issue 20: each model's weak-scaling trend within +-3%
GIB = 2**30

# Megatron-LM accumulates weight gradients into its FP32 main_grad inside the wgrad GEMM
# (--gradient-accumulation-fusion, on by default; NeMo's GPTConfig gradient_accumulation_fusion)
WGRAD = WgradAccum.FUSED


def main_grad_bytes(grad_bytes: int) -> float:
    """The width of the main_grad the wgrad GEMMs accumulate into (costmodel/rates.py
    Accumulation) for a recipe's gradient dtype: BF16 where gradients are kept and synced
    in BF16. NeMo 1.x's distributed_fused_adam points each main_grad at its contiguous
    grad buffer in grad_sync_dtype (nemo/core/optim/distributed_adam.py
    MegatronDistributedFusedAdam.zero_grad: ``param.main_grad =
    self.grad_buffer_view(param)``); NeMo 2.0's grad_reduce_in_fp32 False gives
    megatron-core DDP's buffer the parameters' dtype. NeMo 1.x keeps the embeddings'
    gradients FP32 (megatron_gpt_model.py configure_optimizers,
    ``with_fp32_embedding_grads``): priced at the one width here, 4 bytes an element short
    on the first stage's embedding add."""
    return 2.0 if grad_bytes == 2 else 4.0


def padded_vocab(vocab: int, tp: int, multiple: int = 128) -> int:
    """Megatron's ``_vocab_size_with_padding``: a multiple of 128 x tp."""
    step = multiple * tp
    return -(-vocab // step) * step


def shape_of(recipe_model: str, tp: int, kv_heads: int | None, layers: int | None,
             seq_len: int | None = None) -> ModelShape:
    base = presets.MODELS[recipe_model]
    return dataclasses.replace(
        base, name=f"{base.name}-recipe", kv_heads=kv_heads or base.kv_heads,
        vocab=padded_vocab(base.vocab, tp), num_blocks=layers or base.num_blocks,
        seq_len=seq_len or base.seq_len)


def account_split(blocks: int, chunks: int) -> tuple[int, ...]:
    """The table's layers a chunk when the embedding and the loss count as one layer each
    in Megatron's split (``account_for_embedding_in_pipeline_split`` /
    ``..._loss_...``): megatron-core's blocks a chunk (pptune.frameworks.megatron.split,
    a FrameworkRefusal where they do not divide), the embedding and the head added."""
    per = megatron_blocks(MegatronSplit(blocks, chunks, account_embedding=True,
                                        account_loss=True))
    return tuple(n + (i == 0) + (i == len(per) - 1) for i, n in enumerate(per))


def megatron_split(blocks: int, chunks: int) -> tuple[int, ...]:
    """Blocks evenly over the chunks, embedding first, head last; when the blocks do
    not divide, the embedding and the loss count as one layer each (NeMo 2.0's
    recipes set the account-for flags then: account_split)."""
    if blocks % chunks:
        return account_split(blocks, chunks)
    split = [blocks // chunks] * chunks
    split[0] += 1
    split[-1] += 1
    return tuple(split)


def precision_of(name: str) -> Precision:
    return Precision(name)


def overlap_of(ub: tuple[tuple[str, str], ...] | None) -> TpOverlap | None:
    """A recipe's ub_tp_comm_overlap_cfg (published_modern_data.Recipe.ub) as the cost
    model's TpOverlap; None: the recipe names none (Transformer Engine's defaults)."""
    if ub is None:
        return None
    cfgs = {}
    for name, spec in ub:
        kind, *rest = spec.split(":")
        margin = "margin" in rest
        num_sm = int(rest[0]) if rest and rest[0].isdigit() else 1
        if kind in ("ring", "ring+agg"):
            cfgs[name] = GemmOverlap(Method.RING_EXCHANGE, num_sm, margin,
                                     aggregate=kind == "ring+agg")
        elif kind == "pipe":
            cfgs[name] = GemmOverlap(Method.PIPELINE, num_sm, margin, num_splits=4)
        else:
            cfgs[name] = GemmOverlap(Method.BULK, num_sm, margin)
    return TpOverlap(**cfgs)


def _request(run: Run, key: CostKey) -> PlanRequest:
    gpu = presets.GPUS[run.gpu]
    fp8 = key.precision is not Precision.BF16
    return PlanRequest(
        gpus=run.gpus, global_batch=run.global_batch, tp=run.tp,
        gpus_per_node=gpu.gpus_per_node, grad_bytes_factor=run.recipe.grad_bytes / 4,
        fp8_param_gather=fp8 and run.recipe.fp8_params, moment_bytes=run.recipe.moment_bytes,
        grad_buffer_bytes=2.0 if run.recipe.grad_bytes == 2 else None,
        fp8_amax_reduction=run.recipe.amax_reduction,
        cost_keys=(key,), reserve_bytes=presets.GIB * 2)


@dataclasses.dataclass(frozen=True)
class Evaluated:
    """One row's plan and what the row's report needs beside it."""

    plan: Any
    shape: ModelShape
    table: Any
    dp: int
    microbatches: int
    sharding: Sharding


def _evaluated(run: Run, factors: Factors | None = None,
               attention: str = "cudnn") -> Evaluated:
    """The row's plan as its recipe ran it (module docstring), on the GPU preset with
    its rates scaled by ``factors`` when given (bench/calibrate.py calibrates so).
    ``attention``: Transformer Engine, which every recipe here runs, prefers cuDNN's fused
    attention on Hopper and later (costmodel/presets.py); another kernel is a what-if."""
    r = run.recipe
    key = CostKey(tp=run.tp, cp=run.cp, precision=precision_of(run.precision))
    shape = shape_of(r.model, run.tp, r.kv_heads, run.layers, r.seq_len)
    base = presets.GPUS[run.gpu] if factors is None else scaled_gpu(presets.GPUS[run.gpu], factors)
    gpu = slowest_of(base, run.gpus)  # a job runs at its slowest GPU's pace (variation.py)
    prof = analytic_profile(
        shape, gpu, [run.micro_batch], tp=run.tp,
        sequence_parallel=r.sequence_parallel and run.tp > 1,
        tp_comm_overlap=r.tp_comm_overlap and run.tp > 1, cp=run.cp,
        gemm_precision=key.precision, nvls=False, fp8_params=r.fp8_params, attention=attention,
        tp_overlap=overlap_of(r.ub), cross_entropy=CrossEntropy(r.cross_entropy),
        wgrad_accum=WGRAD, main_grad_bytes=main_grad_bytes(r.grad_bytes))
    table = cost_table(prof, tp=run.tp, tp_in_costs=run.tp)
    req = _request(run, key)
    dp = run.gpus // (run.tp * run.pp * run.cp)
    m = run.global_batch // (dp * run.micro_batch)
    split = megatron_split(shape.num_blocks, run.pp * run.vp)
    schedule = Schedule.INTERLEAVED if run.vp > 1 else Schedule.ONE_F_ONE_B
    sharding = Sharding.ZERO1 if dp * run.cp > 1 else Sharding.NONE
    spec = PlanSpec(schedule, run.pp, run.micro_batch, m, split, run.vp, RankOrder.DP_INNER,
                    sharding, Recompute.NONE, key)
    return Evaluated(evaluate(table, req, spec), shape, table, dp, m, sharding)


def step_s(run: Run, factors: Factors | None = None, attention: str = "cudnn") -> float:
    """The row's simulated seconds per step (at ``factors``: bench/calibrate.py)."""
    return float(_evaluated(run, factors, attention).plan.step_time_s)


def _ratio(run: Run, step: float) -> float:
    """Predicted over published tokens/s per GPU for a step of ``step`` seconds."""
    seq = shape_of(run.recipe.model, run.tp, run.recipe.kv_heads, run.layers,
                   run.recipe.seq_len).seq_len
    return round(run.global_batch * seq / step / run.gpus / run.published_tokens_per_gpu, 3)


def with_flash_attention(run: Run) -> float:
    """The row's speed ratio with its attention at FlashAttention-2's rates instead of
    cuDNN's (what pptune priced before it priced cuDNN's): a what-if of one term."""
    return _ratio(run, step_s(run, attention="flash"))


def without_tp_overlap(run: Run) -> float | None:
    """The row's speed ratio with Transformer Engine's TP communication overlap not
    priced (its collectives exposed), for a recipe that runs it; None otherwise. A
    what-if of one term, not a prediction of the run."""
    if not (run.recipe.tp_comm_overlap and run.tp > 1):
        return None
    off = dataclasses.replace(run, recipe=dataclasses.replace(run.recipe, tp_comm_overlap=False))
    return _ratio(run, step_s(off))


def predict(run: Run) -> dict[str, Any]:
    r = run.recipe
    ev = _evaluated(run)
    plan, shape, table, dp, m, sharding = (ev.plan, ev.shape, ev.table, ev.dp, ev.microbatches,
                                           ev.sharding)
    predicted = plan.tokens_per_s / run.gpus
    ratio = predicted / run.published_tokens_per_gpu
    peak = max(plan.peak_memory_bytes)
    return {
        "table": run.table, "model": r.model, "gpu": run.gpu, "precision": run.precision,
        "gpus": run.gpus, "layers": shape.num_blocks, "seq_len": shape.seq_len,
        "global_batch": run.global_batch, "micro_batch": run.micro_batch, "tp": run.tp,
        "pp": run.pp, "cp": run.cp, "vp": run.vp, "dp": dp, "microbatches": m,
        "sequence_parallel": r.sequence_parallel and run.tp > 1,
        "tp_comm_overlap": r.tp_comm_overlap and run.tp > 1,
        "distributed_optimizer": sharding is Sharding.ZERO1,
        "grad_bytes": r.grad_bytes, "fp8_params": r.fp8_params and run.precision != "bf16",
        "published_tokens_per_gpu": round(run.published_tokens_per_gpu, 1),
        "predicted_tokens_per_gpu": round(predicted, 1), "ratio": round(ratio, 3),
        "within": abs(ratio - 1) <= TOLERANCE,
        "ratio_without_tp_overlap": without_tp_overlap(run),
        "ratio_flash_attention": with_flash_attention(run),
        "predicted_step_s": round(plan.step_time_s, 3),
        "published_step_s": round(run.global_batch * shape.seq_len
                                  / (run.published_tokens_per_gpu * run.gpus), 3),
        "bubble_rate": round(plan.bubble_rate, 4),
        "optimizer_s": round(plan.optimizer_s, 4),
        "peak_memory_gib": round(peak / GIB, 1),
        "fits": peak <= table.memory_bytes,
        "source": run.source, "derivation": run.derivation, "recipe": r.source,
    }


def trends(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per series with more than one GPU count: largest over smallest count."""
    out = []
    series: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        series.setdefault(row["table"], []).append(row)
    for name, rs in series.items():
        full = [r for r in rs if r["layers"] == max(x["layers"] for x in rs)]
        if len(full) < 2:
            continue
        small, big = min(full, key=lambda r: r["gpus"]), max(full, key=lambda r: r["gpus"])
        pub = big["published_tokens_per_gpu"] / small["published_tokens_per_gpu"]
        pred = big["predicted_tokens_per_gpu"] / small["predicted_tokens_per_gpu"]
        out.append({"table": name, "from_gpus": small["gpus"], "to_gpus": big["gpus"],
                    "published": round(pub, 4), "predicted": round(pred, 4),
                    "error": round(pred / pub - 1, 4),
                    "within": abs(pred / pub - 1) <= TREND_TOLERANCE})
    return out


def long_context(run: LongRun) -> dict[str, Any]:
    """The search at the run's tp, cp and pp, and at the schedule and sharding the source
    states where it does: does any plan fit (recomputation, and what the source leaves
    unsaid, searched), and what it predicts."""
    space: dict[str, Any] = {}
    if run.schedule is not None:
        space["schedules"] = (Schedule(run.schedule),)
    if run.sharding is not None:
        space["shardings"] = (Sharding(run.sharding),)
    key = CostKey(tp=run.tp, cp=run.cp, precision=Precision(run.precision))
    shape = shape_of(run.model, run.tp, None, None, run.seq_len)
    tables = preset_tables(shape, slowest_of(presets.GPUS[run.gpu], run.gpus), [1],
                           sequence_parallel=run.sequence_parallel,
                           tp_comm_overlap=True, nvls=False, fp8_params=True,
                           attention=run.attention, wgrad_accum=WGRAD,
                           main_grad_bytes=main_grad_bytes(2))
    req = PlanRequest(gpus=run.gpus, global_batch=run.global_batch, tp=run.tp, pp=(run.pp,),
                      cost_keys=(key,), gpus_per_node=presets.GPUS[run.gpu].gpus_per_node,
                      grad_bytes_factor=0.5, fp8_param_gather=run.precision != "bf16",
                      grad_buffer_bytes=2.0,
                      top=1, with_best_pp1=False, **space)
    res = search(tables, req)
    row: dict[str, Any] = {"name": run.name, "model": run.model, "gpu": run.gpu,
                           "precision": run.precision, "seq_len": run.seq_len,
                           "gpus": run.gpus, "global_batch": run.global_batch, "tp": run.tp,
                           "pp": run.pp, "cp": run.cp, "source": run.source,
                           "fits": bool(res.plans), "rejected": dict(res.rejected)}
    if res.plans:
        p = res.plans[0]
        flops = model_flops_per_token(shape) * run.global_batch * run.seq_len
        row.update({
            "schedule": p.schedule.value, "virtual_stages": p.virtual_stages,
            # full recomputation fitted per stage (stage_recompute.py) says so
            "recompute": p.recompute.value if p.recompute_layers is None else "stage",
            "recompute_layers_per_stage": list(p.recompute_layers) if p.recompute_layers
            else None,
            "sharding": p.sharding.value,
            "peak_memory_gib": round(max(p.peak_memory_bytes) / GIB, 1),
            "predicted_tokens_per_gpu": round(p.tokens_per_s / run.gpus, 1),
            "predicted_model_tflops_per_gpu": round(flops / p.step_time_s / run.gpus / 1e12, 1),
            "published_model_tflops_per_gpu": run.published_tflops_per_gpu,
        })
    return row


def model_flops_per_token(m: ModelShape) -> float:
    """The model-FLOPs count NVIDIA's tables use (dgxc README "Notes"; NeMo
    flops_formulas): per token ``L h^2 (12 + 12 G/A + 18 F/h + 12 s/h) + 6 V h`` for a
    gated MLP, full (not causal) attention; GPT-style 2-matrix MLPs count 12 F/h."""
    h, n = m.hidden, m.num_blocks
    mlp = 18 * m.ffn / h if m.gated_mlp else 12 * m.ffn / h
    return n * h * h * (12 + 12 * m.kv_heads / m.heads + mlp + 12 * m.seq_len / h) + 6 * m.vocab * h


def speed(repeats: int = 1) -> list[dict[str, Any]]:
    """The search over cost keys on the presets (tables built per key, timed with the
    search: what ``recommend`` will do once --cp and --precision reach the CLI)."""
    out = []
    for model, gpus, tps, cps in [("llama3-8b", 8, (1, 2, 4, 8), (1, 2, 4, 8)),
                                  ("llama3-70b", 4096, (1, 2, 4, 8), (1, 2, 4, 8))]:
        keys = tuple(CostKey(tp=t, cp=c, precision=p) for t in tps for c in cps
                     for p in (Precision.BF16, Precision.FP8)
                     if gpus % (t * c) == 0)
        times = []
        res = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            tables = preset_tables(model, "h100-sxm")
            req = PlanRequest(gpus=gpus, global_batch=presets.MODELS[model].global_batch,
                              cost_keys=keys)
            res = search(tables, req)
            times.append(time.perf_counter() - t0)
        assert res is not None
        best = res.plans[0] if res.plans else None
        out.append({"model": model, "gpus": gpus, "cost_keys": len(keys),
                    "candidates": res.candidates, "simulated": res.simulated,
                    "seconds": round(min(times), 2),
                    "best": str(best.key) + f" pp{best.pp} dp{best.dp}" if best else None})
    return out


def main(quick: bool = False) -> dict[str, Any]:
    rows = [predict(r) for r in RUNS]
    within = [r for r in rows if r["within"]]
    tr = trends(rows)
    return {
        "description": __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else "",
        "tolerance": TOLERANCE, "trend_tolerance": TREND_TOLERANCE,
        "rows": rows, "within": len(within), "of": len(rows),
        "worst_ratio": max(rows, key=lambda r: abs(r["ratio"] - 1))["ratio"],
        "trends": tr, "trends_within": sum(t["within"] for t in tr), "trends_of": len(tr),
        "long_context": [long_context(r) for r in LONG_RUNS],
        "speed": speed(1 if quick else 2),
    }


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| table | GPUs | TP | PP | CP | VP | MBS | GBS | published tok/s/GPU "
             "| predicted | ratio | memory GiB |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lay = f" ({r['layers']} layers)" if r["layers"] != presets.MODELS[r["model"]].num_blocks \
            else ""
        lines.append(
            f"| {r['table']}{lay} | {r['gpus']} | {r['tp']} | {r['pp']} | {r['cp']} | {r['vp']} "
            f"| {r['micro_batch']} | {r['global_batch']} | {r['published_tokens_per_gpu']:.0f} "
            f"| {r['predicted_tokens_per_gpu']:.0f} | {r['ratio']:.3f} "
            f"| {r['peak_memory_gib']}{'' if r['fits'] else ' (OOM)'} |")
    lines += ["", f"Within {100 * doc['tolerance']:.0f}%: {doc['within']} of {doc['of']} rows.",
              "", "| series | GPUs | published trend | predicted | error |", "|---|---|---|---|---|"]
    for t in doc["trends"]:
        lines.append(f"| {t['table']} | {t['from_gpus']} -> {t['to_gpus']} | {t['published']:.3f} "
                     f"| {t['predicted']:.3f} | {100 * t['error']:+.1f}% |")
    lines += ["", "| long-context run | GPUs | TP | CP | PP | fits | plan | memory GiB "
              "| predicted TFLOP/s/GPU (full attention) | published |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["long_context"]:
        plan = f"{r.get('schedule')} v{r.get('virtual_stages')} {r.get('recompute')} " \
               f"{r.get('sharding')}" if r["fits"] else "-"
        lines.append(f"| {r['name']} | {r['gpus']} | {r['tp']} | {r['cp']} | {r['pp']} "
                     f"| {'yes' if r['fits'] else 'no'} | {plan} | {r.get('peak_memory_gib', '-')} "
                     f"| {r.get('predicted_model_tflops_per_gpu', '-')} "
                     f"| {r.get('published_model_tflops_per_gpu') or '-'} |")
    lines += ["", "The long-context runs' model TFLOP/s count full attention, 12 x layers x "
              "hidden x sequence FLOPs a token (NVIDIA's convention, model_flops_per_token), "
              "where pptune's MFU counts the causal half (6 x)."]
    return "\n".join(lines)


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    path = Path(__file__).parent / "results" / "published_modern.json"
    if "--run" in sys.argv:
        doc = main(quick=True)
        print(json.dumps({k: doc[k] for k in ("within", "of", "trends_within", "trends_of")}))
        print(markdown(doc))
    else:
        print(markdown(json.loads(path.read_text())))
    _ = math
