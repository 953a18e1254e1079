"""Megatron-LM (Narayanan et al. 2021, SC21) Table 1, predicted row by row.

Each row is run as the paper's own reproduction script launched it
(NVIDIA/Megatron-LM examples/sc21/run_table_1.sh, CONFIG.sh, SRUN.sh; the
values are in bench/published_data.py, MEGATRON_TABLE1_SCRIPT):

- micro-batch size, and interleaving only where the script passes
  ``--num-layers-per-virtual-pipeline-stage`` (39B and 1T run plain 1F1B);
- full recomputation of every transformer layer, one layer per checkpoint
  (``--activations-checkpoint-method uniform``); the embedding and the LM
  head with its loss are not recomputed (megatron/model/transformer.py
  ``_checkpointed_forward`` loops over the transformer layers only);
- fp16 training (``--fp16``) without ``--accumulate-allreduce-grads-in-fp32``:
  gradients are all-reduced in fp16, 2 bytes each;
- ``--DDP-impl torch`` (the pp=1 rows): PyTorch DDP, which all-reduces
  25 MiB buckets while the backward runs; Megatron-LM v2 wraps all but the
  last micro-batch in ``model.no_sync()``, so only the last backward hides
  them;
- ``--DDP-impl local`` (every pipelined row): Megatron-LM's own DDP, whose
  backward hooks only accumulate into ``main_grad``; ``train_step`` calls
  ``allreduce_gradients()`` once ``forward_backward_func`` has returned,
  one all-reduce of the whole buffer, nothing overlapped
  (megatron/training.py and megatron/model/distributed.py of Megatron-LM
  v2; bucketed overlap, ``--overlap-grad-reduce``, came in 2023);
- unfused attention with the fused scale-mask-softmax kernel (Sec. 4.2;
  the paper predates flash attention); blocking pipeline sends (the v2 p2p
  ``_communicate`` waits on its requests and synchronises the device).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from bench.published_data import (
    MEGATRON_SEQ_LEN,
    MEGATRON_TABLE1,
    MEGATRON_TABLE1_SCRIPT,
    MEGATRON_VOCAB,
    MegatronRow,
)
from pptune.costmodel.calibration import Factors, scaled_gpu
from pptune.costmodel.comm import (
    AllReduceLink,
    DpReduction,
    dp_exposed_s,
    torch_ddp_bucket_params,
)
from pptune.costmodel.evaluate import dp_link
from pptune.costmodel.layout import Dim
from pptune.costmodel.memory import Recompute, with_recompute
from pptune.costmodel.presets import GPUS, ModelShape
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import (
    GRAD_DTYPE_BYTES,
    CostTable,
    Plan,
    PlanRequest,
    PlanSpec,
    Sharding,
    evaluate,
)
from pptune.costmodel.variation import slowest_of
from pptune.costs.profiles import analytic_profile, cost_table

GPU = "a100-80gb"  # "8 NVIDIA 80-GB A100 GPUs" a node (Sec. 5)
TFLOPS_TOLERANCE = 0.10
FP16_BYTES = 2  # the Table 1 runs trained in fp16 (CONFIG.sh --fp16)
MEGATRON_SCRIPT = {r.params_billion: r for r in MEGATRON_TABLE1_SCRIPT}


def megatron_model_flops(row: MegatronRow) -> float:
    """Eq. 3 of Narayanan et al. 2021: 96 B s l h^2 (1 + s/6h + V/16lh), per iteration,
    counting the recomputed forward."""
    s, h, n, v = MEGATRON_SEQ_LEN, row.hidden_size, row.layers, MEGATRON_VOCAB
    return 96 * row.batch_size * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


def _blocks_recomputed(table: CostTable) -> CostTable:
    """Full recomputation as Megatron-LM v2 ran it: ``--activations-checkpoint-
    method uniform`` checkpoints the transformer layers one by one
    (megatron/model/transformer.py ``_checkpointed_forward`` over
    ``self.layers``); the embedding and the LM head with its loss run once.
    (Eq. 3 counts the same: 4 forward passes of each block, 3 of the logit layer.)"""
    return with_recompute(table, Recompute.FULL)


def _torch_ddp_step_s(table: CostTable, req: PlanRequest, no_dp: Plan, b: int) -> float:
    """One pp=1 replica's step under PyTorch DDP: fp16 gradients all-reduced in
    25 MiB buckets while the last micro-batch's backward runs (Megatron-LM v2
    wraps the others in ``model.no_sync()``); the exposed tail is added."""
    c = table.by_mb[b]
    params = sum(table.param_bytes) / table.param_dtype_bytes
    group = req.layout(no_dp.spec).group(Dim.CP, Dim.DP)
    link = dp_link(table, Sharding.NONE, group, no_dp.dp, FP16_BYTES / GRAD_DTYPE_BYTES)
    red = DpReduction(params, no_dp.dp, link, FP16_BYTES, FP16_BYTES,
                      bucket_params=torch_ddp_bucket_params(FP16_BYTES))
    return no_dp.step_time_s + dp_exposed_s(red, sum(c.bwd_s) + sum(c.wgrad_s), sum(c.fwd_s))


def megatron_shape(row: MegatronRow) -> ModelShape:
    h = row.hidden_size
    return ModelShape(f"gpt-{row.params_billion}b", row.layers, h, row.attention_heads,
                      row.attention_heads, 4 * h, MEGATRON_VOCAB, MEGATRON_SEQ_LEN,
                      row.batch_size, False, True, "Narayanan et al. 2021 Table 1")


def published_step_s(row: MegatronRow) -> float:
    """The row's seconds per iteration: eq. 3's FLOPs at its published TFLOP/s per GPU."""
    return megatron_model_flops(row) / (row.tflops_per_gpu * 1e12 * row.num_gpus)


def megatron_step_s(row: MegatronRow, factors: Factors = Factors()) -> float:
    """The row's simulated seconds per iteration on the A100 with its rates scaled by
    ``factors`` (pptune.costmodel.calibration; bench/calibrate.py)."""
    return float(megatron_row(row, factors)["step_time_s_exact"])


def megatron_row(row: MegatronRow, factors: Factors = Factors()) -> dict[str, Any]:
    h, t, p = row.hidden_size, row.tensor_parallel, row.pipeline_parallel
    run = MEGATRON_SCRIPT[row.params_billion]
    b = run.micro_batch_size
    shape = megatron_shape(row)
    gpu = slowest_of(scaled_gpu(GPUS[GPU], factors), row.num_gpus)  # the slowest GPU's pace
    table = _blocks_recomputed(cost_table(
        analytic_profile(shape, gpu, [b], tp=t, attention="eager"), tp=t, tp_in_costs=t))
    per_stage = row.layers // p
    v = per_stage // run.layers_per_virtual_stage if run.layers_per_virtual_stage else 1
    schedule = Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B
    dp = row.num_gpus // (t * p)
    local_ddp = run.ddp_impl == "local"
    req = PlanRequest(gpus=row.num_gpus, global_batch=row.batch_size, tp=t, blocking_send=True,
                      grad_buffer_bytes=FP16_BYTES,
                      grad_bytes_factor=FP16_BYTES / GRAD_DTYPE_BYTES,
                      overlap_grad_reduce=not local_ddp)
    m = row.batch_size // (dp * b)
    # Megatron-LM's split: blocks evenly over the p * v chunks, the embedding
    # with the first chunk and the LM head with the last
    split = [row.layers // (p * v)] * (p * v)
    split[0] += 1
    split[-1] += 1
    spec = PlanSpec(schedule, p, b, m, tuple(split), v)
    plan = evaluate(table, req, spec)
    free = AllReduceLink(0.0, math.inf)
    no_dp = evaluate(dataclasses.replace(table, ar_intra=free, ar_inter=free, fabric=None),
                     req, spec)
    step_s = plan.step_time_s
    if not local_ddp:  # PyTorch DDP (the pp=1 rows): its own bucket size
        assert p == 1, "the script runs PyTorch DDP only without pipelining"
        step_s = _torch_ddp_step_s(table, req, no_dp, b)
    tflops = megatron_model_flops(row) / step_s / row.num_gpus / 1e12
    return {
        "params_billion": row.params_billion, "hidden": h, "layers": row.layers,
        "tp": t, "pp": p, "dp": plan.dp, "gpus": row.num_gpus, "batch": row.batch_size,
        "micro_batch_size": b, "microbatches": plan.num_microbatches,
        "schedule": plan.schedule.value, "virtual_stages": plan.virtual_stages,
        "ddp": ("PyTorch DDP, fp16 gradients in 25 MiB buckets during the backward"
                if not local_ddp else "Megatron local DDP, fp16 gradients after the backward"),
        "step_time_s": round(step_s, 3), "step_time_s_exact": step_s,
        "bubble_rate": round(plan.bubble_rate, 4),
        "peak_memory_gib": round(max(plan.peak_memory_bytes) / 2**30, 1),
        "exposed_dp_reduction_s": round(step_s - no_dp.step_time_s, 4),
        "published_tflops": row.tflops_per_gpu, "predicted_tflops": round(tflops, 1),
        "ratio": round(tflops / row.tflops_per_gpu, 3),
        "within": abs(tflops / row.tflops_per_gpu - 1) <= TFLOPS_TOLERANCE,
    }


def megatron_rows() -> dict[str, Any]:
    rows = [megatron_row(r) for r in MEGATRON_TABLE1]
    for r in rows:
        del r["step_time_s_exact"]
    by = {r["params_billion"]: r for r in rows}
    big, ref = by[1008.0], by[145.6]
    pub = big["published_tflops"] / ref["published_tflops"]
    pred = (big["predicted_tflops"] / ref["predicted_tflops"]
            if big["predicted_tflops"] and ref["predicted_tflops"] else None)
    return {
        "rows": rows,
        "ratio_1t_over_145b": {
            "published": round(pub, 3), "predicted": round(pred, 3) if pred else None,
            "error": round(pred / pub - 1, 3) if pred else None,
            "within": pred is not None and abs(pred / pub - 1) <= 0.05,
        },
    }
