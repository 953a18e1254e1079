"""The ``# pptune-plan:`` line: an emitted Megatron-LM script or torchtitan file states
the GPU (and a Hugging Face config for a model no preset names) its plan was made for,
so check-config gives the plan back with no flags; the file's own keys and the command
line still win."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.plan.emit import emit, write
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
HF = Path(__file__).resolve().parents[1] / "data" / "hf" / "gemma3-1b-config.json"


def _check(path: Path, *flags: str) -> dict:
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare",
                            *flags])
    assert r.exit_code in (0, 1), r.stderr
    return json.loads(r.stdout)


def test_a_megatron_script_planned_for_b200_is_checked_on_b200(tmp_path: Path) -> None:
    run = recommend(RecommendSpec.of(gpus=16, model="llama3-8b", gpu="b200", top=1))
    out = emit("megatron", run)
    write(out, tmp_path)
    assert "# pptune-plan: gpu=b200\n" in out.files["pretrain_megatron.sh"]
    doc = _check(tmp_path / "pretrain_megatron.sh")
    assert doc["config"]["gpu"] == "b200"
    assert not any(f["id"] == "gpu-assumed" for f in doc["findings"])
    assert any("from the file's '# pptune-plan:' line" in n for n in doc["notes"])
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    # the command line wins, and the note and the JSON name the GPU priced
    doc = _check(tmp_path / "pretrain_megatron.sh", "--gpu", "h100-sxm")
    assert doc["derived"]["step_time_s"] != pytest.approx(out.plan.step_time_s, rel=1e-3)
    assert doc["config"]["gpu"] == "h100-sxm"
    assert ("gpu h100-sxm from --gpu, which overrides gpu b200 of the file's '# pptune-plan:' "
            "line (what recommend --emit planned for)") in doc["notes"]
    assert not any("gpu b200 from the file's" in n for n in doc["notes"])
    # the same GPU on both: the file's line, as without the flag
    doc = _check(tmp_path / "pretrain_megatron.sh", "--gpu", "b200")
    assert doc["config"]["gpu"] == "b200"


def test_a_torchtitan_file_of_a_hugging_face_model_is_priced_from_its_config(
        tmp_path: Path) -> None:
    run = recommend(RecommendSpec.of(gpus=8, hf_config=str(HF), seq_len=2048, top=1))
    out = emit("torchtitan", run)
    write(out, tmp_path)
    assert f"hf_config={HF}" in out.files["torchtitan.toml"]
    doc = _check(tmp_path / "torchtitan.toml")
    assert doc["config"]["hf_config"] == str(HF)
    assert not any(f["id"] == "model-unknown" for f in doc["findings"])
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_the_file_s_own_keys_win_and_an_unknown_gpu_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("# pptune-plan: gpu=b200\nmodel: llama3-8b\ngpu: a100-80gb\ngpus: 8\n"
                    "micro_batch_size: 1\nglobal_batch: 64\n")
    assert _check(path)["config"]["gpu"] == "a100-80gb"
    path.write_text("# pptune-plan: gpu=tpu-v5\nmodel: llama3-8b\ngpus: 8\n"
                    "micro_batch_size: 1\nglobal_batch: 64\n")
    doc = _check(path)
    assert doc["config"]["gpu"] is None
    assert any("not a preset: left out" in n for n in doc["notes"])


def test_a_torchtitan_file_planned_on_smaller_nodes_is_checked_on_them(tmp_path: Path) -> None:
    """A torchtitan file states no node size: one of 4 GPUs, not the preset's 8, rides on
    the plan line, and the check gives the step the emit predicted (the 8-GPU node had put
    the tp 2 pairs' traffic on other links). A garbled count is left out with a note."""
    run = recommend(RecommendSpec.of(gpus=16, gpus_per_node=4, model="llama3-8b",
                                     gpu="h100-sxm", top=1))
    out = emit("torchtitan", run)
    write(out, tmp_path)
    assert "# pptune-plan: gpu=h100-sxm gpus_per_node=4\n" in out.files["torchtitan.toml"]
    doc = _check(tmp_path / "torchtitan.toml")
    assert doc["config"]["gpus_per_node"] == 4
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    bad = tmp_path / "bad.toml"
    bad.write_text(out.files["torchtitan.toml"].replace("gpus_per_node=4", "gpus_per_node=x4"))
    doc = _check(bad)
    assert doc["config"]["gpus_per_node"] == 8
    assert any("names gpus_per_node 'x4', not a count" in n for n in doc["notes"])
    # a node of the preset's own size says nothing
    plain = emit("torchtitan", recommend(RecommendSpec.of(gpus=16, model="llama3-8b",
                                                          gpu="h100-sxm", top=1)))
    assert "gpus_per_node" not in plain.files["torchtitan.toml"]


def test_a_relative_hf_config_is_written_relative_to_the_output_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """check-config resolves a file's hf_config against the file's folder (check/costs.py):
    recommend --emit -o DIR writes it relative to DIR, and the file still finds it when
    checked from another working folder."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "config.json").write_text(HF.read_text())
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--hf-config", "models/config.json",
                            "--seq-len", "2048", "--emit", "deepspeed", "-o", "out"])
    assert r.exit_code == 0, r.stderr
    written = json.loads((tmp_path / "out" / "ds_config.json").read_text())
    assert written["pptune"]["hf_config"] == "../models/config.json"
    monkeypatch.chdir(tmp_path / "elsewhere")
    doc = _check(tmp_path / "out" / "ds_config.json", "--gpus", "8")
    ids = {f["id"] for f in doc["findings"]}
    assert "costs-unavailable" not in ids and "model-unknown" not in ids
    assert doc["derived"].get("step_time_s")


def test_a_path_sharing_no_folder_but_the_root_stays_absolute() -> None:
    from pptune.plan.emit import as_written

    assert as_written("/models/a/config.json", Path("/runs/out")) == "/models/a/config.json"
    assert as_written("/work/models/config.json", Path("/work/runs/out")) == (
        "../../models/config.json")
