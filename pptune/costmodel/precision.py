"""GEMM precision: what FP8 speeds up, what it adds, and the memory it really costs.

Transformer Engine's FP8 recipes (``fp8_autocast`` with delayed or blockwise
scaling; Megatron-LM ``--fp8-format hybrid``, ``--fp8-recipe``) run the
linear layers of a transformer block in FP8: the QKV, attention-output and
two MLP GEMMs, forward (E4M3) and both backward GEMMs (E5M2 gradients in the
hybrid format). Attention itself, norms, softmax, the activation function,
the embedding and the LM head stay in BF16 (TE's ``te.Linear`` layers are the
block's only FP8 ops; Megatron's output layer is a plain BF16
``ColumnParallelLinear``). DeepSeek-V3 keeps the same split (its report, sec.
3.3: "the embedding module, the output head, MoE gating modules,
normalization operators, and attention operators" in BF16/FP32).

Rates: an FP8 GEMM runs at the GPU's dense FP8 peak times its measured FP8
matmul fraction (presets.py) and the same tile and wave quantisation as BF16
(ops.py); its inputs are 1 byte an element. FP16 runs at BF16's rate (the same
tensor-core throughput on A100 and later).

Casts (TE ``cast_transpose``): an FP8 GEMM needs its inputs quantised, and its
weight-gradient GEMM the transposed copy (Hopper FP8 GEMMs take only the TN
layout): a cast reads the BF16 tensor (2 bytes) and writes the FP8 tensor and
its transpose (1 + 1). TE fuses the cast of the QKV and first MLP inputs into
the preceding norm (``LayerNormLinear``), so the forward pays separate casts
for the attention-output and second MLP inputs only; backward casts the
output gradient of all four GEMMs.

Memory that FP8 really costs:

- weights: BF16 weights and FP32 master weights and moments stay (the
  optimizer is unchanged); TE caches an FP8 copy of each GEMM weight and its
  transpose for the whole step, +2 bytes a parameter, unless the parameters
  themselves are FP8 (Megatron-LM ``--fp8-param-gather``, NeMo
  ``fp8_params``): then the FP8 weight and its cached transpose (1 + 1) take
  the BF16 weight's 2 bytes, +0. MXFP8 keeps row- and column-wise copies with
  one E8M0 scale a 32-element block (OCP Microscaling Formats v1.0): +1/32 a
  copy.
- activations: the saved input of each FP8 GEMM is its FP8 copy (1 byte, TE
  saves the quantised tensor for the weight gradient) instead of BF16's 2; every
  other saved tensor (norm inputs, Q, K, V, attention output for its backward,
  the MLP's inner tensors) stays BF16.
- the distributed optimizer / FSDP all-gather FP8 parameters (1 byte) when
  the parameters are FP8, BF16 (2) otherwise.

Block scaling (``Fp8Recipe.BLOCKWISE``: Megatron-LM ``--fp8-recipe blockwise``,
Transformer Engine's ``Float8BlockScaling``; DeepSeek-V3 report sec. 3.3.1): one
FP32 scale for each 1 x 128 tile of an activation or gradient and each 128 x 128
block of a weight (the recipe's ``x_block_scaling_dim = 1``, ``w_block_scaling_dim =
2``, ``grad_block_scaling_dim = 1``; "The scaling factors are float32 containers",
transformer_engine/common/recipe/__init__.py v2.10; ``Float8BlockQuantizer.
get_scale_shape`` pads a scale tensor's inner dimension to a multiple of 4, left out
here). Both copies a cast
writes (the row-wise one and the column-wise one, each quantised from the BF16
tensor) carry their own scales, so:

- a cast moves ``4 + 2 x 4/128`` bytes an element (the same reads and FP8 writes,
  and two scale vectors); an FP8 GEMM input is saved, and all-gathered by the
  tensor-parallel overlap, at ``1 + 4/128`` bytes an element;
- a cached FP8 weight and its transpose hold ``2 + 2 x 4/128^2`` bytes a parameter
  (the optimizer's FP8 all-gather of ``--fp8-param-gather`` moves 1 a parameter; its
  128 x 128 scales, 1/4096 of a byte a parameter, are left out);
- its scales are each tile's own: no amax reduction over the stage (amax.py);
- its GEMMs run at tensorwise FP8's rate: no published throughput of Hopper's
  block-scaled FP8 GEMMs (cuBLAS 12.9's ``VEC128_32F`` / ``BLK128x128_32F`` scale
  modes, which Transformer Engine calls: transformer_engine/common/gemm/
  cublaslt_gemm.cu v2.10) is found to price them by, and the
  recommend and check-config output says so (``BLOCKWISE_RATE_NOTE``).

That is Transformer Engine's FP8 (Megatron-LM, NeMo; ``Fp8Kernels.TE``). torchao's
float8 training (torchtitan's ``quantize.linear.float8``, ``Fp8Kernels.TORCHAO``)
casts each weight on every use and keeps no copy, and saves the BF16 input and
weight for the backward, casting them again there (torchao
``float8/float8_linear.py``, ``matmul_with_hp_or_float8_args``:
``ctx.save_for_backward(input_hp, weight_hp_t)``): its memory is the BF16 run's
(torchtitan's docs/performance.md, Tables 1 and 3: 77.0 and 62.0 GiB in BF16 with
torch.compile, 76.8 and 61.8 GiB with float8 added). Its casts (ops.torchao_casts)
are counted as torchao's own roofline counts them (``TORCHAO_*`` below): every
linear casts its input and its output gradient once each, into both layouts, and its
weight on every use, forward and backward, per micro-batch; under FSDP's float8
all-gather (``enable_fsdp_float8_all_gather``) the linears receive FP8 weights and cast
none (the shard's cast before the gather, 1/dp of a weight, is not priced).
Transformer Engine casts each weight once a step, on the first micro-batch, and keeps
the copies (``is_first_microbatch``); that cast is not priced (docs/limits.md), nor
are torchao's casts of expert and MLA linears, priced as Transformer Engine's.

torchao's recipes (``Float8LinearRecipeName``, torchao/float8/config.py
``Float8LinearConfig.from_recipe_name``; torchtitan's ``recipe_name``, ``TorchaoRecipe``)
scale tensorwise, rowwise (each row's scale, the CUTLASS rowwise GEMM) or rowwise with
the weight gradient in high precision (``rowwise_with_gw_hp``: its
``cast_config_input_for_grad_weight`` and ``cast_config_grad_output_for_grad_weight``
are ``ScalingType.DISABLED``, so ``grad_weight = input_t_hp @ grad_output_hp`` runs in
BF16). Its roofline prices every recipe's FP8 GEMMs at the FP8 peak and the
weight-gradient GEMM of ``rowwise_with_gw_hp`` at the BF16 one (roofline_utils.py
``get_gemm_time_sympy``), and counts each recipe's casts apart
(``get_tensor_memory_traffic_ovhd_s``, ``TORCHAO_CAST_BYTES``); both are priced so.

That roofline is torch.compile's: its casts fused into the ops around them. With the
model not compiled (torchtitan's zero-bubble and DualPipeV schedules, which refuse a
compiled stage module) torchao's tensorwise casts run eager (``Fp8Casts.EAGER``,
ops.torchao_eager_casts): each op of ``hp_tensor_to_float8_dynamic`` is a kernel of its
own (``TORCHAO_EAGER_*``), every cast the code asks for is made, backward too, and
``_scaled_mm``'s operands in the wrong layout are copied. The rowwise recipes' eager
casts are not derived, nor MXFP8's (torchao's prototype/mx_formats, a code path of its
own): those stay priced as compiled (``eager_casts``).

NVFP4 (``Precision.NVFP4``, Transformer Engine's NVFP4BlockScaling) is priced as a low
precision too, with its own rate, casts and bytes: nvfp4.py.
"""

from __future__ import annotations

from enum import Enum

from pptune.costmodel import nvfp4
from pptune.costmodel.keys import Precision
from pptune.costmodel.presets import GpuSpec

LOW_PRECISION = frozenset({Precision.FP8, Precision.MXFP8, Precision.NVFP4})


class Fp8Kernels(str, Enum):
    """Whose FP8 linear layers run (module docstring): Transformer Engine's, which cache
    the FP8 weights and save the FP8 GEMM inputs, or torchao's float8, which do neither."""

    TE = "te"
    TORCHAO = "torchao"


class Fp8Casts(str, Enum):
    """How torchao's float8 casts run (module docstring): fused into the ops around them by
    torch.compile (its roofline's traffic), or eager, each op of a cast a kernel of its own
    (torchtitan with the model not compiled)."""

    FUSED = "fused"
    EAGER = "eager"


class Fp8Recipe(str, Enum):
    """How an FP8 plan's scales are chosen (Transformer Engine's recipes, Megatron-LM
    ``--fp8-recipe``). ``delayed``: from an amax history, the amaxes all-reduced over the
    stage's ranks after every chunk pass (amax.py); ``tensorwise``: each tensor's own
    amax (current scaling); ``blockwise``: 1 x 128 / 128 x 128 block scales, their bytes
    priced, its GEMMs at tensorwise's rate (module docstring)."""

    DELAYED = "delayed"
    TENSORWISE = "tensorwise"
    BLOCKWISE = "blockwise"


def reduces_amax(recipe: str | None) -> bool:
    """Whether an FP8 recipe, by name (None: unstated, Megatron-LM's default delayed),
    all-reduces its amaxes over the stage after every chunk pass (amax.py)."""
    return (recipe or Fp8Recipe.DELAYED.value) == Fp8Recipe.DELAYED.value

class TorchaoRecipe(str, Enum):
    """torchao's float8 scaling recipes (torchao/float8/config.py
    ``Float8LinearRecipeName``; torchtitan ``[quantize.linear.float8] recipe_name``,
    unset: tensorwise)."""

    TENSORWISE = "tensorwise"
    ROWWISE = "rowwise"
    ROWWISE_WITH_GW_HP = "rowwise_with_gw_hp"


CAST_BYTES_PER_ELEMENT = 4.0  # read BF16 (2), write FP8 and its transpose (1 + 1)
# Block scaling (module docstring): an FP32 scale (4 bytes) for each 128 elements of an
# activation or gradient tile, each 128 x 128 of a weight (Float8BlockScaling)
SCALE_BYTES = 4
SCALE_BLOCK = 128
# what recommend and check-config say of a blockwise plan's GEMMs; the figures quoted are
# NVIDIA/TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst, "Worked Example:
# 5B Model on H200" (autocast mode: each GEMM with its quantization; FP8 block 1.40x, FP8
# current 1.58x, FP8 delayed 1.69x over BF16), a model's whole-layer GEMM times, not a
# kernel rate pptune could price by
BLOCKWISE_RATE_NOTE = (
    "blockwise FP8 priced at tensorwise FP8's GEMM rate (its 1 x 128 and 128 x 128 scales' "
    "bytes added, no amax reduction): no published throughput of Hopper's block-scaled FP8 "
    "GEMMs (cuBLAS 12.9, which Transformer Engine calls) to price them by; Transformer "
    "Engine's GEMM profiling guide measured block scaling's GEMMs with their casts at 1.40x "
    "BF16's speed, current scaling's at 1.58x (H200 NVL), so the step may be optimistic")
# torchao's float8 casts of one linear as its own roofline counts them (pytorch/ao
# torchao/testing/training/roofline_utils.py, v0.16.0 as @ 0598012,
# get_tensor_memory_traffic_ovhd_s, the abs-max of an input or output gradient fused
# into the op that produced it under torch.compile: ``fuse_with_prev``), bytes an
# element: (input forward, input backward, output gradient, weight forward, weight
# backward). tensorwise: an activation read once (2), written in both layouts (1 + 1);
# a weight read for its abs-max (2) and cast for each pass (2 + 1). rowwise: an
# activation cast along rows (write FP8 1 and the BF16 transpose 2, its read fused) and
# the transpose cast again (2 + 1), 6 in all; a weight cast forward (2 + 1), transposed
# (2 + 2) and cast (2 + 1) backward. rowwise_with_gw_hp: an activation cast once (its
# read fused, write 1: the weight gradient takes it in BF16); a weight cast each pass
# (2 + 1) with its tensorwise scale from the row scales (no traffic).
TORCHAO_CAST_BYTES = {
    TorchaoRecipe.TENSORWISE: (4.0, 0.0, 4.0, 5.0, 3.0),
    TorchaoRecipe.ROWWISE: (3.0, 3.0, 6.0, 3.0, 7.0),
    TorchaoRecipe.ROWWISE_WITH_GW_HP: (1.0, 0.0, 1.0, 3.0, 3.0),
}
MX_BLOCK = 32  # elements per E8M0 scale (OCP Microscaling Formats v1.0)
# torchao's tensorwise cast run eager, one kernel an op (pytorch/ao v0.16.0): float8/
# float8_scaling_utils.py hp_tensor_to_float8_dynamic is float8_utils.py tensor_to_amax
# ``torch.max(torch.abs(x))`` (abs: read BF16 2, write 2; max: read 2), amax_to_scale on
# one element (``.to(float64)``, ``clamp``, ``finfo.max / amax``: Tensor.__rtruediv__ is
# reciprocal then mul, ``.to(float32)``: 5 kernels), then float8_training_tensor.py
# _ToFloat8ConstrFunc.forward ``tensor.to(float32) * scale`` (2 + 4, 4 + 4) and
# float8_utils.py to_fp8_saturated ``clamp`` (4 + 4) and ``.to(float8)`` (4 + 1)
TORCHAO_EAGER_CAST_BYTES = (2 + 2) + 2 + (2 + 4) + (4 + 4) + (4 + 4) + (4 + 1)  # 33
TORCHAO_EAGER_CAST_KERNELS = 6 + 5  # over the tensor, on the scale
# float8_ops.py preprocess_addmm: an FP8 operand in the layout _scaled_mm refuses (the
# first row-major, the second column-major) is copied, ``.contiguous()``: read 1, write 1
TORCHAO_EAGER_TRANSPOSE_BYTES = 1 + 1


def is_low(precision: Precision) -> bool:
    """GEMMs in 8-bit (or NVFP4's 4-bit) floating point, with their casts and copies."""
    return precision in LOW_PRECISION


def copies_format(precision: Precision) -> str:
    """The format of the cached low-precision weight copies, as messages name them."""
    return "NVFP4" if precision is Precision.NVFP4 else "FP8"


def eager_casts(precision: Precision, recipe: TorchaoRecipe, casts: Fp8Casts) -> bool:
    """Whether torchao's float8 casts are priced eager: asked for FP8 under tensorwise
    scaling, whose eager ops are derived (``TORCHAO_EAGER_*``); the rowwise recipes and
    MXFP8 are priced as compiled whatever ``casts`` says (module docstring)."""
    return (casts is Fp8Casts.EAGER and precision is Precision.FP8
            and recipe is TorchaoRecipe.TENSORWISE)


def problems(precision: Precision, gpu: GpuSpec) -> list[str]:
    """Why ``gpu`` cannot be priced at ``precision`` (empty: it can)."""
    if precision is Precision.NVFP4 and gpu.fp4_peak_flops is None:
        other = "fp8 or bf16" if gpu.fp8_peak_flops is not None else "bf16"
        return [f"--precision nvfp4 needs FP4 tensor cores and their dense peak (Blackwell: "
                f"b200, gb200, b300, gb300); {gpu.name} has no FP4 peak in its preset: use "
                f"{other}"]
    if precision is Precision.MXFP8 and not gpu.mxfp8:
        return [f"--precision mxfp8 needs microscaling FP8 tensor cores (Blackwell); "
                f"{gpu.name} has none: use fp8 or bf16"]
    if is_low(precision) and (gpu.fp8_peak_flops is None or gpu.fp8_gemm_fraction is None):
        return [f"--precision {precision.value}: {gpu.name} has no FP8 tensor cores "
                "(or no measured FP8 matmul rate); use bf16 or fp16"]
    return []


def gemm_peak(precision: Precision, gpu: GpuSpec) -> tuple[float, float]:
    """(dense peak FLOP/s, measured large-GEMM fraction) of a block GEMM."""
    if precision is Precision.NVFP4:
        if gpu.fp4_peak_flops is None:
            raise ValueError("; ".join(problems(precision, gpu)))
        return gpu.fp4_peak_flops, nvfp4.GEMM_FRACTION
    if is_low(precision):
        if gpu.fp8_peak_flops is None or gpu.fp8_gemm_fraction is None:
            raise ValueError("; ".join(problems(precision, gpu)))
        return gpu.fp8_peak_flops, gpu.fp8_gemm_fraction
    return gpu.peak_flops, gpu.gemm_fraction


def blockwise(precision: Precision, recipe: Fp8Recipe) -> bool:
    """FP8 GEMMs under block scaling (MXFP8 keeps its own 32-element scales)."""
    return precision is Precision.FP8 and recipe is Fp8Recipe.BLOCKWISE


def gemm_input_bytes(precision: Precision, recipe: Fp8Recipe = Fp8Recipe.DELAYED) -> float:
    """Bytes a GEMM input element occupies (and is saved as) under ``precision``; block
    scaling adds its tile's FP32 scale (module docstring)."""
    if precision is Precision.MXFP8:
        return 1.0 + 1.0 / MX_BLOCK
    if precision is Precision.NVFP4:
        return nvfp4.COPY_BYTES
    if blockwise(precision, recipe):
        return 1.0 + SCALE_BYTES / SCALE_BLOCK
    return 1.0 if is_low(precision) else 2.0


def cast_bytes_per_element(recipe: Fp8Recipe = Fp8Recipe.DELAYED,
                           precision: Precision = Precision.FP8) -> float:
    """HBM bytes Transformer Engine's FP8 cast moves an element: read BF16, write the FP8
    tensor and its transpose, and under block scaling each copy's tile scales; NVFP4's
    amax and cast passes (nvfp4.CAST_BYTES)."""
    if precision is Precision.NVFP4:
        return nvfp4.CAST_BYTES
    scales = 2.0 * SCALE_BYTES / SCALE_BLOCK if recipe is Fp8Recipe.BLOCKWISE else 0.0
    return CAST_BYTES_PER_ELEMENT + scales


def weight_cache_bytes_per_param(precision: Precision, fp8_params: bool = False,
                                 kernels: Fp8Kernels = Fp8Kernels.TE,
                                 recipe: Fp8Recipe = Fp8Recipe.DELAYED) -> float:
    """Bytes a GEMM weight parameter holds all step beyond its BF16 training state."""
    if not is_low(precision) or kernels is Fp8Kernels.TORCHAO:
        return 0.0
    scales = 2.0 / MX_BLOCK if precision is Precision.MXFP8 else 0.0
    if blockwise(precision, recipe):  # a 128 x 128 block's scale, each copy
        scales = 2.0 * SCALE_BYTES / SCALE_BLOCK**2
    copies = 2.0 + scales  # the FP8 copy and its transpose (row- and column-wise)
    if precision is Precision.NVFP4:  # the row- and column-wise NVFP4 copies (nvfp4.py)
        copies = 2 * nvfp4.COPY_BYTES
    return copies - 2.0 if fp8_params else copies  # FP8 params replace the BF16 weight


def saved_input_bytes(precision: Precision, kernels: Fp8Kernels = Fp8Kernels.TE,
                      recipe: Fp8Recipe = Fp8Recipe.DELAYED) -> float:
    """Bytes a GEMM input element is saved as for the backward: its FP8 cast under
    Transformer Engine's FP8, the BF16 input under torchao's float8."""
    return 2.0 if kernels is Fp8Kernels.TORCHAO else gemm_input_bytes(precision, recipe)


def param_gather_bytes(precision: Precision, fp8_params: bool = False) -> float:
    """Bytes a parameter moves in the optimizer's / FSDP's all-gather (block scaling's
    weight scales left out: module docstring)."""
    return gemm_input_bytes(precision) if (fp8_params and is_low(precision)) else 2.0
