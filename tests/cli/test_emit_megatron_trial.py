"""Emitted Megatron-LM scripts after a MoE engineer's trial: CUDA_DEVICE_MAX_CONNECTIONS
as Megatron-LM core_v0.16.1 wants it per GPU generation and beside the expert
all-to-all overlap (written with --delay-wgrad-compute), the router a model has
(DeepSeek-V3's sigmoid scores and expert bias), and a relative hf_config that moves
with the script."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.presets import MODELS
from pptune.frameworks.megatron.writer import connections_lines, moe_args
from pptune.plan.emit import emit, write
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
HF = Path(__file__).resolve().parents[1] / "data" / "hf"


def _check(path: Path, *flags: str) -> dict:
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare",
                            *flags])
    assert r.exit_code in (0, 1), r.stderr
    return json.loads(r.stdout)


def _plan(tp: int = 1, cp: int = 1, a2a_overlap: bool = False, ep: int = 1) -> SimpleNamespace:
    return SimpleNamespace(tp=tp, cp=cp, a2a_overlap=a2a_overlap, ep=ep, etp=1)


def test_max_connections_follow_the_gpu_and_the_overlap() -> None:
    """validate_args asserts 1 with tp or cp > 1 before Blackwell and checks nothing from
    Blackwell on; the overlap wants more than one connection (megatron-core's MoE
    README), 32 as NVIDIA's MoE recipes export it, whatever the GPU."""
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in connections_lines(_plan(tp=2), "h100-sxm")
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in connections_lines(_plan(cp=2), "a100-80gb")
    assert connections_lines(_plan(tp=2), "b200") == []
    assert connections_lines(_plan(), "h100-sxm") == []
    for gpu in ("h100-sxm", "b200"):
        assert "export CUDA_DEVICE_MAX_CONNECTIONS=32" in connections_lines(
            _plan(ep=8, a2a_overlap=True), gpu)
    warned = connections_lines(_plan(tp=2, ep=8, a2a_overlap=True), "h200")
    assert any("warns" in line for line in warned)
    assert not any("warns" in line for line in connections_lines(
        _plan(tp=2, ep=8, a2a_overlap=True), "b200"))


def test_deepseek_v3s_router_is_written() -> None:
    """DeepSeek-V3's router (its config.json: scoring_func sigmoid, topk_method noaux_tc)
    as NVIDIA's recipe writes it (Megatron-Bridge moe_model_zoo DeepSeek-V3.yaml):
    sigmoid scores, the expert bias, FP32 routing (megatron-core warns below it from 32
    experts) and fused permutation; Mixtral's 8 softmax experts keep the defaults."""
    args = moe_args(MODELS["deepseek-v3"], _plan(ep=64))
    assert {"--moe-router-score-function sigmoid", "--moe-router-enable-expert-bias",
            "--moe-router-dtype fp32", "--moe-permute-fusion"} <= set(args)
    mixtral = moe_args(MODELS["mixtral-8x7b"], _plan(ep=8))
    assert not any(a.startswith(("--moe-router-score-function", "--moe-router-dtype",
                                 "--moe-router-enable-expert-bias")) for a in mixtral)


def test_a_hugging_face_config_states_the_router() -> None:
    from pptune.costs.modelspec import read_hf_config

    v3 = read_hf_config(HF / "deepseek-v3-config.json", 4096).shape
    assert (v3.router_score, v3.router_expert_bias) == ("sigmoid", True)
    v2 = read_hf_config(HF / "deepseek-v2-config.json", 4096).shape
    assert (v2.router_score, v2.router_expert_bias) == ("softmax", False)


def test_an_overlapped_plan_is_written_with_delayed_weight_gradients(tmp_path: Path) -> None:
    """Qwen3-30B-A3B on 32 H100s at tp 2: the plan runs the expert all-to-all overlap;
    the script exports 32 connections (validate_args then warns of tp 2 on Hopper, which
    check-config says as information: 32 is the choice that warning offers, and the tensor-
    parallel collectives are priced exposed), writes --delay-wgrad-compute, and reads back
    at the same step."""
    run = recommend(RecommendSpec.of(gpus=32, model="qwen3-30b-a3b", gpu="h100-sxm", tp=2,
                                     top=1))
    out = emit("megatron", run)
    assert out.plan.a2a_overlap
    text = out.files["pretrain_megatron.sh"]
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=32" in text and "=1\n" not in text
    assert "--overlap-moe-expert-parallel-comm" in text and "--delay-wgrad-compute" in text
    write(out, tmp_path)
    doc = _check(tmp_path / "pretrain_megatron.sh")
    assert doc["exit_code"] == 0, doc["findings"]
    ids = {f["id"]: f["severity"] for f in doc["findings"]}
    assert ids["megatron-cuda-connections"] == "info"
    assert "--delay-wgrad-compute" not in doc["ignored"]
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_a_script_and_its_hf_config_move_together(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """recommend --emit -o DIR writes the hf_config of its '# pptune-plan:' line relative
    to DIR; check-config resolves it against the script's folder, not the working one, so
    the pair copied elsewhere is still priced as the model."""
    (tmp_path / "models").mkdir()
    shutil.copy(HF / "qwen2-7b-config.json", tmp_path / "models" / "config.json")
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--hf-config", "models/config.json",
                            "--seq-len", "2048", "--emit", "megatron", "-o", "out"])
    assert r.exit_code == 0, r.stderr
    text = (tmp_path / "out" / "pretrain_megatron.sh").read_text()
    assert "hf_config=../models/config.json" in text
    moved = tmp_path / "elsewhere"
    (moved / "models").mkdir(parents=True)
    (moved / "run").mkdir()
    shutil.copy(tmp_path / "models" / "config.json", moved / "models" / "config.json")
    shutil.copy(tmp_path / "out" / "pretrain_megatron.sh", moved / "run" / "train.sh")
    (tmp_path / "models" / "config.json").unlink()  # only the moved copy is left
    monkeypatch.chdir(tmp_path / "out")  # where ../models/config.json is no file now
    doc = _check(moved / "run" / "train.sh")
    assert doc["config"]["hf_config"] == "../models/config.json"
    assert "costs-unavailable" not in {f["id"] for f in doc["findings"]}
    assert doc["derived"].get("step_time_s")


def test_the_emitted_mixtral_script_checks_without_a_connections_warning(tmp_path: Path) -> None:
    """A user's trial: Mixtral 8x7B on 64 H100s at tp 2 (pp 2, ep 8, interleaved v 4, the
    expert all-to-all overlapped) was written with 32 connections, and pptune's own
    check-config warned of megatron-cuda-connections. Megatron-LM warns of tp with the
    overlap on Hopper whatever the environment and offers 1 or 32; 32 favours the overlap
    and gives up only the order one connection keeps between the tensor-parallel
    collectives and their GEMMs, which pptune prices exposed: information, not a
    warning. The same script with --tp-comm-overlap (collectives priced hidden), or
    without the export, still warns."""
    run = recommend(RecommendSpec.of(gpus=64, model="mixtral-8x7b", gpu="h100-sxm", tp=2,
                                     top=1))
    out = emit("megatron", run)
    assert (out.plan.tp, out.plan.ep, out.plan.a2a_overlap) == (2, 8, True)
    write(out, tmp_path)
    script = tmp_path / "pretrain_megatron.sh"
    doc = _check(script)
    assert doc["exit_code"] == 0
    assert [f["id"] for f in doc["findings"] if f["severity"] == "error"] == []
    [found] = [f for f in doc["findings"] if f["id"] == "megatron-cuda-connections"]
    assert found["severity"] == "info"
    assert "CUDA_DEVICE_MAX_CONNECTIONS=32 is the choice that warning offers" in found[
        "message"]
    text = script.read_text()
    (tmp_path / "hidden.sh").write_text(text.replace("--sequence-parallel \\\n",
                                                     "--sequence-parallel \\\n"
                                                     "    --tp-comm-overlap \\\n"))
    (tmp_path / "unset.sh").write_text(text.replace("export CUDA_DEVICE_MAX_CONNECTIONS=32",
                                                    ""))
    for name, why in (("hidden.sh", "--tp-comm-overlap collectives hidden"),
                      ("unset.sh", "exports no CUDA_DEVICE_MAX_CONNECTIONS")):
        [found] = [f for f in _check(tmp_path / name)["findings"]
                   if f["id"] == "megatron-cuda-connections"]
        assert found["severity"] == "warning" and why in found["message"], (name, found)


def test_the_connections_warning_says_no_value_serves_cp_and_the_overlap(
        tmp_path: Path) -> None:
    """With cp > 1 and --overlap-moe-expert-parallel-comm on Hopper, CUDA_DEVICE_MAX_
    CONNECTIONS=1 breaks the all-to-all overlap and 32 may break the ring exchange's order:
    a trial set one, then the other, and each time the warning asked for the other. The
    warning names the variable and says no value serves both."""
    run = recommend(RecommendSpec.of(gpus=64, model="mixtral-8x7b", gpu="h100-sxm", tp=2,
                                     top=1))
    text = (write(emit("megatron", run), tmp_path) and
            (tmp_path / "pretrain_megatron.sh").read_text())
    assert "--context-parallel-size" not in text
    cp = text.replace("--sequence-parallel \\\n",
                      "--sequence-parallel \\\n    --context-parallel-size 2 \\\n")
    for value in ("32", "1"):
        path = tmp_path / f"cp{value}.sh"
        path.write_text(cp.replace("export CUDA_DEVICE_MAX_CONNECTIONS=32",
                                   f"export CUDA_DEVICE_MAX_CONNECTIONS={value}"))
        [found] = [f for f in _check(path)["findings"]
                   if f["id"] == "megatron-cuda-connections"]
        assert found["severity"] == "warning", found
        assert "no CUDA_DEVICE_MAX_CONNECTIONS serves both" in found["message"], value
        assert "CUDA_DEVICE_MAX_CONNECTIONS=1 favours" in found["message"], value
