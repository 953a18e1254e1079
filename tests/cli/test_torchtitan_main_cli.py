"""check-config on torchtitan main's Trainer.Config dumps: recognised from the content
(a JSON mapping with model_spec), and one line (exit 2) for a file that is no dump."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import Result

DUMPS = Path(__file__).resolve().parents[1] / "data" / "torchtitan_main"
LLAMA3_8B = json.loads((DUMPS / "llama3_8b.json").read_text())
Cli = Callable[..., Result]


def written(tmp_path: Path, dump: Any) -> Path:
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump))
    return path


def test_a_dump_is_recognised(cli: Cli, tmp_path: Path) -> None:
    r = cli("check-config", written(tmp_path, LLAMA3_8B), "--gpus", "64", "--json",
            "--no-compare")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["format"] == "torchtitan"
    assert (doc["config"]["model"], doc["config"]["micro_batch_size"], doc["config"]["dp"]) == (
        "llama3-8b", 1, 64)
    forced = cli("check-config", written(tmp_path, LLAMA3_8B), "--gpus", "64", "--json",
                 "--no-compare", "--format-in", "torchtitan")
    assert json.loads(forced.stdout)["derived"] == doc["derived"]


def test_a_real_pipeline_dump_without_preset(cli: Cli) -> None:
    """torchtitan_recipes.tests.features llama3_debugmodel_pp4_interleaved_1f1b: pp 4, 8
    micro-batches of 2048 tokens at context 2048, the debug model priced by its sizes."""
    r = cli("check-config", DUMPS / "llama3_debugmodel_pp4_interleaved_1f1b.json", "--gpus",
            "4", "--json", "--no-compare")
    doc = json.loads(r.stdout)
    cfg = doc["config"]
    assert (cfg["pp"], cfg["schedule"], cfg["virtual_stages"], cfg["grad_accum_steps"],
            cfg["micro_batch_size"], cfg["seq_len"]) == (4, "interleaved-1f1b", 2, 8, 1, 2048)
    assert (cfg["num_layers"], cfg["hidden_size"]) == (6, 256)
    assert doc["derived"]["step_time_s"] is not None


def _without(section: str) -> dict[str, Any]:
    dump = copy.deepcopy(LLAMA3_8B)
    del dump[section]
    return dump


def _with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    dump = copy.deepcopy(LLAMA3_8B)
    node = dump
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return dump


@pytest.mark.parametrize(("dump", "said"), [
    (_without("training"), "no training section: not a torchtitan Trainer.Config dump"),
    (_with(("parallelism",), [1]), "parallelism is [1], not a mapping"),
    (_with(("model_spec", "name"), 3), "model_spec.name is 3; expected the model's name"),
    (_with(("training", "num_tokens_per_microbatch_per_dp_rank"), "16384"),
     "training.num_tokens_per_microbatch_per_dp_rank is '16384'"),
    (_with(("training", "num_tokens_per_train_step"), 0),
     "training.num_tokens_per_train_step is 0"),
    (_with(("model_spec", "model", "layers"), {}), "model_spec.model.layers is {}"),
    (_with(("activation_checkpoint",), "full"), "activation_checkpoint is 'full'"),
    ({"training": {"local_batch_size": 8}, "parallelism": {}},
     "no model_spec section: not a torchtitan Trainer.Config dump"),
])
def test_a_bad_dump_is_one_line(cli: Cli, error_line: Callable[[Result], str], tmp_path: Path,
                                dump: dict[str, Any], said: str) -> None:
    line = error_line(cli("check-config", written(tmp_path, dump), "--gpus", "64"))
    assert said in line, line


def test_a_dumps_memory_fixes_name_mains_keys(cli: Cli, tmp_path: Path) -> None:
    """Llama 3 8B's FSDP over 1 GPU outgrows an H100: the fixes name the keys main's
    config has (0.2.2's local_batch_size and [activation_checkpoint] table it has not)."""
    r = cli("check-config", written(tmp_path, LLAMA3_8B), "--gpus", "1", "--gpu", "h100-sxm",
            "--json", "--no-compare")
    assert r.exit_code == 1
    found = next(f for f in json.loads(r.stdout)["findings"] if f["id"] == "memory-overflow")
    assert "more pipeline stages (parallelism.pipeline_parallel_degree)" in found["message"]
    assert "full activation checkpointing (activation_checkpoint=FullAC.Config())" \
        in found["message"]
    assert "local_batch_size" not in found["message"]
    assert "[activation_checkpoint]" not in found["message"]


def test_precision_states_what_a_dump_cannot(cli: Cli, tmp_path: Path) -> None:
    """A dump records no quantization converter: --precision fp8 prices torchao's float8
    linears (rowwise: main's Float8LinearConverter has no tensorwise recipe), which A100s
    refuse; a file that states its own precision keeps
    it, with a note; a precision pptune cannot fill is bad usage."""
    path = written(tmp_path, LLAMA3_8B)
    run = ["check-config", path, "--gpus", "64", "--json", "--no-compare"]
    plain = json.loads(cli(*run, "--gpu", "h100-sxm").stdout)
    fp8 = json.loads(cli(*run, "--gpu", "h100-sxm", "--precision", "fp8").stdout)
    assert (plain["config"]["precision"], fp8["config"]["precision"]) in (
        (None, "fp8"), ("bf16", "fp8"))
    assert (fp8["config"]["fp8_kernels"], fp8["config"]["fp8_recipe"]) == ("torchao",
                                                                         "rowwise")
    assert fp8["derived"]["step_time_s"] < plain["derived"]["step_time_s"]
    assert any("priced at --precision fp8" in n for n in fp8["notes"])
    a100 = cli(*run, "--gpu", "a100-80gb", "--precision", "fp8")
    assert a100.exit_code == 1
    assert "precision-gpu" in [f["id"] for f in json.loads(a100.stdout)["findings"]]
    script = Path(__file__).resolve().parents[2] / "examples" / "megatron-llama3-8b.sh"
    kept = json.loads(cli("check-config", script, "--precision", "fp8", "--json",
                          "--no-compare").stdout)
    assert "--precision fp8 ignored: the file states its GEMM precision (bf16)" in kept["notes"]
    bad = cli(*run, "--precision", "fp4")
    assert bad.exit_code == 2 and "expected one of bf16, fp8, mxfp8" in bad.stderr


def test_calibrate_takes_the_precision_a_quantized_runs_log_says(cli: Cli,
                                                                 tmp_path: Path) -> None:
    """torchtitan prints mfu: N/A for a run with a quantization converter
    (components/metrics.py has_quantization); a dump records none, so calibrate refuses
    to fit that log's step to BF16 prices, and --precision fp8 states the converter."""
    from tests.frameworks.test_job_logs import torchtitan_step

    log = tmp_path / "train.log"
    log.write_text("\n".join(torchtitan_step(i, 10240.0, 380.0, None, 30.0)
                             for i in range(1, 12)) + "\n")
    run = ["calibrate", "--run", written(tmp_path, LLAMA3_8B), "--gpus", "64", "--gpu",
           "h100-sxm", "--log", log, "-o", tmp_path / "cal.json"]
    refused = cli(*run)
    assert refused.exit_code == 2 and not (tmp_path / "cal.json").exists()
    assert "prints mfu: N/A, as torchtitan does for a run with a quantization converter" \
        in " ".join(refused.stderr.split())
    assert "give --precision fp8 or mxfp8" in " ".join(refused.stderr.split())
    fitted = cli(*run, "--precision", "fp8")
    assert fitted.exit_code == 0, fitted.stderr
    cal = json.loads((tmp_path / "cal.json").read_text())["calibration"]
    assert cal["precision"] == "fp8" and cal["fp8_kernels"] == "torchao"


QWEN3 = json.loads((DUMPS / "qwen3_30b_a3b.json").read_text())
PP4 = json.loads((DUMPS / "llama3_debugmodel_pp4_interleaved_1f1b.json").read_text())


def _with_inner(dump: Any, **inner: Any) -> Any:
    """Every block's inner_attention as a real to_dict() writes it: its own fields and
    the param_init and sharding_config every Configurable carries (the fixtures dropped
    them: function reprs with addresses)."""
    out = copy.deepcopy(dump)
    for layer in out["model_spec"]["model"]["layers"]:
        layer["attention"]["inner_attention"] = {**inner, "param_init": None,
                                                 "sharding_config": {"state_shardings": {}}}
    return out


def test_the_attention_is_told_by_its_own_fields_beside_the_common_ones(
        cli: Cli, tmp_path: Path) -> None:
    """A trial: with param_init and sharding_config beside them no attention config
    matched, qwen3's varlen was priced and warned as flex, and its refusal with cp missed."""
    flex = cli("check-config", written(tmp_path, _with_inner(QWEN3, block_size=128,
                                                             kernel_options={})),
               "--gpus", "8", "--json", "--no-compare")
    ids = [f["id"] for f in json.loads(flex.stdout)["findings"]]
    assert "torchtitan-flex-attention" in ids
    assert not any("none of main's attention configs" in n
                   for n in json.loads(flex.stdout)["notes"])
    varlen = _with_inner(QWEN3, window_size=None)
    varlen["parallelism"]["context_parallel_degree"] = 2
    r = cli("check-config", written(tmp_path, varlen), "--gpus", "8", "--json", "--no-compare")
    ids = [f["id"] for f in json.loads(r.stdout)["findings"]]
    assert r.exit_code == 1 and "torchtitan-cp-attention" in ids
    assert "torchtitan-flex-attention" not in ids


def test_a_csv_schedule_is_run_from_its_file_and_the_abstract_class_refused(
        cli: Cli, tmp_path: Path) -> None:
    """torchtitan_recipes' custom-CSV test: with pipeline_parallel_schedule_csv torchtitan
    runs torch's _PipelineScheduleRuntime and never looks the name up
    (pipeline_parallel.py build_pipeline_schedule); PipelineScheduleSingle without one is
    an abstract base class torchtitan refuses in its own words."""
    csv = copy.deepcopy(PP4)
    csv["parallelism"].update(pipeline_parallel_schedule="PipelineScheduleMulti",
                              pipeline_parallel_schedule_csv="schedule.csv")
    doc = json.loads(cli("check-config", written(tmp_path, csv), "--gpus", "8", "--json",
                         "--no-compare").stdout)
    found = {f["id"]: f["message"] for f in doc["findings"]}
    assert "torchtitan-schedule" not in found
    assert "_PipelineScheduleRuntime; pipeline_parallel_schedule PipelineScheduleMulti is " \
        "not used" in found["torchtitan-unmodelled"]
    single = copy.deepcopy(PP4)
    single["parallelism"]["pipeline_parallel_schedule"] = "PipelineScheduleSingle"
    doc = json.loads(cli("check-config", written(tmp_path, single), "--gpus", "8", "--json",
                         "--no-compare").stdout)
    found = {f["id"]: f["message"] for f in doc["findings"]}
    assert "PipelineScheduleSingle is an abstract base class" in found["torchtitan-schedule"]
    assert "Unknown schedule name" not in found["torchtitan-schedule"]


def test_the_best_plan_of_a_dump_runs_as_main_runs_it(cli: Cli, tmp_path: Path) -> None:
    """A trial: on B200 the stock llama3_8b dump (FlexAttention, priced as flash) was found
    1.36x slower than the best plan "its files state", which differed in SDPA attention
    alone; main's language models refuse SDPA (models/common/config_utils.py
    get_attention_config), so the comparison prices main's plans as main runs them
    (Semantics.versions to the best-plan search) and the stock dump is its own best."""
    doc = json.loads(cli("check-config", written(tmp_path, LLAMA3_8B), "--gpus", "8", "--gpu",
                         "b200", "--json").stdout)
    assert "slower-than-best" not in {f["id"] for f in doc["findings"]}
    assert doc["derived"]["slowdown_vs_best"] == 1.0
