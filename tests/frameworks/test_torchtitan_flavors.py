"""torchtitan's Llama 4 flavor and the model notes of a torchtitan file (a B200 user
trial's findings 4 and 5)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app
from tests.check_json import check_file

ROOT = Path(__file__).resolve().parents[1] / "data"
SCOUT = (ROOT / "configs" / "torchtitan_llama4_scout_ep8.toml").read_text()
SCOUT_HF = ROOT / "hf" / "llama4-scout-17b-16e-config.json"
NO_PRESET = "has no pptune preset"
runner = CliRunner()


def test_llama4_17bx16e_is_priced_as_scout(tmp_path: Path) -> None:
    """torchtitan 0.2.2's llama4 17bx16e is Llama 4 Scout's shape (its llama4_args): the
    file prices with the preset, as with the Hugging Face config."""
    code, _, doc = check_file(tmp_path / "job.toml", SCOUT, "--gpus", "64", "--gpu", "b200")
    assert code == 0 and doc["config"]["model"] == "llama4-scout"
    assert not [n for n in doc["notes"] if NO_PRESET in n]
    _, _, hf = check_file(tmp_path / "job.toml", SCOUT, "--gpus", "64", "--gpu", "b200",
                          "--hf-config", str(SCOUT_HF))
    assert hf["derived"]["step_time_s"] == doc["derived"]["step_time_s"]


def test_no_preset_note_goes_once_the_model_is_known(tmp_path: Path) -> None:
    """A flavor without a preset says so, unless --hf-config or the file's plan line names
    the model (a flavor torchtitan registers only through [experimental] custom_import)."""
    custom = SCOUT.replace('flavor = "17bx16e"', 'flavor = "custom"') + (
        '\n[experimental]\ncustom_import = "my_specs"\n')
    _, _, doc = check_file(tmp_path / "job.toml", custom, "--gpus", "64", "--gpu", "b200")
    assert [n for n in doc["notes"] if NO_PRESET in n]
    _, _, doc = check_file(tmp_path / "job.toml", custom, "--gpus", "64", "--gpu", "b200",
                           "--hf-config", str(SCOUT_HF))
    assert not [n for n in doc["notes"] if NO_PRESET in n] and doc["derived"]["step_time_s"] is not None
    planned = f"# pptune-plan: gpu=b200 hf_config={SCOUT_HF}\n" + custom
    _, _, doc = check_file(tmp_path / "job.toml", planned, "--gpus", "64")
    assert not [n for n in doc["notes"] if NO_PRESET in n]
    assert [n for n in doc["notes"] if "'# pptune-plan:' line" in n]


def test_emit_names_torchtitans_llama4_flavor(tmp_path: Path) -> None:
    """The file names the flavor, and check-config prices it as recommend did."""
    out = tmp_path / "out"
    r = runner.invoke(app, ["recommend", "--hf-config", str(SCOUT_HF), "--gpus", "64",
                            "--gpu", "b200", "--ep", "8", "--pp", "1", "--emit", "torchtitan",
                            "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    text = (out / "torchtitan.toml").read_text()
    assert 'name = "llama4"\nflavor = "17bx16e"' in text and "custom" not in text
    predicted = float(text.split("# predicted: step ")[1].split(" s,")[0])
    r = runner.invoke(app, ["check-config", str(out / "torchtitan.toml"), "--output", "json",
                            "--no-compare"])
    doc = json.loads(r.stdout)
    assert not [n for n in doc["notes"] if NO_PRESET in n]
    assert round(doc["derived"]["step_time_s"], 3) == predicted


def test_a_written_hf_model_with_mtp_is_checked_without_it(tmp_path: Path) -> None:
    """torchtitan builds no multi-token-prediction module: recommend plans GLM-4.5-Air
    (1 MTP layer) without it, and check-config of the custom-flavor file it writes (the
    model from its plan line's hf_config) prices the same step and stages, not the MTP
    layer on the last stage (a user trial: 18.641 s and an 18.6% bubble against 15.024 s)."""
    from pptune.frameworks.registry import Framework
    from pptune.plan.emit import emit, write
    from pptune.plan.recommend import RecommendSpec, recommend
    glm = ROOT / "hf" / "glm-4.5-air-config.json"
    run = recommend(replace(RecommendSpec.of(gpus=32, seq_len=4096, hf_config=glm, top=1),
                            framework="torchtitan"))
    out = emit(Framework.TORCHTITAN, run)
    write(out, tmp_path)
    c = runner.invoke(app, ["check-config", str(tmp_path / "torchtitan.toml"), "--output",
                            "json", "--no-compare"])
    doc = json.loads(c.stdout)
    assert doc["errors"] == 0, doc["findings"]
    assert doc["config"]["mtp_layers"] == 0
    said = [f["message"] for f in doc["findings"] if f["id"] == "mtp-from-config"]
    assert said == ["using the config's 0 MTP layers instead of 1"]
    assert doc["derived"]["step_time_s"] == out.plan.step_time_s
    assert max(doc["derived"]["peak_memory_bytes"]) == max(out.plan.peak_memory_bytes)

