"""Which preset a model shape is (models.preset_of): a Hugging Face config of a preset's
model is that preset whatever sequence and batch it names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pptune.costmodel.models import MODELS, preset_of
from pptune.costs.modelspec import from_hf_config

HF = Path(__file__).resolve().parents[1] / "data" / "hf"


@pytest.mark.parametrize("name", list(MODELS))
def test_every_preset_is_its_own(name: str) -> None:
    assert preset_of(MODELS[name]) == name


@pytest.mark.parametrize(("config", "preset"), [
    ("deepseek-v3-config.json", "deepseek-v3"),  # kv_channels 0 (MLA: not priced)
    ("mixtral-8x7b-config.json", "mixtral-8x7b"),  # sequence 32,768
    ("qwen3-30b-a3b-config.json", "qwen3-30b-a3b"),
    ("gpt-oss-120b-config.json", "gpt-oss-120b"),
])
def test_hugging_face_configs_of_presets(config: str, preset: str) -> None:
    assert preset_of(from_hf_config(HF / config)) == preset


def test_another_shape_is_no_preset() -> None:
    llama = MODELS["llama3-8b"]
    assert preset_of(dataclasses.replace(llama, num_blocks=31)) is None
    assert preset_of(dataclasses.replace(llama, kv_channels=64)) is None  # head dim 64
    assert preset_of(dataclasses.replace(llama, kv_channels=128)) == "llama3-8b"  # 4096 / 32
    assert preset_of(from_hf_config(HF / "qwen2-7b-config.json")) is None
