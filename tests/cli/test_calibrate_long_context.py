"""`pptune calibrate` on long-context jobs (tests/data/long_context/SOURCE.md): a log's
own TFLOP/s held against the count its framework prints (torchtitan's full attention
square, Megatron-LM's causal half since core_r0.12.0), the warning kept with the factors;
a calibrated profile giving its job's step back with the kernels the job ran; a refusal
naming the run that cannot fit."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.costmodel.presets import MODELS
from pptune.costs.flops import counted_flops_per_token, shape_flops_per_token
from pptune.schemas import load_profile

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]
DATA = Path(__file__).resolve().parents[1] / "data" / "long_context"
TITAN, TITAN_LOG = DATA / "titan_70b_131k_h100.toml", DATA / "titan_70b_131k_h100.log"
MEGATRON, MEGATRON_LOG = DATA / "megatron_70b_131k_h100.sh", DATA / "megatron_70b_131k_h100.log"
FULL_LOG = DATA / "megatron_70b_131k_h100_fullattn.log"
B200, B200_LOG = DATA / "megatron_70b_131k_b200.sh", DATA / "megatron_70b_131k_b200.log"
S = 131072
# the job's own layout, as recommend's flags state it (5 layers a virtual stage: v = 4)
LAYOUT = ("--gpus", "512", "--pp", "4", "--tp", "8", "--cp", "8", "--schedules",
          "interleaved-1f1b", "--virtual-stages", "4", "--sharding", "zero1", "--recompute",
          "full", "--micro-batch-sizes", "1", "--global-batch", "64", "--top", "1")


def calibrated(path: Path):  # type: ignore[no-untyped-def]
    cal = load_profile(path).calibration
    assert cal is not None
    return cal


def titan_flops_per_step(log: Path, gpus: int = 512, tokens: int = 64 * S) -> list[float]:
    """Each steady line's TFLOP/s x GPUs x seconds, its seconds from its tps (tokens a
    GPU a second: a step is tokens / (gpus x tps)), the first line left out."""
    out = []
    for line in log.read_text().splitlines():
        tps, tflops = re.search(r"tps: ([\d,]+)", line), re.search(r"tflops: ([\d.]+)", line)
        if tps and tflops:
            out.append(float(tflops[1]) * 1e12 * gpus * tokens
                       / (gpus * float(tps[1].replace(",", ""))))
    return out[1:]


def test_the_frameworks_counts_by_hand() -> None:
    m = MODELS["llama3-70b"]  # 80 layers, 64 heads of 128
    causal = counted_flops_per_token(m, S, causal=True)
    full = counted_flops_per_token(m, S, causal=False)
    # torchtitan: 6 x n_layers x n_heads x (2 x head_dim) x seq_len; Megatron-LM since
    # core_r0.12.0: half of it; no window in Llama 3, so pptune's own count is the causal one
    assert full - causal == 6 * 80 * 64 * 256 * S / 2 == 515_396_075_520
    assert causal == shape_flops_per_token(m, S)
    # the torchtitan log's own FLOPs a step: that count (its tps rounded to integers)
    logged = statistics.median(titan_flops_per_step(TITAN_LOG))
    assert logged / (full * 64 * S) == pytest.approx(1.0, abs=0.005)


@pytest.mark.parametrize(("config", "log", "note"), [
    (TITAN, TITAN_LOG, None),
    (MEGATRON, MEGATRON_LOG, None),
    (MEGATRON, FULL_LOG, "Megatron-LM before core_r0.12.0"),
])
def test_a_long_context_log_of_the_configs_job_raises_no_warning(
        tmp_path: Path, cli: Cli, config: Path, log: Path, note: str | None) -> None:
    # before: "1.56x the 7.82e+18 model FLOPs ... the log may be of another sequence
    # length, batch or model" (pptune's causal count against torchtitan's full one)
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", config, "--log", log, "--gpu", "h100-sxm", "-o", out,
            "--json")
    assert r.exit_code == 0, r.stderr
    assert "TFLOP/s a GPU times" not in r.stderr
    assert not any("TFLOP/s" in w for w in calibrated(out).warnings)
    assert not any("TFLOP/s" in w for w in json.loads(r.stdout)["warnings"])
    # an older Megatron-LM's count is its own: said, not warned
    assert (note is not None) == ("the log is likely of such a release" in r.stderr)
    if note is not None:
        assert f"counted as {note}: attention's full square" in r.stderr


def test_a_log_of_another_sequence_length_is_warned_in_the_profile_and_the_json(
        tmp_path: Path, cli: Cli) -> None:
    """The 131k log given with the job's file at 65,536 tokens: its own FLOPs a step,
    the median over the lines the step is the median of, are 1.55x what torchtitan counts
    for a 64 x 65,536-token step."""
    config = tmp_path / "titan_64k.toml"
    config.write_text(TITAN.read_text().replace("seq_len = 131072", "seq_len = 65536"))
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", config, "--log", TITAN_LOG, "-o", out, "--json")
    assert r.exit_code == 0, r.stderr
    # the log's tps give the step at the config's tokens: a line's FLOPs a step is its
    # tflops x 512 x 64 x 65,536 / (512 x tps)
    per_line = titan_flops_per_step(TITAN_LOG, tokens=64 * 65536)
    logged = statistics.median(per_line)
    counted = counted_flops_per_token(MODELS["llama3-70b"], 65536, causal=False) * 64 * 65536
    warning = next(w for w in calibrated(out).warnings if "TFLOP/s" in w)
    assert warning.startswith(
        f"--log {TITAN_LOG}: its TFLOP/s a GPU times 512 GPUs and each line's seconds make "
        f"{logged:.3g} FLOPs a step (median over steps 2-12, the lines the step is the "
        f"median of), {logged / counted:.2f}x the {counted:.3g} FLOPs torchtitan counts for "
        "the job the config describes (llama3-70b, 64 x 65536 tokens;")
    assert f"{logged / counted:.2f}" == "1.55"
    assert "the log may be of another sequence length, batch or model" in warning
    assert warning in json.loads(r.stdout)["warnings"]
    assert r.stderr.count("TFLOP/s a GPU times") == 1  # said once, as a warning
    assert f"pptune: warning: {warning}" in r.stderr


def test_the_warning_takes_the_median_not_the_last_line(tmp_path: Path, cli: Cli) -> None:
    config = tmp_path / "titan_64k.toml"
    config.write_text(TITAN.read_text().replace("seq_len = 131072", "seq_len = 65536"))
    lines = TITAN_LOG.read_text().splitlines()
    lines[-1] = re.sub(r"tflops: [\d.]+", "tflops: 500.00", lines[-1])  # an outlier last
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", config, "--log", log, "-o", out)
    assert r.exit_code == 0, r.stderr
    per_line = titan_flops_per_step(log, tokens=64 * 65536)
    warning = next(w for w in calibrated(out).warnings if "TFLOP/s" in w)
    assert f"make {statistics.median(per_line):.3g} FLOPs a step" in warning
    assert f"{per_line[-1]:.3g}" != f"{statistics.median(per_line):.3g}"


def test_a_megatron_log_of_another_sequence_length_is_warned(tmp_path: Path, cli: Cli) -> None:
    # the 131k log with the script at 65,536 tokens: 7.8e18 FLOPs a step against 2.8e18
    # (causal, core_r0.12.0 on) or 3.9e18 (full square, before): the nearer is 2.0x
    config = tmp_path / "megatron_64k.sh"
    config.write_text(MEGATRON.read_text().replace("SEQ=131072", "SEQ=65536"))
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", config, "--log", MEGATRON_LOG, "--gpu", "h100-sxm", "-o", out)
    assert r.exit_code == 0, r.stderr
    m = MODELS["llama3-70b"]
    logged = 309.7e12 * 512 * 49.3256  # iteration 2's line
    full = counted_flops_per_token(m, 65536, causal=False) * 64 * 65536
    warning = next(w for w in calibrated(out).warnings if "TFLOP/s" in w)
    assert f"x the {full:.3g} FLOPs Megatron-LM counts" in warning
    assert "Megatron-LM before core_r0.12.0: attention's full square" in warning
    ratio = float(re.search(r"\), ([\d.]+)x the", warning)[1])  # type: ignore[index]
    assert ratio == pytest.approx(logged / full, abs=0.02)


# ---------------------------------------------------------------- the job's own step back


def megatron_profile(tmp_path: Path, cli: Cli) -> Path:
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MEGATRON, "--log", MEGATRON_LOG, "--gpu", "h100-sxm",
            "-o", out)
    assert r.exit_code == 0, r.stderr
    return out


def step_of(r: Result) -> float:
    assert r.exit_code == 0, r.stderr
    return float(json.loads(r.stdout)["plans"][0]["step_time_s"])


def test_a_calibrated_profile_gives_its_jobs_step_back(tmp_path: Path, cli: Cli) -> None:
    """The job's own layout priced from its calibration is the job's step: the profile
    keeps the kernels the job ran (before: priced at pptune's defaults, 53.378 s where the
    log says 49.33 s)."""
    out = megatron_profile(tmp_path, cli)
    cal = calibrated(out)
    assert (cal.tp_comm_overlap, cal.cross_entropy, cal.swiglu, cal.wgrad_accum) == (
        True, "native", "fused", "fused")
    r = cli("recommend", "--profile", out, *LAYOUT, "--json")
    assert step_of(r) == pytest.approx(cal.runs[0].measured_step_s, rel=1e-4)
    assert ("kernels as the calibrated jobs ran: --tp-comm-overlap, --cross-entropy native, "
            "--wgrad-accum fused (a flag prices others)") in r.stderr
    # the flags, given, price as given, and say the jobs ran otherwise
    other = cli("recommend", "--profile", out, *LAYOUT, "--json", "--no-tp-comm-overlap")
    assert step_of(other) > step_of(r)
    assert ("--no-tp-comm-overlap: the calibrated jobs ran --tp-comm-overlap; their factors "
            "price this too") in other.stderr


def test_a_profile_without_the_kernels_loads_and_prices_pptunes_defaults(
        tmp_path: Path, cli: Cli) -> None:
    out = megatron_profile(tmp_path, cli)
    doc = json.loads(out.read_text())
    for key in ("tp_comm_overlap", "cross_entropy", "swiglu", "wgrad_accum"):
        del doc["calibration"][key]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    before = cli("recommend", "--profile", old, *LAYOUT, "--json")
    defaults = cli("recommend", "--profile", out, *LAYOUT, "--json", "--no-tp-comm-overlap",
                   "--cross-entropy", "fused", "--swiglu", "fused", "--wgrad-accum", "bf16")
    assert step_of(before) == step_of(defaults)
    assert "kernels as the calibrated jobs ran" not in before.stderr


def test_recommend_and_check_config_say_the_same_costs(tmp_path: Path, cli: Cli) -> None:
    out = megatron_profile(tmp_path, cli)

    def costs_line(r: Result) -> str:
        return next(x for x in r.stderr.splitlines() if x.startswith("pptune: costs: "))

    rec = costs_line(cli("recommend", "--profile", out, *LAYOUT))
    check = costs_line(cli("check-config", MEGATRON, "--profile", out))
    assert rec == check and rec.endswith(", cudnn attention")  # the kernel the job ran


def test_the_plan_file_records_the_kernels_priced(tmp_path: Path, cli: Cli) -> None:
    out = megatron_profile(tmp_path, cli)
    plans = tmp_path / "plans.json"
    assert cli("recommend", "--profile", out, *LAYOUT, "-o", plans).exit_code == 0
    request = json.loads(plans.read_text())["request"]
    assert (request["tp_comm_overlap"], request["cross_entropy"], request["wgrad_accum"],
            request["attention"]) == (True, "native", "fused", "cudnn")


# ---------------------------------------------------------------- the run a refusal names


def test_a_refusal_names_the_run_that_does_not_fit(tmp_path: Path, cli: Cli,
                                                   error_line: ErrorLine) -> None:
    # before: "megatron_70b_131k_h100.sh's step is 66% attention ... ran faster than the
    # GPU's peak", though that run alone calibrates (0.764) and the 256-GPU one cannot
    alone = calibrated(megatron_profile(tmp_path, cli)).factors["compute"]
    line = error_line(cli("calibrate", "--gpu", "h100-sxm", "--run", MEGATRON, "--log",
                          MEGATRON_LOG, "--run", B200, "--log", B200_LOG,
                          "-o", tmp_path / "two.json"))
    own = re.search(r"fitted alone, each run's one factor: megatron_70b_131k_h100\.sh "
                    r"x([\d.]+), megatron_70b_131k_b200\.sh x([\d.]+) \(out of range\): "
                    r"megatron_70b_131k_b200\.sh's step is", line)
    assert own is not None, line
    assert own[1] == f"{alone:.3g}" and float(own[2]) > 1.04  # the compute ceiling
    assert "megatron_70b_131k_h100.sh's step" not in line
