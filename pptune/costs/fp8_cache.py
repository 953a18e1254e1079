"""The FP8 weight copies a layer keeps on one rank (precision.weight_cache_bytes_per_param
bytes for each weight of its FP8 GEMMs).

Transformer Engine casts each GEMM weight to FP8 once a step and keeps the copy and its
transpose until the step ends (precision.py): TE 2.9 module/linear.py caches it
(``get_weight_workspace(..., cache_name="weight")``) whenever the caller passes
``is_first_microbatch``, which megatron-core's ``TELinear.forward`` always does
(``disable_parameter_transpose_cache`` has no command-line flag, training/arguments.py).
The copy is of the weight the GEMM sees, so sharding the weights over dp (ZeRO-3,
Megatron-FSDP's optim_grads_params) shards none of it: each rank caches every layer's,
as counted here, whatever the plan's sharding; only FP8 parameters
(``--fp8-param-gather``) do without (Megatron-FSDP gathers a layer's FP8 weight and
drops its transpose with it: megatron_fsdp.py ``release_params_fp8_transpose_cache``),
and torchao's float8 keeps none (precision.py). The weights of the GEMMs this rank runs,
its share of the attention projections and of the dense or shared-expert MLP (split by
tp) and its own routed experts (E / ep of them, each split etp ways: moe.moe_params).
Norms and the router are not FP8 GEMMs (megatron-core runs the router in FP32 or BF16)
and keep no copy.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from pptune.costmodel import precision
from pptune.costmodel.analytic import layer_params
from pptune.costmodel.block_style import norm_params
from pptune.costmodel.keys import Precision
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.presets import ModelShape


@functools.lru_cache(maxsize=4096)
def gemm_weight_params(m: ModelShape, i: int, tp: int, ex: ExpertParallel | None) -> float:
    """Weights of block i's GEMMs on one rank (MTP blocks after the last: num_blocks, ...);
    their biases are not cast (block_style.py). Cached (pure): every FP8 table priced
    asks it of every block, and the copy of the shape it makes is a tenth of the
    pricing's time."""
    unbiased = replace(m, qkv_bias=False, attn_out_bias=False, mlp_bias=False)
    dense, expert = layer_params(unbiased, i, tp, ex)
    norms = 2 * norm_params(m)
    router = m.hidden * m.experts if m.moe_block(i) else 0
    return dense + expert - norms - router


def weight_cache_bytes(m: ModelShape, i: int, tp: int, ex: ExpertParallel | None,
                       gemm_precision: Precision, fp8_params: bool,
                       kernels: precision.Fp8Kernels,
                       recipe: precision.Fp8Recipe = precision.Fp8Recipe.DELAYED) -> float:
    """Bytes of block i's cached FP8 weight copies on one rank (0 in BF16)."""
    per = precision.weight_cache_bytes_per_param(gemm_precision, fp8_params, kernels, recipe)
    return gemm_weight_params(m, i, tp, ex) * per if per > 0 else 0.0
