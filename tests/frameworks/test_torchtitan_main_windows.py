"""Sliding-window blocks of a torchtitan main dump (gpt_oss: each block's
``attention.sliding_window_size``, null for a full-attention block; models/gpt_oss) priced
as --hf-config prices GPT-OSS's: one window, full attention every Nth block
(TrainingConfig sliding_window, full_attention_every; ModelShape.sliding_block)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pptune.frameworks.read import read_config

DUMPS = Path(__file__).resolve().parents[1] / "data" / "torchtitan_main"
PP4 = json.loads((DUMPS / "llama3_debugmodel_pp4_interleaved_1f1b.json").read_text())


def windowed(tmp_path: Path, windows: list[int | None]) -> Any:
    """The 6-block debug model (priced by its sizes) with these windows a block."""
    dump = copy.deepcopy(PP4)
    for layer, window in zip(dump["model_spec"]["model"]["layers"], windows, strict=True):
        layer["attention"]["sliding_window_size"] = window
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump))
    return read_config(path, gpus=8)


def unmodelled(result: Any) -> list[str]:
    return [f.message for f in result.semantics.findings if f.id == "torchtitan-unmodelled"]


def test_gpt_oss_pattern_is_priced(tmp_path: Path) -> None:
    """Windows of 128 on blocks 0, 2, 4, full attention on 1, 3, 5: every 2nd block full
    ((i + 1) % 2 == 0), as GPT-OSS's layer_types."""
    result = windowed(tmp_path, [128, None, 128, None, 128, None])
    assert (result.config.sliding_window, result.config.full_attention_every) == (128, 2)
    assert unmodelled(result) == []


def test_every_block_windowed(tmp_path: Path) -> None:
    result = windowed(tmp_path, [256] * 6)
    assert (result.config.sliding_window, result.config.full_attention_every) == (256, None)
    assert unmodelled(result) == []


def test_a_pattern_pptune_cannot_state_is_said(tmp_path: Path) -> None:
    """Block 0 alone windowed: full attention on block 1 makes the period 2, but block 2
    is full too; two window sizes are not one window either."""
    for windows in ([128, None, None, None, None, None], [128, None, 64, None, 128, None]):
        result = windowed(tmp_path, windows)
        assert result.config.sliding_window is None
        [message] = unmodelled(result)
        assert message == (
            "model_spec.model: blocks " + ", ".join(str(i) for i, w in enumerate(windows) if w)
            + " attend within a sliding window (sliding_window_size or varlen window_size) in a "
            "pattern pptune "
            "does not state (one window, full attention every Nth block): priced as full "
            "causal attention")


def test_the_windows_shorten_the_predicted_step(cli: Any, tmp_path: Path) -> None:
    """2048-token sequences, windows of 128 on half the blocks: less attention work than
    full causal attention, so a shorter predicted step."""
    def step(windows: list[int | None]) -> float:
        dump = copy.deepcopy(PP4)
        for layer, window in zip(dump["model_spec"]["model"]["layers"], windows, strict=True):
            layer["attention"]["sliding_window_size"] = window
        path = tmp_path / "dump.json"
        path.write_text(json.dumps(dump))
        r = cli("check-config", path, "--gpus", "8", "--json", "--no-compare")
        return json.loads(r.stdout)["derived"]["step_time_s"]

    assert step([128, None] * 3) < step([None] * 6)


def test_a_varlen_window_is_a_sliding_window(tmp_path: Path) -> None:
    """VarlenAttention's window_size (left, 0) attends to left + 1 keys (models/gpt_oss
    __init__.py sets (sliding_window_size - 1, 0)); (-1, 0) is full causal attention."""
    dump = copy.deepcopy(PP4)
    for i, layer in enumerate(dump["model_spec"]["model"]["layers"]):
        layer["attention"]["inner_attention"] = {
            "param_init": None, "sharding_config": None,
            "window_size": [511, 0] if i % 2 == 0 else [-1, 0]}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump))
    cfg = read_config(path, gpus=8).config
    assert (cfg.sliding_window, cfg.full_attention_every) == (512, 2)


def test_an_attention_config_pptune_does_not_know_is_said_in_words(tmp_path: Path) -> None:
    """A trial saw a truncated Python dict here; the note names its own fields and values
    (not the param_init and sharding_config every config carries), and main's three."""
    dump = copy.deepcopy(PP4)
    for layer in dump["model_spec"]["model"]["layers"]:
        layer["attention"]["inner_attention"] = {
            "param_init": None, "sharding_config": {"state_shardings": {}},
            "window_size": [-1, 0], "softcap": 30.0}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump))
    assert ("model_spec.model.layers.0.attention.inner_attention (softcap 30.0, window_size "
            "[-1, 0]) is none of main's attention configs pptune knows (FlexAttention: "
            "block_size, kernel_options; varlen: window_size; SDPA: no field): priced as "
            "flash attention") in read_config(path, gpus=8).notes
