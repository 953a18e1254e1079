"""`pptune calibrate --run` on real public logs (tests/data/logs/SOURCE.md): a job's GPU
count from its flags, its environment or its log, never assumed; the precision it ran;
the leave-one-out check of several runs; the logs it times and the usage it refuses."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.cli.calibrate import flag_order, pair
from pptune.errors import BadInput
from pptune.frameworks.common.fields import Flags
from pptune.schemas import load_profile

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
CONFIGS = LOGS.parent / "configs"
MPI = LOGS / "megatron_gpt3_7b_fp8_mpi.sh"  # mpirun, WORLD_SIZE=$OMPI_COMM_WORLD_SIZE
LOG8, LOG16 = LOGS / "megatron_gpt3_7b_fp8_8gpu.log", LOGS / "megatron_gpt3_7b_fp8_16gpu.log"
TITAN, TITAN_LOG = LOGS / "torchtitan_h200_llama3_8b.toml", LOGS / "torchtitan_h200_llama3_8b.log"
DS, DS_LOG = LOGS / "megatron_deepspeed_polaris.json", LOGS / "megatron_deepspeed_polaris.log"
# the 8-GPU log's iterations 30-100 but 50 (10 is warm-up; the intervals of 20 and 50
# count skipped iterations), elapsed time per iteration (ms)
MS8 = (12068.8, 12036.3, 12072.4, 12090.5, 12099.3, 12099.4, 12104.3)


def calibration(path: Path):  # type: ignore[no-untyped-def]
    cal = load_profile(path).calibration
    assert cal is not None
    return cal


@pytest.mark.parametrize(("config", "log", "extra", "env_hint"), [
    (MPI, LOG8, [], True),  # a launch script under mpirun
    (DS, DS_LOG, ["--model", "llama2-7b", "--gpu", "a100-80gb", "--tp", "2"], False),
])
def test_a_run_whose_gpu_count_nothing_states_is_refused(
        tmp_path: Path, cli: Cli, error_line: ErrorLine, config: Path, log: Path,
        extra: list[str], env_hint: bool) -> None:
    # before: calibrated at dp 1 (refused only by the peak bound, at "1 x h100-sxm")
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", "--run", config, "--log", log, *extra, "-o", out))
    assert "states neither its GPU count nor its data-parallel size" in line
    assert "give --gpus N after this --run" in line
    assert ("--env NAME=VALUE" in line) is env_hint
    assert not out.exists()


def test_gpus_after_each_run_size_that_run_and_two_runs_are_checked_leave_one_out(
        tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MPI, "--gpus", "8", "--log", LOG8, "--run", MPI, "--log",
            LOG16, "--gpus", "16", "--gpu", "h100-sxm", "-o", out, "--json")
    assert r.exit_code == 0, r.stderr
    cal = calibration(out)
    assert [run.gpus for run in cal.runs] == [8, 16]
    assert cal.runs[0].measured_step_s == pytest.approx(sorted(MS8)[3] / 1e3)
    # one common factor leaves +52.6% and -34.5% (the script's --fp16 keeps and reduces
    # FP16 gradients: +52.5% and -34.4% priced with an FP32 buffer)
    assert [round(run.residual, 3) for run in cal.runs] == [0.526, -0.345]
    held = [run.held_out_residual for run in cal.runs]
    assert None not in held and held[0] > 1.0 and held[1] < -0.5  # type: ignore[operator]
    # both warned, on stderr and in the JSON; the two-node run is the slow one; and the
    # 16-GPU log's own TFLOP/s, another job's (test below), first: it is about an input
    assert len(cal.warnings) == 3
    assert cal.warnings[0].startswith(f"--log {LOG16}: its TFLOP/s")
    assert "inter-node communication" in cal.warnings[1] and "+52.6%" in cal.warnings[1]
    assert "leave one out" in cal.warnings[2]
    assert json.loads(r.stdout)["warnings"] == cal.warnings
    assert r.stderr.count("pptune: warning: ") == 3
    # the note compares the quantity the threshold is about, and says so
    note = next(n for n in cal.notes if "split their steps alike" in n)
    assert "under the 0.1" in note and "is 1.39" not in note
    text = cli("calibrate", "--run", MPI, "--gpus", "8", "--log", LOG8, "--run", MPI,
               "--gpus", "16", "--log", LOG16, "--gpu", "h100-sxm", "-o", out)
    assert "held out" in text.stdout and "+132.8%" in text.stdout


def test_flags_before_the_first_run_are_every_runs(tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--gpus", "8", "--gpu", "h100-sxm", "--run", MPI, "--log", LOG8,
            "--run", MPI, "--gpus", "16", "--log", LOG16, "-o", out)
    assert r.exit_code == 0, r.stderr
    assert [run.gpus for run in calibration(out).runs] == [8, 16]


def test_env_sets_a_launch_scripts_variables_per_run(tmp_path: Path, cli: Cli) -> None:
    # the script's nodes: ${NUM_NODES:-2} x 8 GPUs; --env NUM_NODES=1 runs it on one node
    script = CONFIGS / "megatron_llama3_8b.sh"
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", script, "--env", "NUM_NODES=1", "--step-s", "17", "--run",
            script, "--step-s", "9", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert [run.gpus for run in calibration(out).runs] == [8, 16]
    assert "NUM_NODES=1 from --env" in r.stderr


def test_a_torchtitan_log_states_its_world_size(tmp_path: Path, cli: Cli,
                                                error_line: ErrorLine) -> None:
    # data_parallel_shard_degree = -1: the log's device mesh, [8], sizes the job
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", TITAN, "--log", TITAN_LOG, "--gpu", "h200", "-o", out)
    assert r.exit_code == 0, r.stderr
    run = calibration(out).runs[0]
    assert run.gpus == 8
    # global batch 1 x dp 8; the median tps of steps 10-100 is 7,046.5
    assert run.measured_step_s == pytest.approx(8 * 8192 / (8 * 7046.5))
    assert "gpus 8 from the log's device-mesh line (--gpus overrides)" in r.stderr
    # a GPU count the log contradicts: the config is not the log's job
    line = error_line(cli("calibrate", "--run", TITAN, "--gpus", "16", "--log", TITAN_LOG,
                          "--gpu", "h200", "-o", out.with_name("other.json")))
    assert "ran on 8 GPUs (the log's device-mesh line)" in line and "describes 16" in line
    assert not out.with_name("other.json").exists()


def test_a_megatron_log_states_its_world_size(tmp_path: Path, cli: Cli,
                                              error_line: ErrorLine) -> None:
    log = tmp_path / "train.log"
    # megatron/training/arguments.py validate_args, printed on rank 0 at start-up
    log.write_text("using world size: 8, data-parallel size: 8, context-parallel size: 1, "
                   "hierarchical context-parallel sizes: None, tensor-model-parallel size: 1, "
                   "pipeline-model-parallel size: 1\n" + LOG8.read_text())
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MPI, "--log", log, "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert calibration(out).runs[0].gpus == 8
    assert "gpus 8 from the world size its log prints" in r.stderr
    line = error_line(cli("calibrate", "--run", MPI, "--gpus", "16", "--log", log, "--gpu",
                          "h100-sxm", "-o", tmp_path / "other.json"))
    assert "ran on 8 GPUs" in line


def test_recommend_prices_the_precision_the_calibrated_job_ran(tmp_path: Path,
                                                               cli: Cli) -> None:
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MPI, "--gpus", "8", "--log", LOG8, "--gpu", "h100-sxm",
            "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = calibration(out)
    assert (cal.precision, cal.fp8_kernels, cal.runs[0].precision) == ("fp8", "te", "fp8")
    job = ["recommend", "--gpus", "8", "--global-batch", "1024", "--profile", out, "--tp", "1",
           "--pp", "1", "--micro-batch-sizes", "2", "--sharding", "zero1", "--recompute",
           "none", "--overlap-grad-reduce", "--json"]
    steps = {}
    for given in ([], ["--precision", "bf16"], ["--precision", "fp8"]):
        rec = cli(*job, *given)
        assert rec.exit_code == 0, rec.stderr
        plan = json.loads(rec.stdout)["plans"][0]
        steps[tuple(given)] = (plan["precision"], plan["step_time_s"] / cal.runs[0].measured_step_s - 1)
        if not given:
            assert "precision fp8: the GEMM precision the calibrated jobs ran" in rec.stderr
        elif given[1] == "bf16":
            assert "--precision bf16: the calibrated jobs ran fp8" in rec.stderr
    # the job's own configuration at -0.3% in FP8 (-1.9% before the profile kept the job's
    # kernels: its unfused loss, fused weight-gradient accumulation), +43% in BF16
    assert steps[()] == steps[("--precision", "fp8")]
    assert steps[()][0] == "fp8" and steps[()][1] == pytest.approx(-0.003, abs=0.005)
    assert steps[("--precision", "bf16")][0] == "bf16"
    assert steps[("--precision", "bf16")][1] == pytest.approx(0.43, abs=0.02)


def test_a_megatron_deepspeed_log_is_timed_by_its_iteration_lines(tmp_path: Path,
                                                                  cli: Cli) -> None:
    out = tmp_path / "cal.json"
    sized = ["--gpus", "192", "--tp", "2", "--model", "llama2-7b", "--gpu", "a100-80gb"]
    r = cli("calibrate", "--run", DS, *sized, "--log", DS_LOG, "-o", out)
    assert r.exit_code == 0, r.stderr
    run = calibration(out).runs[0]
    # Megatron's elapsed time of iteration 200, not 768 / CurrSamplesPerSec (13.07 s)
    assert run.measured_step_s == pytest.approx(14.5414)
    assert "Megatron-DeepSpeed line(s)" in run.step_source
    assert "not DeepSpeed's throughput timer" in r.stderr
    r = cli("calibrate", "--run", DS, *sized, "--log", DS_LOG, "--warmup", "0", "-o", out)
    assert r.exit_code == 0, r.stderr
    run = calibration(out).runs[0]
    assert run.measured_step_s == pytest.approx((14.2875 + 14.5414) / 2)  # not 12.79 s
    assert "(no warm-up left out: --warmup 0)" in run.step_source


def test_hf_config_names_the_jobs_model_as_model_does(tmp_path: Path, cli: Cli,
                                                       error_line: ErrorLine) -> None:
    """--hf-config with Llama 2 7B's config.json fits what --model llama2-7b fits; it is
    read relative to the working folder, and one of the two is taken."""
    (tmp_path / "llama2.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
        "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": False}))
    sized = ["--gpus", "192", "--tp", "2", "--gpu", "a100-80gb"]
    by_model, by_hf = tmp_path / "model.json", tmp_path / "hf.json"
    r = cli("calibrate", "--run", DS, *sized, "--model", "llama2-7b", "--log", DS_LOG,
            "-o", by_model)
    assert r.exit_code == 0, r.stderr
    r = cli("calibrate", "--run", DS, *sized, "--hf-config", tmp_path / "llama2.json",
            "--log", DS_LOG, "-o", by_hf)
    assert r.exit_code == 0, r.stderr
    assert calibration(by_hf).factors == pytest.approx(calibration(by_model).factors)
    both = error_line(cli("calibrate", "--run", DS, *sized, "--model", "llama2-7b",
                          "--hf-config", tmp_path / "llama2.json", "--log", DS_LOG,
                          "-o", tmp_path / "x.json"))
    assert "--model and --hf-config both name the jobs' model; give one" in both


def test_a_deepspeed_pipeline_of_auto_stages_is_refused_unsized(tmp_path: Path, cli: Cli,
                                                                error_line: ErrorLine) -> None:
    """stages "auto": PipelineModule sets the depth at run time; calibrate fits no job at
    check-config's assumed pp = 1, and --pp sizes it."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({
        "train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 16, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 1}, "pipeline": {"stages": "auto"},
        "pptune": {"model": "llama3-8b"}}))
    line = error_line(cli("calibrate", "--run", ds, "--gpus", "8", "--step-s", "10",
                          "-o", tmp_path / "cal.json"))
    assert 'pipeline.stages is "auto"' in line and "give --pp N after this --run" in line
    r = cli("calibrate", "--run", ds, "--gpus", "8", "--pp", "2", "--step-s", "10",
            "-o", tmp_path / "cal.json")
    assert r.exit_code == 0, r.stderr


def test_usage_errors_name_the_real_problem(tmp_path: Path, cli: Cli,
                                            error_line: ErrorLine) -> None:
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", "--run", MPI, "--step-s", "12", "--log", LOG8, "-o", out))
    assert f"--run {MPI} has --step-s 12.0 and --log {LOG8} after it" in line
    line = error_line(cli("calibrate", "--run", MPI, "--gpus", "8", "--gpus", "16", "--log",
                          LOG8, "-o", out))
    assert f"--gpus is given twice for --run {MPI}: 8 and 16" in line
    line = error_line(cli("calibrate", "--run", MPI, "--gpus", "0", "--log", LOG8, "-o", out))
    assert "--gpus must be >= 1 (got 0)" in line
    assert "--gpus is for --run" in error_line(cli(
        "calibrate", "r.json", "--profile", "p.json", "--gpus", "8", "-o", out))
    line = error_line(cli("calibrate", "--run", MPI, "--gpus", "8", "--step-s", "12",
                          "--warmup", "10", "-o", out))  # was silently ignored
    assert "--warmup 10 leaves iterations of a --log out; every run here gives --step-s" in line
    # a NeMo log: what it says, and the flag that takes it
    nemo = LOGS / "nemo2_llama3_8b_b200.log"
    line = error_line(cli("calibrate", "--run", CONFIGS / "megatron_llama3_8b.sh", "--log",
                          nemo, "-o", out))
    assert "is a NeMo log" in line and "median after the first 6.066 s" in line
    assert "--step-s instead of --log" in line
    assert not out.exists()


def test_pair_attaches_the_per_run_flags() -> None:
    argv = ["--env", "A=1", "--gpus=4", "--run", "a.sh", "--log", "a.log", "--gpus", "8",
            "--env", "B=2", "--run", "b.sh", "--tp", "2", "--step-s", "7", "-o", "x"]
    order = flag_order(argv)
    assert order == ["--env", "--gpus", "--run", "--log", "--gpus", "--env", "--run", "--tp",
                     "--step-s"]
    got = pair(order, [Path("a.sh"), Path("b.sh")], [7.0], [Path("a.log")],
               {"--gpus": [4, 8], "--env": ["A=1", "B=2"], "--tp": [2]})
    assert [(m.flags, m.env) for m in got] == [
        (Flags(gpus=8), ("A=1", "B=2")), (Flags(gpus=4, tp=2), ("A=1",))]
    with pytest.raises(BadInput, match="is given twice for the runs"):
        pair(["--gpus", "--gpus", "--run", "--step-s"], [Path("a")], [1.0], [],
             {"--gpus": [1, 2]})


def test_a_torchtitan_log_names_its_gpu(tmp_path: Path, cli: Cli,
                                        error_line: ErrorLine) -> None:
    """torchtitan logs 'CUDA capacity: NVIDIA H200 with 139.83GiB memory': calibrated on
    h200 without --gpu (it had calibrated h100-sxm, factor 0.770 for H200's 0.739)."""
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", TITAN, "--log", TITAN_LOG, "-o", out)
    assert r.exit_code == 0, r.stderr
    assert calibration(out).gpu == "h200"
    assert "the log names the GPU, NVIDIA H200: calibrating h200" in r.stderr
    odd = tmp_path / "odd.log"
    odd.write_text(TITAN_LOG.read_text().replace("NVIDIA H200", "NVIDIA RTX 9000"))
    line = error_line(cli("calibrate", "--run", TITAN, "--log", odd, "-o", tmp_path / "x.json"))
    assert "ran on NVIDIA RTX 9000, which no GPU preset states; pass --gpu" in line
    assert not (tmp_path / "x.json").exists()


def test_recommend_on_a_calibrated_profile_plans_the_jobs_batch(tmp_path: Path,
                                                                cli: Cli) -> None:
    """The script's GLOBAL_BATCH_SIZE=1024 is the calibrated profile's batch: recommend
    plans it by default (it had planned pptune's 512)."""
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MPI, "--gpus", "8", "--log", LOG8, "--gpu", "h100-sxm",
            "-o", out)
    assert r.exit_code == 0, r.stderr
    r = cli("recommend", "--gpus", "8", "--profile", out, "--top", "1", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["request"]["global_batch"] == 1024


def test_a_script_under_mpirun_is_sized_by_the_world_size_its_environment_gives(
        tmp_path: Path, cli: Cli) -> None:
    """The script exports WORLD_SIZE=$OMPI_COMM_WORLD_SIZE and runs python, no torchrun:
    --env OMPI_COMM_WORLD_SIZE=8 sizes it (the refusal's own advice)."""
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MPI, "--env", "OMPI_COMM_WORLD_SIZE=8", "--log", LOG8,
            "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert "gpus 8 from the script's WORLD_SIZE" in r.stderr
    assert calibration(out).runs[0].gpus == 8


def test_a_log_whose_own_flops_are_not_the_configs_job_is_said(tmp_path: Path,
                                                               cli: Cli) -> None:
    """The 16-GPU log prints 801.7 TFLOP/s a GPU: over 16 GPUs and its 14.2 s that is 2.15x
    the FLOPs Megatron-LM core_r0.8.0 counts for the script's job (1,024 x 2,048 tokens):
    the run had another sequence length. The 8-GPU log's figure is that count (1.00x:
    attention's full square, as Megatron-LM counted it before core_r0.12.0; at 2,048
    tokens within 3% of the causal count too, so no release is named), and is not warned
    of; the warning is the profile's, as the other doubts are."""
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MPI, "--gpus", "8", "--log", LOG8, "--run", MPI, "--gpus",
            "16", "--log", LOG16, "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "TFLOP/s a GPU times" in line]
    assert len(said) == 1 and LOG16.name in said[0] and "2.15x the" in said[0]
    assert "Megatron-LM before core_r0.12.0: attention's full square" in said[0]
    assert said[0].removeprefix("pptune: warning: ") in calibration(out).warnings
    assert "the log is likely of such a release" not in r.stderr


def test_recommend_keeps_the_calibrated_jobs_fp16_gradient_buffer(tmp_path: Path,
                                                                  cli: Cli) -> None:
    """The script trains --fp16 without --accumulate-allreduce-grads-in-fp32: Megatron-LM
    keeps its gradient buffer in FP16 (validate_args makes it FP32 only under --bf16), the
    calibration records it, and recommend prices its plans so unless --grad-compression
    says otherwise; FP32 buffers then hold 2 bytes a parameter more."""
    from pptune.costmodel.analytic import model_params
    from pptune.costmodel.presets import ModelShape

    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MPI, "--gpus", "8", "--log", LOG8, "--gpu", "h100-sxm",
            "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = calibration(out)
    assert cal.main_grads_dtype == "fp16"
    job = ["recommend", "--gpus", "8", "--profile", out, "--tp", "1", "--pp", "1",
           "--micro-batch-sizes", "1", "--sharding", "zero1", "--recompute", "full", "--json"]
    state = {}
    for given in ([], ["--grad-compression", "none"]):
        rec = cli(*job, *given)
        assert rec.exit_code == 0, rec.stderr
        doc = json.loads(rec.stdout)
        state[doc["request"]["grad_compression"]] = \
            doc["plans"][0]["peak_memory_parts"][0]["state_bytes"]
        held = "gradients kept and reduced in FP16, as the calibrated jobs kept them"
        assert (held in rec.stderr) is (not given)
    params = model_params(ModelShape(**cal.model))  # no pipeline, no tp: every parameter
    assert state["none"] - state["fp16"] == pytest.approx(2 * params, rel=1e-5)


def test_recommend_at_another_sequence_says_the_factors_were_fitted_at_the_jobs(
        tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MPI, "--gpus", "8", "--log", LOG8, "--gpu", "h100-sxm",
            "-o", out)
    assert r.exit_code == 0, r.stderr
    seq = calibration(out).model["seq_len"]
    job = ["recommend", "--gpus", "8", "--profile", out, "--tp", "1", "--pp", "1",
           "--micro-batch-sizes", "1", "--recompute", "full", "--json"]
    said = f"the calibrated jobs ran {seq:,} tokens a sequence"
    far = cli(*job, "--seq-len", str(4 * seq))
    assert far.exit_code in (0, 1) and said in " ".join(far.stderr.split())
    near = cli(*job, "--seq-len", str(2 * seq))  # within twice: nothing said
    assert near.exit_code in (0, 1) and said not in " ".join(near.stderr.split())
