"""What a user trial of the calibration side found: profiles of another model, inputs
overwritten, doubtful factors said, messages that name what is wrong."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.schemas import load_profile
from tests.cli.test_tune import _validate_doc, two_layer_profile
from tests.frameworks.test_job_logs import deepspeed_timer

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]
DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
MEGATRON = DATA / "megatron_llama3_8b.sh"  # llama3-8b, 16 GPUs, tp 2 pp 4 v 2, GBS 128


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Megatron-LM script of Llama 3 8B calibrated at 9 s a step (one factor)."""
    from typer.testing import CliRunner

    from pptune.cli.app import app

    out = tmp_path_factory.mktemp("cal") / "cal.json"
    r = CliRunner().invoke(app, ["calibrate", "--run", str(MEGATRON), "--step-s", "9.0",
                                 "-o", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    return out


def llama70b_script(tmp_path: Path) -> Path:
    """The same launch script with Llama 3 70B's sizes (Dubey et al. 2024 table 3)."""
    text = MEGATRON.read_text()
    for old, new in (("--num-layers 32", "--num-layers 80"), ("--hidden-size 4096",
                     "--hidden-size 8192"), ("--ffn-hidden-size 14336", "--ffn-hidden-size 28672"),
                     ("--num-attention-heads 32", "--num-attention-heads 64")):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "l70.sh"
    path.write_text(text)
    return path


def test_check_config_refuses_a_calibration_of_another_model(
        tmp_path: Path, calibrated: Path, cli: Cli, error_line: ErrorLine) -> None:
    l70 = llama70b_script(tmp_path)
    line = error_line(cli("check-config", l70, "--profile", calibrated, "--no-compare"))
    assert ("is calibrated for llama3-8b (32 layers, hidden 4096, 32 heads), but the config "
            "trains llama3-70b (80 layers, hidden 8192, 64 heads): a calibration holds for its "
            "model and GPU") in line
    doc = json.loads(cli("check-config", l70, "--profile", calibrated, "--output",
                         "json").stdout)
    assert doc["exit_code"] == 2 and "calibrated for llama3-8b" in doc["error"]
    # the job's own script is still priced by it, and says what was fitted
    ok = cli("check-config", MEGATRON, "--profile", calibrated, "--no-compare", "--output",
             "json")
    assert ok.exit_code == 0, ok.stderr
    found = {f["id"]: f for f in json.loads(ok.stdout)["findings"]}
    f = load_profile(calibrated).calibration.factors["compute"]  # type: ignore[union-attr]
    assert found["calibrated-costs"]["message"] == (
        "costs calibrated for llama3-8b on h100-sxm: fitted factors on the preset's rates, "
        f"from 1 job: compute, memory and communication x{f:.3g} (one factor)")
    assert found["calibrated-costs"]["severity"] == "info"


def test_a_config_that_names_a_calibration_of_another_model_is_an_error_finding(
        tmp_path: Path, calibrated: Path, cli: Cli) -> None:
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"model: gpt3-1.3b\ngpus: 8\npp: 2\nmicro_batch_size: 1\nglobal_batch: 64\n"
                   f"profile: {calibrated}\n")
    r = cli("check-config", cfg, "--output", "json")
    assert r.exit_code == 1
    errors = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]
    assert [f["id"] for f in errors] == ["costs-unavailable"]
    assert "the config's profile" in errors[0]["message"]
    assert "calibrated for llama3-8b" in errors[0]["message"]


def test_check_config_refuses_the_gpu_or_model_beside_a_calibrated_profile(
        calibrated: Path, cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("check-config", MEGATRON, "--profile", calibrated, "--gpu", "b200"))
    assert line == (f"pptune: error: --gpu: the costs come from --profile {calibrated}, "
                    "calibrated for llama3-8b on h100-sxm; drop --gpu or the profile (a "
                    "calibration holds for its model and GPU)")
    assert "--model: the costs come from" in error_line(
        cli("check-config", MEGATRON, "--profile", calibrated, "--model", "llama3-8b"))


def _other_model_profile(path: Path) -> Path:
    """The two-layer test profile as another model's (hidden 256, 2 blocks), at ``path``."""
    prof = two_layer_profile().model_copy(deep=True)
    prof.model.hidden_size, prof.model.num_blocks = 256, 2
    path.write_text(prof.model_dump_json())
    return path


def test_check_config_refuses_a_measured_profile_of_another_model(
        tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    path = _other_model_profile(tmp_path / "probe.json")
    line = error_line(cli("check-config", MEGATRON, "--profile", path, "--no-compare"))
    assert (f"--profile {path} holds the costs of gpt-small (layers 2, hidden 256, sequence 8), "
            "but the config trains llama3-8b (32 layers, hidden 4096, 32 heads, sequence "
            "8192): a profile prices the model it measured") in line


def test_recommend_says_the_fitted_factors_and_the_calibrations_doubts(
        tmp_path: Path, calibrated: Path, cli: Cli) -> None:
    doc = json.loads(calibrated.read_text())
    doc["calibration"]["warnings"] = ["leave one out, each run predicted from the others alone "
                                      "misses by a.sh -28.0%"]
    doubtful = tmp_path / "doubtful.json"
    doubtful.write_text(json.dumps(doc))
    r = cli("recommend", "--gpus", "16", "--profile", doubtful, "--top", "1", "--json")
    assert r.exit_code == 0, r.stderr
    f = doc["calibration"]["factors"]["compute"]
    assert (f"calibrated for llama3-8b on h100-sxm (fitted factors on the preset's rates, from 1 "
            f"job: compute, memory and communication x{f:.3g} (one factor))") in r.stderr
    assert ("pptune: warning: the calibration's fitted factors: leave one out, each run "
            "predicted from the others alone misses by a.sh -28.0%") in r.stderr
    checked = cli("check-config", MEGATRON, "--profile", doubtful, "--no-compare")
    assert checked.exit_code == 0  # a doubt is information, not a finding about the config
    assert "calibration-doubt: the calibration's fitted factors: leave one out" in checked.stdout


def test_calibrate_refuses_to_overwrite_a_result_it_reads(tmp_path: Path, cli: Cli,
                                                         error_line: ErrorLine) -> None:
    base = tmp_path / "p.json"
    base.write_text(two_layer_profile().model_dump_json())
    run = tmp_path / "run1.json"
    text = json.dumps(_validate_doc("gpipe", [2], {"F0": 0.004, "B0": 0.006}, 2))
    run.write_text(text)
    line = error_line(cli("calibrate", run, "--profile", base, "-o", run))
    assert line == (f"pptune: error: -o {run} is the RESULTS file this command reads; write to "
                    "another path")
    assert run.read_text() == text


def test_a_file_that_is_not_a_result_names_what_it_lacks(tmp_path: Path, cli: Cli,
                                                         error_line: ErrorLine) -> None:
    base = tmp_path / "p.json"
    base.write_text(two_layer_profile().model_dump_json())
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", base, "--profile", base, "-o", out))
    assert line == (f"pptune: error: {base} is not a pptune validate --json result: it lacks "
                    "schedule, pp, num_microbatches, virtual_stages and 4 more of the keys "
                    "validate writes (it looks like a profile: give it as --profile); give the "
                    "output of pptune validate ... --json")
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    assert error_line(cli("calibrate", listed, "--profile", base, "-o", out)).endswith(
        "it holds a JSON list, not an object")
    no_op = tmp_path / "no_op.json"
    doc = _validate_doc("gpipe", [2], {"F0": 0.004}, 2)
    doc["ops"] = [{"kind": "F", "stage": 0}]
    no_op.write_text(json.dumps(doc))
    assert "a measured step or op lacks its 'measured_s'" in error_line(
        cli("calibrate", no_op, "--profile", base, "-o", out))
    assert not out.exists()


def test_a_result_of_another_model_is_refused_and_one_given_twice_counts_once(
        tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    base = _other_model_profile(tmp_path / "p.json")
    out = tmp_path / "cal.json"
    doc = _validate_doc("gpipe", [2], {"F0": 0.004, "B0": 0.006}, 2)
    # two layers too, but hidden 128: another model
    other = tmp_path / "tiny.json"
    other.write_text(json.dumps({**doc, "model": "--hf-config tiny6.json", "model_info": {
        "name": "tiny", "seq_len": 8, "hidden_size": 128, "num_blocks": 2}}))
    line = error_line(cli("calibrate", other, "--profile", base, "-o", out))
    assert f"{other} ran tiny of hidden_size 128 (the profile: 256), not the profile's" in line
    # a result from before validate wrote model_info: its label names a config, the
    # profile a preset
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**doc, "model": "--hf-config tiny6.json"}))
    assert "ran --hf-config tiny6.json (the profile: the preset gpt-small)" in error_line(
        cli("calibrate", old, "--profile", base, "-o", out))
    run = tmp_path / "run1.json"
    run.write_text(json.dumps({**doc, "model": "gpt-small", "model_info": {
        "name": "gpt-small", "seq_len": 8, "hidden_size": 256, "num_blocks": 2}}))
    copy = tmp_path / "copy.json"
    copy.write_text(run.read_text())
    r = cli("calibrate", run, run, copy, "--profile", base, "-o", out)
    assert r.exit_code == 0, r.stderr
    assert f"pptune: {run} is given twice: counted once (one result is one trial)" in r.stderr
    assert (f"pptune: {copy} holds the same bytes as {run}: counted once (one result is one "
            "trial)") in r.stderr
    assert "from 1 measured trial(s)" in r.stdout


def test_a_job_pptune_says_cannot_fit_is_calibrated_with_a_warning(tmp_path: Path,
                                                                   cli: Cli) -> None:
    # Llama 3 8B, ZeRO-1 over 8 GPUs, 2 x 8192 tokens a micro-batch, no recomputation
    # stated: pptune's 119 GiB a GPU cannot fit 80 GiB, yet the log shows 58.3 GiB
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({
        "train_batch_size": 128, "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 1}}))
    log = tmp_path / "ds.log"
    log.write_text("\n".join(deepspeed_timer(s, 12.2, 58.3, batch=128)
                             for s in (10, 20, 30, 40)) + "\n")
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", config, "--log", log, "--model", "llama3-8b", "--gpu",
            "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    # the GPU count the batch trio gives is said: 128 / (2 x 8) = 8
    assert (f"pptune: {config}: 8 GPUs from the batch the config states: dp inferred as 8 = "
            "global batch 128 / (micro-batch 2 x GA 8), x tp 1 x pp 1 (--gpus overrides)"
            ) in r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and len(cal.warnings) == 1
    assert cal.warnings[0].startswith(f"{config}: pptune predicts this job cannot fit (pipeline "
                                      "rank 0 needs")
    assert "yet it ran; its log's peak is 58.3 GiB" in cal.warnings[0]
    assert "the time factor fitted to it may be distorted" in cal.warnings[0]
    assert f"pptune: warning: {config}: pptune predicts this job cannot fit" in r.stderr
    assert "check-config finds memory-overflow" not in r.stderr  # said once, as the warning


def test_refusals_say_what_they_count_and_the_step_given(cli: Cli,
                                                        error_line: ErrorLine) -> None:
    line = error_line(cli("calibrate", "--run", MEGATRON, "--step-s", "0.5", "-o", "x.json"))
    assert "FLOPs a step (6 per active parameter and token, attention not counted: a lower " \
           "bound) need at least" in line
    # faster than the preset's best rates, not than the peak: the step given is named
    line = error_line(cli("calibrate", "--run", MEGATRON, "--step-s", "4.7", "-o", "x.json"))
    assert "a compute factor of" in line and line.endswith(", --step-s 4.7")


@pytest.mark.parametrize("command", [["calibrate", "--run", "x.sh", "--step-s", "1"],
                                     ["tune", "--gpus", "2"], ["recommend", "--gpus", "8"]])
def test_an_empty_output_path_is_said_to_be_empty(command: list[str], cli: Cli,
                                                  error_line: ErrorLine) -> None:
    assert error_line(cli(*command, "-o", "")) == "pptune: error: -o is empty; give a value"
    assert error_line(cli(*command, "--output=")) == (
        "pptune: error: --output is empty; give a value")


def test_an_unterminated_json_string_is_said_once(tmp_path: Path, cli: Cli,
                                                  error_line: ErrorLine) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"train_batch_size": "12')
    line = error_line(cli("check-config", bad))
    assert "Unterminated string starting at line 1 column 22" in line and "at at" not in line
    line = error_line(cli("trace-report", bad))
    assert "(Unterminated string starting at line 1 column 22)" in line


def test_a_trainer_log_without_deepspeeds_lines_says_what_it_has(
        tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    log = tmp_path / "hf.log"
    log.write_text("{'loss': 7.45, 'grad_norm': 1.23, 'learning_rate': 0.0003, 'epoch': 0.01}\n"
                   " 10%|#         | 20/200 [04:05<36:45, 12.25s/it]\n"
                   "{'train_runtime': 2450.1, 'train_samples_per_second': 10.45, "
                   "'train_steps_per_second': 0.082, 'train_loss': 6.9, 'epoch': 0.2}\n")
    line = error_line(cli("calibrate", "--run", DATA / "ds_config.json", "--log", log,
                          "--model", "gpt3-1.3b", "-o", tmp_path / "cal.json"))
    assert ("has no DeepSpeed iteration lines (expected the pipeline engine's 'steps: N loss: "
            "... iter time (s): ...' or the throughput timer's 'global_step=N, ... "
            "CurrSamplesPerSec=...' lines; it has the Hugging Face Trainer's lines only: "
            "train_samples_per_second 10.45 (the whole run's average, start-up included) and a "
            "progress bar at 12.25 s/it (its last), which give no steady step: pass the seconds "
            "per optimizer step as --step-s)") in line
