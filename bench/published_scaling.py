"""Megatron-LM's H100 weak-scaling table against pptune: bench/results/published_scaling.json.

NVIDIA/Megatron-LM's README (section "Training Speed and Scalability", added in
commit f2e5db40, July 2024, Megatron-Core r0.8.0; the table is the image
images/model_table.png, read here row by row) trains nine GPT models from 1.7B to
462B parameters on 48 to 6,144 H100s: vocabulary 131,072, sequence 4,096, hidden
size, heads and layers varied, tensor and pipeline parallelism per row, data
parallelism 48, the batch growing with the model. It overlaps the data-parallel
reduction and parameter gather (``--overlap-grad-reduce --overlap-param-gather``,
so the distributed optimizer: ZeRO-1), tensor-parallel communication
(``--tp-comm-overlap``, so sequence parallelism) and pipeline sends; throughput is
end to end (data loading, optimizer step, logging). Its MFU column is the TFLOP/s
column over 989 (BF16's dense peak).

What the README leaves unsaid is taken from Megatron-LM's defaults or searched:
GPT models are Megatron's default GPT (learned positions, a 2-matrix GeLU MLP of
4h, multi-head attention, dropout 0.1 on attention and hidden states, FP32
gradient reduction under --bf16: ``accumulate_allreduce_grads_in_fp32``, and
megatron-core's unfused loss, without ``--cross-entropy-loss-fusion``:
pptune/costmodel/loss.py);
micro-batch size (1, 2 or 4), schedule (1F1B or interleaved with its virtual
stages), split and recomputation (none, or full where memory binds) are searched
at the published TP, PP and batch, and pptune's best plan is compared. Model
FLOPs are counted as Megatron-LM's ``num_floating_point_operations`` counts them
(full attention; bench/published_modern.model_flops_per_token). The README's
claim under test: MFU grows with the model (41% to 47-48%) because larger GEMMs
run closer to peak. Nothing is fitted to these rows.

Run: python -m bench.published_scaling  (prints the markdown table)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.published_modern import model_flops_per_token
from pptune.costmodel import presets
from pptune.costmodel.keys import CostKey
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.memory import Recompute
from pptune.costmodel.models import ModelShape
from pptune.costmodel.rates import WgradAccum
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import PlanRequest, Sharding, search
from pptune.costmodel.variation import slowest_of
from pptune.costs.profiles import preset_tables

SOURCE = ("NVIDIA/Megatron-LM README, images/model_table.png (commit f2e5db40, July 2024; "
          "unchanged at d98e8a64)")
VOCAB, SEQ, DP = 131072, 4096, 48
TOLERANCE = 0.10
GIB = 2**30
LOSS = CrossEntropy.UNFUSED  # Megatron-LM without --cross-entropy-loss-fusion (loss.py)


@dataclass(frozen=True)
class ScalingRun:
    """One row of the table as printed."""

    params: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int
    tflops: float  # model TFLOP/s per GPU, as printed
    mfu: float  # as printed (TFLOP/s over 989)


RUNS = (
    ScalingRun("1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8, 0.41),
    ScalingRun("7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9, 0.47),
    ScalingRun("16B", 48, 6144, 32, 4, 1, 192, 192, 489.1, 0.49),
    ScalingRun("32B", 56, 7168, 48, 8, 1, 384, 192, 459.6, 0.46),
    ScalingRun("70B", 64, 8192, 84, 8, 2, 768, 384, 419.7, 0.42),
    ScalingRun("119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5, 0.43),
    ScalingRun("177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8, 0.44),
    ScalingRun("314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4, 0.48),
    ScalingRun("462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9, 0.47),
)


def shape_of(run: ScalingRun) -> ModelShape:
    """Megatron-LM's default GPT at the row's size (module docstring)."""
    return ModelShape(f"megatron-gpt-{run.params}", run.layers, run.hidden, run.heads,
                      run.heads, 4 * run.hidden, VOCAB, SEQ, run.batch, False, True, SOURCE)


def predict(run: ScalingRun) -> dict[str, Any]:
    shape = shape_of(run)
    assert run.gpus == run.tp * run.pp * DP
    tables = preset_tables(shape, slowest_of(presets.GPUS["h100-sxm"], run.gpus), (1, 2, 4),
                           sequence_parallel=run.tp > 1, tp_comm_overlap=run.tp > 1,
                           cross_entropy=LOSS,
                           # Megatron-core with Transformer Engine: cuDNN's fused attention
                           attention="cudnn",
                           # weight gradients into the FP32 main_grad in the wgrad GEMM
                           # (Megatron-LM's --gradient-accumulation-fusion default)
                           wgrad_accum=WgradAccum.FUSED)
    req = PlanRequest(gpus=run.gpus, global_batch=run.batch, tp=run.tp, pp=(run.pp,),
                      cost_keys=(CostKey(tp=run.tp),),
                      schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED),
                      shardings=(Sharding.ZERO1,), recomputes=(Recompute.NONE, Recompute.FULL),
                      top=1, with_best_pp1=False)
    res = search(tables, req)
    row: dict[str, Any] = {"params": run.params, "heads": run.heads, "hidden": run.hidden,
                           "layers": run.layers, "tp": run.tp, "pp": run.pp, "dp": DP,
                           "gpus": run.gpus, "global_batch": run.batch,
                           "published_tflops_per_gpu": run.tflops, "published_mfu": run.mfu,
                           "fits": bool(res.plans)}
    if not res.plans:
        return {**row, "predicted_tflops_per_gpu": None, "ratio": None, "within": False}
    p = res.plans[0]
    tflops = model_flops_per_token(shape) * run.batch * SEQ / p.step_time_s / run.gpus / 1e12
    return {
        **row, "schedule": p.schedule.value, "virtual_stages": p.virtual_stages,
        "micro_batch": p.micro_batch_size, "microbatches": p.num_microbatches,
        "recompute": p.recompute.value if p.recompute_layers is None else "stage",
        "bubble_rate": round(p.bubble_rate, 4), "step_s": round(p.step_time_s, 3),
        "peak_memory_gib": round(max(p.peak_memory_bytes) / GIB, 1),
        "predicted_tflops_per_gpu": round(tflops, 1),
        "predicted_mfu": round(tflops * 1e12 / presets.GPUS["h100-sxm"].peak_flops, 3),
        "ratio": round(tflops / run.tflops, 3), "within": abs(tflops / run.tflops - 1) <= TOLERANCE,
    }


def main() -> dict[str, Any]:
    rows = [predict(r) for r in RUNS]
    done = [r for r in rows if r["ratio"] is not None]
    first, last = done[0], done[-1]
    return {
        "description": "Megatron-LM's H100 weak-scaling table (README, Megatron-Core r0.8.0): "
                       "nine GPT models from 1.7B to 462B parameters on 48 to 6,144 H100s, "
                       "against pptune's best plan at each row's published TP, PP and batch "
                       "(micro-batch, schedule, split and recomputation searched).",
        "source": SOURCE, "tolerance": TOLERANCE, "rows": rows,
        "within": sum(r["within"] for r in rows), "of": len(rows),
        # the README's claim: MFU grows with the model size
        "mfu_growth": {"published": round(last["published_mfu"] / first["published_mfu"], 3),
                       "predicted": round(last["predicted_mfu"] / first["predicted_mfu"], 3)},
    }


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| model | layers | hidden | TP | PP | GPUs | batch | plan | published TFLOP/s/GPU "
             "| predicted | ratio | memory GiB |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        plan = (f"{r['schedule']} v{r['virtual_stages']} mbs {r['micro_batch']} "
                f"{r['recompute']}" if r["fits"] else "no plan fits")
        pred = f"{r['predicted_tflops_per_gpu']:.1f}" if r["ratio"] is not None else "-"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        lines.append(f"| {r['params']} | {r['layers']} | {r['hidden']} | {r['tp']} | {r['pp']} "
                     f"| {r['gpus']} | {r['global_batch']} | {plan} "
                     f"| {r['published_tflops_per_gpu']:.1f} | {pred} | {ratio} "
                     f"| {r.get('peak_memory_gib', '-')} |")
    g = doc["mfu_growth"]
    lines += ["", f"Within {100 * doc['tolerance']:.0f}%: {doc['within']} of {doc['of']} rows. "
              f"MFU of the largest model over the smallest's: published {g['published']:.3f}, "
              f"predicted {g['predicted']:.3f}."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(main()))
