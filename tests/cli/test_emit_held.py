"""Sizes recommend held (--tp, --cp, --ep, --etp, --pp at one value) are named in the files
--emit writes (``held=`` on the plan line; ``"held"`` in DeepSpeed's ``"pptune"``
section), and check-config's best-plan comparison keeps them at the file's: a file the
user forced to tp 2, cp 2 and pp 2 passes ``--strict``, where the same file without the
line fails slower-than-best against a tp 1, cp 1 plan (a user trial's round trip)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner, Result

from pptune.cli.app import app
from pptune.plan.emit import emit, write
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()


def _check(path: Path, *flags: str) -> tuple[int, dict]:
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", *flags])
    assert r.exit_code in (0, 1), r.stderr
    return r.exit_code, json.loads(r.stdout)


def test_forced_sizes_are_held_by_the_comparison_and_said(tmp_path: Path) -> None:
    run = recommend(RecommendSpec.of(gpus=8, model="llama3-8b", tp="2", cp="2", pp="2",
                                     precision="fp8", top=1))
    out = emit("megatron", run)
    script = out.files["pretrain_megatron.sh"]
    assert "# pptune-plan: gpu=h100-sxm held=tp,cp,pp\n" in script
    write(out, tmp_path)
    code, doc = _check(tmp_path / "pretrain_megatron.sh", "--strict")
    assert code == 0, doc["findings"]
    assert doc["config"]["limits"]["held"] == ["tp", "cp", "pp"]
    assert ("the best-plan comparison keeps the file's tp, cp, pp: the file's "
            "'# pptune-plan:' line holds them (recommend --emit writes the sizes a flag held; "
            "delete held to compare every size)") in doc["notes"]
    assert doc["derived"]["slowdown_vs_best"] <= 1.10
    # without held=, every size is compared: a faster plan of other sizes is found
    (tmp_path / "open.sh").write_text(script.replace(" held=tp,cp,pp", ""))
    code, doc = _check(tmp_path / "open.sh", "--strict")
    assert code == 1
    (slow,) = [f for f in doc["findings"] if f["id"] == "slower-than-best"]
    assert slow["values"]["slowdown"] > 1.10 and "tp" in slow["values"]["differs"]


def test_a_size_given_several_values_or_none_is_not_held(tmp_path: Path) -> None:
    for flags, line in (({"cp": "1,2"}, "# pptune-plan: gpu=h100-sxm\n"),
                        ({}, "# pptune-plan: gpu=h100-sxm\n"),
                        ({"pp": "4"}, "# pptune-plan: gpu=h100-sxm held=pp\n")):
        run = recommend(RecommendSpec.of(gpus=16, model="llama3-8b", top=1, **flags))
        assert line in emit("torchtitan", run).files["torchtitan.toml"], flags


def test_deepspeed_states_held_in_its_pptune_section(tmp_path: Path) -> None:
    run = recommend(RecommendSpec.of(gpus=16, model="llama3-8b", pp="2", top=1))
    out = emit("deepspeed", run)
    ds = json.loads(out.files["ds_config.json"])
    assert ds["pptune"]["held"] == ["pp"]
    write(out, tmp_path)
    code, doc = _check(tmp_path / "ds_config.json", "--strict")
    assert code == 0 and doc["config"]["limits"]["held"] == ["pp"]
    assert doc["derived"]["slowdown_vs_best"] <= 1.10
    assert ("the best-plan comparison keeps the file's pp: pptune.held holds it (recommend "
            "--emit writes the sizes a flag held; delete held to compare every size)"
            ) in doc["notes"]


def test_a_held_naming_no_size_is_refused_or_left_out(tmp_path: Path, error_line: Callable[
        [Result], str]) -> None:
    run = recommend(RecommendSpec.of(gpus=16, model="llama3-8b", pp="2", top=1))
    ds = json.loads(emit("deepspeed", run).files["ds_config.json"])
    ds["pptune"]["held"] = ["pp", "dp"]
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    line = error_line(runner.invoke(app, ["check-config", str(tmp_path / "ds.json")]))
    assert "pptune.held is ['pp', 'dp']; expected a list of the parallel sizes" in line
    script = emit("megatron", run).files["pretrain_megatron.sh"]
    (tmp_path / "odd.sh").write_text(script.replace("held=pp", "held=pp,dp"))
    _, doc = _check(tmp_path / "odd.sh", "--no-compare")
    assert doc["config"]["limits"]["held"] == ["pp"]
    assert ("'# pptune-plan:' holds 'dp', not a parallel size (tp, cp, ep, etp, pp): left "
            "out") in doc["notes"]


def test_deepspeed_keeps_a_held_pipeline_for_its_substitute() -> None:
    """DeepSpeed runs AutoTP without a pipeline: its substitute for a plan it cannot state
    (Llama 3 70B on 16 MI300X at cp 4) had taken pp 1 at tp 8 under --pp 4, over the GPU's
    memory (a trial: the file said held pp and stated pp 1); at a held pp above 1 only
    tp 1 is stateable, and pp 4 at tp 1 fits."""
    run = recommend(RecommendSpec.of(gpus=16, model="llama3-70b", gpu="mi300x", pp="4",
                                     top=1))
    out = emit("deepspeed", run)
    assert (out.plan.pp, out.plan.tp) == (4, 1)
    assert max(out.plan.peak_memory_bytes) < 192 * 1024**3
    assert json.loads(out.files["ds_config.json"])["pptune"]["held"] == ["pp"]


def test_pptune_s_own_limits_held_is_said_and_wins_over_the_line(tmp_path: Path) -> None:
    run = recommend(RecommendSpec.of(gpus=16, model="llama3-8b", pp="2", top=1))
    text = emit("pptune", run).files["pptune.yaml"]
    assert "held=pp" in text
    (tmp_path / "own.yaml").write_text(text.replace("held=pp", "held=TP") +
                                       "limits:\n  held: [pp]\n")
    _, doc = _check(tmp_path / "own.yaml")  # the note goes with the comparison it is of
    assert doc["config"]["limits"]["held"] == ["pp"]
    assert ("the best-plan comparison keeps the file's pp: its limits.held holds it (recommend "
            "--emit writes the sizes a flag held; delete held to compare every size)"
            ) in doc["notes"]
    assert "'# pptune-plan:' holds TP; the file's limits.held wins" in doc["notes"]
    # the line alone, in capitals: read as the sizes it names
    (tmp_path / "line.yaml").write_text(text.replace("held=pp", "held=PP"))
    _, doc = _check(tmp_path / "line.yaml", "--no-compare")
    assert doc["config"]["limits"]["held"] == ["pp"]
