"""The AMD Instinct GPU presets (MI300X, MI325X), each figure with its source.

Sources, cited below by their tag:

- [ROCM] ROCm/ROCm @ e396b4898f459db094bfd60b876f419f77eb9f09,
  docs/conceptual/gpu-arch/mi300.md ("AMD Instinct MI300 Series microarchitecture").
- [XGMI] ROCm/rocm-blogs @ 0e81c2ca45881844429731ad502be4a839ca96f0,
  blogs/software-tools-optimization/mi300x-rccl-xgmi/README.md ("Understanding RCCL
  Bandwidth and xGMI Performance on AMD Instinct MI300X", 2 March 2025).
- [MLE] stas00/ml-engineering @ 744d01e18b79512572f64a6bbd8b5f4a725203a7.
- [AZ] Azure/AI-benchmarking-guide, Azure_Results/ND_MI300X_v5_results.md (as the fork
  samuel-bohman/AI-benchmarking-guide @ 3de0c294fd1059a91a2c158712c4a078619d73e8 holds it).

MI300X, per GPU:

- peak_flops / fp8_peak_flops: [ROCM] "Peak-performance capabilities of the MI300X":
  matrix BF16 (and FP16) 1307.4, FP8 2614.9 TFLOP/s dense. Its FP8 is the FNUZ formats
  (e4m3fnuz / e5m2fnuz; HIP docs "FP8 numbers": gfx942 has no OCP e4m3fn); no microscaling
  FP8 and no FP4 (``mxfp8`` False, ``fp4_peak_flops`` None).
- memory_bytes: what torch reports, total_memory 196,592 MiB (ROCm/ROCm issue 4203, torch
  2.6 on ROCm 6.2.4); the datasheet's 192 GB HBM3 ([MLE] compute/accelerator/README.md).
- sm_count: 304 compute units, 38 on each of 8 XCDs ([ROCM]; torch's
  multi_processor_count in the same issue 4203).
- hbm_bytes_per_s / hbm_fraction: 5.3 TB/s, "the theoretical aggregated peak memory
  bandwidth" ([ROCM]); STREAM triad 4.09 TB/s on ND MI300X v5 ([AZ] "HBM Bandwidth"), 0.77.
- gemm_fraction: mamf-finder's best BF16 matmul, 668.4 TFLOP/s (torch 2.5.1+rocm6.3,
  PYTORCH_TUNABLEOP_ENABLED=1; [MLE] compute/accelerator/README.md, "Maximum Achievable
  Matmul FLOPS comparison table"), over 1307.4: 0.511.
- fp8_gemm_fraction: no mamf-finder FP8 row; hipBLASLt's FP8 GEMM at 8192^3, 1159.23
  TFLOP/s ([AZ] "GEMM HipBLASLt"), over 2614.9: 0.443 (one shape, not a sweep's best).
- GEMM tiles: hipBLASLt's tile set on gfx942 is not published; the per-op model's tile and
  wave quantization (kernels.GEMM_TILES, the NVIDIA presets' tiles) is assumed.
- attention: the ROCm docs' Triton FlashAttention-2 forward sweep (attention_curves.py
  ``MI300X_FLASH_FULL``: forward taken for forward + backward, the causal curve at H100's
  mask ratio, both assumptions); no cuDNN, so ``sdpa`` and ``cudnn`` are priced as flash.
- launch_s: no ROCm kernel-launch figure is published; the NVIDIA presets' 4 us assumed.
- matmul_spread: the NVIDIA presets' 5% assumed (none published for MI300X).
- fabric: the 8 GPUs of a node are a full mesh of xGMI links, 7 a GPU, no switch ([ROCM]);
  64 GB/s a link a direction ([XGMI] "rated up to 64 GB/s for each point-to-point link"),
  448 a GPU ([MLE] network/README.md, "MI300X | 64 | 7 | 448"), the ``nvlink_bytes_per_s``
  line rate. Achieved: one link 46.552 GB/s (TransferBench all-to-all, average a link,
  [XGMI]; "315 - 336 GB/s (7x 45-48 GB/s)"), the copy rate and the mesh's link rate; RCCL
  all-reduce on 8 GPUs 318.98 GB/s busbw at 16 GiB (RCCL 2.22.3, ROCm 6.3, [XGMI]'s
  rccl-tests log), the full node's ring figure; [MLE] network/README.md's all_reduce_bench
  at 4 GiB agrees: 2 GPUs 47.671, 8 GPUs 312.912 GB/s. A group's rate inside the node is
  its members' direct links (collectives.py, comm.mesh_ring_busbw): 2 GPUs 46.6 GB/s, 4
  139.7, 8 318.98. No NVLS. RCCL's algorithm choice is priced with NCCL's tuner latencies
  (collectives.py), assumed: its ring LL all-reduce on 8 GPUs, 6.6 + 14 x 0.6 = 15.0 us,
  sits in [XGMI]'s measured 13-17 us for 8 B to 128 KiB (16.61 us at 8 B).
- NIC: one 400 Gb/s NIC a GPU (AMD's Pensando Pollara 400 nodes, eight a node, AMD blog
  on Zyphra's ZAYA1, 2025-11-22; [MLE] network/README.md: "One MI300X setup uses 8x of
  these [400Gbps NICs]"); no consistent RCCL cross-node figure is published, so the
  NVIDIA presets' 400 Gb/s ring figure, 47 GB/s (nccl-tests issue 290), stands in.
- collective_ctas: RCCL's channel count on MI300X is not published; the NVIDIA presets'
  16 assumed (16 of 304 CUs).

MI325X: "the same compute as MI300X, but has more memory" ([MLE] compute/accelerator/
README.md, note 18): MI300X's peaks, CUs and xGMI; 256 GB HBM3e at 6.0 TB/s ([MLE]
"MI325X | 256 | HBM3e | 6.00"), the datasheet's 256 GB taken as 256e9 bytes as the B300
presets take theirs (no torch-reported figure found; MI300X's "192 GB" reads 192 GiB less
16 MiB); mamf-finder BF16 784.9 TFLOP/s ([MLE], torch 2.6.0+6.2.4, 1000 W): 0.600 of
1307.4. Assumed MI300X's: the HBM and FP8 fractions, attention, fabric and NIC.
"""

from __future__ import annotations

import dataclasses

from pptune.costmodel.attention_curves import MI300X_FLASH_CAUSAL, MI300X_FLASH_FULL
from pptune.costmodel.collectives import Fabric
from pptune.costmodel.gpu_spec import GB, MIB, NCCL_CTAS, NIC_400G_BUSBW, GpuSpec

XGMI_LINK_BYTES_PER_S = 46.552 * GB  # one xGMI link, one direction, TransferBench ([XGMI])

MI300X_FABRIC = Fabric(ring_busbw_bytes_per_s=318.98 * GB, p2p_bytes_per_s=XGMI_LINK_BYTES_PER_S,
                       nic_busbw_bytes_per_s=NIC_400G_BUSBW, collective_ctas=NCCL_CTAS,
                       mesh_link_bytes_per_s=XGMI_LINK_BYTES_PER_S)

MI300X = GpuSpec(
    "mi300x", 1307.4e12, 196592 * MIB, 5300 * GB, 448 * GB, 50 * GB,
    "AMD ROCm docs, MI300 microarchitecture; ROCm blog, RCCL and xGMI on MI300X; "
    "Azure ND MI300X v5 benchmarks",
    sm_count=304, gemm_fraction=0.511, hbm_fraction=0.77, launch_s=4e-6,
    fp8_peak_flops=2614.9e12, fp8_gemm_fraction=0.443, fabric=MI300X_FABRIC,
    causal_attention=MI300X_FLASH_CAUSAL, full_attention=MI300X_FLASH_FULL,
    attention_fraction=MI300X_FLASH_CAUSAL[-1][1])

MI325X = dataclasses.replace(
    MI300X, name="mi325x", memory_bytes=256 * GB, hbm_bytes_per_s=6000 * GB, gemm_fraction=0.600,
    source="AMD Instinct MI325X specifications (stas00/ml-engineering); MI300X's measurements")

AMD_GPUS = {g.name: g for g in (MI300X, MI325X)}
