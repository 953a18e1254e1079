"""`pptune calibrate --run`: the jobs you run, their logs, the calibrated what-ifs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.cli.calibrate import flag_order, pair
from pptune.costmodel.calibration import Factors
from pptune.errors import BadInput
from pptune.report.fmt import fmt_seconds
from pptune.schemas import load_profile
from pptune.tune import jobs
from tests.frameworks.test_job_logs import (
    megatron_after_first,
    megatron_iteration,
    megatron_memory,
    torchtitan_step,
)

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]
DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
MEGATRON = DATA / "megatron_llama3_8b.sh"  # llama3-8b, 16 GPUs, tp 2 pp 4 v 2, GBS 128
GIB = 1024**3

JOB = """model: gpt3-1.3b
gpu: a100-80gb
gpus: {gpus}
tp: {tp}
pp: {pp}
micro_batch_size: 4
global_batch: 512
schedule: 1f1b
sharding: zero1
"""


def job(tmp_path: Path, name: str, gpus: int, tp: int, pp: int) -> Path:
    path = tmp_path / name
    path.write_text(JOB.format(gpus=gpus, tp=tp, pp=pp))
    return path


def simulated_step(config: Path, f: Factors) -> float:
    """What pptune simulates for the job at factors ``f`` (a stand-in measurement)."""
    loaded = jobs.load(jobs.Measurement(config, step_s=1e3), None, None, None)
    return jobs.step_at(loaded)(f)


def test_two_runs_recover_the_factors_they_were_made_with(tmp_path: Path, cli: Cli) -> None:
    # one job mostly compute (tp 1, pp 2), one with tp 8: they separate compute from
    # communication; the stand-in measurements are the model at known factors
    truth = Factors(compute=0.7, memory=0.7, communication=0.45)
    a = job(tmp_path, "a.yaml", 16, 1, 2)
    b = job(tmp_path, "b.yaml", 64, 8, 1)
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", a, "--step-s", f"{simulated_step(a, truth):.9g}",
            "--run", b, "--step-s", f"{simulated_step(b, truth):.9g}", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None
    assert cal.fitted == [["compute", "memory"], ["communication"]]
    assert cal.factors["compute"] == pytest.approx(0.7, rel=0.01)
    assert cal.factors["communication"] == pytest.approx(0.45, rel=0.01)
    assert [abs(x.residual) < 1e-3 for x in cal.runs] == [True, True]
    # the residual of each run, and each step's parts, on stdout
    assert str(a) in r.stdout and str(b) in r.stdout and "residual" in r.stdout
    assert "tp communication" in r.stdout


def test_one_run_fits_one_common_factor_and_check_config_gives_the_step_back(
        tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MEGATRON, "--step-s", "9.0", "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.fitted == [["compute", "memory", "communication"]]
    assert len(set(cal.factors.values())) == 1 and 0.5 < cal.factors["compute"] < 1
    assert "one run gives one equation" in r.stdout
    run = cal.runs[0]  # the step's parts add up to it, the optimizer's step among them
    assert sum(run.parts.values()) == pytest.approx(run.predicted_step_s, rel=1e-6)
    assert run.parts["optimizer step"] > 0 and run.parts["tp communication"] > 0
    back = cli("check-config", MEGATRON, "--profile", out, "--no-compare", "--output", "json")
    doc = json.loads(back.stdout)
    assert doc["derived"]["step_time_s"] == pytest.approx(9.0, rel=1e-3)


def test_a_calibrated_profile_prices_what_ifs_of_the_same_model(tmp_path: Path,
                                                                cli: Cli) -> None:
    out = tmp_path / "cal.json"
    assert cli("calibrate", "--run", MEGATRON, "--step-s", "9.0", "-o", out).exit_code == 0
    # the script's Transformer Engine runs cuDNN's attention, which the calibration keeps,
    # with Megatron-LM's unfused loss (no --cross-entropy-loss-fusion) and its fused
    # weight-gradient accumulation (its default)
    cal = load_profile(out).calibration
    assert cal is not None and cal.attention == "cudnn"
    assert (cal.cross_entropy, cal.wgrad_accum) == ("unfused", "fused")
    plain = cli("simulate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--tp", "4", "--pp",
                "2", "--microbatches", "8", "--attention", "cudnn", "--cross-entropy",
                "unfused", "--wgrad-accum", "fused", "--json")
    calibrated = cli("simulate", "--profile", out, "--tp", "4", "--pp", "2", "--microbatches",
                     "8", "--json")
    assert plain.exit_code == 0 and calibrated.exit_code == 0, calibrated.stderr
    f = load_profile(out).calibration.factors["compute"]  # type: ignore[union-attr]
    ratio = (json.loads(calibrated.stdout)["step_time_s"]
             / json.loads(plain.stdout)["step_time_s"])
    # every rate scaled by f; launches and latencies are fixed: a bit under 1 / f
    assert 0.95 / f < ratio <= 1 / f
    rec = cli("recommend", "--gpus", "32", "--profile", out, "--tp", "2", "--json")
    assert rec.exit_code == 0, rec.stderr
    assert "calibrated for llama3-8b on h100-sxm" in rec.stderr
    # a framework's file of the plan is priced at the calibrated rates too: the step
    # --emit writes is the one check-config gives back from the file
    # (its re-pricing as Megatron-LM runs it had taken the preset's rates)
    emitted = cli("recommend", "--gpus", "16", "--global-batch", "128", "--profile", out,
                  "--tp", "2", "--sequence-parallel", "--emit", "megatron", "-o",
                  tmp_path / "launch")
    assert emitted.exit_code == 0, emitted.stderr
    script = tmp_path / "launch" / "pretrain_megatron.sh"
    said = script.read_text().split("# predicted: step ")[1].split(",")[0]
    checked = cli("check-config", script, "--profile", out, "--output", "json")
    step = json.loads(checked.stdout)["derived"]["step_time_s"]
    assert said == fmt_seconds(step)


def test_a_calibrated_profile_refuses_another_model_or_gpu(tmp_path: Path, cli: Cli,
                                                          error_line: ErrorLine) -> None:
    out = tmp_path / "cal.json"
    assert cli("calibrate", "--run", MEGATRON, "--step-s", "9.0", "-o", out).exit_code == 0
    line = error_line(cli("recommend", "--gpus", "8", "--profile", out, "--gpu", "a100-80gb"))
    assert "--gpu: the costs come from" in line and "calibrated for llama3-8b on h100-sxm" in line


def test_a_megatron_log_gives_the_step_and_the_reserve(tmp_path: Path, cli: Cli) -> None:
    log = tmp_path / "train.log"
    ms = [12936.1, 12900.0, 13050.5, 12990.0]
    lines = [megatron_iteration(1, 19138.8, 80.2), megatron_memory(0, 1, 52_000.0)]
    ms[0] = megatron_after_first(19138.8, ms[0])  # 10: the mean of 1..10, 1 included
    lines += [megatron_iteration(10 * (k + 1), x, 118.7) for k, x in enumerate(ms)]
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MEGATRON, "--log", log, "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None
    run = cal.runs[0]
    assert run.measured_step_s == pytest.approx((12.9361 + 12.99) / 2, abs=1e-4)
    assert "median of 4 Megatron-LM line(s)" in run.step_source
    assert run.peak_memory_bytes == pytest.approx(52_000.0 * 1024**2)
    assert cal.reserve_bytes == pytest.approx(run.peak_memory_bytes - run.predicted_memory_bytes)
    # check-config and recommend take the reserve the log measured
    rec = cli("recommend", "--gpus", "16", "--profile", out, "--tp", "2", "--json")
    assert rec.exit_code == 0 and "what the calibrated profile's jobs held" in rec.stderr
    request = json.loads(rec.stdout)["request"]
    assert request["reserve_gib"] == pytest.approx(cal.reserve_bytes / GIB)


@pytest.mark.parametrize(("args", "words"), [
    (["--step-s", "0"], "a step takes a positive, finite number of seconds"),
    (["--step-s", "-3"], "a step takes a positive"),
    (["--step-s", "0.05"], "need at least"),  # faster than 16 H100 at their peak
    (["--step-s", "9000"], "below a tenth of what pptune prices"),
])
def test_impossible_steps_are_refused_and_nothing_is_written(
        tmp_path: Path, cli: Cli, error_line: ErrorLine, args: list[str], words: str) -> None:
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", "--run", MEGATRON, *args, "-o", out))
    assert words in line
    assert not out.exists()


def test_a_log_of_another_framework_or_without_iterations(tmp_path: Path, cli: Cli,
                                                          error_line: ErrorLine) -> None:
    titan = tmp_path / "titan.log"
    titan.write_text(torchtitan_step(10, 5000, 100, 30, 50) + "\n")
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", "--run", MEGATRON, "--log", titan, "-o", out))
    assert "is a torchtitan log" in line and "Megatron-LM" in line
    empty = tmp_path / "empty.log"
    empty.write_text("> building GPT model ...\n")
    assert "no Megatron-LM iteration lines" in error_line(
        cli("calibrate", "--run", MEGATRON, "--log", empty, "-o", out))
    assert not out.exists()


def test_each_run_takes_the_measurement_after_it(tmp_path: Path) -> None:
    argv = ["--run", "a.sh", "--log=a.log", "--run=b.sh", "--step-s", "7.9", "-o", "x"]
    order = flag_order(argv)
    assert order == ["--run", "--log", "--run", "--step-s"]
    got = pair(order, [Path("a.sh"), Path("b.sh")], [7.9], [Path("a.log")])
    assert [(m.config.name, m.step_s, m.log) for m in got] == [
        ("a.sh", None, Path("a.log")), ("b.sh", 7.9, None)]
    with pytest.raises(BadInput, match="comes before any --run"):
        pair(["--step-s", "--run"], [Path("a")], [1.0], [])
    with pytest.raises(BadInput, match="--run b has no --step-s or --log after it"):
        pair(["--run", "--step-s", "--run"], [Path("a"), Path("b")], [1.0], [])


def test_the_two_forms_do_not_mix(tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    out = tmp_path / "cal.json"
    assert "two forms of calibrate" in error_line(cli(
        "calibrate", "r.json", "--run", MEGATRON, "--step-s", "9", "-o", out))
    assert "--gpu is for --run" in error_line(cli(
        "calibrate", "r.json", "--profile", "p.json", "--gpu", "h100-sxm", "-o", out))
    assert "needs --run CONFIG" in error_line(cli("calibrate", "-o", out))


def test_runs_of_two_models_are_refused(tmp_path: Path, cli: Cli,
                                       error_line: ErrorLine) -> None:
    a = job(tmp_path, "a.yaml", 16, 1, 2)
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", "--run", a, "--step-s", "4", "--run", MEGATRON,
                          "--step-s", "9", "-o", out))
    assert "a calibration is for one GPU type" in line or "for one model" in line


def test_a_torchtitan_job_and_its_log(tmp_path: Path, cli: Cli) -> None:
    # 8 GPUs, local batch 8 of 8192 tokens, without activation checkpointing
    config = tmp_path / "titan.toml"
    config.write_text(re.sub(r'(?m)^mode = "selective".*$', 'mode = "none"',
                             (DATA / "torchtitan_llama3_8b.toml").read_text()))
    log = tmp_path / "titan.log"
    tps = (812.0, 1210.0, 1190.0, 1205.0)
    log.write_text("\n".join(torchtitan_step(s, t, 300.0, 30.0, 70.0)
                             for s, t in zip((1, 10, 20, 30), tps, strict=True)) + "\n")
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", config, "--log", log, "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    run = load_profile(out).calibration.runs[0]  # type: ignore[union-attr]
    # global batch 8 x dp 4 = 32 samples; a step is 32 x 8192 / (8 GPUs x tps), median tps 1205
    assert run.measured_step_s == pytest.approx(32 * 8192 / (8 * 1205.0))
    assert run.peak_memory_bytes == pytest.approx(70.0 * GIB)
    # pptune predicts more memory than the job used: said, not refused, and the factor
    # fitted to a job the config may not fully describe is doubted
    assert f"pptune: warning: {config}: pptune predicts this job cannot fit" in r.stderr
    assert "its log's peak is 70.0 GiB" in r.stderr


def test_a_deepspeed_job_and_its_log(tmp_path: Path, cli: Cli) -> None:
    from tests.frameworks.test_job_logs import deepspeed_pipe

    config = DATA / "ds_config.json"  # no model in a DeepSpeed config: --model names it
    log = tmp_path / "ds.log"
    log.write_text("\n".join(deepspeed_pipe(s, t) for s, t in ((10, 2.1), (20, 1.61),
                                                               (30, 1.59), (40, 1.6))) + "\n")
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", config, "--log", log, "--model", "gpt3-1.3b", "--gpu",
            "a100-80gb", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.runs[0].measured_step_s == pytest.approx(1.60)
    assert cal.model["name"] == "gpt3-1.3b" and cal.runs[0].framework == "deepspeed"


def test_a_log_that_is_a_fifo_or_a_folder_is_refused_at_once(tmp_path: Path, cli: Cli,
                                                             error_line: ErrorLine) -> None:
    import os

    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "cal.json"
    assert "not a regular file" in error_line(
        cli("calibrate", "--run", MEGATRON, "--log", fifo, "-o", out))
    assert "is a directory" in error_line(
        cli("calibrate", "--run", MEGATRON, "--log", tmp_path, "-o", out))
    assert "is a directory" in error_line(
        cli("calibrate", "--run", MEGATRON, "--step-s", "9", "-o", tmp_path))
    assert not out.exists()


def test_the_peak_bound_counts_the_experts_a_token_uses(tmp_path: Path) -> None:
    import dataclasses

    from pptune.costmodel.analytic import model_params
    from pptune.costmodel.presets import MODELS

    path = tmp_path / "moe.yaml"
    path.write_text("model: mixtral-8x7b\ngpu: h100-sxm\ngpus: 64\ntp: 8\npp: 4\n"
                    "micro_batch_size: 1\nglobal_batch: 256\nschedule: 1f1b\nsharding: zero1\n")
    job = jobs.load(jobs.Measurement(path, step_s=1e3), None, None, None)
    m = MODELS["mixtral-8x7b"]
    active = model_params(m, active=True) - m.vocab * m.hidden  # top-2 of 8 experts
    least = 6 * active * 256 * m.seq_len / (64 * 989e12)
    jobs._refuse_faster_than_peak(dataclasses.replace(job, measured_step_s=least * 1.001))
    with pytest.raises(BadInput, match="need at least"):
        jobs._refuse_faster_than_peak(dataclasses.replace(job, measured_step_s=least * 0.999))


def test_the_calibration_as_json(tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MEGATRON, "--step-s", "9.0", "-o", out, "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == load_profile(out).calibration.model_dump(mode="json")  # type: ignore[union-attr]
    assert doc["runs"][0]["parts"]["gemm"] > 0 and doc["gpu"] == "h100-sxm"


CP_JOB = """model: llama3-8b
gpu: h100-sxm
gpus: 8
tp: 1
pp: 1
cp: 2
seq_len: 8192
micro_batch_size: 1
global_batch: 32
schedule: 1f1b
sharding: zero1
"""


def test_a_context_parallel_jobs_parts_are_its_own(tmp_path: Path, cli: Cli) -> None:
    # one pipeline rank: nothing of the step is bubble; the ring's K/V exchange is a part
    job_file = tmp_path / "cp.yaml"
    job_file.write_text(CP_JOB)
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", job_file, "--step-s", "5", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None
    parts = cal.runs[0].parts
    assert parts["pipeline bubble"] == pytest.approx(0.0, abs=1e-9)
    assert parts["cp communication"] > 0
    assert sum(parts.values()) == pytest.approx(5.0, rel=1e-6)


MOE_JOB = """hf_config: {hf}
gpu: h100-sxm
gpus: 64
tp: 1
pp: 1
ep: 64
num_layers: 4
seq_len: 4096
micro_batch_size: 1
global_batch: 64
schedule: 1f1b
sharding: zero1
recompute: selective
recompute_modules: [mla_up_proj, moe_act]
"""


def test_an_expert_parallel_job_calibrates_with_its_experts_split(
        tmp_path: Path, cli: Cli) -> None:
    # the calibrated what-if prices the experts over ep as the uncalibrated check does:
    # at factors 1 it gives check-config's own step back, with no finding about ep
    job_file = tmp_path / "moe.yaml"
    job_file.write_text(MOE_JOB.format(hf=DATA.parent / "hf" / "deepseek-v3-config.json"))
    plain = json.loads(cli("check-config", job_file, "--no-compare", "--output", "json").stdout)
    step = plain["derived"]["step_time_s"]
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", job_file, "--step-s", f"{step:.9g}", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None
    assert cal.factors["compute"] == pytest.approx(1.0, rel=1e-6)
    assert cal.runs[0].parts["expert all-to-all"] > 0
    back = json.loads(cli("check-config", job_file, "--profile", out, "--no-compare",
                          "--output", "json").stdout)
    assert back["derived"]["step_time_s"] == pytest.approx(step, rel=1e-6)
    assert back["derived"]["cost_key"] == plain["derived"]["cost_key"]
    assert not [f for f in back["findings"] if f["id"].startswith("moe-")]
    memory = [[f["message"] for f in doc["findings"] if f["id"] == "memory-ok"]
              for doc in (plain, back)]
    assert memory[0] == memory[1] and memory[0]


def test_runs_that_fit_alone_but_not_together_fall_back_with_their_misfit(
        tmp_path: Path, cli: Cli) -> None:
    # made at a communication factor of 1.5, above the links' line rate: each run alone
    # fits one factor in range; together they separate communication and put it out of
    # range, so one common factor is fitted, and the runs' misfit is the warning (this
    # was refused: "fitted together they need the factors above")
    truth = Factors(compute=0.6, memory=0.6, communication=1.5)
    a = job(tmp_path, "a.yaml", 16, 1, 2)  # no tensor parallelism: hardly communicates
    b = job(tmp_path, "b.yaml", 64, 8, 1)
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", a, "--step-s", f"{simulated_step(a, truth):.9g}", "--run",
            b, "--step-s", f"{simulated_step(b, truth):.9g}", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.fitted == [["compute", "memory", "communication"]]
    assert any("communication x1.5, where a communication factor of 1.5 puts" in n
               for n in cal.notes)
    # each run's own factor brackets the common one: a, hardly communicating, is the
    # slower of the two
    a_run, b_run = cal.runs
    assert a_run.residual < 0 < b_run.residual
    found = re.search(r"the fit leaves residuals of a\.yaml (\S+)%, b\.yaml (\S+)%", r.stderr)
    assert found is not None, r.stderr
    assert float(found[1]) == pytest.approx(a_run.residual * 100, abs=0.06)


def test_a_calibrated_profile_warns_of_dropout_it_does_not_price(tmp_path: Path,
                                                                  cli: Cli) -> None:
    """A trial: check-config warned of Megatron-LM's default dropout on the analytic model
    but not under a calibrated profile, which prices the same model without it."""
    script = tmp_path / "run.sh"
    script.write_text(MEGATRON.read_text())  # states no dropout: Megatron-LM's 0.1 each
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", script, "--step-s", "9.0", "-o", out)
    assert r.exit_code == 0, r.stderr
    for profile in ((), ("--profile", out)):
        r = cli("check-config", script, *profile, "--no-compare", "--output", "json")
        found = {f["id"] for f in json.loads(r.stdout)["findings"]}
        assert "dropout-unpriced" in found, profile
