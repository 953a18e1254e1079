"""The routed experts at their own precision, and torchao's recipes, by hand.

torchtitan converts linears (quantize.linear.float8) and the experts' grouped GEMMs
(quantize.grouped_mm.float8) apart (moe.py ``ExpertParallel.precision``); torchao's
rowwise recipes cast more, and rowwise_with_gw_hp runs the weight gradient in BF16
(precision.py ``TORCHAO_CAST_BYTES``, ``Parallel.fp8_wgrad``).
"""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.keys import Precision
from pptune.costmodel.moe import ExpertParallel, moe_act_bytes, moe_part
from pptune.costmodel.ops import Parallel, Phase, Rates, block_ops
from pptune.costmodel.precision import Fp8Kernels, TorchaoRecipe

GPU = presets.GPUS["h100-sxm"]
RATES = Rates.of(GPU)
QWEN3 = presets.MODELS["qwen3-30b-a3b"]
TORCHAO = dict(fp8_kernels=Fp8Kernels.TORCHAO)


def experts(part: list) -> dict[str, float]:
    return {o.name: o.time_s for o in part if o.name.startswith("expert_fc")}


def test_experts_run_at_their_own_precision() -> None:
    """FP8 linears with BF16 experts price the experts as the BF16 block does, and BF16
    linears with FP8 experts as the FP8 block does; the router and the rest follow the
    block."""
    ex = ExpertParallel(ep=8)
    bf16, fp8 = Parallel(**TORCHAO), Parallel(precision=Precision.FP8, **TORCHAO)

    def ops(par: Parallel, precision: Precision | None) -> list:
        part = moe_part(QWEN3, 1, RATES, par, dataclasses.replace(ex, precision=precision))
        return part.fwd + part.bwd + part.wgrad

    assert experts(ops(fp8, Precision.BF16)) == experts(ops(bf16, None))
    assert experts(ops(bf16, Precision.FP8)) == experts(ops(fp8, None))
    assert sum(experts(ops(fp8, None)).values()) < sum(experts(ops(bf16, None)).values())
    # FP8 experts under BF16 linears cast their inputs, as an FP8 block's do
    assert [o.name for o in ops(bf16, Precision.FP8) if o.name.startswith("fp8_cast")] == \
        [o.name for o in ops(fp8, None) if o.name.startswith("fp8_cast")]
    # the experts' saved inputs at their precision (TE saves FP8 casts), the rest the block's
    te8 = Parallel(precision=Precision.FP8)
    assert moe_act_bytes(QWEN3, 1, te8, dataclasses.replace(ex, precision=Precision.BF16)) \
        == moe_act_bytes(QWEN3, 1, Parallel(), ex)


@pytest.mark.parametrize("recipe", list(TorchaoRecipe))
def test_torchao_recipes_cast_as_their_roofline_counts(recipe: TorchaoRecipe) -> None:
    """torchao/testing/training/roofline_utils.py get_tensor_memory_traffic_ovhd_s, bytes
    an element (input forward, input backward, output gradient, weight forward,
    weight backward)."""
    m = presets.MODELS["llama3-8b"]
    par = Parallel(precision=Precision.FP8, torchao_recipe=recipe, **TORCHAO)
    casts = [o for o in block_ops(m, 1, RATES, par) if o.name.startswith("fp8_cast")]
    tokens, h, f = m.seq_len, m.hidden, m.ffn
    qkv = h + 2 * m.kv_heads * m.head_dim
    linears = [(h, qkv), (h, h), (h, 2 * f), (f, h)]
    in_f, in_b, grad, w_f, w_b = {TorchaoRecipe.TENSORWISE: (4, 0, 4, 5, 3),
                                  TorchaoRecipe.ROWWISE: (3, 3, 6, 3, 7),
                                  TorchaoRecipe.ROWWISE_WITH_GW_HP: (1, 0, 1, 3, 3)}[recipe]
    assert sum(c.hbm_bytes for c in casts if c.phase is Phase.F) == sum(
        in_f * tokens * k + w_f * k * n for k, n in linears)
    assert sum(c.hbm_bytes for c in casts if c.phase is Phase.B) == sum(
        in_b * tokens * k + grad * tokens * n + w_b * k * n for k, n in linears)


def test_rowwise_with_gw_hp_runs_the_weight_gradient_in_bf16() -> None:
    m = presets.MODELS["llama3-8b"]

    def phase(par: Parallel, which: Phase) -> dict[str, float]:
        return {o.name: o.time_s for o in block_ops(m, 1, RATES, par)
                if o.phase is which and o.name.endswith(("wgrad", "dgrad", "up", "down"))}

    bf16 = Parallel(**TORCHAO)
    tensorwise = Parallel(precision=Precision.FP8, **TORCHAO)
    gw_hp = Parallel(precision=Precision.FP8, torchao_recipe=TorchaoRecipe.ROWWISE_WITH_GW_HP,
                     **TORCHAO)
    assert gw_hp.fp8_wgrad is False and tensorwise.fp8_wgrad is True
    assert phase(gw_hp, Phase.W) == phase(bf16, Phase.W) != phase(tensorwise, Phase.W)
    assert phase(gw_hp, Phase.B) == phase(tensorwise, Phase.B)  # the data gradients: FP8
    # Transformer Engine's FP8 knows no torchao recipe
    te = Parallel(precision=Precision.FP8, torchao_recipe=TorchaoRecipe.ROWWISE_WITH_GW_HP)
    assert te.fp8_wgrad is True
