"""Built-in model shapes and GPU specs (plain data, each with its source).

Names are lower-case and stable: scripts depend on them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pptune.costmodel.attention_curves import (
    B200_CUDNN_CAUSAL,
    B200_FLASH_CAUSAL,
    GB200_CUDNN_CAUSAL,
    GB200_FLASH_CAUSAL,
    GB300_CUDNN_CAUSAL,
    GB300_FLASH_CAUSAL,
    H100_CAUSAL,
    H100_CUDNN_CAUSAL,
    H100_CUDNN_FULL,
    H100_FULL,
    blackwell_attention,
)
from pptune.costmodel.collectives import Fabric
from pptune.costmodel.gpu_spec import GB, MIB, NCCL_CTAS, NIC_400G_BUSBW, GpuSpec
from pptune.costmodel.models import MODELS, ModelShape
from pptune.costmodel.presets_amd import AMD_GPUS

GIB = 1024**3

__all__ = ["GPUS", "MODELS", "GpuSpec", "ModelShape", "gpu_names", "model_names"]



# Per-op model constants, the same sources for every preset:
# - sm_count: NVIDIA A100 / H100 architecture whitepapers (108 SMs on A100,
#   132 on H100 SXM5; H200 and H800 are the same GH100 die); 148 on B200
#   (NVIDIA Blackwell architecture technical brief; torch's
#   multi_processor_count on a B200).
# - gemm_fraction / fp8_gemm_fraction: the largest BF16 / FP8 (float8_e4m3fn)
#   matmul throughput a shape sweep finds, over the dense peak: the "Maximum
#   Achievable Matmul FLOPS" tables of stas00/ml-engineering,
#   compute/accelerator/README.md (commit 744d01e1, mamf-finder.py, mean of
#   100 iterations after 50 warm-up): BF16 A100 SXM 271.2/312 = 0.869, H100 SXM
#   794.5/989 = 0.803 ("H200 is the same"), B200 1745.0/2250 = 0.776, GB200
#   1822.0/2500 = 0.729; FP8 H100 SXM 1402.6/1979 = 0.709, H200 1453.4/1979 =
#   0.734, B200 3432.5/4500 = 0.763, GB200 3615.6/5000 = 0.723. A best-shape
#   mean, not a training-shape figure (the tile and wave model of ops.py
#   prices the shape).
# - dense peaks: the same repository's "TFLOPS comparison table" (NVIDIA's
#   spec sheets, no sparsity): H100/H200/H800 989 BF16, 1979 FP8; B200 2250,
#   4500, FP4 9000; GB200 2500, 5000, FP4 10000 (per GPU).
# - hbm_fraction: A100 80GB: 1.80 of 2.04 TB/s read, "88% of peak bandwidth"
#   by Nsight Compute (NVIDIA developer forum, "Trouble to reach peak
#   bandwidth of A100"); H100/H200: STREAM triad and device copies reach
#   90-92% (public H100 HBM3 runs); 0.90 taken for both, and assumed for the
#   Blackwell parts (no published STREAM figure found).
# - attention_fraction and the causal/full curves: FlashAttention-2 forward +
#   backward, head dim 128, batch x seq = 16k tokens, on H100 SXM5
#   (Dao-AILab/flash-attention assets/flash2_h100_fwd_bwd_benchmark.png, HEAD
#   0251105a): causal 163/221/265/294/308/328 and no mask 248/294/320/326/
#   335/338 TFLOP/s at 512/1k/2k/4k/8k/16k tokens, over 989. On A100 the
#   constant is FlashAttention-2's "up to 230 TFLOPs/s, 73% of the
#   theoretical maximum" (Dao 2023, sec. 4). The Blackwell parts: their own
#   published sweeps (NVIDIA/cudnn-frontend, below); B300 takes B200's.
# - memory_bytes: the total nvidia-smi reports (its "Memory-Usage" column, MiB),
#   what the driver gives the GPU's processes before the CUDA context, NCCL and
#   the allocator take their share (the reserve, memory.py): A100-SXM4-80GB 81,920
#   MiB, H100 80GB HBM3 81,559, H200 143,771, B200 183,359, GB200 189,471 (public
#   nvidia-smi output of each; the H800, which no such output was found for, as
#   the H100 80GB it shares its HBM3 with). NVIDIA's datasheet "GB" figures are
#   rounded from these (H200's "141 GB" is 140.4 GiB, B200's "180 GB" 179.1 GiB),
#   not decimal gigabytes: read as 1e9 bytes they had lost H200, B200 and GB200
#   about 7% of their memory. B300 and GB300 keep their datasheets' 288 GB.
# - launch_s: a CUDA kernel launch costs ~3-5 us (empty-kernel launch rate
#   ~334k/s, cs.virginia.edu kernel_overhead measurements; ~4 us per op issued
#   from Python); a per-kernel gap of 4 us is taken.
# - matmul_spread: "5% and higher differences" in matmul throughput between the
#   GPUs of one 8-GPU node (stas00/ml-engineering compute/accelerator/README.md,
#   commit 744d01e1, "silicon lottery"); the same for every preset, none
#   published per SKU (variation.py).
# - fabric (collectives.py), what NCCL reaches, stas00/ml-engineering
#   network/README.md (commit 744d01e1) unless stated: 8 x H200 (NVLink 4, the
#   H100's fabric), nccl-tests 16 GiB: ring all-reduce 367.2 GB/s with NVLS off
#   (all-gather 361.4, reduce-scatter 362.9), NVLS 480.0, NVLS picked from 5
#   GPUs; nvbandwidth pairwise copy 396.4 GB/s (88% of 450). 8 x B200: ring
#   682.2, NVLS 838.0, NVLS from 6 GPUs; NVL72: 680 ring, 850 NVLS (NVIDIA GTC25
#   session S72583, quoted there). One 400 Gb/s NIC in a cross-node ring: "you
#   should see 46-48 GB/s per NIC" (NVIDIA/nccl-tests issue 290, maintainer):
#   47. DGX A100: 192 GB/s all-reduce over its eight 200 Gb/s NICs, 24 per NIC
#   (NVIDIA/nccl issue 812, maintainer), 235 GB/s inside the node (the
#   ml-engineering case study; NCCL's own tuner caps A100 at 235 GB/s,
#   src/graph/tuning.cc). A pairwise copy's share of the line rate where no
#   copy was measured (A100, B200, GB200) is H200's 0.881, an assumption.
# - collective_ctas: NCCL runs a collective as one CTA a channel; Hopper nodes run 16
#   (NVIDIA/nccl issue 892: an H800 node's NCCL_DEBUG log, "16 coll channels";
#   issue 1453: three H100 nodes, ring channels xx/16; src/transport/nvls.cc: 16 NVLS
#   CTAs on sm_90). The same 16 is assumed on A100 and Blackwell (no log found).
# an 800 Gb/s ConnectX-8 at the same 47-of-50 share of its line rate: an assumption
# (no nccl-tests figure for it was found)
_NIC_800G_BUSBW = 2 * NIC_400G_BUSBW
_P2P_SHARE = 396.4 / 450  # nvbandwidth copy over NVLink 4's line rate (8 x H200)
_HOPPER_FABRIC = Fabric(ring_busbw_bytes_per_s=367.2 * GB, p2p_bytes_per_s=396.4 * GB,
                        nic_busbw_bytes_per_s=NIC_400G_BUSBW,
                        nvls_busbw_bytes_per_s=480.0 * GB, nvls_min_ranks=5,
                        collective_ctas=NCCL_CTAS)

# NVIDIA A100 datasheet: 312 TFLOP/s dense BF16, 80 GB HBM2e at 2,039 GB/s (SXM), NVLink 3
# 600 GB/s bidirectional; DGX A100 user guide: one 200 Gb/s HDR InfiniBand NIC per GPU.
# No FP8.
_A100 = GpuSpec("a100-80gb", 312e12, 81920 * MIB, 2039 * GB, 300 * GB, 25 * GB,
                "NVIDIA A100 datasheet; DGX A100 user guide",
                sm_count=108, gemm_fraction=0.869, hbm_fraction=0.88,
                attention_fraction=0.73, launch_s=4e-6,
                fabric=Fabric(235 * GB, _P2P_SHARE * 300 * GB, 24 * GB,
                              collective_ctas=NCCL_CTAS))

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        _A100,
        # the same chip (A100 datasheet, SXM4 40GB): 40 GB HBM2 at 1,555 GB/s; its
        # matmul, attention and NCCL shares taken as the 80 GB part's (same SMs, NVLink)
        dataclasses.replace(_A100, name="a100-40gb", memory_bytes=40960 * MIB,
                            hbm_bytes_per_s=1555 * GB),
        # NVIDIA H100 datasheet (SXM5): 989 TFLOP/s dense BF16, 1979 FP8, 80 GB
        # HBM3 at 3.35 TB/s, NVLink 4 900 GB/s bidirectional; DGX H100: one
        # 400 Gb/s NDR InfiniBand NIC per GPU.
        GpuSpec("h100-sxm", 989e12, 81559 * MIB, 3350 * GB, 450 * GB, 50 * GB,
                "NVIDIA H100 datasheet (SXM5); DGX H100 user guide",
                sm_count=132, gemm_fraction=0.803, hbm_fraction=0.90,
                attention_fraction=0.34, launch_s=4e-6,
                fp8_peak_flops=1979e12, fp8_gemm_fraction=0.709, fabric=_HOPPER_FABRIC,
                causal_attention=H100_CAUSAL, full_attention=H100_FULL,
                cudnn_causal_attention=H100_CUDNN_CAUSAL, cudnn_full_attention=H100_CUDNN_FULL),
        # NVIDIA H200 datasheet (SXM): same tensor cores as H100 (989 TFLOP/s
        # dense BF16, 1979 FP8), 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s;
        # DGX H200: one 400 Gb/s NDR NIC per GPU.
        GpuSpec("h200", 989e12, 143771 * MIB, 4800 * GB, 450 * GB, 50 * GB,
                "NVIDIA H200 datasheet; DGX H200 user guide",
                sm_count=132, gemm_fraction=0.803, hbm_fraction=0.90,
                attention_fraction=0.34, launch_s=4e-6,
                fp8_peak_flops=1979e12, fp8_gemm_fraction=0.734, fabric=_HOPPER_FABRIC,
                causal_attention=H100_CAUSAL, full_attention=H100_FULL,
                cudnn_causal_attention=H100_CUDNN_CAUSAL, cudnn_full_attention=H100_CUDNN_FULL),
        # H800 (DeepSeek-V3's GPU): H100 SXM compute and memory with NVLink cut to
        # 400 GB/s bidirectional (NVIDIA H800 product brief); DeepSeek-V3 report
        # (arXiv 2412.19437, sec. 3.2.2): "NVLink offers a bandwidth of 160 GB/s,
        # roughly 3.2 times that of IB (50 GB/s)", the figure taken for every
        # NVLink transfer (no nccl-tests sweep published); one 400 Gb/s NIC per GPU.
        GpuSpec("h800", 989e12, 81559 * MIB, 3350 * GB, 200 * GB, 50 * GB,
                "NVIDIA H800 product brief; DeepSeek-V3 report sec. 3.2.2",
                sm_count=132, gemm_fraction=0.803, hbm_fraction=0.90,
                attention_fraction=0.34, launch_s=4e-6,
                fp8_peak_flops=1979e12, fp8_gemm_fraction=0.709,
                fabric=Fabric(160 * GB, 160 * GB, NIC_400G_BUSBW, collective_ctas=NCCL_CTAS),
                causal_attention=H100_CAUSAL, full_attention=H100_FULL,
                cudnn_causal_attention=H100_CUDNN_CAUSAL, cudnn_full_attention=H100_CUDNN_FULL),
        # NVIDIA DGX B200 datasheet: eight B200, 1,440 GB HBM3e (180 GB each),
        # 64 TB/s (8 TB/s each), NVLink 5 1.8 TB/s bidirectional per GPU; 2,250 /
        # 4,500 / 9,000 TFLOP/s dense BF16 / FP8 / FP4; DGX BasePOD reference
        # architecture: eight single-port ConnectX-7 400 Gb/s NICs.
        GpuSpec("b200", 2250e12, 183359 * MIB, 8000 * GB, 900 * GB, 50 * GB,
                "NVIDIA DGX B200 datasheet; DGX BasePOD reference architecture",
                sm_count=148, gemm_fraction=0.776, hbm_fraction=0.90, launch_s=4e-6,
                fp8_peak_flops=4500e12, fp4_peak_flops=9000e12, fp8_gemm_fraction=0.763,
                mxfp8=True,
                fabric=Fabric(682.2 * GB, _P2P_SHARE * 900 * GB, NIC_400G_BUSBW,
                              838.0 * GB, nvls_min_ranks=6, collective_ctas=NCCL_CTAS),
                **blackwell_attention(B200_FLASH_CAUSAL, B200_CUDNN_CAUSAL)),
        # NVIDIA GB200 NVL72: 72 Blackwell GPUs in one NVLink domain, 1.8 TB/s
        # NVLink 5 each, 13.4 TB HBM3e at 576 TB/s (186 GB, 8 TB/s a GPU:
        # MLCommons GB200-NVL72 system descriptions); 2,500 / 5,000 / 10,000
        # TFLOP/s dense BF16 / FP8 / FP4 a GPU; one ConnectX-7 400 Gb/s NIC a
        # GPU (4 per 4-GPU compute tray, MLCommons system description).
        GpuSpec("gb200", 2500e12, 189471 * MIB, 8000 * GB, 900 * GB, 50 * GB,
                "NVIDIA GB200 NVL72 specifications; MLCommons GB200-NVL72 system description",
                sm_count=148, gemm_fraction=0.729, hbm_fraction=0.90, launch_s=4e-6,
                fp8_peak_flops=5000e12, fp4_peak_flops=10000e12, fp8_gemm_fraction=0.723,
                mxfp8=True, gpus_per_node=72, gpus_per_host=4,
                fabric=Fabric(680 * GB, _P2P_SHARE * 900 * GB, NIC_400G_BUSBW,
                              850 * GB, nvls_min_ranks=5, collective_ctas=NCCL_CTAS),
                **blackwell_attention(GB200_FLASH_CAUSAL, GB200_CUDNN_CAUSAL)),
    ]
}


def host_gpus(spec: GpuSpec | None, domain: int) -> int:
    """GPUs one host (one launcher node) runs of an NVLink domain of ``domain``: the GPU's
    host where its domain spans hosts (a GB200 NVL72 compute tray: 4), else the domain."""
    host = spec.gpus_per_host if spec is not None else None
    return host if host is not None and host < domain else domain


def _blackwell_ultra(base: GpuSpec, name: str, source: str, fp4_peak_flops: float | None,
                     attention: dict[str, Any] | None) -> GpuSpec:
    """A Blackwell Ultra part from the Blackwell part of the same system: its own 288 GB
    of HBM3e and 800 Gb/s NIC, the Blackwell part's dense BF16 and FP8 peaks (the same
    on both datasheets), and its measured matmul fractions and NVLink fabric (assumed:
    no matmul sweep or nccl-tests run of Blackwell Ultra is published); its own measured
    attention curves (``blackwell_attention``) where a sweep is published, else the
    Blackwell part's, named in ``attention_rates_of``."""
    assert base.fabric is not None
    own = attention or {"attention_rates_of": base.name}
    return dataclasses.replace(
        base, name=name, source=source, memory_bytes=288 * GB, ib_bytes_per_s=100 * GB,
        fp4_peak_flops=fp4_peak_flops,
        fabric=dataclasses.replace(base.fabric, nic_busbw_bytes_per_s=_NIC_800G_BUSBW), **own)


# Blackwell Ultra (NVIDIA technical blog "Inside NVIDIA Blackwell Ultra: The Chip Powering
# the AI Factory Era", 2025-08): 288 GB HBM3e at 8 TB/s, NVLink 5 1.8 TB/s
# bidirectional, 15 PF dense NVFP4 (GB300), 160 SMs on the full die (a B300 SXM6 reports
# 148 to CUDA, B200's count). Dense BF16 / FP8: NVIDIA HGX B300 specifications, 36 / 72
# PFLOPS with sparsity for 8 GPUs (2,250 / 4,500 dense a GPU, B200's), and 108 PFLOPS
# dense FP4 (13,500 a GPU); GB300 NVL72
# specifications, 360 / 720 with sparsity for 72 (2,500 / 5,000, GB200's), its
# 72-GPU NVLink domain; DGX B300 datasheet and GB300 NVL72 specifications: one
# ConnectX-8 800 Gb/s NIC a GPU.
GPUS["b300"] = _blackwell_ultra(
    GPUS["b200"], "b300", "NVIDIA Blackwell Ultra technical blog; HGX B300 specifications; "
    "DGX B300 datasheet", 108e15 / 8, None)
GPUS["gb300"] = _blackwell_ultra(
    GPUS["gb200"], "gb300", "NVIDIA GB300 NVL72 specifications; NVIDIA Blackwell Ultra "
    "technical blog", 15000e12, blackwell_attention(GB300_FLASH_CAUSAL, GB300_CUDNN_CAUSAL))
# AMD Instinct MI300X and MI325X: presets_amd.py cites each figure (an 8-GPU xGMI mesh)
GPUS.update(AMD_GPUS)

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


def gpu_key_for(name: str) -> str | None:
    """The GPU preset of a device name as NVML, torch and training logs print it ("NVIDIA
    H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X"), else
    None."""
    upper = name.upper()
    # NVML names: "NVIDIA GB300", "NVIDIA B300 SXM6 AC", "NVIDIA B200", "NVIDIA H800";
    # the Grace parts first ("GB200" holds "B200")
    blackwell = next((k for k in ("gb300", "gb200", "b300", "b200") if k.upper() in upper),
                     None)
    if blackwell is not None:
        return blackwell
    if "H800" in upper:
        return "h800"
    if "H200" in upper:
        return "h200"
    if "H100" in upper and ("SXM" in upper or "HBM3" in upper):
        return "h100-sxm"
    if "A100" in upper and "80GB" in upper.replace(" ", ""):
        return "a100-80gb"
    if "A100" in upper and "40GB" in upper.replace(" ", ""):
        return "a100-40gb"
    # what torch and rocm-smi name them: "AMD Instinct MI300X" ("... MI300X VF" on a VM)
    return next((k for k in ("mi325x", "mi300x") if k.upper() in upper), None)


def model_names() -> list[str]:
    return list(MODELS)


def gpu_names() -> list[str]:
    return list(GPUS)
