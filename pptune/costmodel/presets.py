"""Built-in model shapes and GPU specs (plain data, each with its source).

Names are lower-case and stable: scripts depend on them.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
GB = 1e9


@dataclass(frozen=True)
class ModelShape:
    name: str
    num_blocks: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    global_batch: int  # samples (sequences) per optimizer step
    gated_mlp: bool  # SwiGLU (3 matrices) vs GeLU MLP (2 matrices)
    dropout: bool  # GPT-style dropout masks kept for backward
    source: str

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def rotary(self) -> bool:
        """Rotary position embeddings (Llama family); GPT-2/3 shapes, the ones
        with dropout, add learned positions in the embedding instead."""
        return not self.dropout


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_flops: float  # dense bf16 FLOP/s
    memory_bytes: float
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float  # per GPU, one direction
    ib_bytes_per_s: float  # per GPU, one direction (one NIC per GPU)
    source: str
    # What the per-op compute model needs (ops.py); each preset cites its own.
    sm_count: int = 108
    gemm_fraction: float = 0.80  # of peak, large bf16 GEMMs, measured
    hbm_fraction: float = 0.88  # of hbm_bytes_per_s, streaming kernels, measured
    attention_fraction: float = 0.35  # of peak, flash attention forward+backward
    launch_s: float = 4e-6  # per kernel: launch and tail


MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in [
        # The CPU demo model: the block measured in docs/measured.md
        # (d=256, 4 heads, ffn 1024, seq 128, 8k vocabulary).
        ModelShape("gpt-small", 6, 256, 4, 4, 1024, 8192, 128, 32, False, True,
                   "pptune CPU demo size (docs/measured.md)"),
        # Brown et al. 2020, "Language Models are Few-Shot Learners", table 2.1
        # (layers, d_model, batch in tokens / 2048); heads as Megatron-LM's
        # GPT-3 examples use them (d_head 128).
        ModelShape("gpt3-1.3b", 24, 2048, 16, 16, 8192, 50257, 2048, 512, False, True,
                   "Brown et al. 2020 table 2.1 (GPT-3 XL)"),
        ModelShape("gpt3-13b", 40, 5120, 40, 40, 20480, 50257, 2048, 1024, False, True,
                   "Brown et al. 2020 table 2.1 (GPT-3 13B; d_model 5120 as in Megatron-LM)"),
        ModelShape("gpt3-175b", 96, 12288, 96, 96, 49152, 50257, 2048, 1536, False, True,
                   "Brown et al. 2020 table 2.1 (GPT-3 175B)"),
        # Llama 3 model cards / Dubey et al. 2024 table 3 (layers, model dim,
        # FFN dim, heads, KV heads, vocabulary 128,256); sequence 8192; global
        # batch 512 x 8192 = 4M tokens (the paper's 405B batch, assumed here).
        ModelShape("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 512, True, False,
                   "Dubey et al. 2024 table 3 (Llama 3 8B)"),
        ModelShape("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 512, True, False,
                   "Dubey et al. 2024 table 3 (Llama 3 70B)"),
    ]
}

# Per-op model constants, the same sources for every preset:
# - sm_count: NVIDIA A100 / H100 architecture whitepapers (108 SMs on A100,
#   132 on H100 SXM5; H200 is the same GH100 die).
# - gemm_fraction: largest bf16 matmul throughput found by a shape sweep,
#   over peak: "Maximum Achievable Matmul FLOPS" table of
#   stas00/ml-engineering, compute/accelerator/README.md (mamf-finder.py):
#   A100 SXM 267.9/312 = 0.859, H100 SXM 792.1/989 = 0.801, GH200 (the H200's
#   GPU and HBM3e) 821.0/989 = 0.830.
# - hbm_fraction: A100 80GB: 1.80 of 2.04 TB/s read, "88% of peak bandwidth"
#   by Nsight Compute (NVIDIA developer forum, "Trouble to reach peak
#   bandwidth of A100"); H100/H200: STREAM triad and device copies reach
#   90-92% (public H100 HBM3 runs); 0.90 taken for both.
# - attention_fraction: FlashAttention-2 (Dao 2023, sec. 4): forward+backward
#   "up to 230 TFLOPs/s, 73% of the theoretical maximum" on A100; the same
#   kernels reach 335 TFLOP/s on H100 (its Fig. 8), 0.34 of 989 (PyTorch's
#   SDPA flash backend is FlashAttention-2).
# - launch_s: a CUDA kernel launch costs ~3-5 us (empty-kernel launch rate
#   ~334k/s, cs.virginia.edu kernel_overhead measurements; ~4 us per op issued
#   from Python); a per-kernel gap of 4 us is taken.
GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        # NVIDIA A100 datasheet: 312 TFLOP/s dense BF16, 80 GB HBM2e at
        # 2,039 GB/s (SXM), NVLink 3 600 GB/s bidirectional; DGX A100 user
        # guide: one 200 Gb/s HDR InfiniBand NIC per GPU.
        GpuSpec("a100-80gb", 312e12, 80 * GIB, 2039 * GB, 300 * GB, 25 * GB,
                "NVIDIA A100 datasheet; DGX A100 user guide",
                sm_count=108, gemm_fraction=0.859, hbm_fraction=0.88,
                attention_fraction=0.73, launch_s=4e-6),
        # NVIDIA H100 datasheet (SXM5): 989 TFLOP/s dense BF16, 80 GB HBM3 at
        # 3.35 TB/s, NVLink 4 900 GB/s bidirectional; DGX H100: one 400 Gb/s
        # NDR InfiniBand NIC per GPU.
        GpuSpec("h100-sxm", 989e12, 80 * GIB, 3350 * GB, 450 * GB, 50 * GB,
                "NVIDIA H100 datasheet (SXM5); DGX H100 user guide",
                sm_count=132, gemm_fraction=0.801, hbm_fraction=0.90,
                attention_fraction=0.34, launch_s=4e-6),
        # NVIDIA H200 datasheet (SXM): same tensor cores as H100 (989 TFLOP/s
        # dense BF16), 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s; DGX H200:
        # one 400 Gb/s NDR NIC per GPU.
        GpuSpec("h200", 989e12, 141 * GB, 4800 * GB, 450 * GB, 50 * GB,
                "NVIDIA H200 datasheet; DGX H200 user guide",
                sm_count=132, gemm_fraction=0.830, hbm_fraction=0.90,
                attention_fraction=0.34, launch_s=4e-6),
    ]
}

# Latency (alpha) of one NCCL operation: small-message times reported by
# nccl-tests are ~5-10 us for send/recv over NVLink and ~20 us across
# InfiniBand, and a few tens of us for a small all-reduce. Order-of-magnitude
# defaults; `pptune probe` measures the real ones.
P2P_LATENCY_INTRA_S = 10e-6
P2P_LATENCY_INTER_S = 20e-6
ALLREDUCE_LATENCY_INTRA_S = 20e-6
ALLREDUCE_LATENCY_INTER_S = 40e-6

# The GEMM efficiency comes from the per-op model (ops.py: tile and wave
# quantization times the GPU's measured large-GEMM fraction); --efficiency
# overrides it with one fraction of peak for every GEMM.
DEFAULT_EFFICIENCY: float | None = None

DEFAULT_MODEL = "llama3-8b"
DEFAULT_GPU = "h100-sxm"


def model_names() -> list[str]:
    return list(MODELS)


def gpu_names() -> list[str]:
    return list(GPUS)
