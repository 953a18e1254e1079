"""recommend --framework ranks plans with the kernels the framework's files run: a kernel
flag given that its files cannot state is set aside, one note a flag, and the search
priced (and the plan file's ``request`` recorded) with the kernel they run instead
(plan/written.py, Adapter.states_kernels); a flag its files state is kept as given.

What each framework's files state, as its writer writes them and its as_run prices them:
torchtitan's attention is the flavor's (llama3 8B: SDPA; torchtitan main's config states
FlexAttention, priced as flash: attention.py), its loss compiled (fused) or eager, autograd's
BF16 weight gradients and torchao's float8; Megatron-LM's writer states Transformer
Engine's cuDNN attention or --transformer-impl local (eager), --cross-entropy-loss-fusion
(native), gradient_accumulation_fusion on or off (fused, unfused) and Transformer Engine's
FP8; DeepSpeed's any attention and loss (the model code's), BF16 weight gradients."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()
_GPUS = ["recommend", "--gpus", "8"]


def _aside(flag: str, value: str, title: str, runs: str, name: str) -> str:
    return (f"pptune: kernels: {flag} {value} set aside: {title}'s files run {runs}, with "
            f"which the plans are ranked, as --emit {name} prices the file it writes")


def _run(*args: str) -> tuple[dict, list[str]]:
    r = runner.invoke(app, [*_GPUS, *args, "--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), [line for line in r.stderr.splitlines() if "kernels:" in line]


def _kernels(doc: dict) -> tuple[str, str | None, str | None]:
    req = doc["request"]
    return req["attention"], req.get("cross_entropy"), req.get("wgrad_accum")


def test_torchtitan_sets_aside_each_kernel_its_files_do_not_run() -> None:
    doc, said = _run("--framework", "torchtitan", "--attention", "eager",
                     "--cross-entropy", "native", "--wgrad-accum", "fused")
    assert said == [
        _aside("--attention", "eager", "torchtitan", "sdpa attention", "torchtitan"),
        _aside("--cross-entropy", "native", "torchtitan", "its fused cross-entropy",
               "torchtitan"),
        _aside("--wgrad-accum", "fused", "torchtitan", "bf16 weight-gradient accumulation",
               "torchtitan")]
    assert _kernels(doc) == ("sdpa", "fused", "bf16")
    # sdpa, fused and bf16 are pptune's defaults: the plans are those ranked without flags
    plain, _ = _run("--framework", "torchtitan")
    assert [p["step_time_s"] for p in doc["plans"]] == [p["step_time_s"] for p in plain["plans"]]


def test_torchtitan_keeps_what_its_files_state() -> None:
    # the loss eager: its [compile] table without "loss" (cp_fp8.compiled)
    doc, said = _run("--framework", "torchtitan", "--cross-entropy", "eager",
                     "--attention", "sdpa", "--wgrad-accum", "bf16")
    assert said == []
    assert _kernels(doc) == ("sdpa", "eager", "bf16")


def test_torchtitan_main_runs_flex_attention_priced_as_flash() -> None:
    main = ["--framework", "torchtitan", "--framework-version", "torchtitan=0.3.0"]
    doc, said = _run(*main, "--attention", "sdpa")
    assert said == [_aside("--attention", "sdpa", "torchtitan", "flash attention",
                           "torchtitan")]
    assert doc["request"]["attention"] == "flash"
    doc, said = _run(*main, "--attention", "flash")
    assert said == [] and doc["request"]["attention"] == "flash"


_MEGATRON_RANKED = ("pptune: kernels: ranked with cudnn attention, its native cross-entropy "
                    "and fused weight-gradient accumulation, what Megatron-LM's files run "
                    "(--attention or --wgrad-accum sets another)")


def test_megatron_sets_aside_kernels_its_writer_does_not_state() -> None:
    doc, said = _run("--framework", "megatron", "--attention", "flash",
                     "--cross-entropy", "fused", "--wgrad-accum", "bf16")
    assert said == [
        _aside("--attention", "flash", "Megatron-LM", "cudnn attention", "megatron"),
        _aside("--cross-entropy", "fused", "Megatron-LM", "its native cross-entropy",
               "megatron"),
        _aside("--wgrad-accum", "bf16", "Megatron-LM", "fused weight-gradient accumulation "
               "(BF16 weight gradients under Megatron-FSDP's shardings alone)", "megatron")]
    assert _kernels(doc) == ("cudnn", "native", "fused")
    plain, said = _run("--framework", "megatron")
    assert said == [_MEGATRON_RANKED]  # --cross-entropy sets no other: its files run one
    assert [p["step_time_s"] for p in doc["plans"]] == [p["step_time_s"] for p in plain["plans"]]


def test_megatron_keeps_eager_attention_and_unfused_gradients() -> None:
    # --transformer-impl local; --no-gradient-accumulation-fusion (writer.py)
    doc, said = _run("--framework", "megatron", "--attention", "eager",
                     "--wgrad-accum", "unfused")
    assert said == ["pptune: kernels: ranked with its native cross-entropy, what "
                    "Megatron-LM's files run"]
    assert _kernels(doc) == ("eager", "native", "unfused")


def test_megatron_runs_transformer_engines_fp8_linears() -> None:
    doc, said = _run("--framework", "megatron", "--precision", "fp8",
                     "--fp8-kernels", "torchao")
    assert said == [_MEGATRON_RANKED, _aside(
        "--fp8-kernels", "torchao", "Megatron-LM",
        "te FP8 linears (each weight's FP8 copy and transpose cached)", "megatron")]
    assert doc["request"]["fp8_kernels"] == "te"


def test_deepspeed_sets_aside_main_grad_accumulation_alone() -> None:
    doc, said = _run("--framework", "deepspeed", "--attention", "eager",
                     "--cross-entropy", "native", "--wgrad-accum", "unfused")
    assert [line for line in said if "set aside" in line] == [
        _aside("--wgrad-accum", "unfused", "DeepSpeed", "bf16 weight-gradient accumulation",
               "deepspeed")]
    assert _kernels(doc) == ("eager", "native", "bf16")


def test_pptune_files_state_every_kernel() -> None:
    doc, said = _run("--framework", "pptune", "--attention", "eager",
                     "--cross-entropy", "unfused", "--wgrad-accum", "fused")
    assert said == []
    assert _kernels(doc) == ("eager", "unfused", "fused")


def test_emit_alone_keeps_the_flag_and_framework_agrees_with_the_file(tmp_path: Path) -> None:
    # --emit without --framework: the table is pptune's, ranked with the loss asked; the
    # script is priced with its own (closest.py's note), nothing set aside
    r = runner.invoke(app, [*_GPUS, "--cross-entropy", "fused", "--emit", "megatron",
                            "-o", str(tmp_path / "a")])
    assert r.exit_code == 0, r.stderr
    assert "set aside" not in r.stderr
    assert "megatron-core's fused cross-entropy (--cross-entropy-loss-fusion" in r.stderr
    # with --framework: set aside once, and the script written as ranked (no re-pricing)
    r = runner.invoke(app, [*_GPUS, "--cross-entropy", "fused", "--framework", "megatron",
                            "--emit", "megatron", "-o", str(tmp_path / "b")])
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count("--cross-entropy fused set aside") == 1
    # what the script runs is what plan 1 was ranked with: priced again at plan 1's step
    # (a Megatron-FSDP plan's BF16 weight gradients, which its search prices alike)
    again = re.findall(r"\(([0-9.]+)x plan 1\)", r.stderr)
    assert again in ([], ["1.000"]), r.stderr
    script = next((tmp_path / "b").iterdir()).read_text()
    assert "--cross-entropy-loss-fusion" in script
    assert "--cross-entropy-fusion-impl" not in script
