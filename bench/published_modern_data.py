"""Today's published training runs, as plain data (bench/published_modern.py predicts them).

Pure data: stdlib only. Every row names its table and source; every recipe
setting names the file it was read from. Figures marked [V] are printed in
the source, [D] derived by the stated arithmetic.

Sources
-------
DGXC: NVIDIA/dgxc-benchmarking, tag v25.02 (commit 8f5cbb3799ea8cc031ed2c2cee1cbdbc15b240ad),
  container nvcr.io/nvidia/nemo:24.12. Tables in llama3.1/README_{8b,70b,405b}.md,
  nemo_megatron/README_175b.md, nemotron/README_{15b,340b}.md: step time, cluster
  tokens/s and MFU [V]; tokens/s per GPU = cluster tokens/s / GPUs [D]. Recipes:
  llama3.1/llama3.1_{8b,70b,405b}.yaml + llama3.1/configure.sh,
  nemo_megatron/gpt3_175b_hydra.yaml + nemo_megatron/configure.sh,
  nemotron/nemotron4-{15b,340b}-synth.yaml + nemotron/configure.sh.
NEMO2407: NVIDIA/NeMo docs/source/performance/performance_summary.md at commit
  070a0bb168d405d653b9734c0017cf5078e77c0d ("24.07" table, DGX-H100, FP8) [V]; the
  recipes of that release: NVIDIA/NeMo-Framework-Launcher
  launcher_scripts/conf/training/{gpt3,llama,nemotron}/*.yaml at commit
  48af207b219a9be6e723bfde05bb63a80b1e21a7 (Aug 2024).
NEMO2502: docs.nvidia.com nemo-framework/user-guide/latest/performance/
  performance_summary.html, DGX-B200 FP8 table (NeMo 25.02) [V]; recipes: NVIDIA/NeMo
  v2.2.0 (commit 7192a2c944c48ab253f3f711ee52fe2dc986a3bb)
  scripts/llm/performance/pretrain_*.py and utils.py.

What the recipes state, as pptune models it (per family below)
---------------------------------------------------------------
- distributed optimizer (NeMo ``distributed_fused_adam`` / ``mcore_distributed_optim``,
  NeMo 2.0's default): ZeRO-1 over dp x cp, gradients reduced in buckets during the
  backward (``overlap_grad_sync``) and parameters gathered behind the next forward
  (``overlap_param_sync``);
- ``grad_sync_dtype: bf16`` (dgxc Llama, GPT-3, Nemotron-340B; NeMo 2.0 FP8 sets
  ``grad_reduce_in_fp32 = False``): 2-byte gradients on the wire;
- ``NCCL_NVLS_ENABLE=0`` in every dgxc configure.sh and in NeMo 2.2 utils.py: ring
  all-reduce inside a node;
- FP8: ``fp8_hybrid`` (E4M3 forward, E5M2 gradients) with ``fp8_params`` true (dgxc
  configure.sh ``+model.fp8_params=$FP8_ENABLED``, NeMo 2.2 ``bf16_with_fp8_mixed``):
  FP8 weights, gathered in FP8;
- sequence parallelism and TP communication overlap (``ub_tp_comm_overlap``) as each
  recipe sets them; no activation recomputation except Nemotron-340B's selective
  (core attention), which flash attention makes free;
- vocabulary padded to a multiple of 128 x tp (``make_vocab_size_divisible_by: 128``,
  Megatron's ``_vocab_size_with_padding``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

DGXC = ("NVIDIA/dgxc-benchmarking v25.02 (8f5cbb3799ea8cc031ed2c2cee1cbdbc15b240ad)")
NEMO2407 = ("NVIDIA/NeMo docs/source/performance/performance_summary.md "
            "(070a0bb168d405d653b9734c0017cf5078e77c0d), NeMo 24.07, DGX-H100, FP8")
NEMO2502 = ("docs.nvidia.com nemo-framework performance_summary (NeMo 25.02), DGX-B200, FP8")
LAUNCHER = ("NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training "
            "(48af207b219a9be6e723bfde05bb63a80b1e21a7)")
NEMO22 = "NVIDIA/NeMo v2.2.0 scripts/llm/performance (7192a2c944c48ab253f3f711ee52fe2dc986a3bb)"
# A NeMo 1.x yaml (MegatronGPTModel, NVIDIA/NeMo v2.0.0 and v2.1.0: the 24.07 and 24.12
# containers) without cross_entropy_loss_fusion: megatron_base_model.py
# build_model_parallel_config takes each ModelParallelConfig field from the yaml, else
# megatron-core's default, cross_entropy_loss_fusion False (megatron-core 0.8 and 0.10,
# model_parallel_config.py): the unfused loss
NEMO1_LOSS = ("cross_entropy_loss_fusion unset: megatron-core's default False "
              "(NeMo v2.1.0 megatron_base_model.py build_model_parallel_config)")


@dataclass(frozen=True)
class Recipe:
    """How a framework recipe runs a model (each field from the file named in ``source``)."""

    model: str  # pptune preset
    sequence_parallel: bool
    tp_comm_overlap: bool
    grad_bytes: int  # on the wire: 2 (bf16 grad sync) or 4
    fp8_params: bool = True  # FP8 runs only
    moment_bytes: float = 4.0  # Adam moments (NeMo optim.dtype bf16: 2)
    kv_heads: int | None = None  # the recipe's query groups where they differ from the model
    seq_len: int | None = None
    source: str = ""
    # Transformer Engine's per-GEMM TP overlap (``ub_tp_comm_overlap_cfg``) as the recipe
    # sets it, one entry per GEMM name (UB_NAMES): "ring" (ring exchange), "ring+agg"
    # (aggregate), "ring:1:margin" (num_sm 1, set_sm_margin), "pipe:24:margin"
    # (pipeline, num_sm 24, set_sm_margin, 4 splits), "bulk:4" (num_sm 4); None: the
    # recipe names no configuration (Transformer Engine v1.13's defaults apply)
    ub: tuple[tuple[str, str], ...] | None = None
    ub_source: str = ""
    # the loss's kernels (pptune/costmodel/loss.py): "native" where the file sets
    # cross_entropy_loss_fusion: true or the framework defaults to it (NeMo 2.0's
    # GPTConfig); "unfused" where a NeMo 1.x yaml states nothing (NEMO1_LOSS)
    cross_entropy: str = "fused"
    # FP8 amaxes reduced over the stage each chunk pass (delayed scaling, NeMo's recipes);
    # False for current scaling, whose scales come from each tensor's own amax
    amax_reduction: bool = True


@dataclass(frozen=True)
class Run:
    """One published row: its configuration as published and its throughput."""

    table: str  # series name: runs of one table, model and precision
    recipe: Recipe
    gpu: str
    precision: str  # bf16 / fp8
    gpus: int
    global_batch: int
    micro_batch: int
    tp: int
    pp: int
    cp: int
    vp: int
    published_tokens_per_gpu: float  # [V] or [D] as ``derivation`` says
    source: str
    derivation: str = ""
    layers: int | None = None  # where the run truncates the model
    notes: tuple[str, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- recipes

UB_NAMES = ("qkv_fprop", "proj_fprop", "fc1_fprop", "fc2_fprop", "proj_dgrad", "fc2_dgrad",
            "qkv_dgrad", "fc1_dgrad", "qkv_wgrad", "fc1_wgrad")


def _ub(qkv_dgrad: int, qkv_wgrad: int, fc1_dgrad: int, fc1_wgrad: int, proj_fprop: str,
        fc2_fprop: str, ring: str = "ring", fc2_dgrad: str | None = None
        ) -> tuple[tuple[str, str], ...]:
    """A ub_tp_comm_overlap_cfg: bulk SM counts of the four dgrad/wgrad overlaps, the two
    forward reduce-scatters, the ring exchanges (``ring`` for all four unless fc2_dgrad
    differs)."""
    return (("qkv_fprop", ring), ("proj_fprop", proj_fprop), ("fc1_fprop", ring),
            ("fc2_fprop", fc2_fprop), ("proj_dgrad", ring), ("fc2_dgrad", fc2_dgrad or ring),
            ("qkv_dgrad", f"bulk:{qkv_dgrad}"), ("fc1_dgrad", f"bulk:{fc1_dgrad}"),
            ("qkv_wgrad", f"bulk:{qkv_wgrad}"), ("fc1_wgrad", f"bulk:{fc1_wgrad}"))


# dgxc v25.02 recipe files, model.ub_tp_comm_overlap_cfg (every set_sm_margin 0 unless named)
UB_GPT3_175B = _ub(4, 8, 2, 4, "pipe:24:margin", "pipe:20:margin", fc2_dgrad="ring+agg")
UB_LLAMA31_70B = _ub(4, 24, 2, 4, "pipe:24:margin", "pipe:16:margin")
UB_LLAMA31_405B = _ub(2, 24, 2, 2, "pipe:24:margin", "pipe:8:margin", ring="ring+agg")
# NeMo-Framework-Launcher (48af207b) launcher_scripts/conf/training/tp_overlap/*.yaml
UB_H6144_TP2_MBS2_S2048 = _ub(8, 16, 4, 16, "pipe:16:margin", "pipe:24:margin")
UB_H8192_TP4_MBS1_S4096 = _ub(8, 16, 2, 4, "pipe:24:margin", "pipe:16:margin",
                              fc2_dgrad="ring+agg")
UB_H8192_TP4_MBS1_S8192 = _ub(4, 24, 2, 4, "pipe:24:margin", "pipe:16:margin")
# NeMo v2.2.0 nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py (b200 entries)
UB_FP8_B200_H12288_TP4 = _ub(4, 16, 2, 8, "ring:1:margin", "ring:1:margin")
UB_FP8_B200_H8192_TP2 = _ub(4, 24, 2, 4, "ring:1:margin", "ring:1:margin")
UB_FP8_B200_H16384_TP4_CP2 = _ub(8, 32, 2, 8, "ring:1:margin", "ring:1:margin", ring="ring+agg")
UB_BF16_B200_H18432_TP8 = _ub(8, 32, 2, 8, "ring:1:margin", "pipe:24:margin")

LLAMA31_8B = Recipe("llama3-8b", sequence_parallel=False, tp_comm_overlap=False, grad_bytes=2,
                    cross_entropy="native",
                    source=f"{DGXC} llama3.1/llama3.1_8b.yaml: sequence_parallel false, "
                    "ub_tp_comm_overlap false, optim distributed_fused_adam grad_sync_dtype bf16, "
                    "cross_entropy_loss_fusion true")
LLAMA31_70B = Recipe("llama3-70b", sequence_parallel=True, tp_comm_overlap=True, grad_bytes=2,
                     cross_entropy="native",
                     source=f"{DGXC} llama3.1/llama3.1_70b.yaml: sequence_parallel true, "
                     "ub_tp_comm_overlap true, grad_sync_dtype bf16",
                     ub=UB_LLAMA31_70B, ub_source=f"{DGXC} llama3.1/llama3.1_70b.yaml")
LLAMA31_405B = Recipe("llama3.1-405b", sequence_parallel=True, tp_comm_overlap=True,
                      grad_bytes=2, kv_heads=16,
                      cross_entropy="native",
                      source=f"{DGXC} llama3.1/llama3.1_405b.yaml: sequence_parallel true, "
                      "ub_tp_comm_overlap true, num_query_groups 16, grad_sync_dtype bf16",
                      ub=UB_LLAMA31_405B, ub_source=f"{DGXC} llama3.1/llama3.1_405b.yaml")
GPT3_175B = Recipe("gpt3-175b", sequence_parallel=True, tp_comm_overlap=True, grad_bytes=2,
                   source=f"{DGXC} nemo_megatron/gpt3_175b_hydra.yaml: sequence_parallel true, "
                   f"ub_tp_comm_overlap true, dropout 0.1, grad_sync_dtype bf16, {NEMO1_LOSS}",
                   ub=UB_GPT3_175B, ub_source=f"{DGXC} nemo_megatron/gpt3_175b_hydra.yaml",
                   cross_entropy="unfused")
NEMOTRON4_15B = Recipe("nemotron4-15b", sequence_parallel=True, tp_comm_overlap=True,
                       grad_bytes=4,
                       cross_entropy="native",
                       source=f"{DGXC} nemotron/configure.sh (model.sequence_parallel=True, "
                       "model.ub_tp_comm_overlap=True) and nemotron4-15b-synth.yaml "
                       "(mcore_distributed_optim, FP32 gradient reduction)")
NEMOTRON4_340B = Recipe("nemotron4-340b", sequence_parallel=True, tp_comm_overlap=True,
                        grad_bytes=2, moment_bytes=2.0,
                        cross_entropy="native",
                        source=f"{DGXC} nemotron/configure.sh and nemotron4-340b-synth.yaml "
                        "(distributed_fused_adam, grad_sync_dtype bf16, optim dtype bf16)")

# NeMo 24.07 (launcher confs): sequence_parallel / ub_tp_comm_overlap as each file sets them
def _launcher(model: str, name: str, sp: bool, overlap: bool, kv: int | None = None,
              grad_bytes: int = 4, ub: tuple[tuple[str, str], ...] | None = None,
              ub_file: str = "", loss_fusion: bool = False) -> Recipe:
    """``loss_fusion``: the file sets cross_entropy_loss_fusion true (else NEMO1_LOSS)."""
    return Recipe(model, sequence_parallel=sp, tp_comm_overlap=overlap, grad_bytes=grad_bytes,
                  fp8_params=False, kv_heads=kv, ub=ub,
                  ub_source=f"{LAUNCHER} tp_overlap/{ub_file}.yaml" if ub_file else "",
                  cross_entropy="native" if loss_fusion else "unfused",
                  source=f"{LAUNCHER} {name}: sequence_parallel {str(sp).lower()}, "
                  f"ub_tp_comm_overlap {str(overlap).lower()}, distributed_fused_adam"
                  + (", grad_sync_dtype bf16" if grad_bytes == 2 else "")
                  + "; fp8_params not set (BF16 weights, FP8 copies cached); "
                  + ("cross_entropy_loss_fusion true" if loss_fusion else NEMO1_LOSS))


L_GPT3_5B = _launcher("gpt3-5b", "gpt3/5b.yaml", False, False)
L_GPT3_20B = _launcher("gpt3-20b", "gpt3/20b.yaml", True, True, ub=UB_H6144_TP2_MBS2_S2048,
                       ub_file="ub_cfg_h100_h6144_tp2_mbs2_seqlen2048")
L_GPT3_175B = _launcher("gpt3-175b", "gpt3/175b.yaml", True, False)
L_LLAMA2_7B = _launcher("llama2-7b", "llama/llama2_7b.yaml", False, False, loss_fusion=True)
L_LLAMA2_13B = _launcher("llama2-13b", "llama/llama2_13b.yaml", False, False,
                         loss_fusion=True)
L_LLAMA2_70B = _launcher("llama2-70b", "llama/llama2_70b.yaml", True, True,
                         ub=UB_H8192_TP4_MBS1_S4096, ub_file="ub_cfg_h100_h8192_tp4_mbs1_seqlen4096",
                         loss_fusion=True)
L_NEMOTRON_8B = _launcher("nemotron3-8b", "nemotron/nemotron_8b.yaml", True, True,
                          loss_fusion=True)
L_NEMOTRON_22B = _launcher("nemotron3-22b", "nemotron/nemotron_22b.yaml", True, True,
                           loss_fusion=True)
L_NEMOTRON_340B = _launcher("nemotron4-340b", "nemotron/nemotron_340b.yaml", True, False,
                            grad_bytes=2)
L_LLAMA3_8B = _launcher("llama3-8b", "llama/llama3_8b.yaml", False, False, loss_fusion=True)
L_LLAMA3_70B = _launcher("llama3-70b", "llama/llama3_70b.yaml", True, True,
                         ub=UB_H8192_TP4_MBS1_S8192, ub_file="ub_cfg_h100_h8192_tp4_mbs1_seqlen8192",
                         loss_fusion=True)


def _nemo2(model: str, sp: bool, kv: int | None = None, ub: tuple[tuple[str, str], ...] | None = None,
           ub_name: str = "") -> Recipe:
    """NeMo 2.2 performance recipes: performance_mode (TP communication overlap where
    tp > 1), FP8 with fp8_params and BF16 gradients; ``ub``: the userbuffers
    configuration scripts/llm/performance/pretrain_<model>.py picks for b200."""
    return Recipe(model, sequence_parallel=sp, tp_comm_overlap=sp, grad_bytes=2, kv_heads=kv,
                  ub=ub, ub_source=f"{NEMO22} tp_overlap_configs/userbuffers.py {ub_name}"
                  if ub_name else "", cross_entropy="native",
                  source=f"{NEMO22}: pretrain_recipe(performance_mode=True), "
                  "bf16_with_fp8_mixed (fp8_params True), grad_reduce_in_fp32 False; "
                  "GPTConfig's cross_entropy_loss_fusion True (NVIDIA/NeMo "
                  "nemo/collections/llm/recipes/CONFIGURATION-HIERARCHY.md, the NeMo 2.0 "
                  "defaults)")


# --------------------------------------------------------------------------- runs

def _dgxc(table: str, recipe: Recipe, precision: str, rows: list[tuple[int, int, int]],
          tp: int, pp: int, cp: int, vp: int, mbs: int, readme: str,
          layers: dict[int, tuple[int, int, int]] | None = None) -> list[Run]:
    """rows: (GPUs, global batch, cluster tokens/s); layers: GPUs -> (layers, pp, vp)."""
    out = []
    for gpus, gbs, cluster in rows:
        lay, p, v = (layers or {}).get(gpus, (None, pp, vp))
        out.append(Run(table, recipe, "h100-sxm", precision, gpus, gbs, mbs, tp, p, cp, v,
                       cluster / gpus, f"{DGXC} {readme}",
                       "cluster tokens/s [V] / GPUs", layers=lay))
    return out


RUNS: list[Run] = []

RUNS += _dgxc("dgxc llama3.1-8b bf16", LLAMA31_8B, "bf16",
              [(8, 128, 82028), (16, 256, 161443), (32, 512, 322638), (64, 1024, 645277),
               (128, 2048, 1275155)], 1, 1, 2, 1, 1, "llama3.1/README_8b.md")
RUNS += _dgxc("dgxc llama3.1-8b fp8", LLAMA31_8B, "fp8",
              [(8, 128, 111054), (16, 256, 221358), (32, 512, 437088), (64, 1024, 870639),
               (128, 2048, 1725163)], 1, 1, 2, 1, 1, "llama3.1/README_8b.md")
RUNS += _dgxc("dgxc llama3.1-70b bf16", LLAMA31_70B, "bf16",
              [(64, 128, 71756), (128, 256, 142663), (256, 512, 284881), (512, 1024, 566797),
               (1024, 2048, 1129246), (2048, 4096, 2260623)], 4, 4, 2, 5, 1,
              "llama3.1/README_70b.md")
RUNS += _dgxc("dgxc llama3.1-70b fp8", LLAMA31_70B, "fp8",
              [(64, 128, 100275), (128, 256, 199292), (256, 512, 390167), (512, 1024, 779393),
               (1024, 2048, 1549142), (2048, 4096, 3053178)], 4, 4, 2, 5, 1,
              "llama3.1/README_70b.md")
# 405B: configure.sh truncates the model below 576 GPUs (NUM_LAYERS, PP, VP per GPU count)
_405B_LAYERS = {32: (7, 1, 1), 96: (21, 3, 7), 192: (42, 3, 7)}
RUNS += _dgxc("dgxc llama3.1-405b bf16", LLAMA31_405B, "bf16",
              [(32, 126, 114637), (96, 126, 116342), (192, 252, 119328), (576, 252, 117964),
               (1152, 504, 234589), (2304, 1008, 466527)], 8, 9, 2, 7, 1,
              "llama3.1/README_405b.md", _405B_LAYERS)
RUNS += _dgxc("dgxc llama3.1-405b fp8", LLAMA31_405B, "fp8",
              [(32, 126, 179511), (96, 126, 183337), (192, 252, 191146), (576, 252, 187671),
               (1152, 504, 371961), (2304, 1008, 737280)], 8, 9, 2, 7, 1,
              "llama3.1/README_405b.md", _405B_LAYERS)
# GPT-3 175B: the README's table header says VP=12; gpt3_175b_hydra.yaml (what
# configure.sh launches) sets virtual_pipeline_model_parallel_size 6: the recipe is used.
RUNS += _dgxc("dgxc gpt3-175b bf16", GPT3_175B, "bf16",
              [(128, 256, 63099), (256, 512, 124712), (512, 1024, 249068), (1024, 2048, 496191),
               (2048, 4096, 988057)], 4, 8, 1, 6, 1, "nemo_megatron/README_175b.md")
RUNS += _dgxc("dgxc gpt3-175b fp8", GPT3_175B, "fp8",
              [(128, 256, 93190), (256, 512, 183157), (512, 1024, 363206), (1024, 2048, 720671),
               (2048, 4096, 1407485)], 4, 8, 1, 6, 1, "nemo_megatron/README_175b.md")
RUNS += _dgxc("dgxc nemotron4-15b bf16", NEMOTRON4_15B, "bf16",
              [(16, 64, 93223), (128, 512, 733526), (2048, 8192, 11622595)], 4, 1, 1, 1, 4,
              "nemotron/README_15b.md")
RUNS += _dgxc("dgxc nemotron4-15b fp8", NEMOTRON4_15B, "fp8",
              [(16, 64, 128565), (128, 512, 1018529), (2048, 8192, 15827562)], 4, 1, 1, 1, 4,
              "nemotron/README_15b.md")
# Nemotron-4 340B: nemotron/configure.sh sets CP=2 for BF16 (CP=1 for FP8); the
# README's table header (TP8 PP8 GA16 VP12) names no CP: the script is used.
RUNS += _dgxc("dgxc nemotron4-340b bf16", NEMOTRON4_340B, "bf16",
              [(128, 32, 28432), (256, 64, 56134), (512, 128, 111551), (1024, 256, 221686),
               (2048, 512, 433296)], 8, 8, 2, 12, 1, "nemotron/README_340b.md")
RUNS += _dgxc("dgxc nemotron4-340b fp8", NEMOTRON4_340B, "fp8",
              [(128, 32, 41478), (256, 64, 81665), (512, 128, 160825), (1024, 256, 313945),
               (2048, 512, 600903)], 8, 8, 1, 12, 1, "nemotron/README_340b.md")

# NeMo 24.07, DGX-H100, FP8: (recipe, GPUs, GBS, MBS, TP, PP, CP, VP, tokens/s/GPU [V])
for recipe, gpus, gbs, mbs, tp, pp, cp, vp, tok in [
    (L_GPT3_5B, 64, 2048, 4, 1, 1, 1, 1, 22521),
    (L_GPT3_20B, 64, 256, 2, 2, 1, 1, 1, 5851),
    (L_GPT3_175B, 128, 256, 1, 4, 8, 1, 6, 726),
    (L_GPT3_175B, 512, 2048, 2, 4, 8, 1, 6, 782),
    (L_LLAMA2_7B, 8, 128, 1, 1, 1, 1, 1, 16847),
    (L_LLAMA2_13B, 16, 128, 1, 1, 4, 1, 10, 8646),
    (L_LLAMA2_70B, 64, 128, 1, 4, 4, 1, 20, 1707),
    (L_NEMOTRON_8B, 64, 256, 4, 2, 1, 1, 1, 12701),
    (L_NEMOTRON_22B, 64, 256, 2, 2, 4, 1, 10, 4256),
    (L_NEMOTRON_340B, 128, 32, 1, 8, 8, 1, 12, 322),
    (L_LLAMA3_8B, 8, 128, 1, 1, 1, 2, 1, 12036),
    (L_LLAMA3_70B, 64, 128, 1, 4, 4, 2, 5, 1533),
]:
    RUNS.append(Run(f"nemo24.07 {recipe.model} fp8", recipe, "h100-sxm", "fp8", gpus, gbs, mbs,
                    tp, pp, cp, vp, tok, NEMO2407, "tokens/s/GPU [V]"))

# NeMo 25.02, DGX-B200, FP8 (the page's dense rows; the Mixtral rows are mixtures of experts)
for recipe, gpus, gbs, mbs, tp, pp, cp, vp, tok in [
    (_nemo2("gpt3-175b", True, ub=UB_FP8_B200_H12288_TP4,
            ub_name="userbuffers_fp8_b200_h12288_tp4_mbs1_seqlen2048"), 512, 2048, 2, 4, 4, 1, 6,
     1600),
    (_nemo2("llama3-8b", False), 8, 128, 2, 1, 1, 1, 1, 26006),
    (_nemo2("llama3-70b", True, ub=UB_FP8_B200_H8192_TP2,
            ub_name="userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192"), 64, 128, 1, 2, 4, 2, 5,
     3062),
    (_nemo2("llama3.1-405b", True, kv=8, ub=UB_FP8_B200_H16384_TP4_CP2,
            ub_name="userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192"), 128, 64, 1, 4, 8, 2,
     8, 625),
    (_nemo2("nemotron4-15b", False), 64, 256, 2, 1, 1, 1, 1, 14760),
    (_nemo2("nemotron4-340b", True, ub=UB_BF16_B200_H18432_TP8,
            ub_name="userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096 (the only b200 entry "
            "pretrain_nemotron4_340b.py imports)"), 128, 32, 1, 8, 4, 1, 12, 602),
]:
    RUNS.append(Run(f"nemo25.02 {recipe.model} fp8 b200", recipe, "b200", "fp8", gpus, gbs,
                    mbs, tp, pp, cp, vp, tok, NEMO2502, "tokens/s/GPU [V]"))


# --------------------------------------------------------------------------- long context

@dataclass(frozen=True)
class LongRun:
    """A long-context run that must fit in memory (and, where published, its rate)."""

    name: str
    model: str
    gpu: str
    precision: str
    seq_len: int
    gpus: int
    global_batch: int
    tp: int
    pp: int
    cp: int
    source: str
    published_tflops_per_gpu: float | None = None  # as the source counts model FLOPs
    sequence_parallel: bool = True
    # the schedule and sharding the source states (None: searched)
    schedule: str | None = None
    sharding: str | None = None
    # the attention kernel: NeMo's Transformer Engine runs cuDNN's; a source that names
    # no kernel and no Transformer Engine is priced at pptune's default (flash)
    attention: str = "cudnn"


LONG_RUNS = [
    # Dubey et al. 2024 ("The Llama 3 Herd of Models"), table 4: 16,384 H100, TP 8,
    # CP 16, PP 16, DP 8, sequence 131,072, 16M tokens a batch (128 sequences),
    # 380 TFLOP/s per GPU, BF16.
    # Sec. 3.3.2: an interleaved schedule, data parallelism as FSDP.
    LongRun("llama3.1-405b 131k (Meta)", "llama3.1-405b", "h100-sxm", "bf16", 131072, 16384,
            128, 8, 16, 16, "Dubey et al. 2024 table 4", 380.0,
            schedule="interleaved-1f1b", sharding="fsdp", attention="flash"),
    # NVIDIA/NeMo docs/source/performance/performance_long_sequence.md (commit
    # a2c4cc8ee64eb98d83684fc616dd0225c25bdfa1), LLAMA2-7B (FP8), DGX-H100, NeMo
    # 24.03.01: 1,024K tokens on 1,024 GPUs, batch 4, TP 8, PP 1, DP 4, CP 32, 536
    # TFLOP/s per GPU (NeMo's model-FLOPs formula).
    LongRun("llama2-7b 1M (NeMo)", "llama2-7b", "h100-sxm", "fp8", 1048576, 1024, 4, 8, 1, 32,
            "NVIDIA/NeMo performance_long_sequence.md (a2c4cc8e)", 536.0),
]
