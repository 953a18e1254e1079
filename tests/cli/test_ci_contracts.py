"""What a CI script relies on: GitHub annotation properties escaped, a JSON document for
a file that cannot be checked, no plan file replaced when no plan fits, caps said with
their value, a probe profile's model heads checked against --tp."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pptune.check.render import github_error
from pptune.cli.app import app

runner = CliRunner()


def test_a_file_name_is_escaped_as_a_property() -> None:
    # actions/toolkit escapeProperty: %, CR, LF, ':' and ','; the message keeps ':' and ','
    line = github_error(Path("t/a,b:c%d.yaml"), "bad: x, y").splitlines()[0]
    assert line == "::error file=t/a%2Cb%3Ac%25d.yaml,title=pptune cannot-check::bad: x, y"


def test_json_output_of_a_file_that_cannot_be_checked(tmp_path: Path) -> None:
    r = runner.invoke(app, ["check-config", str(tmp_path / "missing.yaml"), "--output", "json"])
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and "not found" in doc["error"]
    assert doc["file"] == str(tmp_path / "missing.yaml")


def test_no_plan_leaves_the_output_file_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "plans.json"
    earlier = '{"plans": [], "rejected": {}}\n'  # an earlier run's plan file, replaceable
    out.write_text(earlier)
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--micro-batch-sizes", "65536",
                            "-o", str(out)])
    assert r.exit_code == 1
    assert out.read_text() == earlier
    assert "not written: no plan fits" in r.stderr


def test_caps_are_said_with_their_value_and_the_probe_size_is_capped(tmp_path: Path) -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--global-batch", "2000000000"])
    assert r.exit_code == 2 and "must be <= 1,073,741,824" in r.stderr
    r = runner.invoke(app, ["probe", "--max-bytes", "1T", "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 2 and "at most 16 GiB" in r.stderr
    assert not (tmp_path / "p.json").exists()


def test_a_probe_profile_of_a_preset_refuses_a_tp_its_heads_cannot_take(tmp_path: Path
                                                                        ) -> None:
    from pptune.costs.profiles import analytic_profile

    profile = tmp_path / "profile.json"  # a profile of the gpt-small preset (4 heads)
    profile.write_text(analytic_profile("gpt-small", "h100-sxm", [1]).model_dump_json())
    doc = json.loads(profile.read_text())
    assert doc["model"]["name"] == "gpt-small" and doc["model"].get("hf_config") is None
    r = runner.invoke(app, ["recommend", "--gpus", "64", "--tp", "8", "--profile",
                            str(profile)])
    assert r.exit_code == 2
    assert "does not divide the 4 attention heads" in r.stderr and "gpt-small preset" in r.stderr


def test_deepspeed_memory_fixes_name_what_deepspeed_runs(tmp_path: Path) -> None:
    """A pipelined ZeRO-1 overflow is not told to use ZeRO-2/3 (the PipelineEngine refuses
    them); a ZeRO-3 overflow is not told to add pipeline stages (nor can it pipeline)."""
    piped = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
             "bf16": {"enabled": True}, "zero_optimization": {"stage": 1},
             "pipeline": {"stages": 2}}
    zero3 = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
             "bf16": {"enabled": True}, "zero_optimization": {"stage": 3},
             "pptune": {"recompute": "full"}}
    for doc, absent in ((piped, "ZeRO"), (zero3, "pipeline stages")):
        path = tmp_path / "ds.json"
        path.write_text(json.dumps(doc))
        r = runner.invoke(app, ["check-config", str(path), "--gpus", "8", "--model",
                                "llama3-70b", "--gpu", "h100-sxm", "--output", "json",
                                "--no-compare"])
        over = [f["message"] for f in json.loads(r.stdout)["findings"]
                if f["id"] == "memory-overflow"]
        assert over and all(absent not in m.split("; use ")[1] for m in over), over
