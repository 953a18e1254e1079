"""recommend --emit torchtitan for a pptune preset torchtitan does not ship (GPT-3,
Llama 2, Mixtral, Nemotron): the file names it as a TrainSpec the user registers,
[model] name = the preset, flavor = "custom" (writer.py), and check-config reads that
name back as the preset, so it prices the file the way its header says. The [compile]
comment says what compiling fuses for the model: no SwiGLU for GPT-3's GeLU MLP, whose
activation is one kernel each way compiled or eager (ops.activation_ops)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from tests.check_json import check_file

runner = CliRunner()


def _emit(tmp_path: Path, *flags: str) -> str:
    r = runner.invoke(app, ["recommend", *flags, "--top", "1", "--emit", "torchtitan", "-o",
                            str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    return (tmp_path / "torchtitan.toml").read_text()


def _read_back(tmp_path: Path) -> dict:
    r = runner.invoke(app, ["check-config", str(tmp_path / "torchtitan.toml"), "--output",
                            "json", "--no-compare"])
    assert r.exit_code == 0, r.stdout
    return json.loads(r.stdout)


@pytest.mark.parametrize(("model", "gpus", "compiled"), [
    ("gpt3-1.3b", "8", "enable = true  # fuses the loss, as priced; the model is compiled too "
                       "(no SwiGLU: its GeLU is one kernel each way either way)\n"),
    ("llama2-7b", "8", "enable = true  # fuses the SwiGLU and the loss, as priced\n"),
])
def test_a_custom_flavor_of_a_preset_is_priced_as_the_preset(
        tmp_path: Path, model: str, gpus: str, compiled: str) -> None:
    text = _emit(tmp_path, "--gpus", gpus, "--model", model)
    assert f'[model]\nname = "{model}"\nflavor = "custom"\n' in text
    assert compiled in text
    predicted = float(text.split("# predicted: step ")[1].split(" s,")[0])
    doc = _read_back(tmp_path)
    assert doc["config"]["model"] == model
    ids = {f["id"] for f in doc["findings"]}
    assert "model-unknown" not in ids and "memory-ok" in ids
    assert not any("has no pptune preset" in n for n in doc["notes"])
    assert any(f"model {model} flavor custom read as pptune's {model} preset" in n
               for n in doc["notes"])
    assert round(doc["derived"]["step_time_s"], 3) == predicted


def test_a_custom_moe_preset_keeps_its_experts(tmp_path: Path) -> None:
    """Mixtral 8x7B on 32 H100s, its experts over ep: read back with its 8 experts and
    the file's expert degree, at the step the header predicts."""
    text = _emit(tmp_path, "--gpus", "32", "--model", "mixtral-8x7b")
    assert 'name = "mixtral-8x7b"' in text and "expert_parallel_degree = " in text
    ep = int(text.split("expert_parallel_degree = ")[1].split("\n")[0])
    predicted = float(text.split("# predicted: step ")[1].split(" s,")[0])
    doc = _read_back(tmp_path)
    assert (doc["config"]["model"], doc["config"]["ep"]) == ("mixtral-8x7b", ep)
    assert round(doc["derived"]["step_time_s"], 3) == predicted


def test_only_the_custom_flavor_of_a_preset_name_is_read_as_it(tmp_path: Path) -> None:
    """A flavor other than "custom", or a name no preset has, stays a model pptune does
    not know (check-config's --model or --hf-config names it)."""
    base = ('[training]\nlocal_batch_size = 1\nseq_len = 2048\n'
            '[parallelism]\ndata_parallel_shard_degree = 8\n[model]\n')
    for name, flavor, known in (("llama2-7b", "custom", "llama2-7b"),
                                ("llama2-7b", "7B", None), ("my-model", "custom", None)):
        _, found, doc = check_file(tmp_path / "t.toml",
                                   base + f'name = "{name}"\nflavor = "{flavor}"\n',
                                   "--gpus", "8", "--gpu", "h100-sxm")
        assert doc["config"]["model"] == known, (name, flavor)
        assert ("model-unknown" in found) == (known is None), (name, flavor)
