"""`pptune tune` and `pptune calibrate` through the CLI: errors, a real 2-rank tune, resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.schemas import Profile, load_profile

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]


def failed_line(result: Result) -> str:
    """The one error line of a run that started and failed (exit 1)."""
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = [x for x in result.stderr.splitlines() if x.startswith("pptune: error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def two_layer_profile() -> Profile:
    """Two layers at micro-batch size 1: F 1 ms and B 2 ms each, free links."""
    link = {"latency_s": 0.0, "bytes_per_s": 1e30}
    cost = {"fwd_s": 0.001, "bwd_s": 0.002, "wgrad_s": 0.0, "act_bytes": 0.0, "out_bytes": 0.0}
    return Profile.model_validate({
        "source": "probe", "model": {"name": "gpt-small", "seq_len": 8},
        "device": {"name": "cpu", "memory_bytes": 1e12},
        "links": {"intra_node": {"p2p": link, "allreduce": link},
                  "inter_node": {"p2p": link, "allreduce": link}},
        "layers": [{"name": f"block.{i}", "param_bytes": 0.0, "per_micro_batch": {"1": cost}}
                   for i in range(2)],
    })


def test_help_shares_recommends_flags_and_adds_its_own(cli: Cli) -> None:
    r = cli("tune", "--help")
    assert r.exit_code == 0
    assert "pptune tune --gpus 2 --global-batch 8 -o tuned/" in r.stdout
    for flag in ("--gpus", "--global-batch", "--schedules", "--profile", "--micro-batch-sizes",
                 "--steps", "--warmup", "--max-trials", "--budget", "--resume", "--emit"):
        assert flag in r.stdout
    # recommend's groups, from the same declarations: tests/cli/test_options.py


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--budget", "0"], "--budget must be > 0 seconds (got 0)"),
        (["--steps", "0", "--max-trials", "0"], "--steps must be at least 1 (got 0); --max-trials"),
        (["--schedules", "pipedream"], "unknown schedule 'pipedream'"),
        (["--emit", "nemo"], "unknown --emit 'nemo'"),
        (["--resume", "NOWHERE"], "no tune.jsonl there to resume from"),
        (["-o", "FILE"], "exists and is not a folder"),
        (["-o", "DONE"], "tune.jsonl exists: continue it with --resume"),
        (["-o", "A", "--resume", "B"], "-o A and --resume B differ"),
        (["-o", "MINE"], "-o MINE already has pptune-profile.json: tune would replace it"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], text: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, cli: Cli,
                                          error_line: ErrorLine) -> None:
    monkeypatch.chdir(tmp_path)
    Path("FILE").write_text("x")
    Path("DONE").mkdir()
    Path("DONE/tune.jsonl").write_text("")
    Path("MINE").mkdir()
    Path("MINE/pptune-profile.json").write_text("{}")
    line = error_line(cli("tune", "--gpus", "2", *args))
    assert text in line


def _validate_doc(schedule: str, split: list[int], ops: dict[str, float], m: int) -> dict:  # type: ignore[type-arg]
    return {
        "schedule": schedule, "pp": len(split), "num_microbatches": m, "virtual_stages": 1,
        "micro_batch_size": 1, "stage_layers": split,
        "measured": {"step_times_s": [0.02, 0.021]}, "contention": None, "loss_s": None,
        "ops": [{"kind": k[0], "stage": int(k[1:]), "measured_s": v} for k, v in ops.items()],
    }


def test_calibrate_folds_validate_results_into_a_profile(tmp_path: Path, cli: Cli,
                                                        error_line: ErrorLine) -> None:
    base = tmp_path / "p.json"
    base.write_text(two_layer_profile().model_dump_json())
    run = tmp_path / "run1.json"
    run.write_text(json.dumps(_validate_doc("gpipe", [2], {"F0": 0.004, "B0": 0.006}, 2)))
    out = tmp_path / "cal.json"
    r = cli("calibrate", run, "--profile", base, "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out)
    # F: 4 ms over 1 + 1 ms -> x2; B: 6 ms over 2 + 2 ms -> x1.5
    assert cal.layers[0].cost(1).fwd_s == pytest.approx(0.002)
    assert cal.layers[1].cost(1).bwd_s == pytest.approx(0.003)
    assert any("run1.json" in n for n in cal.notes)
    assert any(n.startswith("calibrated by pptune calibrate from 1") for n in cal.notes)
    # the fit is the report, on stdout (as the --run form's); stderr says what was written
    assert r.stdout.startswith("calibrated by pptune calibrate from 1")
    assert "calibrated by" not in r.stderr
    # the profile prices no weight gradient: no factor is reported for one
    assert r.stdout.endswith("size 1: block bwd x1.50, fwd x2.00\n") and "wgrad" not in r.stdout
    # errors: a file that is not a result, one of another model, the profile itself as -o
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert "is not a pptune validate --json result" in error_line(
        cli("calibrate", bad, "--profile", base, "-o", out))
    other = tmp_path / "other.json"
    other.write_text(json.dumps(_validate_doc("gpipe", [3], {"F0": 0.004}, 2)))
    assert "ran 3 layers but the profile has 2" in error_line(
        cli("calibrate", other, "--profile", base, "-o", out))
    assert "is the --profile file this command reads" in error_line(
        cli("calibrate", run, "--profile", base, "-o", base))


@pytest.mark.torch
@pytest.mark.slow
def test_real_two_rank_cpu_tune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    """gpt-small (sequence 32) on two gloo CPU ranks, the quick-probe fallback, --emit."""
    monkeypatch.chdir(tmp_path)
    r = cli("tune", "--gpus", "2", "--pp", "2", "--global-batch", "4", "--seq-len", "32",
               "--micro-batch-sizes", "1", "--schedules", "gpipe,1f1b", "--max-trials", "2",
               "--steps", "2", "--warmup", "1", "-o", "out", "--emit", "pptune", "--json")
    assert r.exit_code == 0, r.stderr
    assert "measuring a quick profile of gpt-small" in r.stderr
    doc = json.loads(r.stdout)
    measured = [t for t in doc["trials"] if t["status"] == "measured"]
    assert 1 <= len(measured) <= 2 and doc["winner"] in {t["key"] for t in measured}
    for t in doc["trials"]:
        assert t["status"] in ("measured", "pruned", "not run"), t
        assert t["predicted_before_s"] > 0
    lines = [json.loads(x) for x in Path("out/tune.jsonl").read_text().splitlines()]
    assert [x["key"] for x in lines] == [t["key"] for t in measured]
    for x in lines:
        assert x["measured_step_s"] > 0 and len(x["step_times_s"]) == 2
        assert {o["kind"] for o in x["ops"]} >= {"F", "B"}
    if "calibration not kept" in r.stderr:
        # a loaded host can time the held-out trial so that the fit predicts it worse:
        # then tune says so and writes no calibrated profile (artifacts.calibration_refusal)
        assert not Path("out/pptune-profile.json").exists()
    else:
        cal = Profile.model_validate_json(Path("out/pptune-profile.json").read_text())
        assert cal.schema_version == 1 and any("calibrated by pptune tune" in n
                                               for n in cal.notes)
    plans = json.loads(Path("out/pptune-plans.json").read_text())["plans"]
    assert plans[0]["measured_step_s"] is not None and plans[0]["tune_status"] == "measured"
    assert Path("out/pptune.yaml").exists() and Path("out/probe-profile.json").exists()


DYING_MODULE = '''
import os
from pathlib import Path

import torch
from torch import nn


class Die(nn.Module):
    """Ends its process in forward: a rank that dies mid-trial."""

    def forward(self, x):
        os._exit(3)


def layers():
    """Pipeline rank 1 of the second trial dies (spawned ranks have RANK set)."""
    die = False
    if os.environ.get("RANK") == "1":
        counter = Path(os.environ["PPTUNE_TEST_COUNTER"])
        n = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(n))
        die = n == 2
    body = [nn.Linear(16, 16) for _ in range(3)]
    return [*body, Die() if die else nn.Linear(16, 16)], torch.randn(1, 16)
'''


@pytest.mark.torch
@pytest.mark.slow
def test_resume_after_a_rank_dies_mid_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            cli: Cli) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PPTUNE_TEST_COUNTER", str(tmp_path / "counter"))
    Path("dying.py").write_text(DYING_MODULE)
    args = ["tune", "--gpus", "2", "--pp", "2", "--global-batch", "4", "--module", "dying:layers",
            "--micro-batch-sizes", "1", "--schedules", "gpipe,1f1b,zb-h1", "--steps", "1",
            "--warmup", "0", "--timeout", "60"]
    line = failed_line(cli(*args, "-o", "out"))
    # the parent sees rank 1 exit, or rank 0 first reports its peer's lost connection
    assert "failed: validate: rank 1 of 2 exited with code 3" in line or (
        "failed: validate: rank 0 of 2 failed" in line), line
    first = Path("out/tune.jsonl").read_text().splitlines()
    assert [json.loads(x)["status"] for x in first] == ["measured", "failed"]
    r = cli(*args, "--resume", "out")
    assert r.exit_code == 0, r.stderr
    assert "1 measured trial(s) in tune.jsonl are kept, not rerun" in r.stderr
    after = Path("out/tune.jsonl").read_text().splitlines()
    assert after[:2] == first  # nothing written is lost or replaced
    again = [json.loads(x) for x in after[2:]]
    assert again and json.loads(first[0])["key"] not in {x["key"] for x in again}
    # the kept trial is marked as resumed, unless it won (its status then reads WINNER)
    winner = next(x for x in r.stdout.splitlines() if "WINNER" in x)
    assert "(resumed)" in r.stdout or json.loads(first[0])["key"] in winner, r.stdout


@pytest.mark.torch
def test_nothing_runnable_is_a_failed_run_with_the_reasons(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          cli: Cli) -> None:
    from pptune.costs.profiles import analytic_profile

    monkeypatch.chdir(tmp_path)
    Path("p.json").write_text(analytic_profile("gpt-small", "h100-sxm", [1]).model_dump_json())
    r = cli("tune", "--gpus", "2", "--tp", "2", "--profile", "p.json", "--global-batch", "4")
    assert "none of the" in failed_line(r) and "candidates was measured" in failed_line(r)
    assert "tp=2: tune runs no tensor parallelism" in r.stdout


@pytest.mark.torch
def test_a_model_this_hosts_memory_cannot_hold_is_refused_before_any_trial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli, error_line: ErrorLine) -> None:
    """A user's trial: tune --gpus 64 of Llama 3 70B on a CPU host had built the whole
    model in one rank until the OOM killer ended it. Here Llama 3 8B (8.0e9 parameters:
    fp32 weights and gradients alone 60 GiB) with the host's free memory set to 23 GiB;
    a trial that starts fails the test (none may: it would take the machine's memory)."""
    from pptune.costs.profiles import analytic_profile
    from pptune.probe import host_memory
    from pptune.tune import trial

    def no_trial(*args: object, **kwargs: object) -> None:
        raise AssertionError("a trial started")

    monkeypatch.setattr(host_memory, "available_bytes", lambda: 23 * 2**30)
    monkeypatch.setattr(trial, "measure", no_trial)
    monkeypatch.chdir(tmp_path)
    Path("p.json").write_text(analytic_profile("llama3-8b", "h100-sxm", [1]).model_dump_json())
    line = error_line(cli("tune", "--gpus", "8", "--profile", "p.json", "-o", "out",
                          "--max-trials", "1", "--budget", "30", "--device", "cpu"))
    assert line.startswith("pptune: error: tune: none of the candidates fits this host's "
                           "memory; the smallest: trial '")
    assert "more than the 23.00 GiB it has free (MemAvailable); run the tune on a GPU" in line
    assert not Path("out/tune.jsonl").exists() and not Path("out/probe-profile.json").exists()
