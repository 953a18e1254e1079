"""`pptune tune --launcher`: trials through a launcher (a cluster), checked on CPU with a
stand-in launcher that starts the ranks the way torchrun does; flags refused at once."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput
from pptune.tune.launcher import Launcher, result_of
from pptune.validate.spec import ModelSource, RunSpec

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]

# torchrun's contract with its workers: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT in each worker's environment (torch.distributed.run)
STAND_IN = '''
import os, socket, subprocess, sys

args = sys.argv[1:]
n = int(args[args.index("--nproc") + 1])
command = args[args.index("--nproc") + 2:]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
procs = []
for rank in range(n):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    procs.append(subprocess.Popen(command, env=env))
sys.exit(max(p.wait() for p in procs))
'''


def spec(pp: int = 2) -> RunSpec:
    return RunSpec(Schedule.ONE_F_ONE_B, pp, 4, 1, 1, (4, 4) if pp == 2 else (8,),
                   ModelSource("gpt-small", seq_len=32), warmup=1, steps=2, timeout_s=60)


def test_the_template_is_filled_per_trial(tmp_path: Path) -> None:
    launcher = Launcher("srun -N {nodes} --ntasks-per-node {nproc_per_node} {command}", 8,
                        tmp_path / "p.json", "cuda")
    argv = launcher.argv(spec())
    assert argv[:4] == ["srun", "-N", "1", "--ntasks-per-node"] and argv[4] == "2"
    assert argv[5:9] == [sys.executable, "-m", "pptune", "validate"]
    tail = argv[9:]
    assert tail[tail.index("--split") + 1] == "4,4" and tail[tail.index("--device") + 1] == "cuda"
    assert tail[tail.index("--profile") + 1] == str(tmp_path / "p.json") and tail[-1] == "--json"
    wide = Launcher("torchrun --nnodes {nodes} --nproc-per-node {nproc_per_node} {module}", 4,
                    tmp_path / "p.json")
    argv = wide.argv(spec(pp=2).__class__(Schedule.GPIPE, 10, 10, 1, 1, (1,) * 10))
    assert argv[:5] == ["torchrun", "--nnodes", "3", "--nproc-per-node", "4"]
    assert argv[5:8] == ["-m", "pptune", "validate"]


def test_templates_tune_cannot_fill_are_refused() -> None:
    with pytest.raises(BadInput, match=r"has neither \{command\} nor \{module\}"):
        Launcher("srun -N 2", 8, Path("p")).check()
    with pytest.raises(BadInput, match="is not a placeholder"):
        Launcher("srun {gpus} {command}", 8, Path("p")).check()


def test_rank_zeros_json_is_found_among_other_output() -> None:
    out = 'W1201 warning from a launcher\n{\n  "pp": 2,\n  "ops": []\n}\ntrailing\n'
    assert result_of(out) == {"pp": 2, "ops": []}
    assert result_of("no json here\n") is None


@pytest.mark.parametrize("args", [["--gpus", "0"], ["--gpus", "2", "--pp", "3"],
                                  ["--gpus", "2", "--grad-compression", "zip"]])
def test_bad_flags_are_refused_before_any_probe(cli: Cli, error_line: ErrorLine,
                                                args: list[str]) -> None:
    t0 = time.perf_counter()
    r = cli("tune", *args)
    line = error_line(r)
    assert "quick profile" not in r.stderr and time.perf_counter() - t0 < 5.0, line


def test_a_launcher_needs_a_shared_output_folder(cli: Cli, error_line: ErrorLine) -> None:
    assert "--launcher needs -o DIR" in error_line(
        cli("tune", "--gpus", "2", "--launcher", "torchrun {module}"))


@pytest.mark.torch
@pytest.mark.slow
def test_a_trial_through_a_stand_in_launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             cli: Cli) -> None:
    """Two gloo CPU ranks started by the stand-in as torchrun would start them; rank 0's
    JSON read back; the journal resumes as on one host."""
    monkeypatch.chdir(tmp_path)
    Path("launch.py").write_text(STAND_IN)
    template = f"{sys.executable} launch.py --nproc {{nproc}} {{command}}"
    args = ["tune", "--gpus", "2", "--pp", "2", "--global-batch", "4", "--seq-len", "32",
            "--micro-batch-sizes", "1", "--schedules", "1f1b", "--max-trials", "1",
            "--steps", "2", "--warmup", "1", "--launcher", template, "--json"]
    r = cli(*args, "-o", "out")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    measured = [t for t in doc["trials"] if t["status"] == "measured"]
    assert len(measured) == 1 and doc["winner"] == measured[0]["key"]
    line = json.loads(Path("out/tune.jsonl").read_text().splitlines()[0])
    assert line["measured_step_s"] > 0 and {o["kind"] for o in line["ops"]} >= {"F", "B"}
    again = cli(*args, "--resume", "out")
    assert again.exit_code == 0 and "1 measured trial(s) in tune.jsonl are kept" in again.stderr
