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
and wave model of kernels.py. The fraction is Transformer Engine's GEMM profiling guide
(docs/examples/gemm_profiling/gemm_profiling.rst at d0067d0, "Worked Example: 5B Model
on B300", ``--pre-quantize``: the GEMM kernels alone): on a B300 SXM6 AC the 12 GEMMs of
one layer (hidden 4096, FFN 16384, QKV 12288, 15,872 tokens) take 3.764 ms in NVFP4, 19.17
TFLOP (``LAYER_FLOPS``), 5.09 PFLOP/s, 0.377 of B300's dense FP4 peak of 13.5 PFLOP/s
(NVIDIA HGX B300 specifications: 108 PFLOPS dense FP4 for 8 GPUs). A training-shape mean,
not a best-shape sweep as the BF16 and FP8 fractions are (presets.py), measured on
Blackwell Ultra and taken for every GPU with an FP4 peak (no NVFP4 sweep of B200 or GB200
with its shapes is published): an assumption, stated in docs/limits.md.

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
B300_FP4_PEAK_FLOPS = 108e15 / 8
GEMM_FRACTION = round(LAYER_FLOPS / LAYER_S / B300_FP4_PEAK_FLOPS, 3)  # 0.377
