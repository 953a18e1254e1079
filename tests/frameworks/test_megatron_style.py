"""A block's style in Megatron-LM scripts: --normalization, --disable-bias-linear,
--add-qkv-bias and --untie-embeddings-and-output-weights read into the config, written
from the shape, and a plan of a LayerNorm or QKV-bias model round-tripped through
check-config (frameworks/megatron/style.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.models import MODELS, Norm
from pptune.errors import BadInput
from pptune.frameworks.megatron.style import style_args
from pptune.frameworks.read import read_config
from pptune.plan.emit import Framework, emit, write
from pptune.plan.recommend import RecommendSpec, recommend
from tests.check_json import check_file

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
runner = CliRunner()
SCRIPT = (
    "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py \\\n"
    "  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \\\n"
    "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --swiglu \\\n"
    "  --ffn-hidden-size 11008 --seq-length 2048 --max-position-embeddings 2048 \\\n"
    "  --micro-batch-size 1 \\\n"
    "  --global-batch-size 64 --bf16 --use-distributed-optimizer {style}\n"
)
STYLE = ("normalization", "qkv_bias", "attn_out_bias", "mlp_bias", "tied_embeddings")


def _style(tmp_path: Path, flags: str) -> tuple[object, ...]:
    path = tmp_path / "train.sh"
    path.write_text(SCRIPT.format(style=flags))
    cfg = read_config(path).config
    return tuple(getattr(cfg, key) for key in STYLE)


def test_flags_read_as_megatron_builds_them(tmp_path: Path) -> None:
    # unsaid: the model's own style (a script priced before these flags were read)
    assert _style(tmp_path, "") == (None,) * 5
    assert _style(tmp_path, "--normalization RMSNorm --disable-bias-linear "
                            "--untie-embeddings-and-output-weights") == (
        "rmsnorm", False, False, False, False)
    # megatron-core's linear_qkv: bias=add_bias_linear or add_qkv_bias
    assert _style(tmp_path, "--normalization LayerNorm --disable-bias-linear --add-qkv-bias") == (
        "layernorm", True, False, False, None)
    assert _style(tmp_path, "--add-qkv-bias") == (None, True, None, None, None)
    with pytest.raises(BadInput, match="--normalization is 'ScaleNorm'; expected one of "
                                       "LayerNorm, RMSNorm"):
        _style(tmp_path, "--normalization ScaleNorm")


def test_stated_biases_are_priced(tmp_path: Path) -> None:
    """Biases cost memory and their share of the optimizer step and gradient reduction,
    no kernel time: a larger peak, a step a hair longer."""
    _, _, plain = check_file(tmp_path / "a.sh", SCRIPT.format(style="--disable-bias-linear"),
                             "--gpu", "h100-sxm")
    _, _, biased = check_file(tmp_path / "b.sh", SCRIPT.format(style=""), "--gpu", "h100-sxm")
    _, _, qkv = check_file(tmp_path / "c.sh", SCRIPT.format(
        style="--disable-bias-linear --add-qkv-bias"), "--gpu", "h100-sxm")
    step = plain["derived"]["step_time_s"]
    assert step < qkv["derived"]["step_time_s"] < step * 1.0001
    assert biased["config"]["qkv_bias"] is None  # unsaid: priced as before, without biases
    assert biased["derived"]["peak_memory_bytes"] == plain["derived"]["peak_memory_bytes"]
    assert qkv["derived"]["peak_memory_bytes"] > plain["derived"]["peak_memory_bytes"]


def test_writer_states_the_shapes_style() -> None:
    llama = MODELS["llama3-8b"]
    assert style_args(llama, []) == ["--normalization RMSNorm", "--disable-bias-linear",
                                     "--untie-embeddings-and-output-weights"]
    qwen2 = dataclasses.replace(llama, qkv_bias=True)
    assert style_args(qwen2, []) == ["--normalization RMSNorm", "--disable-bias-linear",
                                     "--add-qkv-bias", "--untie-embeddings-and-output-weights"]
    # GPT-2 style with every bias and a tied head: Megatron-LM's defaults but the norm
    gpt = dataclasses.replace(MODELS["gpt3-13b"], qkv_bias=True, attn_out_bias=True,
                              mlp_bias=True, tied_embeddings=True)
    assert style_args(gpt, []) == ["--normalization LayerNorm"]
    # Phi-3.5-MoE with attention_bias: LayerNorm, QKV bias; the output's bias unsayable
    phi = dataclasses.replace(llama, norm=Norm.LAYERNORM, qkv_bias=True, attn_out_bias=True)
    unsaid: list[str] = []
    assert style_args(phi, unsaid) == ["--normalization LayerNorm", "--disable-bias-linear",
                                       "--add-qkv-bias", "--untie-embeddings-and-output-weights"]
    assert unsaid == ["the attention output's biases are priced but left out: Megatron-LM "
                      "states biases on every linear layer or on QKV alone"]
    # GPT-OSS's experts split over etp 2: megatron-core refuses their biases
    oss, unsaid = MODELS["gpt-oss-120b"], []
    assert style_args(oss, unsaid) == ["--normalization RMSNorm",
                                       "--untie-embeddings-and-output-weights"]
    assert style_args(oss, unsaid, etp=2) == [
        "--normalization RMSNorm", "--disable-bias-linear", "--add-qkv-bias",
        "--untie-embeddings-and-output-weights"]
    assert unsaid == ["the attention output's and the MLP's biases are priced but left out: "
                      "megatron-core takes no expert biases with --expert-tensor-parallel-size "
                      "2 ('Bias in Moe is only supported when ETP==1')"]


@pytest.mark.parametrize("config", ["qwen2-7b-config.json", "phi-3.5-moe-config.json"])
def test_hugging_face_style_round_trips(config: str, tmp_path: Path) -> None:
    hf = str(HF / config)
    run = recommend(RecommendSpec.of(gpus=16, hf_config=hf, gpu="h100-sxm", seq_len=4096,
                                     top=1))
    emitted = emit(Framework.MEGATRON, run)
    text = emitted.files["pretrain_megatron.sh"]
    if config.startswith("qwen2"):
        assert "--normalization RMSNorm" in text and "--add-qkv-bias" in text
    else:
        assert "--normalization LayerNorm" in text and "--add-qkv-bias" not in text
    assert "--disable-bias-linear" in text and "--untie-embeddings-and-output-weights" in text
    write(emitted, tmp_path)
    r = runner.invoke(app, ["check-config", str(tmp_path / "pretrain_megatron.sh"), "--output",
                            "json", "--gpu", "h100-sxm", "--hf-config", hf])
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
    assert doc["derived"]["peak_memory_bytes"] == pytest.approx(
        emitted.plan.peak_memory_bytes, rel=1e-9)
