"""A calibrated rowwise-FP8 torchtitan job keeps its recipe (a user trial): recommend
prices it with torchao's rowwise casts, as check-config prices the job's file, and
``--emit torchtitan`` writes ``recipe_name = "rowwise"`` (unset, torchtitan runs
tensorwise: 0.2.2 job_config.py Float8Linear.recipe_name defaults to None)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

Cli = Callable[..., Result]
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
LOG = LOGS / "torchtitan_h200_llama3_8b.log"  # 8 H200 ([8] device mesh), seq 8192
JOB = """[model]
name = "llama3"
flavor = "8B"
converters = ["quantize.linear.float8"]

[training]
local_batch_size = 1
global_batch_size = 8
seq_len = 8192

[parallelism]
data_parallel_shard_degree = -1

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[quantize.linear.float8]
recipe_name = "rowwise"
filter_fqns = ["output"]

[compile]
enable = true
"""


def test_a_calibrated_rowwise_job_is_emitted_rowwise(tmp_path: Path, cli: Cli) -> None:
    job = tmp_path / "job.toml"
    job.write_text(JOB)
    cal = tmp_path / "cal.json"
    r = cli("calibrate", "--run", job, "--log", LOG, "--gpu", "h200", "-o", cal)
    assert r.exit_code == 0, r.stderr
    out = tmp_path / "emit"
    r = cli("recommend", "--profile", cal, "--gpus", "8", "--emit", "torchtitan", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert "FP8 recipe rowwise, as the calibrated jobs ran (--fp8-recipe prices another)" \
        in r.stderr
    written = (out / "torchtitan.toml").read_text()
    assert 'recipe_name = "rowwise"' in written and "recipe_name unset" not in written
    step = next(line for line in written.splitlines() if line.startswith("# predicted: step"))
    r = cli("check-config", out / "torchtitan.toml", "--profile", cal)
    assert r.exit_code == 0, r.stdout
    assert "rowwise scaling" in r.stdout
    # the file's own step, priced rowwise as recommend priced it
    assert step.split("step ")[1].split(",")[0] in r.stdout
