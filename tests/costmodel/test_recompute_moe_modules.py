"""megatron-core's --recompute-modules layernorm, moe and shared_experts, derived by hand.

DeepSeek-V3 cut to 4 blocks (3 dense, 1 MoE) of 512 tokens, ep 8, BF16, one rank
(no tensor parallelism): h = 7,168, one shared expert of 2,048.

- ``layernorm`` (transformer_layer.py: only where the norm is its own module, not
  fused into the next linear): MLA's input norm (gpt_layer_specs.py builds MLA
  with a separate input_layernorm) and a MoE block's pre-MLP norm (separate when
  the layer has experts). Its output, 2 h bytes a token, is dropped and the norm
  (4 h bytes a token) reruns before the backward.
- ``moe`` (moe_layer.py ``moe_layer_recompute``): the whole MoE sub-layer is
  checkpointed: it keeps only its input and reruns its forward, all-to-alls
  included, before its backward.
- ``shared_experts`` (moe_layer.py ``shared_experts_recompute``): the shared
  experts' MLP is checkpointed the same way.
"""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import AnalyticLayer, analytic_layers
from pptune.costmodel.kernels import Kind, Phase, phase_s
from pptune.costmodel.moe import ExpertParallel, moe_act_bytes, moe_part
from pptune.costmodel.ops import Parallel, Rates, mlp_part

DS = dataclasses.replace(presets.MODELS["deepseek-v3"], num_blocks=4, seq_len=512,
                         mtp_layers=0)
GPU, EX = presets.GPUS["h100-sxm"], ExpertParallel(ep=8)
H, T = 7168, 512


def layers(*modules: str) -> list[AnalyticLayer]:
    return analytic_layers(DS, GPU, [1], experts=EX, recompute_modules=frozenset(modules))


def norm_rerun_s() -> float:
    rates = Rates.of(GPU)
    return 4 * H * T / rates.hbm_bytes_per_s + rates.launch_s


def test_layernorm_drops_the_outputs_of_the_norms_that_stand_alone() -> None:
    plain, norm = layers(), layers("layernorm")
    dense0, dense1 = plain[1].per_micro_batch[1], norm[1].per_micro_batch[1]
    moe0, moe1 = plain[4].per_micro_batch[1], norm[4].per_micro_batch[1]
    # a dense MLA block: the attention's input (its MLP norm is fused into fc1)
    assert dense0.act_bytes - dense1.act_bytes == 2 * H * T
    assert dense1.bwd_s - dense0.bwd_s == pytest.approx(norm_rerun_s())
    # a MoE MLA block: the attention's and the MoE layer's inputs, two norms rerun
    assert moe0.act_bytes - moe1.act_bytes == 2 * 2 * H * T
    assert moe1.bwd_s - moe0.bwd_s == pytest.approx(2 * norm_rerun_s())
    assert (dense1.fwd_s, moe1.fwd_s) == (dense0.fwd_s, moe0.fwd_s)


def test_layernorm_leaves_fused_norms_alone() -> None:
    # Llama's norms are fused into the QKV and fc1 linears (TE's LayerNormLinear)
    llama = dataclasses.replace(presets.MODELS["llama3-8b"], num_blocks=2, seq_len=512)
    a = analytic_layers(llama, GPU, [1])
    b = analytic_layers(llama, GPU, [1], recompute_modules=frozenset({"layernorm"}))
    assert a[1].per_micro_batch == b[1].per_micro_batch


def test_moe_checkpoints_the_whole_moe_layer() -> None:
    rates, par = Rates.of(GPU), Parallel()
    plain, whole = layers(), layers("moe")
    moe0, moe1 = plain[4].per_micro_batch[1], whole[4].per_micro_batch[1]
    # everything the MoE layer kept goes: router scores, expert inputs and activations,
    # routing weights, the shared expert's inner tensors
    assert moe0.act_bytes - moe1.act_bytes == pytest.approx(moe_act_bytes(DS, 1, par, EX))
    part = moe_part(DS, 1, rates, par, EX)
    compute = [o for o in part.fwd if o.kind is not Kind.ALL_TO_ALL]
    a2a = [o for o in part.fwd if o.kind is Kind.ALL_TO_ALL]
    assert moe1.bwd_s - moe0.bwd_s == pytest.approx(phase_s(compute, Phase.F, rates))
    # the rerun forward dispatches and combines its tokens again
    assert moe1.bwd_a2a_s - moe0.bwd_a2a_s == pytest.approx(phase_s(a2a, Phase.F, rates))
    assert moe1.bwd_a2a_s - moe0.bwd_a2a_s == pytest.approx(moe0.fwd_a2a_s)
    # dense blocks are not MoE layers
    assert whole[1].per_micro_batch == plain[1].per_micro_batch


def test_shared_experts_checkpoints_the_shared_mlp() -> None:
    rates = Rates.of(GPU)
    plain, shared = layers(), layers("shared_experts")
    moe0, moe1 = plain[4].per_micro_batch[1], shared[4].per_micro_batch[1]
    # gate and up (the fused SwiGLU's input) and the product of the 2,048-wide shared
    # expert: 6 bytes a column
    assert moe0.act_bytes - moe1.act_bytes == 6 * 2048 * T
    mlp = mlp_part(DS, 1, rates, Parallel(), ffn=2048, name="shared")
    assert moe1.bwd_s - moe0.bwd_s == pytest.approx(phase_s(mlp.fwd, Phase.F, rates))
    assert shared[1].per_micro_batch == plain[1].per_micro_batch
