"""`pptune probe` through the CLI: the file, stdout/stderr, exit codes, every enum value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.probe.build import DeviceChoice, DType
from pptune.schemas import Profile

pytestmark = pytest.mark.torch  # skipped without torch (tests/conftest.py)

DATA = Path(__file__).resolve().parent.parent / "data" / "nccl"
runner = CliRunner()
# the cheapest real probe: no processes, one micro-batch size, one repeat, short sequence
TINY = ["--no-comm", "--micro-batch-sizes", "1", "--repeats", "1", "--warmup", "0", "--seq-len", "8"]


def run(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["probe", *args], catch_exceptions=False)


def one_error_line(result) -> str:  # type: ignore[no-untyped-def]
    lines = [x for x in result.stderr.splitlines() if x.startswith("pptune: error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output + result.stderr
    return lines[0]


@pytest.mark.slow
def test_quick_probe_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    r = run("--quick", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    profile = Profile.model_validate(json.loads(out.read_text()))
    assert profile.source == "probe"
    assert profile.model.name == "gpt-small" and profile.model.num_blocks == 6
    assert [layer.name for layer in profile.layers] == (
        ["embed"] + [f"block.{i}" for i in range(6)] + ["head"]
    )
    assert profile.micro_batch_sizes() == [1, 2]
    assert profile.param_dtype_bytes == 4
    embed, block, head = profile.layers[0], profile.layers[1], profile.layers[-1]
    assert embed.cost(1).bwd_s == 0.0  # token ids: no input gradient
    assert block.cost(1).fwd_s > 0 and block.cost(1).bwd_s > 0 and block.cost(1).wgrad_s > 0
    assert block.cost(2).act_bytes > block.cost(1).act_bytes
    assert block.cost(1).out_bytes == 128 * 256 * 4
    assert head.cost(1).out_bytes == 128 * 8192 * 4
    assert block.param_bytes == pytest.approx(4 * (12 * 256 * 256 + 13 * 256), rel=0.01)
    fits = profile.raw["links_fit"]  # type: ignore[index]
    assert fits["intra_node.p2p"]["source"].startswith("measured, gloo, 2 ranks")
    assert fits["intra_node.allreduce"]["source"].startswith("measured")
    assert any("inter-node p2p link NOT measured" in n for n in profile.notes)
    # torch 2.13's gloo runs all_to_all_single: the expert dispatch is swept and fitted,
    # or, where the loaded host's sweep resolved no bandwidth, left out and said
    assert fits["intra_node.alltoall"]["source"].startswith("measured, gloo, 2 ranks")
    unresolved = "unresolved" in fits["intra_node.alltoall"]
    assert (profile.links.intra_node.all_to_all is None) == unresolved
    assert ("warning: intra-node alltoall" in r.stderr) == unresolved
    assert len(profile.raw["layer_samples"]["block.0"]["1"]["fwd_s"]) == 5  # type: ignore[index]
    assert "per-layer costs" in r.stdout and "links" in r.stdout
    assert "pptune:" in r.stderr  # the NVML / CPU line, progress: talk goes to stderr
    assert "per-layer costs" not in r.stderr


def test_moe_blocks_are_measured_with_their_expert_parameters(tmp_path: Path) -> None:
    out = tmp_path / "moe.json"
    r = run("--model", "moe-small", *TINY, "-o", str(out))
    assert r.exit_code == 0, r.stderr
    profile = Profile.model_validate(json.loads(out.read_text()))
    assert (profile.model.experts, profile.model.top_k) == (8, 2)
    block = profile.layers[1]
    # fp32: eight SwiGLU experts of 256 x 2 x 512 + 512 x 256 weights, every one local
    assert block.expert_param_bytes == 4 * 8 * (256 * 2 * 512 + 512 * 256)
    assert block.cost(1).fwd_s > 0 and profile.layers[0].expert_param_bytes == 0
    assert any("mixtures of experts" in n for n in profile.notes)


def test_json_goes_to_stdout_and_matches_the_file(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    r = run(*TINY, "--json", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    printed = json.loads(r.stdout)
    assert printed == json.loads(out.read_text())
    profile = Profile.model_validate(printed)
    assert profile.model.seq_len == 8
    assert profile.links.intra_node.p2p.latency_s == 100e-6  # documented loopback default
    assert any(n.startswith("--no-comm: link bandwidth was NOT measured") for n in profile.notes)
    assert any("intra-node p2p link NOT measured: CPU loopback defaults" in n for n in profile.notes)


def test_links_from_nccl_tests_files(tmp_path: Path) -> None:
    r = run(
        *TINY[1:], "--json", "-o", str(tmp_path / "p.json"),
        "--nccl-tests", str(DATA / "all_reduce_perf_8xh100.txt"),
        "--nccl-tests", str(DATA / "sendrecv_perf_2nodes.txt"),
    )
    assert r.exit_code == 0, r.stderr
    p = Profile.model_validate_json(r.stdout)
    assert p.links.intra_node.allreduce.bytes_per_s == pytest.approx(360e9, rel=0.15)
    assert p.links.inter_node.p2p.bytes_per_s == pytest.approx(46e9, rel=0.1)
    assert p.links.inter_node.p2p.latency_s == pytest.approx(18.5e-6, rel=0.1)
    assert p.links.inter_node.allreduce == p.links.intra_node.allreduce  # copied, noted
    assert any("inter-node allreduce link NOT measured: copied" in n for n in p.notes)
    assert any("intra-node p2p link NOT measured" in n for n in p.notes)
    assert [t["test"] for t in p.raw["nccl_tests"]] == ["all_reduce", "sendrecv"]  # type: ignore[index]


@pytest.mark.parametrize("dtype", list(DType))
def test_every_dtype(dtype: DType, tmp_path: Path) -> None:
    r = run(*TINY, "--json", "--dtype", dtype.value, "-o", str(tmp_path / "p.json"))
    assert r.exit_code == 0, r.stderr
    expected = {DType.AUTO: 4, DType.FP32: 4, DType.BF16: 2, DType.FP16: 2}[dtype]
    assert json.loads(r.stdout)["param_dtype_bytes"] == expected


@pytest.mark.parametrize("device", list(DeviceChoice))
def test_every_device_choice(device: DeviceChoice, tmp_path: Path) -> None:
    import torch

    r = run(*TINY, "--json", "--device", device.value, "-o", str(tmp_path / "p.json"))
    if device == DeviceChoice.CUDA and not torch.cuda.is_available():
        assert r.exit_code == 2
        assert "--device cuda: torch" in one_error_line(r)
    else:
        assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--micro-batch-sizes", "1,x"], "--micro-batch-sizes takes comma-separated integers, "
         "e.g. 1,2,4 (got '1,x')"),
        (["--model", "nope"], "--model 'nope' is not a preset; choose one of gpt-small"),
        (["--max-bytes", "12X"], "--max-bytes: cannot read '12X'"),
        (["--max-bytes", "512"], "--max-bytes 512 is below the smallest message (1024 bytes)"),
        (["--model", "gpt-small", "--hf-config", "c.json"], "--model and --hf-config both name the model"),
        (["--nccl-tests", "missing.txt"], "--nccl-tests: file not found: missing.txt"),
        (["--no-comm", "--nccl-tests", "x.txt"], "--nccl-tests and --no-comm both given"),
        (["--repeats", "0"], "--repeats must be at least 1, got 0"),
        (["--timeout", "0"], "--timeout must be positive seconds"),
        (["--module", "nomodule"], "--module expects 'package.module:factory'"),
        (["--hf-config", "missing-config.json"], "--hf-config file not found"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    r = run(*args, "-o", str(tmp_path / "p.json"))
    assert r.exit_code == 2
    assert message in one_error_line(r)
    assert not (tmp_path / "p.json").exists()


def test_help_has_an_example() -> None:
    r = runner.invoke(app, ["probe", "--help"])
    assert r.exit_code == 0
    assert "pptune probe --quick" in r.stdout
    for flag in ("--nccl-tests", "--micro-batch-sizes", "--no-comm", "--max-bytes", "--timeout"):
        assert flag in r.stdout


@pytest.mark.slow
def test_probe_imports_without_torch_and_says_how_to_install() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import pptune.probe, pptune.probe.build, pptune.probe.models, pptune.probe.layers\n"
        "import pptune.probe.comm, pptune.probe.nccl_tests, pptune.probe.inventory\n"
        "import pptune.probe.summary, pptune.cli.probe\n"
        "from pptune.errors import MissingDependency\n"
        "from pptune.probe.build import ProbeOptions, run_probe\n"
        "try:\n"
        "    run_probe(ProbeOptions())\n"
        "except MissingDependency as exc:\n"
        "    print('OK', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OK pptune probe needs torch")
    assert "pip install 'pptune[probe]'" in out.stdout


def test_a_max_bytes_that_leaves_too_few_sizes_is_refused(tmp_path: Path) -> None:
    r = run("--quick", "--max-bytes", "4K", "-o", str(tmp_path / "p.json"))
    assert r.exit_code == 2
    assert one_error_line(r) == (
        "pptune: error: --max-bytes 4096 leaves 3 message size(s) (1024 bytes doubling): a "
        "latency-and-bandwidth fit needs at least 4, up to where a transfer outlasts the "
        "latency; give --max-bytes 8K or more (the default: 64M on CPU, 256M on GPU), or "
        "--no-comm")
    assert not (tmp_path / "p.json").exists()
