"""Layer sources: presets, Hugging Face config.json, user code (--module)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pptune.errors import BadInput  # noqa: E402
from pptune.probe.models import param_count, plan_hf_config, plan_module, plan_preset  # noqa: E402

pytestmark = pytest.mark.torch


def _params(layer) -> int:  # type: ignore[no-untyped-def]
    return sum(p.numel() for p in layer.parameters())


def test_gpt_small_is_embedding_six_blocks_and_head() -> None:
    plan = plan_preset("gpt-small", "cpu", torch.float32)
    assert plan.layer_names == ["embed"] + [f"block.{i}" for i in range(6)] + ["head"]
    assert (plan.seq_len, plan.hidden_size, plan.num_blocks, plan.param_dtype_bytes) == (128, 256, 6, 4)
    ids = plan.make_input(2)
    assert ids.shape == (2, 128) and ids.dtype == torch.int64
    h = plan.build_layer(0)(ids)
    assert h.shape == (2, 128, 256)
    h = plan.build_layer(1)(h)
    assert h.shape == (2, 128, 256)
    logits = plan.build_layer(7)(h)
    assert logits.shape == (2, 128, 8192)
    # the same weights on every build (seeded), so runs are comparable
    assert torch.equal(plan.build_layer(3).mlp.up.weight, plan.build_layer(3).mlp.up.weight)
    assert not plan.warnings


def test_param_count_matches_the_built_layers_without_biases_and_norms() -> None:
    plan = plan_preset("gpt-small", "cpu", torch.float32)
    from pptune.costmodel.presets import MODELS
    built = sum(_params(plan.build_layer(i)) for i in range(len(plan.layer_names)))
    small = sum(
        p.numel()
        for i in range(len(plan.layer_names))
        for name, p in plan.build_layer(i).named_parameters()
        if p.dim() == 1
    )
    assert built - small == param_count(MODELS["gpt-small"])


def test_large_preset_on_cpu_warns_and_unknown_preset_is_bad_input() -> None:
    plan = plan_preset("llama3-8b", "cpu", torch.float32, seq_len=16)
    assert plan.warnings and "llama3-8b" in plan.warnings[0] and "--seq-len" in plan.warnings[0]
    assert plan.seq_len == 16
    with pytest.raises(BadInput, match="--model 'gpt-4' is not a preset; choose one of gpt-small"):
        plan_preset("gpt-4", "cpu", torch.float32)


def _write(path: Path, cfg: dict) -> Path:  # type: ignore[type-arg]
    path.write_text(json.dumps(cfg))
    return path


def test_hf_llama_config_builds_gqa_swiglu_blocks(tmp_path: Path) -> None:
    cfg = {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 160,
        "vocab_size": 500, "max_position_embeddings": 131072, "hidden_act": "silu",
    }
    plan = plan_hf_config(_write(tmp_path / "config.json", cfg), "cpu", torch.float32)
    assert plan.layer_names == ["embed", "block.0", "block.1", "block.2", "head"]
    assert plan.seq_len == 8192  # capped, with a note
    assert any("131072" in n for n in plan.notes)
    block = plan.build_layer(1)
    assert block.attn.qkv.weight.shape == ((8 + 2 * 2) * 8, 64)
    assert isinstance(block.norm1, torch.nn.RMSNorm)
    assert block.mlp.up.weight.shape == (2 * 160, 64)
    plan = plan_hf_config(tmp_path / "config.json", "cpu", torch.float32, seq_len=32)
    x = plan.build_layer(0)(plan.make_input(1))
    assert plan.build_layer(1)(x).shape == (1, 32, 64)


def test_hf_gpt2_style_keys(tmp_path: Path) -> None:
    cfg = {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4,
           "vocab_size": 100, "n_positions": 64, "resid_pdrop": 0.1}
    plan = plan_hf_config(_write(tmp_path / "c.json", cfg), "cpu", torch.float32)
    assert (plan.seq_len, plan.hidden_size, plan.num_blocks) == (64, 32, 2)
    block = plan.build_layer(1)
    assert block.mlp.up.weight.shape == (4 * 32, 32)  # n_inner default 4 * n_embd
    assert isinstance(block.drop1, torch.nn.Dropout)


@pytest.mark.parametrize(
    "cfg,match",
    [
        ({"hidden_size": 64, "num_attention_heads": 8, "vocab_size": 10}, "missing num_hidden_layers"),
        ({"hidden_size": 60, "num_hidden_layers": 1, "num_attention_heads": 8, "vocab_size": 10},
         r"hidden_size \(60\) must be divisible by num_attention_heads \(8\)"),
        ({"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 8,
          "num_key_value_heads": 3, "vocab_size": 10}, "divisible by num_key_value_heads"),
        ({"hidden_size": "64", "num_hidden_layers": 1, "num_attention_heads": 8, "vocab_size": 10},
         "hidden_size must be a positive integer, got '64'"),
    ],
)
def test_hf_config_errors_name_the_key(tmp_path: Path, cfg: dict, match: str) -> None:  # type: ignore[type-arg]
    path = _write(tmp_path / "config.json", cfg)
    with pytest.raises(BadInput, match=match):
        plan_hf_config(path, "cpu", torch.float32)


def test_hf_config_unreadable(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="file not found"):
        plan_hf_config(tmp_path / "nope.json", "cpu", torch.float32)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(BadInput, match="not valid JSON"):
        plan_hf_config(tmp_path / "bad.json", "cpu", torch.float32)


USER_MODULE = '''
import torch
from torch import nn

def layers():
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)) for _ in range(3)]
    return blocks, torch.randn(1, 5, 16)

def broken():
    raise RuntimeError("no weights here")

def not_a_pair():
    return [nn.Linear(2, 2)]

def not_modules():
    return [lambda x: x], torch.randn(1, 2)
'''


def test_module_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "user_layers_mod.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    plan = plan_module("user_layers_mod:layers", "cpu")
    assert plan.layer_names == ["0.Sequential", "1.Sequential", "2.Sequential"]
    assert plan.seq_len == 5 and plan.param_dtype_bytes == 4
    x = plan.make_input(4)
    assert x.shape == (4, 5, 16)  # the micro-batch-1 sample repeated along dim 0
    assert plan.build_layer(0)(x).shape == (4, 5, 16)

    for spec, match in [
        ("user_layers_mod", "expects 'package.module:factory'"),
        ("no_such_module_xyz:f", "cannot import no_such_module_xyz"),
        ("user_layers_mod:missing", "has no callable 'missing'"),
        ("user_layers_mod:broken", r"broken\(\) raised RuntimeError: no weights here"),
        ("user_layers_mod:not_a_pair", r"must return \(list_of_layers, sample_input\)"),
        ("user_layers_mod:not_modules", "layer 0 is a function, not a torch.nn.Module"),
    ]:
        with pytest.raises(BadInput, match=match):
            plan_module(spec, "cpu")


def test_moe_small_blocks_route_each_token_to_its_top_k_experts() -> None:
    from pptune.probe._torch_layers import MoE

    plan = plan_preset("moe-small", "cpu", torch.float32)
    block = plan.build_layer(1)
    assert isinstance(block.mlp, MoE) and len(block.mlp.experts) == 8 and not plan.warnings
    assert (plan.experts, plan.top_k) == (8, 2)
    # parameters: attention 256 x (4 + 2 x 4) x 64 + 256 x 256, two RMSNorms 2 x 256,
    # router 256 x 8, eight SwiGLU experts 8 x (256 x 2 x 512 + 512 x 256)
    experts = 8 * (256 * 2 * 512 + 512 * 256)
    assert _params(block) == 256 * 12 * 64 + 256 * 256 + 2 * 256 + 256 * 8 + experts
    assert sum(p.numel() for p in block.routed_parameters()) == experts
    # the layer as the router defines it: each token's output is the weighted sum of its
    # top-2 experts' outputs, the two softmax weights renormalised to 1
    moe = block.mlp
    x = torch.randn(1, 5, 256)
    probs = torch.softmax(moe.router(x[0]), dim=-1)
    weights, chosen = torch.topk(probs, 2, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    expected = torch.stack([sum(weights[t, k] * moe.experts[int(chosen[t, k])](x[0, t])
                                for k in range(2)) for t in range(5)])
    assert torch.allclose(moe(x)[0], expected, atol=1e-5)
    assert param_count(presets_shape("moe-small")) == sum(
        _params(plan.build_layer(i)) for i in range(len(plan.layer_names))) - 4 * 2 * 256 - 256


def presets_shape(name: str):  # type: ignore[no-untyped-def]
    from pptune.costmodel.presets import MODELS

    return MODELS[name]


def test_a_model_of_the_demos_size_probes_on_cpu_without_a_size_warning() -> None:
    from dataclasses import replace

    from pptune.costmodel.presets import MODELS
    from pptune.probe.models import ModelPlan, _warn_if_large

    demo = MODELS["gpt-small"]

    def plan(name: str, seq_len: int) -> ModelPlan:
        return ModelPlan(name, seq_len, [], lambda i: None, lambda b: None, 4)

    same = plan("llama", demo.seq_len)  # a Hugging Face config of the demo's shape
    _warn_if_large(same, replace(demo, name="llama"), "cpu")
    assert same.warnings == []
    big = plan("llama2-7b", MODELS["llama2-7b"].seq_len)
    _warn_if_large(big, MODELS["llama2-7b"], "cpu")
    assert len(big.warnings) == 1 and "CPU demo size" in big.warnings[0]
    gpu = plan("llama2-7b", 4096)
    _warn_if_large(gpu, MODELS["llama2-7b"], "cuda")
    assert gpu.warnings == []
