"""`pptune validate` through the CLI: one real 2-process CPU run, the plan file, the errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput
from pptune.validate.session import ValidateRequest, build_spec

Cli = Callable[..., Result]  # the ``cli`` fixture of tests/conftest.py


@pytest.fixture
def run(cli: Cli) -> Cli:
    return lambda *args: cli("validate", *args)


def one_error_line(result: Result, exit_code: int = 2) -> str:
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    lines = [x for x in result.stderr.splitlines() if x.startswith("pptune: error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output + result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory, cli: Cli) -> Path:
    """A real plan file: `pptune recommend` on analytic gpt-small costs, pp=2, ten plans
    (the DualPipes lead it; a zb-h1 plan is among them)."""
    out = tmp_path_factory.mktemp("plans") / "plans.json"
    r = cli(
        "recommend", "--gpus", "2", "--pp", "2", "--model", "gpt-small", "--gpu", "h100-sxm",
        "--recompute", "none", "--top", "10", "-o", out, "--json",
    )
    assert r.exit_code == 0, r.stderr
    return out


def test_help_has_an_example(run: Cli) -> None:
    r = run("--help")
    assert r.exit_code == 0
    assert "pptune validate --pp 2 --microbatches 4" in r.stdout
    for flag in ("--plan", "--rank", "--profile", "--trace", "--timeline", "--json", "--timeout"):
        assert flag in r.stdout


def test_plan_file_becomes_the_run_spec(plans: Path) -> None:
    doc = json.loads(plans.read_text())
    record = next(p for p in doc["plans"] if p["schedule"] == "zb-h1")
    req = ValidateRequest(plan=plans, rank=record["rank"])
    spec, notes = build_spec(req, lambda source: 8, "cpu")
    assert spec.schedule is Schedule.ZB_H1
    assert (spec.pp, spec.microbatches, spec.micro_batch_size) == (
        record["pp"], record["num_microbatches"], record["micro_batch_size"]
    )
    assert list(spec.stage_layers) == record["stage_layers"]
    assert spec.source.model == "gpt-small"
    assert any("from the plan file" in n for n in notes)
    # a dualpipev plan runs as torch's ScheduleDualPipeV, its 2 x pp stages in a V
    vee = next(p for p in doc["plans"] if p["schedule"] == "dualpipev")
    assert vee["virtual_stages"] == 2 and len(vee["stage_layers"]) == 4
    spec, _ = build_spec(ValidateRequest(plan=plans, rank=vee["rank"]), lambda s: 8, "cpu")
    assert spec.schedule is Schedule.DUALPIPEV and spec.stages_of(0) == [0, 3]
    # a dualpipe plan: no torch runtime, one line
    dual = next(p for p in doc["plans"] if p["schedule"] == "dualpipe")
    assert len(dual["stage_layers"]) == 2  # its pp chunks, each on two ranks
    with pytest.raises(BadInput, match="'s schedule dualpipe: no torch runtime has it"):
        build_spec(ValidateRequest(plan=plans, rank=dual["rank"]), lambda s: 8, "cpu")


def test_flags_default_to_an_even_split() -> None:
    spec, _ = build_spec(ValidateRequest(pp=2, microbatches=4), lambda source: 8, "cpu")
    assert spec.stage_layers == (4, 4) and spec.schedule is Schedule.ONE_F_ONE_B
    spec, _ = build_spec(
        ValidateRequest(pp=2, microbatches=4, schedule="interleaved-1f1b"), lambda s: 8, "cpu"
    )
    assert spec.stage_layers == (2, 2, 2, 2)


def test_plan_and_flags_together_is_an_error(plans: Path) -> None:
    with pytest.raises(BadInput, match="--plan and --pp, --schedule both describe the plan"):
        build_spec(ValidateRequest(plan=plans, pp=2, schedule="gpipe"), lambda s: 8, "cpu")
    with pytest.raises(BadInput, match="no plan of rank 99; it has ranks 1, 2"):
        build_spec(ValidateRequest(plan=plans, rank=99), lambda s: 8, "cpu")


@pytest.mark.torch
@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--split", "3,3"], "--split 3,3 must have 2 entries"),
        (["--pp", "4", "--microbatches", "2"], "1f1b needs at least as many micro-batches"),
        (["--schedule", "pipedream"], "unknown schedule 'pipedream'"),
        (["--split", "4,x"], "--split takes comma-separated integers"),
        (["--dtype", "int8"], "--dtype must be auto, fp32, bf16 or fp16"),
        (["--model", "gpt-small", "--module", "x:y"], "--model and --module both name the model"),
        (["--model", "nope"], "--model 'nope' is not a preset"),
        (["--plan", "/nonexistent/plans.json"], "plan file not found"),
        (["--profile", "/nonexistent/p.json"], "profile file not found"),
        (["--micro-batch-size", "3", "--profile", "PROFILE"], "no costs for micro-batch size 3"),
        (["--schedule", "dualpipe", "--microbatches", "4"],
         "--schedule dualpipe: no torch runtime has it"),
        (["--schedule", "dualpipev", "--microbatches", "2"],
         "DualPipeV requires at least as many microbatches as stages, but got 2 microbatches "
         "and 4 stages"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Cli
) -> None:
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)  # no ./pptune-profile.json; nothing gets spawned
    if "PROFILE" in args:
        profile = tmp_path / "p.json"
        profile.write_text(json.dumps(_tiny_profile(8)))
        args = [str(profile) if a == "PROFILE" else a for a in args]
    line = one_error_line(run(*args))
    assert text in line


def _tiny_profile(n_layers: int) -> dict:  # type: ignore[type-arg]
    from pptune.costs.profiles import analytic_profile

    prof = analytic_profile("gpt-small", "h100-sxm", [1, 2])
    assert len(prof.layers) == n_layers
    return json.loads(prof.model_dump_json())


@pytest.mark.slow
def test_import_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import pptune.cli.validate, pptune.validate\n"
        "from pptune.validate import spec, measure, compare, session, render, runner\n"
        "from pptune.validate.runner import import_torch\n"
        "from pptune.errors import MissingDependency\n"
        "try:\n"
        "    import_torch()\n"
        "except MissingDependency as e:\n"
        "    print('missing:', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "missing: pptune validate needs torch" in r.stdout


@pytest.mark.torch
@pytest.mark.slow
def test_real_two_rank_cpu_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Cli
) -> None:
    """gpt-small, 1f1b, pp=2, m=4 on two gloo CPU processes; the quick-probe fallback."""
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "measured.json"
    r = run(
        "--schedule", "1f1b", "--pp", "2", "--microbatches", "4", "--seq-len", "64",
        "--warmup", "1", "--steps", "2", "--json", "--trace", str(trace),
    )
    assert r.exit_code == 0, r.stderr
    assert "measuring a quick profile of gpt-small" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["torch_schedule"] == "Schedule1F1B" and doc["backend"] == "gloo"
    assert doc["stage_layers"] == [4, 4]
    for side in ("predicted", "measured"):
        s = doc[side]
        assert s["step_time_s"] > 0
        assert 0 <= s["bubble_rate"] < 1
        assert len(s["devices"]) == 2
        for d in s["devices"]:
            assert d["busy_s"] > 0 and d["idle_s"] >= 0
            assert d["busy_s"] + d["idle_s"] == pytest.approx(s["step_time_s"])
    err = doc["step_time_error"]
    assert err is not None and math.isfinite(err)
    assert err == pytest.approx(
        (doc["predicted"]["step_time_s"] - doc["measured"]["step_time_s"])
        / doc["measured"]["step_time_s"]
    )
    assert len(doc["measured"]["step_times_s"]) == 2
    kinds = {(o["kind"], o["stage"]) for o in doc["ops"]}
    assert kinds == {("F", 0), ("B", 0), ("F", 1), ("B", 1)}
    assert trace.exists()
    events = json.loads(trace.read_text())["traceEvents"]
    computes = [e for e in events if e["ph"] == "X"]
    assert len(computes) == 2 * 4 * 2  # 2 ranks x 4 micro-batches x (F, B)


@pytest.mark.torch
@pytest.mark.slow
def test_mixture_of_experts_runs_through_pipelining_on_two_cpu_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Cli
) -> None:
    """moe-small (8 local experts, top-2, ep 1) as 1f1b on two gloo ranks, priced from a
    quick probe of the same blocks."""
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    r = run("--model", "moe-small", "--schedule", "1f1b", "--pp", "2", "--microbatches", "2",
            "--seq-len", "32", "--warmup", "1", "--steps", "1", "--json")
    assert r.exit_code == 0, r.stderr
    assert "measuring a quick profile of moe-small" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["stage_layers"] == [3, 3]  # embedding + 2 MoE blocks, 2 MoE blocks + head
    assert doc["predicted"]["step_time_s"] > 0 and doc["measured"]["step_time_s"] > 0
    assert doc["step_time_error"] is not None and math.isfinite(doc["step_time_error"])


@pytest.mark.torch
@pytest.mark.slow
def test_dualpipev_runs_through_torchs_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Cli
) -> None:
    """gpt-small, dualpipev, pp=2 (4 stages in a V), m=4 on two gloo CPU processes."""
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    r = run(
        "--schedule", "dualpipev", "--pp", "2", "--microbatches", "4", "--seq-len", "64",
        "--warmup", "1", "--steps", "2", "--json",
    )
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["torch_schedule"] == "ScheduleDualPipeV"
    assert doc["stage_layers"] == [2, 2, 2, 2]
    for side in ("predicted", "measured"):
        assert len(doc[side]["devices"]) == 2 and doc[side]["step_time_s"] > 0
    # rank 0 holds stages 0 and 3, rank 1 stages 1 and 2; torch runs the pairs as a
    # forward then a whole backward, stamped BW beside the split B and W
    kinds = {(o["kind"], o["stage"]) for o in doc["ops"]}
    assert {("F", 0), ("F", 3), ("BW", 1), ("BW", 3), ("W", 0)} <= kinds
    assert math.isfinite(doc["step_time_error"])
    # every stage's backward into held gradients, whole and split, timed in the run
    assert sorted(doc["accumulation_s"]) == ["0", "1", "2", "3"]
    assert all(x >= 0 for pair in doc["accumulation_s"].values() for x in pair)


HANGING_MODULE = '''
import os
import time

import torch
from torch import nn


class Hang(nn.Module):
    """Hangs on pipeline rank 1 (a spawned rank has RANK set; the CLI process does not)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if os.environ.get("RANK") == "1":
            time.sleep(600)
        return self.lin(x)


def layers():
    return [nn.Linear(4, 4), Hang()], torch.randn(1, 4)
'''


@pytest.mark.torch
@pytest.mark.slow
def test_a_hung_rank_is_bounded_by_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Cli
) -> None:
    pytest.importorskip("torch")
    from pptune.schemas import Profile

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hangmod.py").write_text(HANGING_MODULE)
    doc = _tiny_profile(8)
    doc["layers"] = doc["layers"][:2]
    doc["layers"][0]["per_micro_batch"] = {"1": doc["layers"][0]["per_micro_batch"]["1"]}
    doc["layers"][1]["per_micro_batch"] = {"1": doc["layers"][1]["per_micro_batch"]["1"]}
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(Profile.model_validate(doc).model_dump()))
    r = run(
        "--module", "hangmod:layers", "--schedule", "gpipe", "--pp", "2", "--microbatches", "2",
        "--warmup", "0", "--steps", "1", "--timeout", "8", "--profile", str(profile),
    )
    line = one_error_line(r, exit_code=1)  # a run that failed, not bad input
    # start-up (spawn, import torch, rendezvous) takes ~7 s here; on a slower or busier
    # host it may not fit in 8 s, which the message tells apart
    assert (
        "rank(s) 0, 1 of 2 gave no word for 8 s (--timeout 8); a rank hangs" in line
        or "did not start within 8 s" in line
    ), line


@pytest.mark.torch  # validate imports torch before it reads the plan file
def test_plan_n_reads_the_saved_recommendation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Cli, cli: Cli
) -> None:
    monkeypatch.chdir(tmp_path)
    # no saved recommendation yet: one line naming the default file
    assert "pptune-plans.json" in one_error_line(run("--plan", "1"))
    saved = cli("recommend", "--gpus", "2", "--model", "gpt-small", "--gpu", "h200",
                "-o", "pptune-plans.json", "--json")
    assert saved.exit_code == 0, saved.stderr
    n_plans = len(json.loads(saved.stdout)["plans"])
    line = one_error_line(run("--plan", str(n_plans + 1)))
    assert f"no plan of rank {n_plans + 1}" in line


def test_a_tampered_plan_file_is_blamed_by_its_keys_not_by_flags_never_given(
        plans: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Cli) -> None:
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    doc = json.loads(plans.read_text())
    doc["plans"][0].update(stage_layers=[10**12], schedule="1f1b")
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(doc))
    line = one_error_line(run("--plan", str(bad)))
    assert "stage_layers 1000000000000 must have 2 entries" in line
    assert "--split" not in line
    doc["plans"][0].update(stage_layers=doc["plans"][1]["stage_layers"], schedule="dualpipe")
    bad.write_text(json.dumps(doc))
    line = one_error_line(run("--plan", str(bad)))
    assert "schedule dualpipe" in line and "--schedule dualpipe:" not in line


def test_a_quick_probe_that_does_not_fit_names_validates_own_flags(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Cli) -> None:
    pytest.importorskip("torch")
    from pptune.probe import host_memory

    monkeypatch.chdir(tmp_path)  # no ./pptune-profile.json: validate probes in-process
    monkeypatch.setattr(host_memory, "available_bytes", lambda *a: 1)
    line = one_error_line(run("--model", "gpt-small", "--device", "cpu"))
    assert "lower -b/--micro-batch-size or --seq-len" in line
    assert "--micro-batch-sizes" not in line


def test_ranks_this_hosts_memory_cannot_hold_are_refused_before_they_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Cli) -> None:
    """gpt-small (the CPU demo: d 256, 6 blocks, vocab 8,192, sequence 128) on two CPU
    ranks, 4 micro-batches of 1, fp32: the weights and gradients of its 8,945,664
    parameters (no norms or biases) are 71,565,312 B; one boundary's 8 receive buffers of
    128 x 256 x 4 B, 1 MiB; the inputs 132,096 + 16,384 B: 72,762,368 B, 69.39 MiB. With
    32 MiB free the run is refused, and no rank starts."""
    pytest.importorskip("torch")
    from pptune.costs.profiles import analytic_profile
    from pptune.probe import host_memory
    from pptune.validate import runner

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("a rank started")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(host_memory, "available_bytes", lambda *a: 32 * 2**20)
    monkeypatch.setattr(runner, "run_spawned", no_run)
    Path("p.json").write_text(analytic_profile("gpt-small", "h100-sxm", [1]).model_dump_json())
    line = one_error_line(run("--model", "gpt-small", "--device", "cpu", "--profile", "p.json"))
    assert line.startswith("pptune: error: validate's 2-rank run of gpt-small would hold at "
                           "least 69.39 MiB of this host's memory at once (8.9M parameters as "
                           "weights and gradients of 4 bytes each, 68.25 MiB")
    assert line.endswith("more than the 32.00 MiB it has free (MemAvailable); validate it on "
                         "a GPU host (--device cuda), or a smaller model here (--model, "
                         "--hf-config)")
