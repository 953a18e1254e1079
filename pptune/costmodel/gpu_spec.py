"""A GPU's specification: the figures the cost model prices a GPU by (presets.py and
presets_amd.py fill one in per GPU, each figure with its source)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pptune.costmodel.collectives import Fabric

GB = 1e9
MIB = 1024**2
# One 400 Gb/s NIC in a cross-node ring: "you should see 46-48 GB/s per NIC"
# (NVIDIA/nccl-tests issue 290, maintainer): 47
NIC_400G_BUSBW = 47 * GB
# one CTA a channel: NCCL's collectives on Hopper nodes run 16 (NVIDIA/nccl issues 892 and
# 1453, src/transport/nvls.cc; presets.py)
NCCL_CTAS = 16


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_flops: float  # dense bf16 FLOP/s
    memory_bytes: float
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float  # per GPU, one direction (on MI300X its 7 xGMI links)
    ib_bytes_per_s: float  # per GPU, one direction (one NIC per GPU)
    source: str
    # What the per-op compute model needs (ops.py); each preset cites its own.
    sm_count: int = 108
    gemm_fraction: float = 0.80  # of peak, large bf16 GEMMs, measured
    hbm_fraction: float = 0.88  # of hbm_bytes_per_s, streaming kernels, measured
    attention_fraction: float = 0.35  # of peak, flash attention forward+backward
    launch_s: float = 4e-6  # per kernel: launch and tail
    # Low precision (precision.py): dense FP8 / FP4 tensor-core peaks and the
    # measured share of the FP8 peak the largest FP8 GEMMs reach; None: not
    # supported (or not measured, so not priced).
    fp8_peak_flops: float | None = None
    fp4_peak_flops: float | None = None
    fp8_gemm_fraction: float | None = None
    mxfp8: bool = False  # OCP microscaling FP8 in the tensor cores (Blackwell)
    # The NVLink domain: GPUs that reach each other over NVLink (8 on a DGX/HGX,
    # 72 on a GB200 NVL72). A request's gpus_per_node defaults to it.
    gpus_per_node: int = 8
    # GPUs one host holds (one torchrun node) where the NVLink domain spans hosts (a
    # GB200 NVL72 compute tray: 4); None: the domain is one host
    gpus_per_host: int | None = None
    # What NCCL achieves on this node type (collectives.py); None: the line rates.
    fabric: Fabric | None = None
    # Causal flash attention forward+backward as a share of peak at kernel
    # sequence lengths (tokens, fraction), interpolated in log2(seq) and
    # clamped at the ends (context.py); empty: ``attention_fraction`` throughout.
    causal_attention: tuple[tuple[int, float], ...] = ()
    full_attention: tuple[tuple[int, float], ...] = ()  # the same without a mask
    # The same for cuDNN's fused attention (Transformer Engine's FusedAttention, which it
    # prefers over FlashAttention on Hopper and later); empty: not measured on this GPU,
    # priced as flash attention (with_attention_kernel)
    cudnn_causal_attention: tuple[tuple[int, float], ...] = ()
    cudnn_full_attention: tuple[tuple[int, float], ...] = ()
    # the GPU whose measured attention shares of peak price this one (None: its own, or
    # the die's: H200 and H800 are H100's GH100)
    attention_rates_of: str | None = None
    # The range of sustained matmul throughput over the 8 GPUs of a node, relative
    # to the median: a job runs at its slowest GPU's pace (variation.py).
    matmul_spread: float = 0.05

    def priced_kernel(self, kernel: str) -> str:
        """The attention kernel whose rates price ``kernel`` here: ``cudnn`` where cuDNN's
        rates are not measured is priced as ``flash`` (what Transformer Engine falls back
        to); ``sdpa`` (torch's scaled_dot_product_attention, ops.Attention) as ``cudnn``
        on the GPUs torch 2.13 runs cuDNN's kernel first on, the sm90 and sm10x parts whose
        cuDNN rates are measured here (Hopper, Blackwell), else as ``flash``: aten/src/ATen/
        native/transformers/cuda/sdp_utils.cpp ``check_prefer_cudnn_attention`` puts cuDNN
        first there with a runtime cuDNN above 9.15 (torch 2.13.0's CUDA wheel pins
        nvidia-cudnn-cu13 9.20.0.48; TORCH_CUDNN_SDPA_DEPRIORITIZED turns it off); any
        other kernel as itself."""
        if kernel == "sdpa":
            kernel = "cudnn"
        return "flash" if kernel == "cudnn" and not self.cudnn_causal_attention else kernel

    def sdpa_said(self, kernel: str) -> str:
        """" (K on GPU)" after ``sdpa``: the kernel torch's SDPA runs here; "" otherwise."""
        return f" ({self.priced_kernel(kernel)} on {self.name})" if kernel == "sdpa" else ""

    def cudnn_unmeasured(self, kernel: str) -> bool:
        """``kernel`` names cuDNN's attention, whose rates are not measured here."""
        return kernel == "cudnn" and self.priced_kernel(kernel) != kernel

    def with_attention_kernel(self, kernel: str) -> GpuSpec:
        """This GPU as a fused attention kernel runs on it (``priced_kernel``): ``cudnn``
        takes cuDNN's curves, and as the flat share (MLA's causal kernels) the causal
        curve's longest length; ``flash`` and ``eager`` keep the GPU as it is."""
        if self.priced_kernel(kernel) != "cudnn":
            return self
        return dataclasses.replace(self, causal_attention=self.cudnn_causal_attention,
                                   full_attention=self.cudnn_full_attention,
                                   attention_fraction=self.cudnn_causal_attention[-1][1])

    def fabric_or_line(self) -> Fabric:
        """The measured fabric, or one at the line rates when none is known."""
        if self.fabric is not None:  # its collectives' CTAs run on this GPU's SMs
            return dataclasses.replace(self.fabric, sm_count=self.sm_count)
        return Fabric(self.nvlink_bytes_per_s, self.nvlink_bytes_per_s, self.ib_bytes_per_s)
