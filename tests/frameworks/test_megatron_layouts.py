"""Megatron-LM's --pipeline-model-parallel-layout in check-config: NVIDIA's recipes
read stage by stage, megatron-core's rules as error findings (exit 1), strings no
parser reads as stages as bad input (exit 2), and block recomputation per stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()
DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
# a prediction is not a framework rule (as bench/peers counts them)
PREDICTIONS = {"memory-overflow", "bubble-over-limit", "slower-than-best", "prediction-skipped"}
SCRIPT = ("torchrun --nproc_per_node {gpus} pretrain_gpt.py --num-layers {layers} "
          "--hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
          "--pipeline-model-parallel-size {pp} --micro-batch-size 1 --global-batch-size 16 "
          "{extra}\n")


def check(path: Path, *flags: str) -> tuple[int, dict, str]:
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare",
                            *flags])
    return r.exit_code, (json.loads(r.stdout) if r.exit_code != 2 else {}), r.stderr


def script(tmp_path: Path, extra: str, *, layers: int = 8, pp: int = 4,
           gpus: int = 4) -> tuple[int, dict, str]:
    path = tmp_path / "run.sh"
    path.write_text(SCRIPT.format(layers=layers, pp=pp, gpus=gpus, extra=extra))
    return check(path, "--model", "gpt-small", "--gpu", "h100-sxm")


def rule_errors(doc: dict) -> list[str]:
    return [f["id"] for f in doc["findings"]
            if f["severity"] == "error" and f["id"] not in PREDICTIONS]


def test_deepseek_v3_recipe_reads_as_megatron_runs_it() -> None:
    """61 layers over PP 8: no divisibility error (the layout places them), 32
    stages of 2 table layers each (E t, t t x 30, m L), 4 virtual stages."""
    code, doc, _ = check(DATA / "megatron_deepseek_v3_layout.sh")
    assert code in (0, 1) and rule_errors(doc) == []
    assert not any("divisible" in f["message"] for f in doc["findings"])
    cfg = doc["config"]
    assert (cfg["pp"], cfg["virtual_stages"], cfg["schedule"]) == (8, 4, "interleaved-1f1b")
    assert cfg["pipeline_layout"] == "Et|(tt|)*30mL" and cfg["mtp_layers"] == 1
    assert cfg["stage_layers"] == [1] + [2] * 30 + [0]  # transformer layers per stage
    # the plan file's key: the cost table's layers (embedding, blocks, MTP, head)
    assert doc["derived"]["stage_layers"] == [2] * 32
    # its selective recomputation of the MLA up-projections and dense MLPs is priced:
    # the recipe fits its 80 GB H100s (priced as kept, six of its eight ranks would not)
    assert cfg["recompute_modules"] == ["mla_up_proj", "mlp"]
    assert "memory-ok" in [f["id"] for f in doc["findings"]], doc["findings"]


def test_llama3_70b_fp8_recipe_reads_forty_stages() -> None:
    code, doc, _ = check(DATA / "megatron_llama3_70b_fp8_layout.sh")
    assert code in (0, 1) and rule_errors(doc) == []
    cfg = doc["config"]
    assert (cfg["pp"], cfg["virtual_stages"]) == (8, 5)
    assert cfg["stage_layers"] == [2] * 35 + [3] + [2] * 3 + [1]
    assert doc["derived"]["stage_layers"] == [3] + [2] * 34 + [3] + [2] * 4
    assert sum(doc["derived"]["stage_layers"]) == 82  # 80 layers, embedding, head


def test_an_uneven_layout_is_predicted_as_stated(tmp_path: Path) -> None:
    code, doc, _ = script(tmp_path, "--pipeline-model-parallel-layout 'Et|ttt|ttt|tL'")
    assert code in (0, 1) and rule_errors(doc) == [], doc["findings"]
    assert doc["derived"]["stage_layers"] == [2, 3, 3, 2]
    # 8 layers over pp 4 would divide; over pp 3 they would not: no error either way
    code, doc, _ = script(tmp_path, "--pipeline-model-parallel-layout 'Ettt|ttt|ttL'", pp=3,
                          gpus=3)
    assert rule_errors(doc) == [] and doc["derived"]["stage_layers"] == [4, 3, 3]


def test_empty_stages_and_a_stage_of_its_own_for_the_loss(tmp_path: Path) -> None:
    _code, doc, _ = script(tmp_path, "--pipeline-model-parallel-layout 'Et*4|t*4||L'")
    assert rule_errors(doc) == [], doc["findings"]
    assert doc["derived"]["stage_layers"] == [5, 4, 0, 1]
    assert len(doc["derived"]["peak_memory_bytes"]) == 4


@pytest.mark.parametrize(("layout", "column", "needle"), [
    ("Et|tx|tt|tL", 5, "unknown symbol 'x'"),
    ("Et|(tt|tt|tL", 4, "never closed"),
    ("Et|tt)|tt|tL", 6, "closes nothing"),
    ("Et*0|t*4|tt|ttL", 3, "count of 0"),
    ("E((t|)*2)*2|L", 3, "nested"),
])
def test_strings_that_are_no_layout_are_bad_input(tmp_path: Path, layout: str, column: int,
                                                  needle: str) -> None:
    code, _, err = script(tmp_path, f"--pipeline-model-parallel-layout '{layout}'")
    assert code == 2
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"at column {column}" in line and needle in line
    assert "--pipeline-model-parallel-layout" in line


@pytest.mark.parametrize(("extra", "rule", "needle"), [
    # 9 transformer layers for --num-layers 8: the ninth t is pointed at
    ("--pipeline-model-parallel-layout 'Et|ttt|ttt|ttL'", "megatron-layout",
     "at column 13: the layout places 9 transformer layers t; the model has 8"),
    # 5 stages for pp 4
    ("--pipeline-model-parallel-layout 'Et|tt|tt|tt|tL'", "megatron-layout",
     "5 stages where a multiple of pp = 4 are needed"),
    ("--pipeline-model-parallel-layout 'tE|ttt|ttt|tL'", "megatron-layout",
     "the first layer must be the embedding E"),
    ("--pipeline-model-parallel-layout 'Et|ttt|ttt|tmL'", "megatron-layout",
     "MTP layers m; the model has 0"),
    ("--pipeline-model-parallel-layout 'Et|ttt|ttt|tL' --decoder-first-pipeline-num-layers 1",
     "megatron-layout-conflict", "cannot be set with other pipeline layout arguments"),
    ("--pipeline-model-parallel-layout 'Et|ttt|ttt|tL' --num-virtual-stages-per-pipeline-rank 2",
     "megatron-vpp-flags", "No more than one"),
])
def test_megatron_refusals_are_error_findings(tmp_path: Path, extra: str, rule: str,
                                              needle: str) -> None:
    code, doc, _ = script(tmp_path, extra)
    assert code == 1
    found = {f["id"]: f["message"] for f in doc["findings"]}
    assert rule in found and needle in found[rule], found


def test_an_mtp_layout_needs_its_mtp_layers_stated(tmp_path: Path) -> None:
    rope = "--position-embedding-type rope"  # MTP refuses learned absolute positions
    _, doc, _ = script(tmp_path, "--pipeline-model-parallel-layout 'Et|ttt|ttt|tmL' "
                       f"--mtp-num-layers 1 {rope}")
    assert rule_errors(doc) == [] and doc["config"]["mtp_layers"] == 1
    _, doc, _ = script(tmp_path, "--pipeline-model-parallel-layout 'Et|ttt|ttt|tL' "
                       f"--mtp-num-layers 1 {rope}")
    assert "megatron-layout" in rule_errors(doc)


def test_block_recomputation_recomputes_the_first_n_of_every_stage(tmp_path: Path) -> None:
    full = "--recompute-granularity full --recompute-method"
    _, doc, _ = script(tmp_path, f"{full} block --recompute-num-layers 2", layers=32)
    assert doc["config"]["recompute_block_layers"] == 2
    assert doc["derived"]["recompute_layers_per_stage"] == [2, 2, 2, 2]
    _, many, _ = script(tmp_path, f"{full} block --recompute-num-layers 20", layers=32)
    assert many["derived"]["recompute_layers_per_stage"] == [8, 8, 8, 8]
    _, uniform, _ = script(tmp_path, f"{full} uniform --recompute-num-layers 1", layers=32)
    assert uniform["derived"]["recompute_layers_per_stage"] == [8, 8, 8, 8]
    # fewer recomputed layers: less backward, more activation memory
    assert doc["derived"]["step_time_s"] < uniform["derived"]["step_time_s"]
    assert max(doc["derived"]["peak_memory_bytes"]) > max(uniform["derived"]["peak_memory_bytes"])
    # with the layout's uneven stages each recomputes min(N, its layers)
    _, lay, _ = script(tmp_path, f"{full} block --recompute-num-layers 2 "
                       "--pipeline-model-parallel-layout 'E|t*3|tttt|tL'")
    assert lay["derived"]["recompute_layers_per_stage"] == [0, 2, 2, 1]


def test_full_recomputation_needs_a_method_and_a_count(tmp_path: Path) -> None:
    code, doc, _ = script(tmp_path, "--recompute-granularity full")
    assert code == 1 and "megatron-recompute-full" in rule_errors(doc)
    code, doc, _ = script(tmp_path, "--recompute-granularity full --recompute-method block")
    assert code == 1 and "megatron-recompute-full" in rule_errors(doc)
    code, _, err = script(tmp_path, "--recompute-granularity full --recompute-method blocks "
                          "--recompute-num-layers 1")
    assert code == 2 and "--recompute-method is 'blocks'" in err


def test_pptune_configs_state_layouts_too(tmp_path: Path) -> None:
    """pptune's own config: pipeline_layout with pp x virtual_stages stages."""
    base = ("gpus: 2\npp: 2\nschedule: interleaved-1f1b\nvirtual_stages: 2\n"
            "micro_batch_size: 1\nglobal_batch: 8\nmodel: gpt-small\ngpu: h100-sxm\n")
    path = tmp_path / "ok.yaml"
    path.write_text(base + "pipeline_layout: 'Et|t|tt|ttL'\n")
    code, doc, _ = check(path)
    assert rule_errors(doc) == [] and doc["derived"]["stage_layers"] == [2, 1, 2, 3]
    path = tmp_path / "stages.yaml"
    path.write_text(base + "pipeline_layout: 'Et|tt|tttL'\n")  # 3 stages for pp 2 x 2
    code, doc, _ = check(path)
    assert code == 1 and "pipeline-layout" in rule_errors(doc)
    found = {f["id"]: f["message"] for f in doc["findings"]}
    assert "3 stages where pp x vp = 2 x 2 = 4 are needed" in found["pipeline-layout"]
    path = tmp_path / "bad.yaml"
    path.write_text(base + "pipeline_layout: 'Et|t(t|ttL'\n")
    code, _, err = check(path)
    assert code == 2 and "pipeline_layout" in err and "at column 5" in err
