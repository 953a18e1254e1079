"""torchao's tensorwise float8 casts run eager (the model not compiled), by hand.

Each cast is torchao v0.16.0's ``hp_tensor_to_float8_dynamic`` op by op: abs (read BF16
2, write 2), max (read 2), the scale on one element (5 kernels), ``to(float32)`` (2 + 4),
``* scale`` (4 + 4), ``clamp`` (4 + 4), ``to(float8)`` (4 + 1): 33 bytes an element in 11
kernels; float8_ops.py preprocess_addmm copies an FP8 operand in the wrong layout (1 + 1).
"""

from __future__ import annotations

import pytest

from pptune.costmodel import presets
from pptune.costmodel.keys import Precision
from pptune.costmodel.ops import Parallel, Phase, Rates, block_ops, phase_s, torchao_eager_casts
from pptune.costmodel.precision import Fp8Casts, Fp8Kernels, TorchaoRecipe, eager_casts

RATES = Rates.of(presets.GPUS["h100-sxm"])  # HBM 3.35e12 x 0.9 = 3.015e12 B/s, 4 us a launch


def test_one_small_linear_by_hand() -> None:
    # 1,024 tokens through a 256 -> 512 linear. Forward: the input (1,024 x 256 = 262,144
    # elements) and the weight (256 x 512 = 131,072) cast, 393,216 x 33 = 12,976,128 bytes
    # in 2 x 11 kernels. Backward: the output gradient twice (2 x 1,024 x 512 = 1,048,576),
    # the weight (131,072) and the input (262,144) again, 1,441,792 x 33 = 47,579,136, and
    # the weight, the output gradient and the input copied to _scaled_mm's layouts, (131,072
    # + 524,288 + 262,144) x 2 = 1,835,008: 49,414,144 bytes in 4 x 11 + 3 kernels
    fwd, bwd = torchao_eager_casts("x", 1024, [(256, 512, 1)], RATES, fp8_weights=False)
    assert [(o.hbm_bytes, o.kernels) for o in fwd] == [(12_976_128, 22)]
    assert [(o.hbm_bytes, o.kernels) for o in bwd] == [(49_414_144, 47)]
    # 12,976,128 / 3.015e12 = 4.30 us + 22 x 4 us; 49,414,144 / 3.015e12 = 16.39 us + 47 x 4 us
    assert phase_s(fwd, Phase.F, RATES) == pytest.approx(92.304e-6, abs=1e-9)
    assert phase_s(bwd, Phase.B, RATES) == pytest.approx(204.389e-6, abs=1e-9)
    # FP8 weights (FSDP's float8 all-gather): no weight casts, its copy stays
    fwd, bwd = torchao_eager_casts("x", 1024, [(256, 512, 1)], RATES, fp8_weights=True)
    assert [(o.hbm_bytes, o.kernels) for o in fwd] == [(262_144 * 33, 11)]
    assert [(o.hbm_bytes, o.kernels) for o in bwd] == [
        ((1_048_576 + 262_144) * 33 + 1_835_008, 36)]


def test_a_block_casts_each_module_of_a_shared_input() -> None:
    # torchtitan's llama3 block: wq, wk, wv each cast the attention's input, w1 and w3 the
    # MLP's; wo and w2 their own
    m = presets.MODELS["llama3-8b"]
    par = Parallel(precision=Precision.FP8, fp8_kernels=Fp8Kernels.TORCHAO,
                   fp8_casts=Fp8Casts.EAGER)
    casts = [o for o in block_ops(m, 1, RATES, par) if o.name.startswith("fp8_cast")]
    t, h, f = m.seq_len, m.hidden, m.ffn
    qkv = h + 2 * m.kv_heads * m.head_dim
    linears = [(h, qkv, 3), (h, h, 1), (h, 2 * f, 2), (f, h, 1)]  # (in, out, modules)
    fwd = 33 * sum(k * t * i + i * o for i, o, k in linears)
    bwd = sum(33 * (2 * t * o + i * o + k * t * i) + 2 * (i * o + t * o + k * t * i)
              for i, o, k in linears)
    assert sum(c.hbm_bytes for c in casts if c.phase is Phase.F) == fwd
    assert sum(c.hbm_bytes for c in casts if c.phase is Phase.B) == bwd
    assert sum(c.kernels for c in casts if c.phase is Phase.F) == 22 * 7
    assert sum(c.kernels for c in casts if c.phase is Phase.B) == 47 * 7


@pytest.mark.parametrize(("precision", "recipe"), [
    (Precision.MXFP8, TorchaoRecipe.TENSORWISE), (Precision.FP8, TorchaoRecipe.ROWWISE),
    (Precision.FP8, TorchaoRecipe.ROWWISE_WITH_GW_HP)])
def test_only_tensorwise_fp8_is_priced_eager(precision: Precision,
                                             recipe: TorchaoRecipe) -> None:
    """The rowwise recipes' and MXFP8's eager casts are not derived: priced as compiled."""
    assert eager_casts(Precision.FP8, TorchaoRecipe.TENSORWISE, Fp8Casts.EAGER)
    assert not eager_casts(precision, recipe, Fp8Casts.EAGER)
    m = presets.MODELS["llama3-8b"]

    def ops(casts: Fp8Casts) -> list[object]:
        return block_ops(m, 1, RATES, Parallel(precision=precision, torchao_recipe=recipe,
                                               fp8_kernels=Fp8Kernels.TORCHAO,
                                               fp8_casts=casts))
    assert ops(Fp8Casts.EAGER) == ops(Fp8Casts.FUSED)
