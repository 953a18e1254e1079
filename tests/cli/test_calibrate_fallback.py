"""`pptune calibrate --run` with runs the model cannot give all at once: a split of the
factors outside the physical range falls back to one common factor, said in a note with
the numbers; leave one out still checks it; a step no factor reaches is refused in
range terms; what the warnings and the advice say follows the runs.

The measurements are pptune's own steps at known factors (``simulated_step``), so what
the fit finds is known: a split made at a communication factor of 1.3 is recovered as
1.3, above the A100's ceiling."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from pptune.costmodel import presets
from pptune.costmodel.calibration import Factors, RateGroup, ceiling
from pptune.schemas import load_profile
from pptune.tune import jobs
from tests.cli.test_tune import two_layer_profile

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]
MEGATRON = Path(__file__).resolve().parents[1] / "data" / "configs" / "megatron_llama3_8b.sh"
A100 = presets.GPUS["a100-80gb"]

JOB = """model: gpt3-1.3b
gpu: a100-80gb
gpus: {gpus}
tp: {tp}
pp: {pp}
micro_batch_size: 4
global_batch: {batch}
schedule: 1f1b
sharding: zero1
"""


def job(tmp_path: Path, name: str, gpus: int, tp: int, pp: int, batch: int = 512) -> Path:
    path = tmp_path / name
    path.write_text(JOB.format(gpus=gpus, tp=tp, pp=pp, batch=batch))
    return path


def simulated_step(config: Path, f: Factors) -> float:
    loaded = jobs.load(jobs.Measurement(config, step_s=1e3), None, None, None)
    return jobs.step_at(loaded)(f)


def _separating_pair(tmp_path: Path) -> tuple[Path, Path]:
    # tp 1 pp 2 on 16 GPUs, mostly compute; tp 8 on 64, a third of it communication
    return job(tmp_path, "a.yaml", 16, 1, 2), job(tmp_path, "b.yaml", 64, 8, 1)


def test_a_split_above_the_links_line_rate_falls_back_to_one_factor(
        tmp_path: Path, cli: Cli) -> None:
    # made at communication 1.3, above the A100's links (their line rate over what NCCL
    # reaches: 1.04); each run alone is in range: it was refused as "a communication
    # factor of 1.3 puts the link bandwidths above the links' line rate"
    a, b = _separating_pair(tmp_path)
    truth = Factors(0.7, 0.7, 1.3)
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", a, "--step-s", f"{simulated_step(a, truth):.9g}",
            "--run", b, "--step-s", f"{simulated_step(b, truth):.9g}", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.fitted == [["compute", "memory", "communication"]]
    top = ceiling(A100, RateGroup.COMMUNICATION)
    (note,) = [n for n in cal.notes if "fitted apart" in n]
    assert "compute and memory x0.7, communication x1.3" in note
    assert (f"a communication factor of 1.3 puts the link bandwidths above the links' "
            f"line rate on a100-80gb (at most {top:.3g})") in note
    assert f"one common factor is fitted instead, x{cal.factors['compute']:.3g}" in note
    assert note in " ".join(r.stdout.split())
    # leave one out is kept: each run predicted from the other alone
    assert all(run.held_out_residual is not None for run in cal.runs)


def test_a_least_squares_split_at_an_infinitely_fast_link_falls_back(
        tmp_path: Path, cli: Cli) -> None:
    # b measured faster than its step at any communication rate (10% under its step at a
    # link a million times faster) while a fixes compute: the split's least squares lie at
    # an infinitely fast link, where math.exp overflowed (exit 1, a traceback)
    a, b = _separating_pair(tmp_path)
    at_a = simulated_step(a, Factors.common(0.7))
    at_b = simulated_step(b, Factors(0.7, 0.7, 1e6)) * 0.9
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", a, "--step-s", f"{at_a:.9g}", "--run", b, "--step-s",
            f"{at_b:.9g}", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.fitted == [["compute", "memory", "communication"]]
    (note,) = [n for n in cal.notes if "fitted apart" in n]
    assert "communication x1e+06 or more" in note
    assert "a communication factor of 1e+06 or more puts the link bandwidths above" in note


def test_a_step_no_factor_reaches_is_refused_as_out_of_range(
        tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", "--run", MEGATRON, "--step-s", "1e308", "-o", out))
    # the refusal a too-slow log gets, not pydantic's "1 validation error for LinkSpec"
    # one factor common to the three groups, its floor said once
    assert ("one run fits one factor common to compute, memory and communication, and a "
            "factor of 1e-06 or less puts the GEMM and attention rates, the HBM bandwidth "
            "and the link bandwidths below a tenth of what pptune prices on h100-sxm (at "
            "least 0.1)") in line
    assert line.count("ran over ten times slower than pptune prices it") == 1
    assert "validation error" not in line and "pydantic" not in line
    assert not out.exists()


def test_the_held_out_warning_names_inter_node_communication(tmp_path: Path,
                                                             cli: Cli) -> None:
    # weak scaling, 2 nodes and 8: their steps split alike (one common factor); the 8-node
    # run took 20% longer than the model gives it at the 2-node run's factor. Fitted
    # together each misses by ~9% (no residual warning); left out, the 8-node run is
    # predicted 1/1.2 - 1 = -16.7% (under-priced), the 2-node one +20%
    small = job(tmp_path, "two_nodes.yaml", 16, 1, 2, 512)
    large = job(tmp_path, "eight_nodes.yaml", 64, 1, 2, 2048)
    f = Factors.common(0.7)
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", small, "--step-s", f"{simulated_step(small, f):.9g}",
            "--run", large, "--step-s", f"{simulated_step(large, f) * 1.2:.9g}", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.fitted == [["compute", "memory", "communication"]]
    assert all(abs(run.residual) < 0.10 for run in cal.runs)
    (loo,) = cal.warnings
    assert loo.startswith("leave one out")
    assert "the runs on more nodes (8 against 2) ran slower than pptune prices them" in loo
    assert "inter-node communication" in loo
    # the advice follows the runs: they already differ in dp and GPU count
    (alike,) = [n for n in cal.notes if "split their steps alike" in n]
    assert "they differ in dp (8, 32) and GPUs (16, 64)" in alike
    assert "a run with another tp" in alike
    assert "runs with other tp, dp or GPU counts" not in alike


def test_a_too_fast_run_is_asked_about_its_own_description(
        tmp_path: Path, cli: Cli, error_line: ErrorLine) -> None:
    # b three times faster than the model's best rates; a in range: the question is
    # b's description, with b's own GPU count and batch
    a, b = _separating_pair(tmp_path)
    at_a = simulated_step(a, Factors.common(0.7))
    at_b = simulated_step(b, Factors.common(3.0))
    line = error_line(cli("calibrate", "--run", a, "--step-s", f"{at_a:.9g}", "--run", b,
                          "--step-s", f"{at_b:.9g}", "-o", tmp_path / "cal.json"))
    assert "b.yaml x3 (out of range)" in line
    assert ("does b.yaml run on more GPUs than the 64 it is priced on, a smaller batch "
            "than 512 sequences") in line
    assert "does it run on more GPUs" not in line


def test_a_model_the_script_contradicts_is_refused(tmp_path: Path, cli: Cli,
                                                   error_line: ErrorLine) -> None:
    out = tmp_path / "cal.json"
    line = error_line(cli("calibrate", "--run", MEGATRON, "--step-s", "9.0", "--model",
                          "llama3-70b", "-o", out))
    # it was calibrated as "llama3-70b" with the script's 32 layers
    assert "--model llama3-70b (80 layers, hidden 8192, 64 heads)" in line
    assert "llama3-8b (32 layers, hidden 4096, 32 heads)" in line
    assert "hidden_size 4096 (the model: 8192)" in line
    assert not out.exists()
    # the model the script states is no contradiction
    ok = cli("calibrate", "--run", MEGATRON, "--step-s", "9.0", "--model", "llama3-8b",
             "-o", out)
    assert ok.exit_code == 0, ok.stderr


def test_json_refusals_leave_stdout_empty(tmp_path: Path, cli: Cli,
                                          error_line: ErrorLine) -> None:
    # as recommend, simulate and every verb but check-config (whose CI document is its
    # contract): the error is the stderr line and the exit code
    line = error_line(cli("calibrate", "--run", MEGATRON, "--step-s", "1e5", "--json", "-o",
                          tmp_path / "cal.json"))
    assert "below a tenth" in line


def test_a_log_given_as_a_result_names_the_run_form(tmp_path: Path, cli: Cli,
                                                    error_line: ErrorLine) -> None:
    log = tmp_path / "train.log"
    log.write_text(" [2026-08-22 15:22:22] iteration       10/    5000 |\n")
    profile = tmp_path / "p.json"
    profile.write_text(two_layer_profile().model_dump_json())
    for args in ([log, "--profile", profile], [log]):
        line = error_line(cli("calibrate", *args, "-o", tmp_path / "cal.json"))
        assert "--run SCRIPT --log LOG" in line, line
