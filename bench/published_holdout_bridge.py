"""Published H100 runs outside the development set, for bench/published_holdout.py:
NVIDIA Megatron-Bridge's performance summary for the 26.02 NeMo container
(NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at tag v0.3.0, commit date
2026-02-26, "Pre-Training Performance"), every DGX-H100 row: LLAMA3_70B and
LLAMA3.1_405B in FP8, and the mixture-of-experts GPT OSS 120B, Qwen3_30B_a3B and
Qwen3_235B_a22B (its footnote: "we force-balance the token distribution among experts
and all benchmarks are token-dropless").

The dense rows, FP8 current scaling (scripts/performance/utils/precision.py
``fp8_cs``: Transformer Engine's tensorwise recipe, every layer in FP8 since
``first_last_layers_bf16`` is turned off, FP8 parameter all-gather), sequence
parallelism and Transformer Engine's TP overlap with the userbuffers configuration
each H100 function names (src/megatron/bridge/training/comm_overlap.py:
``userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192`` and
``userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192``), BF16 gradient reduction,
the distributed optimizer, Transformer Engine's fused cross-entropy, and, for 405B,
the embedding and loss counted in the pipeline split (its recipe's
``account_for_*_in_pipeline_split``); priced by the dense benchmark's machinery
(bench/published_modern.py).

Each run's settings are the ones its performance recipe at the same tag applies
(scripts/performance/configs/<family>/*_workload_base_configs.py, the V2 variant
whose global batch the table prints, with *_llm_pretrain.py's H100 function and
scripts/performance/utils/overrides.py), read, not guessed:

- every run: distributed optimizer, gradients reduced in BF16
  (``grad_reduce_in_fp32 = False`` in each family's common settings), the router
  forced to balance (routing imbalance 1.0), Transformer Engine's fused
  cross-entropy (``cross_entropy_fusion_impl = "te"``), grouped expert GEMMs,
  expert tensor parallelism 1;
- GPT OSS 120B, BF16: TP 1, PP 4, EP 8, micro-batch 1, the all-to-all dispatcher
  (its provider's default), recomputing ``layernorm`` and ``moe_act``;
- Qwen3-30B-A3B, FP8 current scaling: PP 2 with 12 virtual stages, EP 8, the flex
  dispatcher on DeepEP, the MoE all-to-all overlapped
  (``overlap_moe_expert_parallel_comm``, the performance scripts' ``moe_a2a_overlap``);
- Qwen3-235B-A22B, FP8 current scaling: TP 2 with sequence parallelism and no TP
  communication overlap (its H100 function passes ``tp_comm_overlap=False``), PP 8
  with 4 virtual stages, EP 32, the all-to-all dispatcher, the all-to-all
  overlapped, and the 94 blocks placed three a chunk with the embedding and the
  loss each counted as one (``account_for_embedding_in_pipeline_split`` and
  ``account_for_loss_in_pipeline_split``, set by its recipe).

The same summary's DGX-B200 and DGX-GB200 rows of the mixture-of-experts models, each
with its Blackwell recipe at the same tag, MXFP8 (32-element block scales, nothing
reduced) except GPT OSS in BF16. And its DGX-GB200 dense rows that pptune can state:
Llama 3 70B in MXFP8 (TP2 PP4 VP5) and Llama 3.1 405B in FP8 current scaling (TP4 PP16
VP4) and MXFP8 (TP4 PP16 VP8), their V2 variants (GBS 256 and 1536), each with
Transformer Engine's TP overlap configured by the B200 userbuffers entry its GB200
function names (``userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192``,
``userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192``: ring exchanges without
aggregation), MXFP8 with its parameters gathered in FP8 (``bf16_with_mxfp8_mixed``:
``fp8_param_gather``). Its NVFP4 rows of both systems (``bf16_with_nvfp4_mixed``, TP
overlap off). Not stated: the Llama 3 70B FP8 rows (Megatron FSDP with 20-40 layers
offloaded to the CPU).

The Blackwell Ultra rows of the same summary, DGX-GB300 and DGX-B300 (the gb300 and
b300 presets, whose matmul fractions are GB200's and B200's: no sweep of Blackwell
Ultra is published), each with its V2 preset at the same tag: Llama 3 70B MXFP8 TP1
PP4 VP5; Llama 3.1 405B FP8 current scaling TP4 PP8 VP4 and MXFP8 TP2 PP8 CP2 VP4
(the GB300 functions name the GB200 ones' userbuffers entries); DeepSeek-V3 GB300
micro-batch 2, PP2 VP8 with the same layout (``Et*4|(t*4|)*14tmL``), EP32, HybridEP,
``mla_up_proj``, B300 PP16 EP8; GPT OSS 120B EP64, micro-batch 4, recomputing
nothing (CUDA graphs of the attention, router and preprocessing instead); Qwen3-30B-A3B
micro-batch 8 on HybridEP; Qwen3-235B-A22B GB300 PP4 EP32 micro-batch 2 on HybridEP,
B300 PP8 VP4 EP8 with the all-to-all overlapped (``moe_a2a_overlap``), both with the
embedding and loss counted in the split.

- DeepSeek-V3 (deepseek_workload_base_configs.py V2, GBS 4096; recipes/deepseek/
  deepseek_v3.py): its one MTP layer, the recipe's layout for its (PP, VP), [embedding
  and 4 blocks], 14 x [4 blocks], [1 block, the MTP layer, the loss]; recomputing
  ``mla_up_proj``; the precision-aware optimizer (BF16 main gradients and Adam moments,
  FP32 main parameters);
  the flex dispatcher on HybridEP; GB200 PP4 VP4 EP64, B200 PP16 EP8;
- GPT OSS 120B (V2, GBS 1280): EP64, micro-batch 4, no pipeline, recomputing
  ``layernorm`` and ``moe_act``, the all-to-all dispatcher;
- Qwen3-30B-A3B (V1, GBS 512, 8 GPUs, EP8): GB200 micro-batch 4 on HybridEP, B200
  micro-batch 1 on the all-to-all dispatcher;
- Qwen3-235B-A22B (V2, GBS 8192, 256 GPUs, PP8, the embedding and loss counted in the
  split): GB200 EP32 on HybridEP, B200 EP8 on the all-to-all dispatcher.

And the newest summary, for the 26.08 NeMo container (docs/performance-summary.md at tag
v0.6.0, commit date 2026-08-19), its DGX-GB300 and DGX-GB200 MXFP8 rows of the models
pptune has presets for (DeepSeek-V3, GPT OSS 120B, Qwen3-30B-A3B, Qwen3-235B-A22B; not
DeepSeek-V4 Flash or Nemotron 3), each with the perf recipe the row matches
(src/megatron/bridge/perf_recipes/<family>/<gpu>/*_fp8mx_config @ v0.6.0): MXFP8,
HybridEP, the MoE all-to-all overlapped, full-iteration CUDA graphs, nothing recomputed
but DeepSeek-V3's ``mla_up_proj`` on GB200, FP32 Adam moments, BF16 gradients;
DeepSeek-V3 GB300 PP2 VP8 EP32 and GB200 PP4 VP4 EP64 at micro-batch 1 with the layout
above; GPT OSS EP16 (GB300) and EP64 (GB200) at micro-batch 4; Qwen3-30B-A3B EP8 at
micro-batch 8 (GB300) and 4 (GB200); Qwen3-235B-A22B EP32, GB300 PP4 VP12 at
micro-batch 2, GB200 PP8 VP3 at 1, the embedding and loss counted in the split (94
blocks split into 48 or 24 chunks no other way). What these recipes run and pptune does
not price: FP8 attention (``fp8_dot_product_attention``; pptune prices attention in
BF16), the weight-gradient GEMMs delayed behind the all-to-all (``delay_wgrad_compute``),
expert buffers sized for a 1.5 capacity factor so CUDA graphs can capture them, and the
MoE activations stashed in paged buffers that spill to host memory
(``moe_paged_stash``), which pptune's memory does not count; the CUDA graphs remove host
time pptune does not price either.

HybridEP (the flex dispatcher's other backend) moves a token once a destination node
and rank as DeepEP does, so it is priced with DeepEP's traffic. A GB200 NVL72 rack is
one 72-GPU NVLink domain (the preset's node): EP64 runs inside it, where on DGX-B200
EP64 spans eight nodes over InfiniBand. What these recipes add and pptune does not
price: CUDA graphs of the attention, router and MoE preprocessing on several of them
(they remove host time pptune does not count) and HybridEP's SM count (32, used only
when a dispatch overlaps compute, which none of these does).

FP8 current scaling computes each tensor's scale from its own amax: no amax
history is reduced over the stage, so none is priced. What the summary states
and pptune does not model (CUDA graphs of the router on other GPUs) does not apply
to these H100 runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench import published_modern
from bench.published_modern_data import Recipe, _ub
from bench.published_modern_data import Run as DenseRun
from bench.published_moe import Run, predict
from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.loss import CrossEntropy

BRIDGE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md @ v0.3.0 "
          "(26.02 NeMo container), DGX-H100 rows")
RECIPES = ("NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/{gpt_oss,qwen} @ v0.3.0 "
           "(V2 variants)")
PRINTED = "printed tokens/s/GPU"


def _bridge(model: str, precision: str, gpus: int, layers: int, tp: int, pp: int, ep: int,
            vp: int, gbs: int, tokens: float, *, gpu: str = "h100-sxm", mbs: int = 1,
            source: str = BRIDGE, **more: Any) -> Run:
    """A summary row with what every performance recipe sets: sequence 4096, etp 1, BF16
    gradient reduction, no amax history (current or block scaling), TE's fused loss."""
    return Run(model, gpu, precision, gpus, 4096, layers, tp, pp, 1, ep, vp, mbs, gbs,
               tokens, source, PRINTED, etp=1, grad_bf16=True, amax_reduction=False,
               cross_entropy=CrossEntropy.FUSED, **more)


RUNS: tuple[Run, ...] = (
    _bridge("gpt-oss-120b", "bf16", 64, 36, 1, 4, 8, 1, 1280, 5993,
            recompute_modules=("layernorm", "moe_act")),
    _bridge("qwen3-30b-a3b", "fp8", 16, 48, 1, 2, 8, 12, 1024, 5113,
            dispatcher=Dispatcher.DEEPEP, a2a_overlap=True),
    _bridge("qwen3-235b-a22b", "fp8", 256, 94, 2, 8, 32, 4, 8192, 1633,
            a2a_overlap=True, tp_overlap=False, account_ends=True),
)


def _blackwell(model: str, gpu: str, precision: str, gpus: int, layers: int, pp: int,
               ep: int, vp: int, mbs: int, gbs: int, tokens: float, **more: Any) -> Run:
    """A DGX-B200 or DGX-GB200 row (TP 1 in every one of them)."""
    return _bridge(model, precision, gpus, layers, 1, pp, ep, vp, gbs, tokens, gpu=gpu,
                   mbs=mbs, source=BRIDGE_BLACKWELL, **more)


BRIDGE_BLACKWELL = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md @ v0.3.0 "
                    "(26.02 NeMo container), DGX-GB300, DGX-GB200, DGX-B300 and DGX-B200 "
                    "rows")
# [embedding + 4 blocks], 14 x [4 blocks], [1 block, MTP, loss] (deepseek_v3.py layout_map
# for (4, 4) and (16, 1))
DEEPSEEK_LAYOUT = (5,) + (4,) * 14 + (3,)
# its recipe's precision-aware optimizer (recipes/deepseek/deepseek_v3.py): FP32 main
# parameters, BF16 main gradients (as every recipe here keeps them) and Adam moments
_DS = {"dispatcher": Dispatcher.DEEPEP, "recompute_modules": ("mla_up_proj",),
       "moment_bytes": 2.0, "split": DEEPSEEK_LAYOUT}
_OSS = {"recompute_modules": ("layernorm", "moe_act")}
BLACKWELL_RUNS: tuple[Run, ...] = (
    _blackwell("deepseek-v3", "gb200", "mxfp8", 256, 61, 4, 64, 4, 1, 4096, 3955, **_DS),
    _blackwell("gpt-oss-120b", "gb200", "bf16", 64, 36, 1, 64, 1, 4, 1280, 15784, **_OSS),
    _blackwell("qwen3-30b-a3b", "gb200", "mxfp8", 8, 48, 1, 8, 1, 4, 512, 26084,
               dispatcher=Dispatcher.DEEPEP),
    _blackwell("qwen3-235b-a22b", "gb200", "mxfp8", 256, 94, 8, 32, 1, 1, 8192, 5448,
               dispatcher=Dispatcher.DEEPEP, account_ends=True),
    _blackwell("deepseek-v3", "b200", "mxfp8", 256, 61, 16, 8, 1, 1, 4096, 2689, **_DS),
    _blackwell("gpt-oss-120b", "b200", "bf16", 64, 36, 1, 64, 1, 4, 1280, 8047, **_OSS),
    _blackwell("qwen3-30b-a3b", "b200", "mxfp8", 8, 48, 1, 8, 1, 1, 512, 9691),
    _blackwell("qwen3-235b-a22b", "b200", "mxfp8", 256, 94, 8, 8, 1, 1, 8192, 3805,
               account_ends=True),
    # Blackwell Ultra (the V2 GB300 and B300 presets of the same files)
    _blackwell("deepseek-v3", "gb300", "mxfp8", 256, 61, 2, 32, 8, 2, 4096, 4612, **_DS),
    _blackwell("gpt-oss-120b", "gb300", "bf16", 64, 36, 1, 64, 1, 4, 1280, 19412),
    _blackwell("qwen3-30b-a3b", "gb300", "mxfp8", 8, 48, 1, 8, 1, 8, 512, 30376,
               dispatcher=Dispatcher.DEEPEP),
    _blackwell("qwen3-235b-a22b", "gb300", "mxfp8", 256, 94, 4, 32, 1, 2, 8192, 6583,
               dispatcher=Dispatcher.DEEPEP, account_ends=True),
    _blackwell("deepseek-v3", "b300", "mxfp8", 256, 61, 16, 8, 1, 1, 4096, 2983, **_DS),
    _blackwell("gpt-oss-120b", "b300", "bf16", 64, 36, 1, 64, 1, 4, 1280, 8359),
    _blackwell("qwen3-30b-a3b", "b300", "mxfp8", 8, 48, 1, 8, 1, 8, 512, 29521,
               dispatcher=Dispatcher.DEEPEP),
    _blackwell("qwen3-235b-a22b", "b300", "mxfp8", 256, 94, 8, 8, 4, 1, 8192, 2691,
               account_ends=True, a2a_overlap=True),
)


BRIDGE_2608 = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md @ v0.6.0 "
               "(26.08 NeMo container), DGX-GB300 and DGX-GB200 rows")
# The 26.08 recipes (src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py @ v0.6.0, the
# *_fp8mx_config functions the table's rows match) all run MXFP8 with full-iteration CUDA
# graphs, HybridEP, the MoE all-to-all overlapped (overlap_moe_expert_parallel_comm),
# nothing recomputed but DeepSeek-V3's mla_up_proj on GB200, FP32 Adam moments (the
# precision-aware optimizer is not called) and BF16 gradients (_benchmark_common).
RECIPES_2608 = ("NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/perf_recipes/"
                "{deepseek,gpt_oss,qwen}/{gb300,gb200}/*.py @ v0.6.0 (the *_fp8mx_config "
                "functions)")
_NEW = {"dispatcher": Dispatcher.DEEPEP, "a2a_overlap": True, "source": BRIDGE_2608}
_DS_NEW = {**_NEW, "split": DEEPSEEK_LAYOUT}
RUNS_2608: tuple[Run, ...] = (
    _bridge("deepseek-v3", "mxfp8", 256, 61, 1, 2, 32, 8, 4096, 6288, gpu="gb300", **_DS_NEW),
    _bridge("deepseek-v3", "mxfp8", 256, 61, 1, 4, 64, 4, 4096, 4912, gpu="gb200",
            recompute_modules=("mla_up_proj",), **_DS_NEW),
    _bridge("gpt-oss-120b", "mxfp8", 64, 36, 1, 1, 16, 1, 1280, 33024, gpu="gb300", mbs=4,
            **_NEW),
    _bridge("gpt-oss-120b", "mxfp8", 64, 36, 1, 1, 64, 1, 1280, 28672, gpu="gb200", mbs=4,
            **_NEW),
    _bridge("qwen3-30b-a3b", "mxfp8", 8, 48, 1, 1, 8, 1, 512, 44544, gpu="gb300", mbs=8,
            **_NEW),
    _bridge("qwen3-30b-a3b", "mxfp8", 8, 48, 1, 1, 8, 1, 512, 39936, gpu="gb200", mbs=4,
            **_NEW),
    # 94 blocks over PP x VP chunks: only with the embedding and loss counted (96 = 48 x 2,
    # 24 x 4), as its canonical recipe does
    _bridge("qwen3-235b-a22b", "mxfp8", 256, 94, 1, 4, 32, 12, 8192, 8816, gpu="gb300", mbs=2,
            account_ends=True, **_NEW),
    _bridge("qwen3-235b-a22b", "mxfp8", 256, 94, 1, 8, 32, 3, 8192, 7280, gpu="gb200",
            account_ends=True, **_NEW),
)


def _fp8_cs(model: str, ub: tuple[tuple[str, str], ...], ub_name: str) -> Recipe:
    return Recipe(model, sequence_parallel=True, tp_comm_overlap=True, grad_bytes=2,
                  fp8_params=True, cross_entropy="fused", amax_reduction=False, ub=ub,
                  source=f"{RECIPES}: fp8_cs, grad_reduce_in_fp32 False",
                  ub_source=f"Megatron-Bridge comm_overlap.py {ub_name}")


# (qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad) bulk SMs; proj/fc2 fprop ring exchange
# on 1 SM with the SM margin; the other four plain ring exchanges
LLAMA3_70B_FP8 = _fp8_cs("llama3-70b", _ub(4, 24, 2, 4, "ring:1:margin", "ring:1:margin"),
                         "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192")
LLAMA31_405B_FP8 = _fp8_cs("llama3.1-405b",
                           _ub(2, 24, 2, 2, "ring:1:margin", "ring:1:margin"),
                           "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192")

# the B200 entries Megatron-Bridge's GB200 functions name (comm_overlap.py @ v0.3.0)
UB_FP8_B200_H8192_TP2 = _ub(4, 24, 2, 4, "ring:1:margin", "ring:1:margin")
UB_FP8_B200_H16384_TP4 = _ub(8, 32, 2, 8, "ring:1:margin", "ring:1:margin")


def _mxfp8(recipe: Recipe) -> Recipe:
    """The same recipe under ``bf16_with_mxfp8_mixed``: block scales, nothing reduced,
    parameters gathered in FP8, as current scaling's are."""
    return dataclasses.replace(
        recipe, source=f"{RECIPES}: bf16_with_mxfp8_mixed, grad_reduce_in_fp32 False")


LLAMA3_70B_MXFP8_GB200 = _mxfp8(_fp8_cs("llama3-70b", UB_FP8_B200_H8192_TP2,
                                        "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192"))
LLAMA31_405B_FP8_GB200 = _fp8_cs("llama3.1-405b", UB_FP8_B200_H16384_TP4,
                                 "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192")
LLAMA31_405B_MXFP8_GB200 = _mxfp8(LLAMA31_405B_FP8_GB200)


def _nvfp4(model: str) -> Recipe:
    """``bf16_with_nvfp4_mixed`` (src/megatron/bridge/training/mixed_precision.py @ v0.3.0:
    fp4 e2m1, fp4_recipe nvfp4, fp8_param_gather False), with Transformer Engine's TP
    overlap off, as the GB200 and GB300 functions set it for nvfp4
    (scripts/performance/configs/llama/llama3{,1}_llm_pretrain.py: ``tp_comm_overlap =
    False if precision == "nvfp4"``)."""
    return Recipe(model, sequence_parallel=True, tp_comm_overlap=False, grad_bytes=2,
                  fp8_params=False, cross_entropy="fused", amax_reduction=False,
                  source="NVIDIA-NeMo/Megatron-Bridge scripts/performance @ v0.3.0: "
                  "bf16_with_nvfp4_mixed, tp_comm_overlap False, grad_reduce_in_fp32 False")


LLAMA3_70B_NVFP4 = _nvfp4("llama3-70b")
LLAMA31_405B_NVFP4 = _nvfp4("llama3.1-405b")

# table, recipe, GPU, precision, GPUs, GBS, MBS, TP, PP, CP, VP, tokens/s/GPU as printed
# (the Blackwell rows: micro-batch 1)
DENSE_RUNS: tuple[DenseRun, ...] = (
    DenseRun("bridge26.02 llama3-70b fp8", LLAMA3_70B_FP8, "h100-sxm", "fp8", 64, 256, 1,
             4, 8, 1, 5, 1621, BRIDGE, PRINTED),
    DenseRun("bridge26.02 llama3.1-405b fp8", LLAMA31_405B_FP8, "h100-sxm", "fp8", 1024,
             1536, 1, 8, 8, 2, 8, 311, BRIDGE, PRINTED),
    *(DenseRun(f"bridge26.02 {model} {precision} {gpu}", recipe, gpu, precision, gpus, gbs,
               1, tp, pp, cp, vp, tokens, BRIDGE_BLACKWELL, PRINTED)
      for model, recipe, gpu, precision, gpus, gbs, tp, pp, cp, vp, tokens in (
          ("llama3-70b", LLAMA3_70B_MXFP8_GB200, "gb200", "mxfp8", 64, 256, 2, 4, 1, 5, 3613),
          ("llama3.1-405b", LLAMA31_405B_FP8_GB200, "gb200", "fp8", 256, 1536, 4, 16, 1, 4,
           793),
          ("llama3.1-405b", LLAMA31_405B_MXFP8_GB200, "gb200", "mxfp8", 256, 1536, 4, 16, 1,
           8, 786),
          # the GB300 functions name the GB200 ones' userbuffers entries (the 70B row runs
          # TP 1: nothing to overlap)
          ("llama3-70b", LLAMA3_70B_MXFP8_GB200, "gb300", "mxfp8", 64, 256, 1, 4, 1, 5, 4596),
          ("llama3.1-405b", LLAMA31_405B_FP8_GB200, "gb300", "fp8", 256, 1536, 4, 8, 1, 4,
           988),
          ("llama3.1-405b", LLAMA31_405B_MXFP8_GB200, "gb300", "mxfp8", 256, 1536, 2, 8, 2,
           4, 931),
          # NVFP4 (the V2 variants of llama3{,1}_workload_base_configs.py: the MXFP8 rows'
          # layouts, the GB300 405B row at the FP8 row's TP4 PP8 VP4)
          ("llama3-70b", LLAMA3_70B_NVFP4, "gb200", "nvfp4", 64, 256, 2, 4, 1, 5, 4458),
          ("llama3.1-405b", LLAMA31_405B_NVFP4, "gb200", "nvfp4", 256, 1536, 4, 16, 1, 8,
           1076),
          ("llama3-70b", LLAMA3_70B_NVFP4, "gb300", "nvfp4", 64, 256, 1, 4, 1, 5, 6798),
          ("llama3.1-405b", LLAMA31_405B_NVFP4, "gb300", "nvfp4", 256, 1536, 4, 8, 1, 4,
           1333))),
)


def _row_name(model: str, precision: str, gpu: str, source: str = BRIDGE) -> str:
    """A row's name: the model and precision, the system where it is not DGX-H100, and
    the container."""
    system = "" if gpu == "h100-sxm" else f" {gpu.upper()}"
    container = "26.08" if source == BRIDGE_2608 else "26.02"
    return f"{model} {precision}{system} (Megatron-Bridge {container})"


def dense_rows() -> list[dict[str, Any]]:
    out = []
    for run in DENSE_RUNS:
        r = published_modern.predict(run)
        out.append({
            "name": _row_name(r["model"], run.precision, run.gpu),
            "source": run.source, "recipe": run.recipe.source, "gpu": run.gpu,
            "gpus": run.gpus, "framework": "Megatron-Bridge (megatron-core)",
            "precision": run.precision, "tp": run.tp, "pp": run.pp, "cp": run.cp,
            "vp": run.vp, "micro_batch": run.micro_batch, "global_batch": run.global_batch,
            "seq_len": r["seq_len"],
            "plan": {"peak_memory_gib": r["peak_memory_gib"],
                     "step_time_s": r["predicted_step_s"], "bubble_rate": r["bubble_rate"]},
            "published": run.published_tokens_per_gpu,
            "predicted": r["predicted_tokens_per_gpu"],
            "unit": "tokens/s per GPU", "ratio": r["ratio"],
        })
    return out


def rows() -> list[dict[str, Any]]:
    """One holdout row a run, in published_holdout's columns: the dense rows, then MoE."""
    out = dense_rows()
    for run in RUNS + BLACKWELL_RUNS + RUNS_2608:
        r = predict(run)
        out.append({
            "name": _row_name(run.model, run.precision, run.gpu, run.source),
            "source": run.source, "recipe": RECIPES_2608 if run.source == BRIDGE_2608
            else RECIPES, "gpu": run.gpu, "gpus": run.gpus,
            "framework": "Megatron-Bridge (megatron-core)", "precision": run.precision,
            "tp": run.tp, "pp": run.pp, "vp": run.vp, "ep": run.ep,
            "micro_batch": run.mbs, "global_batch": run.gbs, "seq_len": run.seq_len,
            "experts": r.get("experts"), "dispatcher": run.dispatcher.value,
            "a2a_overlap": run.a2a_overlap,
            "recompute_modules": list(run.recompute_modules),
            "plan": {"peak_memory_gib": r.get("peak_memory_gib"),
                     "step_time_s": r.get("step_time_s"), "bubble_rate": r.get("bubble_rate")},
            "published": run.tokens_per_s_per_gpu,
            "published_ms_per_block": r["published_ms_per_block"],
            "predicted": r["predicted_tokens_per_s_per_gpu"],
            "unit": "tokens/s per GPU", "ratio": r["ratio"],
        })
    return out
