"""The GPUs a torchtitan file is judged on: its keys state none (torchtitan takes the
world size from the launcher), so check-config takes the launch a comment states
(``recommend --emit torchtitan`` writes one) and otherwise says the world it priced was
inferred from the degrees, and from which."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.common.launched import StatedLaunch, stated_launch
from pptune.plan.emit import emit
from pptune.plan.recommend import RecommendSpec, recommend
from tests.check_json import check_file


@pytest.fixture(scope="module")
def emitted() -> tuple[str, float]:
    """llama3-8b on 8 H100s at tp 2, as torchtitan's files run it: pp 1, FSDP over 4."""
    spec = RecommendSpec.of(gpus=8, model="llama3-8b", tp=2, top=1)
    run = recommend(replace(spec, framework="torchtitan"))
    out = emit("torchtitan", run)
    return out.files["torchtitan.toml"], out.plan.step_time_s


def test_the_emitted_file_is_checked_on_the_gpus_its_launch_comment_states(
        tmp_path: Path, emitted: tuple[str, float]) -> None:
    text, step_s = emitted
    assert "launch: torchrun --nnodes 1 --nproc_per_node 8 " in text
    assert "data_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n" in text
    code, found, doc = check_file(tmp_path / "torchtitan.toml", text)
    assert code == 0 and "gpus-mismatch" not in found
    assert doc["config"]["gpus"] == 8
    assert any(n.startswith("gpus 8 from the file's launch comment, line ") for n in doc["notes"])
    assert doc["derived"]["step_time_s"] == pytest.approx(step_s, rel=1e-9)


def test_degrees_edited_apart_from_the_launch_are_a_gpus_mismatch(
        tmp_path: Path, emitted: tuple[str, float]) -> None:
    """A user trial set tensor_parallel_degree 8 in the emitted file and got 0 errors,
    priced on the 32 GPUs the degrees make (replicate 1 x shard 4 x tp 8) rather than the
    8 the launch runs: torchtitan asserts they agree (parallel_dims.py _validate)."""
    text = emitted[0].replace("tensor_parallel_degree = 2", "tensor_parallel_degree = 8")
    code, found, doc = check_file(tmp_path / "tp8.toml", text, by="message")
    assert code == 1
    assert found["gpus-mismatch"].startswith("gpus 8 (the file's launch comment, line ")
    assert "torchrun --nnodes 1 --nproc_per_node 8) != tp*pp*cp*dp = 8*1*1*4 = 32" in found[
        "gpus-mismatch"]
    # --gpus still wins over the comment, with a note
    code, found, doc = check_file(tmp_path / "tp8.toml", text, "--gpus", "32")
    assert "gpus-mismatch" not in found and doc["config"]["gpus"] == 32
    assert any(n.startswith("--gpus 32 over the 8 GPUs of the file's launch comment")
               for n in doc["notes"])


def test_without_a_launch_the_world_is_said_to_be_inferred_from_the_degrees(
        tmp_path: Path, emitted: tuple[str, float]) -> None:
    text = "\n".join(line for line in emitted[0].replace(
        "tensor_parallel_degree = 2", "tensor_parallel_degree = 8").splitlines()
        if "torchrun" not in line)
    code, found, doc = check_file(tmp_path / "bare.toml", text)
    assert code == 0 and "gpus-mismatch" not in found and doc["config"].get("gpus") is None
    assert ("gpus 32 inferred from the degrees: data_parallel_replicate_degree 1 x "
            "data_parallel_shard_degree 4 x context_parallel_degree 1 x tensor_parallel_degree "
            "8 x pipeline_parallel_degree 1; no launch comment of the file gives a GPU count "
            "(torchtitan takes it from the launcher): --gpus checks the degrees against yours"
            ) in doc["notes"]


def test_a_shard_degree_of_minus_one_takes_the_rest_of_the_launch(
        tmp_path: Path, emitted: tuple[str, float]) -> None:
    """2 nodes of 8 at tp 2: data_parallel_shard_degree -1 resolves to 16 / 2 = 8."""
    text = (emitted[0].replace("--nnodes 1 ", "--nnodes 2 ")
            .replace("data_parallel_shard_degree = 4", "data_parallel_shard_degree = -1")
            .replace("global_batch_size = 512", "global_batch_size = 1024"))
    code, found, doc = check_file(tmp_path / "rest.toml", text)
    assert code == 0 and "gpus-mismatch" not in found and doc["config"]["dp"] == 8
    assert any(n.startswith("data_parallel_shard_degree -1 resolved to 8: gpus 16 from the "
                            "file's launch comment, line ") for n in doc["notes"])


@pytest.mark.parametrize(("text", "expected"), [
    ("# launch: torchrun --nnodes 2 --nproc_per_node 8 -m torchtitan.train\n",
     StatedLaunch(2, 8, 1)),
    ("[model]\n  # torchrun --nproc-per-node=4 -m torchtitan.train\n", StatedLaunch(1, 4, 2)),
    ("# torchrun --nnodes=$NNODES --nproc_per_node 8\n", None),  # a variable: no count
    ("# torchrun --nnodes 1:4 --nproc_per_node 8\n", None),  # an elastic range
    ("# torchrun --nnodes 2 -m torchtitan.train\n", None),  # no processes per node
    ("x = 1  # torchrun --nproc_per_node 8\n", None),  # not a comment line
    ("# torchrun --nnodes 1 --nproc_per_node 8\n# torchrun --nnodes 2 --nproc_per_node 8\n",
     None),  # two launches of different counts
    ("# torchrun --nnodes 2 --nproc_per_node 4\n# torchrun --nnodes 1 --nproc_per_node 8\n",
     StatedLaunch(2, 4, 1)),  # the same count twice
])
def test_the_launch_a_comment_states(text: str, expected: StatedLaunch | None) -> None:
    assert stated_launch(text, Ctx(name="job.toml")) == expected
