"""NVFP4 training (``--precision nvfp4``): Transformer Engine's ``NVFP4BlockScaling``
recipe as Megatron-LM runs it (``--fp4-format e2m1 --fp4-recipe nvfp4``: megatron/core/
fp4_utils.py ``get_fp4_recipe``; NVIDIA, "Pretraining Large Language Models with NVFP4",
arXiv 2509.25149), priced like FP8 (precision.py) with its own rate, casts and bytes.

The recipe (transformer_engine/common/recipe/__init__.py ``NVFP4BlockScaling``, TE docs
features/low_precision_training/nvfp4/nvfp4.rst, both at TE commit d0067d0): the block's
linears run all three GEMMs (forward, data and weight gradient) in NVFP4, E2M1 elements
with one E4M3 scale a block of 16 (and one FP32 scale a tensor); weights scaled in 16 x 16
blocks (2D), activations and gradients in 1 x 16; stochastic rounding on gradients; a
16 x 16 random Hadamard transform (RHT) on the column-wise copies of inputs and gradients,
the weight gradient's operands. Attention, norms, the embedding and the output layer stay
BF16 as under FP8. Megatron-LM's ``--first-last-layers-bf16`` (with
``--num-layers-at-start-in-bf16`` / ``--num-layers-at-end-in-bf16``) keeps blocks in BF16
(fp4_utils.py ``get_fp4_context``); pptune prices every block in NVFP4 and does not write
those flags (Megatron-Bridge's ``bf16_with_nvfp4_mixed`` leaves them off).

Rate: an NVFP4 GEMM runs at the GPU's dense FP4 peak times ``GEMM_FRACTION``, with the tile
and wave model of kernels.py. No best-shape NVFP4 sweep (the kind the BF16 and FP8
fractions are: presets.py) is published; Transformer Engine's GEMM profiling guide
(docs/examples/gemm_profiling/gemm_profiling.rst at d0067d0, "Worked Example: 5B Model
on B300", ``--pre-quantize``: the GEMM kernels alone) measured the same 12 GEMMs of one
layer (hidden 4096, FFN 16384, QKV 12288, 15,872 tokens; 19.17 TFLOP, ``LAYER_FLOPS``) on a
B300 SXM6 AC in NVFP4 (3.764 ms) and in MXFP8 (7.161 ms): NVFP4 1.90x as fast at the same
shapes. The fraction keeps that ratio on the FP8 fraction's footing: the FP8 best-shape
fraction the b300 preset takes (B200's mamf-finder sweep, 0.763), times 1.90, times the
FP8 over FP4 dense peak of the B300 (4.5 / 13.5 PFLOP/s: NVIDIA HGX B300 specifications,
72 PFLOPS FP8 with sparsity and 108 dense FP4 for 8 GPUs): 0.484. Read alone, the NVFP4
kernels reached 5.09 PFLOP/s, 0.377 of the FP4 peak, but at those shapes the MXFP8 ones
reached 0.595 of theirs where the sweep's best is 0.763: the shapes cost both alike, and
pricing NVFP4 at 0.377 with FP8 at its best would have made NVFP4 plans about as fast as
FP8 ones. The one B300 measurement is taken for every GPU with an FP4 peak, each at its own
peak (no NVFP4 kernels of B200 or GB200 are published): an assumption, docs/limits.md.

Casts (Transformer Engine's ``NVFP4Quantizer::quantize_impl``, pytorch/csrc/quantizer.cpp
at d0067d0): the tensor's amax first (``nvte_hadamard_transform_amax``: the row-wise amax
and the column-wise one after the RHT, one read of the BF16 tensor), then one fused kernel
writing the row-wise copy and the RHT'd, transposed column-wise copy
(``nvte_quantize_with_hadamard_transform``): 2 + 2 bytes read and 2 x (1/2 + 1/16) written
an element, in 2 kernels (``CAST_BYTES``, ``CAST_KERNELS``), and the 16 x 16 transform
twice, 2 x 16 FLOPs an element each time (``RHT_FLOPS``), on the tensor cores
(fp4_utils.py ``get_fp4_align_size``), priced at the BF16 GEMM rate. Unlike FP8 no norm
writes the quantised tensor: with the RHT's amax the norm runs unfused
(pytorch/csrc/extensions/normalization.cpp: ``Impl::UNFUSED`` "Amax is handled within
NVFP4 quantizer"), so every linear's input is cast forward, and every output gradient
backward. The weights' casts, once a step, are not priced (as FP8's: docs/limits.md).

Memory: a saved GEMM input is its column-wise NVFP4 copy, 1/2 + 1/16 bytes an element
(``COPY_BYTES``; the scales' layout pads to 128 x 4 blocks, left out); the cached weight
copies, row- and column-wise, 2 x (1/2 + 1/16) a parameter beyond the BF16 weight (2D
scaling's scales are stored in the GEMM's 1 x 16 layout: nvfp4.rst "Handling
transposes"); ``--fp4-param-gather`` all-gathers one NVFP4 copy (1/2 + 1/16) and drops the
BF16 weight, whose saving is not counted (fp8_cache.py counts no negative cache).
The cast ops are nvfp4_ops.py's; precision.py and rates.py read these constants.
"""

from __future__ import annotations

BLOCK = 16  # elements a scale
COPY_BYTES = 0.5 + 1.0 / BLOCK  # an E2M1 element and its share of an E4M3 scale
CAST_BYTES = 2.0 + 2.0 + 2 * COPY_BYTES  # amax read, cast read, two copies written
CAST_KERNELS = 2  # the amax, the fused quantize
RHT_FLOPS = 2 * (2 * BLOCK)  # a 16 x 16 transform an element, in the amax and the cast
# Transformer Engine's GEMM profiling guide (module docstring): one layer's 12 GEMMs,
# 2 x 15,872 tokens x (4096 x 12288 + 4096 x 4096 + 2 x 4096 x 16384) FLOPs forward,
# times 3, in 3.764 ms on a B300 of 13.5 PFLOP/s dense FP4 (HGX B300 specifications)
LAYER_FLOPS = 3 * 2 * 15872 * 4096 * (12288 + 4096 + 16384 + 16384)
LAYER_S = 3.764e-3
MXFP8_LAYER_S = 7.161e-3  # the same 12 GEMMs in MXFP8, the same guide
B300_FP4_PEAK_FLOPS = 108e15 / 8
B300_FP8_PEAK_FLOPS = 72e15 / 2 / 8  # 72 PFLOPS with sparsity for 8 GPUs
FP8_FRACTION = 0.763  # the b300 preset's FP8 fraction (B200's mamf-finder; presets.py)
GEMM_FRACTION = round(FP8_FRACTION * MXFP8_LAYER_S / LAYER_S
                      * B300_FP8_PEAK_FLOPS / B300_FP4_PEAK_FLOPS, 3)  # 0.484
