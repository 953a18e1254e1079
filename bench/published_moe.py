"""Mixture-of-experts runs against pptune's predictions -> bench/results/published_moe.json.

Every MoE row of the development set is here, each with its configuration as
published and its source; every row is reported, misses included. Where a source
leaves a setting unsaid, the row takes Megatron-LM's default (fp32 gradient
reduction, etp = tp) and pptune's (grouped expert GEMMs, balanced routing, no
FP8 parameters). The model is the same for every
row (nothing is fitted to them).

1. NVIDIA dgxc-benchmarking v25.02 (tag commit 8f5cbb37), Grok-1 314B on H100,
   BF16 and FP8, 8 to 2048 GPUs (grok1/README_314b.md: the table of settings,
   step times and tokens/s; grok1/configure.sh and grok1/grok1_314b.yaml: the
   rest of the run). Proxy scales truncate the layers (2 to 32) and run
   sequence 4096 below 64 GPUs.
2. NVIDIA NeMo 25.02 performance summary, DGX-B200, FP8 (docs.nvidia.com
   nemo-framework/user-guide/latest/performance/performance_summary.html, the
   25.02 page): Mixtral-8x7B and Mixtral-8x22B.
3. DeepSeek-V3 technical report (arXiv 2412.19437, sec. 1 and 3.1): 180K H800
   GPU-hours per trillion tokens on 2,048 H800s, i.e. 1e12 / (180e3 x 3600 s) =
   1,543 tokens/s per GPU, a wall-clock average with every overhead; PP16 with
   DualPipe, EP64 over 8 nodes with each token's experts on at most 4 nodes,
   ZeRO-1, no TP, FP8 GEMMs, sequence 4096 (the MTP module on the last stage).
   Its memory savings (sec. 3.2.3: RMSNorm and the MLA up-projections recomputed
   in the backward pass; sec. 3.3.3: the SwiGLU's output in MoE recomputed from
   its cached input) are priced as megatron-core's ``mla_up_proj``, ``layernorm``
   (the norms before attention and before the MoE layer) and ``moe_act`` recompute
   modules, its BF16 Adam moments (sec. 3.3.3) as such, and the embedding its MTP
   module shares with the model on DualPipe's first device (sec. 3.2.3) as pptune
   prices any MTP module on the embedding's device; not modelled: the SwiGLU input
   and the attention output cached in its own low-precision formats, and the EMA
   kept in CPU memory (no GPU memory). DualPipe's F&B pairs
   overlap the all-to-all (sec. 3.2.1: "both all-to-all and PP communication can
   be fully hidden"), so the row runs with it (``PlanSpec.a2a_overlap``), as
   recommend prices a DualPipe plan without block recomputation.
4. DeepSeek's published profile of one DualPipe F&B pair (deepseek-ai/profile-data,
   train.json at commit 449602428a1b023acb8a505d4f34fef536535db6: a PyTorch
   profiler trace on an H800, "a pair of individual forward and backward chunks
   ... Each chunk contains 4 MoE layers ... EP64, TP1 with 4K sequence length",
   PP communication left out, balanced routing; one 4,096-token sequence, from the
   attention kernels' grid: 32 query blocks of 128 x 128 heads x batch 1). Summed
   from its kernel events (``deepseek_pair``): 129.0 ms from the first kernel to
   the last; GEMM kernels (DeepSeek's FP8 grouped GEMMs, one stream and a second
   one for part of the weight gradients) 75.0 ms, attention (FlashAttention-3
   forward and backward) 22.0 ms, every other compute kernel (FP8 casts and
   transposes, norms, rotary, SwiGLU, permutation) 32.5 ms, the all-to-all
   kernels on the communication stream (DeepEP, their polling included) 113.4 ms.

5. One megatron-core ``MoELayer`` alone on 8 H100s (``megatron_layer``): a public
   layer benchmark, marin-community/marin issue 4311 (comment of 2026-04-13, column
   "Megatron deepep (ms)": forward plus backward of the layer, 20 timed iterations),
   run by .agents/scripts/megatron_qwen_moe_perf.py (commit 093449c1): 4,096 tokens a
   rank (sequence 4096, micro-batch 1), BF16, EP8 over the node, TP1, the flex
   dispatcher on DeepEP, Transformer Engine grouped expert GEMMs, router and permute
   fusion, forced load balancing, no shared experts; CUDA events around the forward
   and around the backward, each iteration after a barrier and an 8192 x 8192 BF16
   GEMM. Issue 3666 (the same sweep) gives the spread of the 32- and 64-expert cases:
   forward standard deviation 30.0 and 11.4 ms, backward 15.2 and 15.5 ms.

What the Grok-1 runs state and pptune takes from them (configure.sh and the
yaml): tensor parallelism 4 with sequence parallelism and ``ub_tp_comm_overlap``
(--tp-comm-overlap), the distributed optimizer with overlapped gradient and
parameter sync (ZeRO-1, bf16 gradient sync: ``grad_sync_dtype: bf16``),
``moe_grouped_gemm: false`` (one GEMM per local expert), capacity factor 1.0
with ``moe_pad_expert_input_to_capacity`` (every expert gets exactly its
capacity: routing imbalance 1.0), the all-to-all dispatcher, flash attention,
no recomputation, the Llama-3 tokenizer (vocabulary 128256, padded to a
multiple of 128 x tp = 512: 128512). Expert tensor parallelism is not set, so
megatron-core uses the tensor-parallel size (``expert_tensor_parallel_size =
tensor_model_parallel_size`` when None, megatron/core/parallel_state.py):
etp = 4. The micro-batch count follows from the batch: GBS / (MBS x dp) (the
README's GA column, 128, holds only where dp = 8). Not modelled: the optimizer
step, data loading and logging that the step time includes.

Memory check (NVIDIA's DeepSeek-V3 recipe on 1,024 H100, Megatron-Bridge
src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py,
``deepseek_v3_pretrain_1024gpu_h100_bf16_config``, and dgxc-benchmarking
deepseek_v3/pretrain/megatron_bridge/README.md): TP2 PP8 VP4 EP64 ETP1, MBS 1,
GBS 16384, sequence 4096, sequence parallelism, the distributed optimizer,
``recompute_modules = ["mla_up_proj", "mlp"]``, forced load balancing, layout
``Et|(tt|)*30mL`` (the embedding and one block, thirty chunks of two blocks,
the MTP module and the loss). Its optimizer keeps bf16 gradients and Adam
moments (``use_precision_aware_optimizer``, ``main_grads_dtype`` and
``exp_avg*_dtype`` bfloat16); pptune's ZeRO-1 state counts Megatron's default
fp32 gradients and moments, so the recipe's own state is also given.

Speed: the planner searching DeepSeek-V3 on 2,048 H100 over expert parallelism,
tensor parallelism, pipeline depth, interleaving and sharding (one cost table
per key), timed in this process (the CLI flags for --ep come with the CLI work).
"""

from __future__ import annotations

import dataclasses
import math
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.published_modern import account_split
from bench.published_modern import predict as predict_modern
from bench.published_modern_data import RUNS as MODERN_RUNS
from pptune.costmodel import presets
from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.memory import Recompute
from pptune.costmodel.moe import ExpertParallel, moe_part
from pptune.costmodel.ops import Parallel, Phase, Rates, phase_s
from pptune.costmodel.rates import WgradAccum
from pptune.costmodel.schedules import Schedule, model_chunks
from pptune.costmodel.search import CostTable, PlanRequest, PlanSpec, evaluate, search
from pptune.costmodel.sharding import Sharding
from pptune.costmodel.sim_records import overlapped_pair_s
from pptune.costmodel.table import stage_costs
from pptune.costmodel.variation import slowest_of
from pptune.costs.profiles import analytic_profile, cost_table, preset_experts, preset_tables

GIB = 1024**3
TOLERANCE = 0.15
WALL_CLOCK_TOLERANCE = 0.20

DGXC = ("NVIDIA/dgxc-benchmarking v25.02 (commit 8f5cbb3799ea8cc031ed2c2cee1cbdbc15b240ad) "
        "grok1/README_314b.md, configure.sh, grok1_314b.yaml")
NEMO_2502 = ("NVIDIA NeMo 25.02 performance summary, DGX-B200 FP8 (docs.nvidia.com/nemo-framework/"
             "user-guide/latest/performance/performance_summary.html)")
DEEPSEEK_REPORT = "DeepSeek-V3 technical report (arXiv 2412.19437), sec. 1 and 3.1"
DS_RECIPE = ("NVIDIA-NeMo/Megatron-Bridge (commit 067f987d) src/megatron/bridge/perf_recipes/"
             "deepseek/h100/deepseek_v3.py deepseek_v3_pretrain_1024gpu_h100_bf16_config; "
             "NVIDIA/dgxc-benchmarking (commit 841f546) "
             "deepseek_v3/pretrain/megatron_bridge/README.md (H100 BF16 row)")

GROK_VOCAB_PADDED = 128512  # Llama-3's 128256 padded to a multiple of 128 x tp 4


@dataclass(frozen=True)
class Run:
    """One published MoE run as its source states it."""

    model: str
    gpu: str
    precision: str
    gpus: int
    seq_len: int
    layers: int
    tp: int
    pp: int
    cp: int
    ep: int
    vp: int  # 1: not interleaved
    mbs: int
    gbs: int
    tokens_per_s_per_gpu: float
    source: str
    derived: str  # how the per-GPU figure follows from the printed ones
    needs: tuple[str, ...] = ()  # what pptune does not express yet
    etp: int | None = None  # expert tensor parallelism (None: megatron-core's default, tp)
    grouped: bool = True  # local experts in one grouped GEMM
    # gradients kept and reduced in bf16 (megatron-core's grad_reduce_in_fp32 off: its
    # gradient buffer takes the parameters' dtype), else Megatron's fp32 default
    grad_bf16: bool = False
    schedule: Schedule | None = None  # None: interleaved when vp > 1, else 1f1b
    # how tokens reach their experts: DeepSeek's own kernels send a token once a node and
    # forward it over NVLink (report sec. 3.2.2), DeepEP's design; NeMo's alltoall else
    dispatcher: Dispatcher = Dispatcher.ALLTOALL
    # megatron-core recompute modules matching what the source says it recomputes
    recompute_modules: tuple[str, ...] = ()
    moment_bytes: float = 4.0  # each Adam moment (2: BF16, where the source says so)
    a2a_overlap: bool = False  # the F&B pairs overlap the all-to-all (the source says so)
    # FP8 amaxes reduced over the stage each chunk pass: NeMo's delayed scaling; DeepSeek-V3
    # scales each 1 x 128 / 128 x 128 block locally (its report, sec. 3.3)
    amax_reduction: bool = True
    # the loss's kernels (pptune/costmodel/loss.py): NeMo 2.0's GPTConfig fuses it
    # (cross_entropy_loss_fusion True, NVIDIA/NeMo nemo/collections/llm/recipes/
    # CONFIGURATION-HIERARCHY.md); a NeMo 1.x yaml without the key runs megatron-core's
    # unfused loss (published_modern_data.NEMO1_LOSS: the Grok-1 recipe); DeepSeek's
    # own framework: pptune's one pass
    cross_entropy: CrossEntropy = CrossEntropy.FUSED
    tp_overlap: bool = True  # Transformer Engine's TP overlap when tp > 1 (a recipe may not)
    # Megatron's account_for_embedding/loss_in_pipeline_split: the embedding and the loss
    # each count as a layer when the blocks are split (else blocks evenly: _even_split)
    account_ends: bool = False
    # the recipe's own pipeline layout: table entries (embedding, blocks, MTP, head) a chunk
    split: tuple[int, ...] = ()
    # the attention kernel: Transformer Engine (every NVIDIA recipe) runs cuDNN's fused
    # attention on Hopper and later; DeepSeek's trace shows FlashAttention-3, whose measured
    # rates the same paper puts within 10% of cuDNN's: cuDNN's, the nearest pptune prices
    attention: str = "cudnn"


def _grok(gpus: int, seq: int, layers: int, pp: int, cp: int, ep: int, vp: int, gbs: int,
          bf16: tuple[float, float], fp8: tuple[float, float]) -> list[Run]:
    out = []
    for precision, (step_s, tokens_s) in (("bf16", bf16), ("fp8", fp8)):
        out.append(Run("grok-1", "h100-sxm", precision, gpus, seq, layers, 4, pp, cp, ep, vp,
                       1, gbs, tokens_s / gpus, DGXC,
                       f"{tokens_s:.0f} tokens/s on {gpus} GPUs (step {step_s} s)",
                       grouped=False, grad_bf16=True, cross_entropy=CrossEntropy.UNFUSED))
    return out


RUNS: tuple[Run, ...] = (
    # GPUs, seq, layers, PP, CP, EP, VP, GBS, (BF16 step s, tok/s), (FP8 step s, tok/s) [V]
    *_grok(8, 4096, 2, 1, 1, 2, 1, 1024, (24.00, 174762), (19.71, 212757)),
    *_grok(16, 4096, 4, 1, 1, 4, 1, 1024, (21.71, 193223), (17.80, 235635)),
    *_grok(32, 4096, 4, 1, 1, 8, 1, 1024, (10.70, 391991), (8.70, 482159)),
    *_grok(64, 8192, 8, 1, 2, 8, 1, 1024, (21.42, 391606), (17.53, 478583)),
    *_grok(128, 8192, 16, 2, 2, 8, 8, 1024, (20.73, 404699), (16.70, 502311)),
    *_grok(256, 8192, 32, 4, 2, 8, 8, 1024, (20.83, 402756), (16.75, 500752)),
    *_grok(512, 8192, 64, 8, 2, 8, 8, 1024, (21.01, 399191), (16.90, 496367)),
    *_grok(1024, 8192, 64, 8, 2, 8, 8, 2048, (21.20, 791378), (17.01, 981295)),
    *_grok(2048, 8192, 64, 8, 2, 8, 8, 4096, (21.29, 1576065), (17.30, 1939562)),
    Run("mixtral-8x7b", "b200", "fp8", 64, 4096, 32, 1, 1, 1, 8, 1, 2, 256, 15457, NEMO_2502,
        "printed tokens/s/GPU", cross_entropy=CrossEntropy.NATIVE),
    # printed "GBS 1, MBS 64"; dp = 256 / (2 x 4 x 8) = 4 and GA 16 make it GBS 64, MBS 1
    Run("mixtral-8x22b", "b200", "fp8", 256, 65536, 56, 2, 4, 8, 8, 14, 1, 64, 2232, NEMO_2502,
        "printed tokens/s/GPU (GBS/MBS read as 64/1: dp 4 x GA 16)",
        cross_entropy=CrossEntropy.NATIVE),
    Run("deepseek-v3", "h800", "fp8", 2048, 4096, 61, 1, 16, 1, 64, 1, 1, 15360,
        1e12 / (180e3 * 3600), DEEPSEEK_REPORT,
        "1e12 tokens / (180K GPU-hours x 3600 s), wall clock with every overhead",
        etp=1, schedule=Schedule.DUALPIPE, dispatcher=Dispatcher.DEEPEP,
        recompute_modules=("mla_up_proj", "layernorm", "moe_act"), moment_bytes=2.0,
        a2a_overlap=True,
        amax_reduction=False),
)

# deepseek-ai/profile-data train.json (module docstring, item 4), milliseconds, summed
# from its kernel events by kind
DEEPSEEK_PAIR_SOURCE = ("deepseek-ai/profile-data train.json "
                        "(449602428a1b023acb8a505d4f34fef536535db6), H800, EP64, TP1")
DEEPSEEK_PAIR_LAYERS = 4  # MoE layers in each chunk
DEEPSEEK_PAIR_MS = {"pair": 129.0, "gemm": 75.0, "attention": 22.0, "other compute": 32.5,
                    "all-to-all kernels": 113.4}


def _key(run: Run) -> CostKey:
    return CostKey(tp=run.tp, cp=run.cp, ep=run.ep, etp=run.tp if run.etp is None else run.etp,
                   precision=Precision(run.precision))


def _table(run: Run) -> CostTable:
    """The run's model and GPU at its layout: the presets' analytic costs (sequence
    parallelism and Transformer Engine's TP overlap when tp > 1, flash attention)."""
    shape = dataclasses.replace(presets.MODELS[run.model], num_blocks=run.layers,
                                seq_len=run.seq_len, global_batch=run.gbs)
    if run.model == "grok-1":
        shape = dataclasses.replace(shape, vocab=GROK_VOCAB_PADDED)
    ex = ExpertParallel(grouped_gemm=run.grouped, dispatcher=run.dispatcher)
    gpu = slowest_of(presets.GPUS[run.gpu], run.gpus)  # a job runs at its slowest GPU's pace
    tables = preset_tables(shape, gpu, (run.mbs,), experts=ex,
                           sequence_parallel=run.tp > 1,
                           tp_comm_overlap=run.tp > 1 and run.tp_overlap,
                           attention=run.attention,
                           recompute_modules=frozenset(run.recompute_modules),
                           cross_entropy=run.cross_entropy, wgrad_accum=WgradAccum.FUSED)
    return tables(_key(run))


def predict(run: Run) -> dict[str, Any]:
    """The run's row: its configuration, the published and predicted tokens/s per GPU."""
    row: dict[str, Any] = {
        "model": run.model, "gpu": run.gpu, "precision": run.precision, "gpus": run.gpus,
        "seq_len": run.seq_len, "layers": run.layers, "tp": run.tp, "pp": run.pp, "cp": run.cp,
        "ep": run.ep, "vp": run.vp, "micro_batch_size": run.mbs, "global_batch": run.gbs,
        "source": run.source, "published_tokens_per_s_per_gpu": round(run.tokens_per_s_per_gpu, 1),
        "published_as": run.derived,
    }
    if run.needs:
        row.update(predicted_tokens_per_s_per_gpu=None, ratio=None, within=None,
                   status="not expressible yet: needs " + ", ".join(run.needs))
        return row
    table = _table(run)
    key = _key(run)
    dp = run.gpus // (run.tp * run.pp * run.cp)
    m = run.gbs // (run.mbs * dp)
    schedule = run.schedule or (Schedule.INTERLEAVED if run.vp > 1 else Schedule.ONE_F_ONE_B)
    # Megatron's placement: blocks (and MTP layers) evenly over the chunks
    split = (run.split if run.split
             else account_split(len(table.names) - 2, run.pp * run.vp) if run.account_ends
             else _even_split(len(table.names) - 2, model_chunks(schedule, run.pp, run.vp)))
    if sum(split) != len(table.names):
        raise ValueError(f"{run.model}: a split of {sum(split)} entries for a table of "
                         f"{len(table.names)}")
    req = PlanRequest(gpus=run.gpus, global_batch=run.gbs, tp=run.tp, cost_keys=(key,),
                      # bf16 gradient sync of fp32 main grads, where the recipe says so
                      grad_bytes_factor=0.5 if run.grad_bf16 else 1.0,
                      moment_bytes=run.moment_bytes, fp8_amax_reduction=run.amax_reduction,
                      grad_buffer_bytes=2.0 if run.grad_bf16 else None)
    spec = PlanSpec(schedule, run.pp, run.mbs, m, tuple(split), run.vp,
                    sharding=Sharding.ZERO1, recompute=Recompute.NONE, key=key,
                    a2a_overlap=run.a2a_overlap)
    plan = evaluate(table, req, spec)
    tokens = run.gbs * run.seq_len / plan.step_time_s / run.gpus
    ratio = tokens / run.tokens_per_s_per_gpu
    tolerance = WALL_CLOCK_TOLERANCE if "wall clock" in run.derived else TOLERANCE
    c = table.by_mb[run.mbs]
    shape = presets.MODELS[run.model]
    block = 1 + next(i for i in range(run.layers) if shape.moe_block(i))  # the first MoE block
    etp = key.etp
    row.update(
        status="predicted", dp=dp, edp=dp * run.tp * run.cp // (run.ep * etp), microbatches=m,
        schedule=schedule.value, sharding="zero1",
        recompute_modules=list(run.recompute_modules),
        experts=f"etp {etp}" + (" (= tp, megatron-core's default)" if run.etp is None else "")
        + (", one GEMM per local expert" if not run.grouped else ", grouped GEMM")
        + ", balanced routing",
        step_time_s=round(plan.step_time_s, 3), bubble_rate=round(plan.bubble_rate, 4),
        block_ms={"fwd": round(c.fwd_s[block] * 1e3, 3), "bwd": round(c.bwd_s[block] * 1e3, 3),
                  "wgrad": round(c.wgrad_s[block] * 1e3, 3),
                  "a2a_fwd": round(c.fwd_a2a_s[block] * 1e3, 3),
                  "a2a_bwd": round(c.bwd_a2a_s[block] * 1e3, 3)},
        peak_memory_gib=round(max(plan.peak_memory_bytes) / GIB, 1),
        # the published step over the micro-batches and the blocks a GPU runs (its bubble,
        # embedding, head and optimizer step included): an upper bound on a block's time
        published_ms_per_block=round(1e3 * run.gbs * run.seq_len / (
            run.tokens_per_s_per_gpu * run.gpus) / (m * run.layers / run.pp), 1),
        predicted_tokens_per_s_per_gpu=round(tokens, 1), ratio=round(ratio, 3),
        within=abs(ratio - 1) <= tolerance,
    )
    return row


def _even_split(layers: int, chunks: int) -> list[int]:
    """Megatron's placement: blocks evenly over the chunks, the embedding with the
    first and the head with the last."""
    q, r = divmod(layers, chunks)
    split = [q + (1 if i < r else 0) for i in range(chunks)]
    split[0] += 1
    split[-1] += 1
    return split


def deepseek_memory() -> dict[str, Any]:
    """Per-rank peak memory of NVIDIA's DeepSeek-V3 recipe on 1,024 H100, per stage."""
    shape = presets.MODELS["deepseek-v3"]
    gpus, tp, pp, vp, ep, mbs, gbs = 1024, 2, 8, 4, 64, 1, 16384
    ex = ExpertParallel(ep=ep, etp=1, grouped_gemm=True)
    prof = analytic_profile(shape, "h100-sxm", [mbs], tp=tp, sequence_parallel=True, experts=ex,
                            recompute_modules=frozenset({"mla_up_proj", "mlp"}),
                            wgrad_accum=WgradAccum.FUSED)
    table = cost_table(prof, tp=tp, tp_in_costs=tp)
    key = CostKey(tp=tp, ep=ep)
    dp = gpus // (tp * pp)
    m = gbs // (mbs * dp)
    # Et|(tt|)*30mL: [embedding, block0], 30 x [two blocks], [mtp0, head]
    split = (2,) + (2,) * 30 + (2,)
    assert sum(split) == len(table.names) == 64
    req = PlanRequest(gpus=gpus, global_batch=gbs, tp=tp, cost_keys=(key,))
    spec = PlanSpec(Schedule.INTERLEAVED, pp, mbs, m, split, vp, sharding=Sharding.ZERO1,
                    key=key)
    plan = evaluate(table, req, spec)
    edp = dp * tp // ep
    devices = []
    for d, mem in enumerate(plan.memory):
        chunks = [k for k in range(pp * vp) if k % pp == d]
        layers = [i for k in chunks for i in range(sum(split[:k]), sum(split[:k + 1]))]
        dense = sum(table.params(i, i + 1) - table.expert_params(i, i + 1) for i in layers)
        expert = sum(table.expert_params(i, i + 1) for i in layers)
        # the recipe's precision-aware optimizer: bf16 weights and gradients, fp32 master
        # weights, bf16 Adam moments sharded: 2 + 2 + (4 + 2 + 2) / dp
        recipe_state = dense * (4 + 8 / dp) + expert * (4 + 8 / edp)
        devices.append({
            "pipeline_rank": d, "layers": [table.names[i] for i in layers],
            "state_gib": round(mem.state_bytes / GIB, 2),
            "activation_gib": round(mem.activation_bytes / GIB, 2),
            "p2p_gib": round(mem.p2p_bytes / GIB, 3),
            "reserve_gib": round(mem.reserve_bytes / GIB, 2),
            "total_gib": round(mem.total_bytes / GIB, 2),
            "total_with_recipe_optimizer_gib": round(
                (mem.total_bytes - mem.state_bytes + recipe_state) / GIB, 2),
        })
    peak = max(d["total_gib"] for d in devices)
    return {
        "source": DS_RECIPE,
        "configuration": {"gpus": gpus, "tp": tp, "pp": pp, "vp": vp, "ep": ep, "etp": 1,
                          "dp": dp, "edp": edp, "micro_batch_size": mbs, "global_batch": gbs,
                          "microbatches": m, "seq_len": shape.seq_len,
                          "sequence_parallel": True, "sharding": "zero1",
                          "recompute_modules": ["mla_up_proj", "mlp"],
                          "layout": "Et|(tt|)*30mL", "schedule": "interleaved-1f1b"},
        "capacity_gib": round(table.memory_bytes / GIB, 1),
        "per_pipeline_rank": devices,
        "peak_gib": peak,
        "fits": peak <= table.memory_bytes / GIB,
        "step_time_s": round(plan.step_time_s, 2),
        "note": "state_gib counts pptune's ZeRO-1 bytes (bf16 weights, fp32 gradients, "
                "fp32 master and moments over dp); total_with_recipe_optimizer_gib uses the "
                "recipe's bf16 gradients and moments instead; reserve: pptune's stated 2 GiB",
    }


def _deepseek_keys() -> list[CostKey]:
    """Expert and tensor parallel sizes searched: ep dividing the 256 experts, from one
    node's 8 GPUs to 64; tp 1 to 8 (DeepSeek-V3's own run: EP64, TP1)."""
    return [CostKey(tp=tp, ep=ep) for tp in (1, 2, 4, 8) for ep in (8, 16, 32, 64)]


def speed() -> dict[str, Any]:
    """Timings: DeepSeek-V3 on 2,048 H100 searched over keys; the dense default's CLI."""
    shape = presets.MODELS["deepseek-v3"]
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    tables: dict[CostKey, CostTable] = {}
    for key in _deepseek_keys():
        prof = analytic_profile(shape, "h100-sxm", [1, 2], tp=key.tp,
                                sequence_parallel=key.tp > 1,
                                experts=ExpertParallel(ep=key.ep, etp=key.etp))
        tables[key] = cost_table(prof, tp=key.tp, tp_in_costs=key.tp)
    built = time.perf_counter() - t0
    req = PlanRequest(gpus=2048, global_batch=shape.global_batch, cost_keys=tuple(tables),
                      shardings=(Sharding.ZERO1, Sharding.NONE), top=5)
    t1 = time.perf_counter()
    res = search(tables.__getitem__, req)
    searched = time.perf_counter() - t1
    cpu_s = time.process_time() - cpu0
    best = res.plans[0] if res.plans else None
    t2 = time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cli = subprocess.run([str(Path(sys.executable).parent / "pptune"), "recommend", "--gpus",
                          "8", "--json"], capture_output=True, check=False)
    cli_s = time.perf_counter() - t2
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cli_cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {
        "deepseek_v3_2048_h100": {
            "keys": [str(k) for k in tables], "tables_s": round(built, 2),
            "search_s": round(searched, 2), "total_s": round(built + searched, 2),
            "cpu_s": round(cpu_s, 2),
            "target_s": 10.0, "candidates": res.candidates, "simulated": res.simulated,
            "best": None if best is None else {
                "key": str(best.key), "pp": best.pp, "dp": best.dp,
                "schedule": best.schedule.value, "virtual_stages": best.virtual_stages,
                "micro_batch_size": best.micro_batch_size, "sharding": best.sharding.value,
                "recompute": best.recompute.value, "step_time_s": round(best.step_time_s, 2),
                "tokens_per_s_per_gpu": round(best.tokens_per_s / 2048, 1),
                "peak_memory_gib": round(max(best.peak_memory_bytes) / GIB, 1),
            },
            "note": "in this process (no CLI start-up); the --ep flags come with the CLI work",
        },
        "recommend_gpus_8_cli_s": {"seconds": round(cli_s, 2), "cpu_s": round(cli_cpu_s, 2),
                                   "exit_code": cli.returncode, "target_s": 1.0,
                                   "note": "wall clock on a shared machine; cpu_s is the "
                                           "process's own CPU time"},
    }


# Dense reference for the Grok-1 diagnosis, with the same GEMM and collective model:
# The dense row of the same benchmark suite the Grok-1 block is set beside: dgxc-benchmarking
# v25.02's Nemotron-4 15B BF16 on 16 H100 (TP4 PP1 MBS4, GBS 64, sequence 4096), priced by
# the modern benchmark as its recipe ran it (bench/published_modern_data.py).
DENSE_REFERENCE = ("dgxc nemotron4-15b bf16", 16)


def grok_breakdown(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the predicted Grok-1 micro-batch time goes, against the published one.

    The rows without a pipeline (pp 1) run m micro-batches of one sequence, so the published
    step over m is one micro-batch's forward and backward (the optimizer step and the
    data-parallel tail are a few ms of a 10-24 s step); taking away pptune's embedding
    and head leaves the published time of one block, to compare with pptune's block."""
    out = []
    for run, row in zip(RUNS, rows, strict=True):
        if row["ratio"] is None or run.model != "grok-1" or run.pp != 1:
            continue
        table = _table(run)
        c = table.by_mb[run.mbs]
        per_layer = [c.fwd_s[i] + c.bwd_s[i] + c.wgrad_s[i] + (
            c.fwd_a2a_s[i] + c.bwd_a2a_s[i] if c.fwd_a2a_s else 0.0)
            for i in range(len(table.names))]
        published_mb = run.gbs * run.seq_len / (run.tokens_per_s_per_gpu * run.gpus) / (
            row["microbatches"])
        ends = per_layer[0] + per_layer[-1]
        out.append({
            "gpus": run.gpus, "layers": run.layers, "seq_len": run.seq_len, "ep": run.ep,
            "predicted_ms": {"embedding": round(per_layer[0] * 1e3, 2),
                             "block": round(per_layer[1] * 1e3, 2),
                             "head": round(per_layer[-1] * 1e3, 2)},
            "published_micro_batch_ms": round(published_mb * 1e3, 2),
            "published_block_ms": round((published_mb - ends) / run.layers * 1e3, 2),
            "block_ratio": round((published_mb - ends) / run.layers / per_layer[1], 3),
        })
    table_name, gpus = DENSE_REFERENCE
    dense = predict_modern(next(r for r in MODERN_RUNS if r.table == table_name and r.gpus == gpus))
    return {
        "note": "published_block_ms = (published step / micro-batches - pptune's embedding "
                "and head) / layers: the published time of one MoE block if pptune's "
                "embedding and head are right; dense_reference: a dense dgxc-benchmarking "
                "row of the same suite as published_modern prices it, with and without its "
                "TP communication overlap",
        "rows": out,
        "dense_reference": {"table": table_name, "gpus": gpus, "tp": dense["tp"],
                            "micro_batch": dense["micro_batch"],
                            "source": dense["source"],
                            "published_tokens_per_s_per_gpu": dense["published_tokens_per_gpu"],
                            "ratio": dense["ratio"],
                            "ratio_without_tp_overlap": dense["ratio_without_tp_overlap"]},
    }


def deepseek_pair() -> dict[str, Any]:
    """DeepSeek's measured F&B pair (module docstring, item 4) against pptune's: a
    forward chunk and a backward chunk of 4 DeepSeek-V3 MoE layers each, priced on the
    DeepSeek-V3 row's table (H800, EP64, FP8, micro-batch 1 x 4,096 tokens) and
    overlapped as an F&B pair (sim_records.overlapped_pair_s); by part, the layers'
    forward plus backward and weight gradient (costmodel/parts.py)."""
    run = next(r for r in RUNS if r.model == "deepseek-v3")
    table = _table(run)
    shape = presets.MODELS[run.model]
    first = 1 + next(i for i in range(run.layers) if shape.moe_block(i))  # a table index
    n = DEEPSEEK_PAIR_LAYERS
    split = [first, n, len(table.names) - first - n]
    chunk = stage_costs(table, run.mbs, split, True)[1]
    pair_ms = overlapped_pair_s(chunk, chunk) * 1e3
    parts: dict[str, float] = {}
    for p in table.layer_parts[run.mbs][first]:
        parts[p.part] = parts.get(p.part, 0.0) + n * (p.fwd_s + p.bwd_s + p.wgrad_s) * 1e3
    predicted = {"pair": pair_ms, "gemm": parts.get("gemm", 0.0),
                 "attention": parts.get("attention", 0.0),
                 "other compute": parts.get("memory-bound", 0.0) + parts.get("launch", 0.0),
                 "all-to-all kernels": parts.get("expert all-to-all", 0.0)}
    return {
        "source": DEEPSEEK_PAIR_SOURCE, "layers_per_chunk": n, "tokens": run.seq_len,
        "note": "measured: kernel time by kind in the trace (the all-to-all kernels' time "
                "includes their polling); predicted: the same layers' forward, backward and "
                "weight-gradient time by part, the pair overlapped with the all-to-all",
        "rows": [{"part": k, "measured_ms": v, "predicted_ms": round(predicted[k], 1),
                  "ratio": round(v / predicted[k], 3) if predicted[k] else None}
                 for k, v in DEEPSEEK_PAIR_MS.items()],
    }


MEGATRON_LAYER_SOURCE = ("marin-community/marin issue 4311 (comment of 2026-04-13, "
                         "\"Megatron deepep (ms)\"), .agents/scripts/megatron_qwen_moe_perf.py "
                         "@ 093449c150979751df6f6ff8fe30d7f99f732706; spread: issue 3666")
# (case, hidden, expert FFN width, routed experts, measured forward + backward ms); top-8
MEGATRON_LAYER_MS = (
    ("Qwen3-30B-A3B shape", 2048, 768, 128, 12.41),
    ("Qwen3-235B-A22B shape", 4096, 1536, 128, 11.75),
    ("32 experts", 2048, 768, 32, 22.82),
    ("64 experts", 2048, 768, 64, 15.52),
)
MEGATRON_LAYER_TOKENS = 4096


def megatron_layer() -> dict[str, Any]:
    """The megatron-core MoE layer benchmark (module docstring, item 5) against pptune's
    MoE sub-layer (moe.moe_part) at the same shape: 4,096 tokens a rank, BF16, EP8 on
    one H100 node, DeepEP, at the slowest of 8 GPUs' pace; forward, input gradient and
    weight gradient together, as the benchmark's backward includes both."""
    gpu = slowest_of(presets.GPUS["h100-sxm"], 8)
    rates = Rates.of(gpu)
    ex = preset_experts(gpu.fabric_or_line(), 8,
                        ExpertParallel(ep=8, dispatcher=Dispatcher.DEEPEP))
    rows = []
    for case, hidden, ffn, experts, measured in MEGATRON_LAYER_MS:
        shape = dataclasses.replace(presets.MODELS["qwen3-30b-a3b"], hidden=hidden,
                                    expert_ffn=ffn, experts=experts, top_k=8,
                                    seq_len=MEGATRON_LAYER_TOKENS, shared_ffn=0)
        part = moe_part(shape, 1, rates, Parallel(1), ex)
        ms = [1e3 * phase_s(ops, phase, rates) for ops, phase in
              ((part.fwd, Phase.F), (part.bwd, Phase.B), (part.wgrad, Phase.W))]
        flops = sum(o.flops for o in (*part.fwd, *part.bwd, *part.wgrad))
        rows.append({
            "case": case, "hidden": hidden, "expert_ffn": ffn, "experts": experts,
            "local_experts": experts // ex.ep, "top_k": 8, "tokens": MEGATRON_LAYER_TOKENS,
            "measured_ms": measured, "predicted_ms": round(sum(ms), 2),
            "predicted_fwd_ms": round(ms[0], 2), "predicted_bwd_ms": round(ms[1] + ms[2], 2),
            "measured_tflops": round(flops / (measured * 1e-3) / 1e12, 1),
            "ratio": round(measured / sum(ms), 2),
        })
    return {"source": MEGATRON_LAYER_SOURCE, "gpu": "h100-sxm", "ep": 8,
            "dispatcher": "deepep", "precision": "bf16", "rows": rows}


def main() -> dict[str, Any]:
    rows = [predict(r) for r in RUNS]
    predicted = [r for r in rows if r["ratio"] is not None]
    return {
        "description": "published MoE training runs (development set), tokens/s per GPU "
                       "published vs predicted; every row, misses included",
        "assumptions": __doc__.split("What the Grok-1 runs state")[1].split("Memory check")[0]
        .strip() if __doc__ else "",
        "tolerance": TOLERANCE, "wall_clock_tolerance": WALL_CLOCK_TOLERANCE,
        "rows": rows,
        "predicted": len(predicted), "within": sum(bool(r["within"]) for r in predicted),
        "not_expressible": len(rows) - len(predicted), "of": len(rows),
        "geomean_ratio": round(math.exp(sum(math.log(r["ratio"]) for r in predicted)
                                        / len(predicted)), 3) if predicted else None,
        "grok_breakdown": grok_breakdown(rows),
        "deepseek_v3_memory": deepseek_memory(),
        "deepseek_pair": deepseek_pair(),
        "megatron_layer": megatron_layer(),
        "speed": speed(),
    }
