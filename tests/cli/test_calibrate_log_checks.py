"""`pptune calibrate --run ... --log`: what a user trial found (a Megatron-LM MoE job on
B200). The GPU the log names or its peak memory contradicts; logs of several runs;
another batch; lines that are no steady measurement; refusals and warnings that name the
part of the step that decides the factor; a reserve pptune's tensors cannot account for.
Every log here is built from the frameworks' own format strings (tests/frameworks)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.costmodel.calibration import Factors
from pptune.costs.flops import shape_flops_per_token
from pptune.schemas import load_profile
from pptune.tune import jobs
from tests.frameworks.test_job_logs import (
    megatron_after_first,
    megatron_iteration,
    megatron_memory,
    megatron_world,
)

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]
DATA = Path(__file__).resolve().parents[1] / "data"
MEGATRON = DATA / "configs" / "megatron_llama3_8b.sh"  # llama3-8b, 16 GPUs, GBS 128
TITAN = DATA / "logs" / "torchtitan_h200_llama3_8b.toml"
TITAN_LOG = DATA / "logs" / "torchtitan_h200_llama3_8b.log"  # CUDA capacity: NVIDIA H200
GIB, MIB = 1024**3, 1024**2
# a Qwen3-235B-A22B job like the trial's, on 256 B200: its step is over 80% expert
# all-to-all (ep 32 across nodes of 8; cuDNN's attention, which Transformer Engine runs)
MOE_JOB = """model: qwen3-235b-a22b
gpu: b200
attention: cudnn
gpus: 256
tp: 2
pp: 8
ep: 32
micro_batch_size: 1
global_batch: 1024
sharding: zero1
schedule: interleaved-1f1b
virtual_stages: 4
precision: fp8
"""


def megatron_log(tmp_path: Path, ms: float = 9207.0, reserved_mb: float = 47104.0,
                 batch: int = 128, tflops: float | None = None) -> Path:
    """A Megatron-LM log of the 16-GPU Llama 3 8B job: iterations 1 (warm-up) and 10-50."""
    lines = [megatron_iteration(1, 15000.0, tflops, batch=batch),
             megatron_memory(0, 1, reserved_mb)]
    lines += [megatron_iteration(i, ms, tflops, batch=batch) for i in (10, 20, 30, 40, 50)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def moe_job(tmp_path: Path) -> Path:
    path = tmp_path / "qwen3.yaml"
    path.write_text(MOE_JOB)
    return path


def step_at(config: Path, f: float) -> float:
    """pptune's step for the job at one common factor ``f`` (a stand-in measurement)."""
    job = jobs.load(jobs.Measurement(config, step_s=1e3), None, None, None)
    return jobs.step_at(job)(Factors.common(f))


# ---------------------------------------------------------------- 1. the GPU


def test_a_gpu_the_log_contradicts_is_refused(tmp_path: Path, cli: Cli,
                                              error_line: ErrorLine) -> None:
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", "--run", TITAN, "--log", TITAN_LOG, "--gpu", "b200",
                          "-o", out))
    assert line == (f"pptune: error: --log {TITAN_LOG} ran on NVIDIA H200 (h200), but --gpu "
                    "b200 names another GPU: factors fitted against b200's rates from a run on "
                    "h200 are off by their ratio; pass --gpu h200, or give the log of the job "
                    "on b200")
    assert not out.exists()


def test_a_peak_above_the_gpus_memory_is_refused(tmp_path: Path, cli: Cli,
                                                 error_line: ErrorLine) -> None:
    # 90,000 MB reserved = 87.89 GiB: no H100 (81,559 MiB, 79.65 GiB) holds it
    log = megatron_log(tmp_path, reserved_mb=90000.0)
    out = tmp_path / "cal.json"
    what = "(max reserved, the largest of 1 rank(s) reported)"
    line = error_line(cli("calibrate", "--run", MEGATRON, "--log", log, "--gpu", "h100-sxm",
                          "-o", out))
    assert line == (f"pptune: error: --log {log}: the log's peak 87.89 GiB {what} exceeds "
                    "h100-sxm's 79.65 GiB: the run was not on this GPU; pass --gpu with the GPU "
                    "it ran on")
    line = error_line(cli("calibrate", "--run", MEGATRON, "--log", log, "-o", out))
    assert line == (f"pptune: error: --log {log}: the log's peak 87.89 GiB {what} exceeds "
                    "h100-sxm's 79.65 GiB (no GPU named: h100-sxm is pptune's default): the run "
                    "was not on this GPU; pass --gpu with the GPU it ran on")
    assert not out.exists()


def test_no_gpu_named_anywhere_is_calibrated_as_the_default_with_a_warning(
        tmp_path: Path, cli: Cli) -> None:
    # --gpu's help documents the default (h100-sxm); what it means is now said
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MEGATRON, "--log", megatron_log(tmp_path), "-o", out)
    assert r.exit_code == 0, r.stderr
    warning = (f"{MEGATRON}: no GPU named (--gpu, the config or its log): calibrated as "
               "h100-sxm, pptune's default; if the job ran on another GPU, the factors hold "
               "that GPU's speed over h100-sxm's rates, off by the ratio of the two, and so is "
               "every plan priced from this profile; pass --gpu")
    assert f"pptune: warning: {warning}\n" in r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.gpu == "h100-sxm" and warning in cal.warnings
    named = cli("calibrate", "--run", MEGATRON, "--log", megatron_log(tmp_path), "--gpu",
                "h100-sxm", "-o", out)
    assert named.exit_code == 0 and "no GPU named" not in named.stderr


# ---------------------------------------------------------------- 2. runs in one log


def test_a_log_of_two_runs_calibrates_the_last(tmp_path: Path, cli: Cli) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        megatron_world(8, 1, pp=4), megatron_iteration(1, 30000.0),
        megatron_iteration(10, megatron_after_first(30000.0, 17000.0)),
        megatron_iteration(20, 17100.0),
        megatron_world(16, 2, pp=4), megatron_iteration(1, 25000.0),
        megatron_iteration(10, megatron_after_first(25000.0, 9200.0)),
        *(megatron_iteration(i, ms) for i, ms in ((20, 9300.0), (30, 9250.0)))]) + "\n")
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MEGATRON, "--log", log, "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert (f"pptune: --log {log}: it holds 2 runs (split at a start-up line): calibrating "
            "the last, iterations 1-30 on 16 GPUs (4 line(s)); left out: iterations 1-20 on 8 "
            "GPUs (3 line(s))") in r.stderr
    cal = load_profile(out).calibration
    assert cal is not None
    # the median of 9.2, 9.3 and 9.25 s, the second run's first line (25 s) left out
    assert cal.runs[0].measured_step_s == pytest.approx(9.25, abs=1e-4)
    assert ("iterations 10-30 (the warm-up line, iteration 1, left out)"
            in cal.runs[0].step_source)


def test_a_log_of_another_plan_than_the_configs_is_refused(tmp_path: Path, cli: Cli) -> None:
    """The config runs tp 2, pp 4 at 8,192 tokens; the log's job printed tp 8, pp 1 (its
    world-size line) and seq_length 4096 (its argument dump): calibrating the config's plan
    to that step would fit the factors to another job."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "  seq_length ...................................... 4096",
        megatron_world(16, 2), megatron_iteration(10, 9200.0), megatron_iteration(20, 9300.0),
        megatron_iteration(30, 9250.0)]) + "\n")
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MEGATRON, "--log", log, "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 2 and not out.exists()
    assert (f"--log {log} ran sequence 4096, tp 8, pp 1 (what its log prints), but --run "
            f"{MEGATRON} describes sequence 8192, tp 2, pp 4; give the config of the job "
            "that wrote the log") in " ".join(r.stderr.split())


# ---------------------------------------------------------------- 3. another batch


def test_a_log_of_another_global_batch_is_refused(tmp_path: Path, cli: Cli,
                                                  error_line: ErrorLine) -> None:
    log = megatron_log(tmp_path, batch=256)
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", "--run", MEGATRON, "--log", log, "--gpu", "h100-sxm",
                          "-o", out))
    assert line == (f"pptune: error: --log {log}: its Megatron-LM lines state a global batch "
                    "size of 256, but the config's job has 128 (samples a step): the log is of "
                    "another job; give the log of the job the config describes, or "
                    "--global-batch where the config leaves the batch open")
    assert not out.exists()


def test_a_refusal_names_a_log_of_another_model_or_batch(tmp_path: Path, cli: Cli,
                                                         error_line: ErrorLine) -> None:
    # 4.7 s a step is faster than the preset's best rates (a compute factor above 1.04);
    # the log's own 30 TFLOP/s a GPU make a fraction of the job's model FLOPs
    log = megatron_log(tmp_path, ms=4700.0, tflops=30.0)
    line = error_line(cli("calibrate", "--run", MEGATRON, "--log", log, "--gpu", "h100-sxm",
                          "-o", tmp_path / "cal.json"))
    job = jobs.load(jobs.Measurement(MEGATRON, step_s=1e3), "h100-sxm", None, None)
    model = shape_flops_per_token(job.shape, 8192) * 128 * 8192
    ratio = 30e12 * 16 * 4.7 / model
    assert (f"is the log of another model or batch (its own TFLOP/s a GPU make {ratio:.3g}x "
            f"the model FLOPs of the job {MEGATRON} describes), or does megatron_llama3_8b.sh "
            "run on more GPUs than the 16 it is priced on") in line


# ---------------------------------------------------------------- 4. the part that decides


def test_a_refusal_names_the_part_that_dominates_the_step(tmp_path: Path, cli: Cli,
                                                          error_line: ErrorLine) -> None:
    moe = moe_job(tmp_path)
    line = error_line(cli("calibrate", "--run", moe, "--step-s",
                          f"{step_at(moe, 1.10):.9g}", "-o", tmp_path / "cal.json"))
    # one factor for every rate: communication out of range is named first, the
    # all-to-all being the step
    assert line.startswith(
        "pptune: error: calibrate: one run fits one factor common to compute, memory and "
        "communication, and a communication factor of 1.1 puts the link bandwidths above the "
        "links' line rate on b200 (at most 1.06); a compute factor of 1.1 puts the GEMM and "
        "attention rates above the GPU's measured matmul peak on b200 (at most 1.04): "
        "qwen3.yaml's step is 8")
    assert "% expert all-to-all (its sensitivity to the rates: communication 0.8" in line
    assert ("so its expert all-to-all ran faster than its priced NIC bandwidth (the ep group "
            "of 32 spans nodes of 8 GPUs) allows; the job ran faster than") in line


def test_a_refusal_of_a_tied_factor_does_not_blame_the_part_in_range(
        tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    # 1.05: within the links' 1.064 but above the matmul peak's 1.04, on a step that is
    # almost all communication: the tie is refused, not the all-to-all
    moe = moe_job(tmp_path)
    line = error_line(cli("calibrate", "--run", moe, "--step-s",
                          f"{step_at(moe, 1.05):.9g}", "-o", tmp_path / "cal.json"))
    assert ("one run fits one factor common to compute, memory and communication, and a "
            "compute factor of 1.05 puts the GEMM and attention rates above the GPU's measured "
            "matmul peak on b200 (at most 1.04): qwen3.yaml's step is 8") in line
    assert "% expert all-to-all (its sensitivity to the rates: communication 0.8" in line
    assert (": its communication factor, 1.05, is in range, but the one factor carries it to "
            "the GEMM and attention rates, which this run hardly measured, into every plan "
            "priced from the profile; a second run whose step holds more GEMMs and attention "
            "(another tp, ep, dp or batch) fits them apart") in line
    assert "ran faster than its priced" not in line


def test_a_dense_jobs_refusal_names_its_gemms(cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("calibrate", "--run", MEGATRON, "--step-s", "4.7", "--gpu",
                          "h100-sxm", "-o", "x.json"))
    assert "megatron_llama3_8b.sh's step is 6" in line and "% gemm (its sensitivity" in line
    assert "so its gemm ran faster than the GPU's measured matmul peak allows" in line


def test_a_step_one_part_dominates_is_calibrated_with_a_warning(tmp_path: Path,
                                                                cli: Cli) -> None:
    moe = moe_job(tmp_path)
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", moe, "--step-s", f"{step_at(moe, 0.9):.9g}", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.factors["compute"] == pytest.approx(0.9, rel=1e-4)
    share = cal.runs[0].parts["expert all-to-all"] / sum(cal.runs[0].parts.values())
    assert share > 0.8
    warning = next(w for w in cal.warnings if "of the step at the calibration" in w)
    assert warning.startswith(f"{moe}: the expert all-to-all is {share:.0%} of the step at "
                              "the calibration (its sensitivity to the rates: communication ")
    assert warning.endswith(
        "so the one factor fitted, 0.9, is the expert all-to-all's; it is carried to the GEMM "
        "and attention rates and the HBM bandwidth too, into plans whose step is made of "
        "GEMMs, attention and memory-bound ops, which this run hardly measured; a run whose "
        "step holds more of them (another tp, ep, dp or batch) fits them apart")
    assert f"pptune: warning: {warning}" in r.stderr


# ---------------------------------------------------------------- 5. the reserve


def test_a_reserve_beyond_fragmentation_and_the_context_is_a_warning(tmp_path: Path,
                                                                     cli: Cli) -> None:
    out = tmp_path / "cal.json"
    # 80,000 MB = 78.125 GiB reserved: a third of it (fragmentation) and 2 GiB make 28.04
    log = megatron_log(tmp_path, reserved_mb=80000.0)
    r = cli("calibrate", "--run", MEGATRON, "--log", log, "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.reserve_bytes is not None
    tensors = cal.runs[0].predicted_memory_bytes
    assert tensors is not None
    reserve = 80000.0 * MIB - tensors
    assert cal.reserve_bytes == pytest.approx(reserve)
    assert (f"{MEGATRON}: its log's peak, 78.12 GiB (max reserved, the largest of 1 rank(s) "
            f"reported), is {reserve / GIB:.2f} GiB beyond pptune's tensors, over the 28.04 GiB "
            "that the allocator's fragmentation (up to a third of what a caching allocator "
            "reserves: GMLake, Guo et al., ASPLOS 2024) and pptune's 2 GiB for the CUDA "
            "context and NCCL buffers (its default reserve, an assumption) account for: "
            "pptune's tensors likely miss something this run holds (an op's activations it "
            "does not price, a larger micro-batch or sequence than the config states), and "
            f"the reserve, {reserve / GIB:.2f} GiB a GPU, is carried into every plan "
            "recommend --profile ranks (--reserve-gib overrides)") in cal.warnings
    # the docs' example: 46 GiB reserved, 9.85 GiB beyond the tensors, under its 17.33
    r = cli("calibrate", "--run", MEGATRON, "--log", megatron_log(tmp_path), "--gpu",
            "h100-sxm", "-o", out)
    assert r.exit_code == 0 and "beyond pptune's tensors, over the" not in r.stderr


# ---------------------------------------------------------------- 6. weak measurements


def test_skipped_and_nan_intervals_and_one_line_are_said(tmp_path: Path, cli: Cli) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        megatron_iteration(1, 15000.0), megatron_iteration(10, megatron_after_first(15000.0,
                                                                                9200.0)),
        megatron_iteration(20, 7000.0, skipped=3), megatron_iteration(30, 7100.0, nan=1),
    ]) + "\n")
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MEGATRON, "--log", log, "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert (f"pptune: --log {log}: iterations 20, 30 left out (skipped iterations or nan "
            "iterations in their intervals)") in r.stderr
    assert (f"pptune: --log {log}: the step is one line's, iteration 10, not a median over "
            "several: a longer log gives a steadier figure") in r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.runs[0].measured_step_s == pytest.approx(9.2, abs=1e-4)
    assert "median of 1 Megatron-LM line(s), iteration 10 (" in cal.runs[0].step_source


def test_a_factor_near_the_floor_gets_a_note(tmp_path: Path, cli: Cli) -> None:
    out = tmp_path / "cal.json"
    step = step_at(MEGATRON, 0.15)
    r = cli("calibrate", "--run", MEGATRON, "--step-s", f"{step:.9g}", "--gpu", "h100-sxm",
            "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None
    assert ("the compute, memory and communication factor 0.15 is within 2x of the 0.1 below "
            "which calibrate refuses (a job that slow is more often described wrongly): check "
            "the run's GPU count, batch and step units before trusting it") in cal.notes
    fine = cli("calibrate", "--run", MEGATRON, "--step-s", "9.0", "--gpu", "h100-sxm", "-o", out)
    assert "within 2x" not in fine.stdout


def test_a_binary_log_is_said_binary(tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    """As check-config says of a binary config: the NUL byte and where, not only that no
    iteration line was found."""
    log = tmp_path / "train.log"
    log.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    line = error_line(cli("calibrate", "--run", MEGATRON, "--log", log, "-o",
                          tmp_path / "cal.json"))
    assert line == (f"pptune: error: --log {log} looks like a binary file (NUL byte at offset "
                    "7) and has no Megatron-LM iteration lines; give the job's text log, or "
                    "its seconds per step with --step-s instead of --log")
    assert not (tmp_path / "cal.json").exists()
