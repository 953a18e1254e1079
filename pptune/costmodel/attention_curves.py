"""Measured attention rates: forward + backward shares of a GPU's dense BF16 peak by kernel
length, for FlashAttention-2 and cuDNN's fused attention, causal and unmasked; each curve
cites its benchmark (presets.py takes them into its GPUs; context.py interpolates them)."""

from __future__ import annotations

from typing import Any

Curve = tuple[tuple[int, float], ...]

H100_CAUSAL = ((512, 163 / 989), (1024, 221 / 989), (2048, 265 / 989), (4096, 294 / 989),
                (8192, 308 / 989), (16384, 328 / 989))
H100_FULL = ((512, 248 / 989), (1024, 294 / 989), (2048, 320 / 989), (4096, 326 / 989),
              (8192, 335 / 989), (16384, 338 / 989))


_FA_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)  # the FlashAttention benchmarks' lengths


def _fwd_bwd(fwd: tuple[float, ...], bwd: tuple[float, ...], peak_tflops: float = 989,
             lengths: tuple[int, ...] = _FA_LENGTHS) -> Curve:
    """Forward + backward shares of a peak (H100's by default) at the kernel lengths of a
    benchmark (the FlashAttention benchmarks' six by default), from forward and backward
    TFLOP/s: the backward does 2.5x the forward's FLOPs (ops.py), so the pair runs at
    3.5 / (1 / fwd + 2.5 / bwd)."""
    return tuple((s, 3.5 / (1 / f + 2.5 / b) / peak_tflops)
                 for s, f, b in zip(lengths, fwd, bwd, strict=True))


def _rescaled(curve: Curve, to: Curve, frm: Curve) -> Curve:
    """``curve`` times H100's ``to``-over-``frm`` ratio for the same kernel, at the nearest
    length H100 was measured at."""
    ratio = {s: t / f for (s, t), (_, f) in zip(to, frm, strict=True)}
    return tuple((s, share * ratio[min(ratio, key=lambda r: abs(r - s))]) for s, share in curve)


def _unmasked(causal: Curve, h100_full: Curve,
              h100_causal: Curve) -> Curve:
    """An unmasked curve from a GPU's causal one, at H100's unmasked-over-causal ratio for
    the same kernel: the Blackwell sweeps below are causal only, so the mask's cost is
    assumed to be H100's."""
    return _rescaled(causal, h100_full, h100_causal)


# cuDNN's fused attention on H100 SXM5, head dim 128, BF16, 16k tokens a batch: Shah et al.
# 2024, "FlashAttention-3" (arXiv 2407.08608), fig. 5 (c), (d) forward without and with the
# causal mask (also Dao-AILab/flash-attention assets/flash3_fp16_fwd.png @ 0251105a) and
# fig. 6 backward without the mask, TFLOP/s at 512..16k: forward 497/574/617/609/600/595,
# causal 315/410/484/518/529/539; backward 305/408/465/499/518/516. The paper gives no causal
# backward: it is taken at the backward's rate times the mask's cost to the forward at the
# same length (causal over full forward), an assumption. The same figures put
# FlashAttention-2 at 309-370 forward and 214-322 backward, consistent with the curves above
# (its fwd+bwd 235-334 vs 248-338): cuDNN's kernels run 1.5-1.6x FlashAttention-2's.
_CUDNN_FWD = (497, 574, 617, 609, 600, 595)
_CUDNN_FWD_CAUSAL = (315, 410, 484, 518, 529, 539)
_CUDNN_BWD = (305, 408, 465, 499, 518, 516)
H100_CUDNN_FULL = _fwd_bwd(_CUDNN_FWD, _CUDNN_BWD)
H100_CUDNN_CAUSAL = _fwd_bwd(
    _CUDNN_FWD_CAUSAL,
    tuple(b * c / f for b, c, f in zip(_CUDNN_BWD, _CUDNN_FWD_CAUSAL, _CUDNN_FWD, strict=True)))
# Blackwell's attention, measured: NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training,
# the published sample runs in artifacts/ (sdpa_bf16_benchmark_results_NVIDIA_{B200,GB200,
# GB300}.csv with sample_*_bf16_run.txt): causal, BF16, batch 1, 128 query and 8 KV heads
# of 128, forward and backward TFLOP/s (causal FLOPs halved, as above) at 512 to 131,072
# tokens. cuDNN: B200 through torch's SDPA (cuDNN 9.13, torch 2.9 nv25.09), GB200 through
# the cuDNN frontend (cuDNN 9.17, nv25.11), GB300 through torch's SDPA (cuDNN 9.13,
# nv25.09); FlashAttention-2: torch's SDPA flash backend (pyt_flash_attention) on each.
# Their unmasked curves take H100's mask ratios (_unmasked). B300 takes B200's (no B300
# sweep is published).
_SWEEP_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
B200_CUDNN_CAUSAL = _fwd_bwd(
    (83.991, 254.501, 478.921, 855.678, 1171.278, 1332.415, 1419.000, 1382.330, 1355.418),
    (134.164, 308.529, 371.486, 701.265, 942.509, 1074.776, 1108.688, 1073.059, 1047.843),
    2250, _SWEEP_LENGTHS)
B200_FLASH_CAUSAL = _fwd_bwd(
    (74.596, 165.535, 242.386, 324.899, 373.392, 394.495, 403.739, 408.739, 410.988),
    (83.040, 107.669, 186.284, 256.427, 298.867, 319.979, 330.801, 335.402, 336.043),
    2250, _SWEEP_LENGTHS)
GB200_CUDNN_CAUSAL = _fwd_bwd((408, 733, 1069, 1386, 1584, 1668, 1681, 1573, 1467),
                               (329, 527, 655, 1054, 1211, 1304, 1348, 1229, 1188),
                               2500, _SWEEP_LENGTHS)
GB200_FLASH_CAUSAL = _fwd_bwd((163, 255, 336, 387, 414, 430, 438, 442, 444),
                               (146, 207, 268, 311, 338, 352, 360, 363, 363),
                               2500, _SWEEP_LENGTHS)
GB300_CUDNN_CAUSAL = _fwd_bwd(
    (54.923, 224.233, 593.514, 1144.867, 1495.674, 1702.463, 1795.879, 1770.478, 1720.854),
    (95.339, 277.209, 487.345, 892.572, 1130.076, 1267.827, 1319.161, 1301.700, 1280.022),
    2500, _SWEEP_LENGTHS)
GB300_FLASH_CAUSAL = _fwd_bwd(
    (58.617, 153.986, 271.164, 366.238, 410.579, 430.746, 440.329, 444.845, 447.786),
    (76.486, 149.147, 230.185, 291.593, 330.096, 350.925, 362.028, 366.561, 368.391),
    2500, _SWEEP_LENGTHS)


def blackwell_attention(flash: Curve,
                         cudnn: Curve) -> dict[str, Any]:
    """A Blackwell GPU's measured causal curves of both kernels and their unmasked ones."""
    return {"causal_attention": flash,
            "full_attention": _unmasked(flash, H100_FULL, H100_CAUSAL),
            "cudnn_causal_attention": cudnn,
            "cudnn_full_attention": _unmasked(cudnn, H100_CUDNN_FULL, H100_CUDNN_CAUSAL),
            "attention_fraction": flash[-1][1]}


# MI300X: the ROCm docs (ROCm/ROCm @ e396b489, docs/how-to/rocm-for-ai/inference-optimization/
# model-acceleration-libraries.rst, "Triton Flash Attention 2", figures the page marks as
# informal) run ROCm/triton's python/perf-kernels/flash-attention.py (triton-mlir branch) with
# its defaults: forward only, head dim 128, 16 heads, fp16 (MI300X's FP16 and BF16 peaks are
# the same 1307.4), no mask (the script's -causal flag is off unless given):
# "fused-attention-fwd-d128" 287.5 / 287.5 / 346.0 / 361.4 / 356.9 TFLOP/s at 1k to 16k
# tokens. No forward + backward sweep is published: the forward's share of the peak is taken
# as the pair's (an assumption: on H100 the pair runs below the forward alone), and the causal
# curve at H100's FlashAttention-2 causal-over-unmasked ratio (the mask's cost assumed H100's).
MI300X_PEAK_TFLOPS = 1307.4
MI300X_FLASH_FULL: Curve = tuple(
    (s, t / MI300X_PEAK_TFLOPS) for s, t in zip(
        (1024, 2048, 4096, 8192, 16384),
        (287.528411, 287.490806, 345.966031, 361.369510, 356.873720), strict=True))
MI300X_FLASH_CAUSAL = _rescaled(MI300X_FLASH_FULL, H100_CAUSAL, H100_FULL)
