"""recommend --emit torchtitan writes no MXFP8 plan with tensor parallelism and the model
compiled, which torchtitan 0.2.2 refuses (components/quantization/mx.py
MXLinearConverter: 'TP not yet supported with torch.compile for mxfp8'): the model stays
uncompiled, the plan is priced so, and check-config passes the file."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()


def test_emitted_mxfp8_tp_plan_leaves_the_model_uncompiled(tmp_path: Path) -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "256", "--model", "llama3-70b", "--gpu",
                            "b200", "--seq-len", "131072", "--global-batch", "32",
                            "--precision", "bf16,mxfp8", "--emit", "torchtitan", "-o",
                            str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    text = (tmp_path / "torchtitan.toml").read_text()
    assert 'converters = ["quantize.linear.mx"]' in text
    tp = int(text.split("tensor_parallel_degree = ")[1].split("\n")[0])
    assert tp > 1
    assert ('[compile]\nenable = true  # fuses the loss, as priced\ncomponents = ["loss"]\n'
            "# the model is not compiled: torchtitan asserts 'TP not yet supported with "
            f"torch.compile for mxfp8' at tp {tp} (torchtitan/components/quantization/mx.py "
            "MXLinearConverter)\n") in text
    assert ("the mxfp8 linears run with the model not compiled: torchtitan asserts 'TP not "
            f"yet supported with torch.compile for mxfp8' at tp {tp}") in r.stderr
    predicted = float(text.split("# predicted: step ")[1].split(" s,")[0])
    r = runner.invoke(app, ["check-config", str(tmp_path / "torchtitan.toml"), "--output",
                            "json", "--no-compare"])
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    found = {f["id"]: f["severity"] for f in doc["findings"]}
    assert "torchtitan-mx-tp-compile" not in found
    assert found["torchtitan-float8-eager"] == "warning"
    # priced as the file runs: the SwiGLU eager, as check-config reads it
    assert doc["config"]["swiglu"] == "eager"
    assert round(doc["derived"]["step_time_s"], 3) == predicted
