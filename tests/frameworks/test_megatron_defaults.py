"""What Megatron-LM derives where a script leaves a size out, read as Megatron-LM does:
``--swiglu`` without ``--ffn-hidden-size`` builds an MLP of int(4h x 2/3 / 64) x 64
(megatron/training/arguments.py validate_args), not 4h."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.check_json import check_file

SCRIPT = (
    "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py \\\n"
    "  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \\\n"
    "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 {ffn} \\\n"
    "  --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 \\\n"
    "  --global-batch-size 64 --bf16 \\\n"
    "  --use-distributed-optimizer {mlp}\n"
)


def test_swiglu_without_a_width_takes_megatrons_two_thirds(tmp_path: Path) -> None:
    _, _, doc = check_file(tmp_path / "a.sh", SCRIPT.format(ffn="", mlp="--swiglu"),
                               "--gpu", "h100-sxm")
    assert doc["config"]["ffn_hidden_size"] == int(4 * 4096 * 2 / 3 / 64) * 64 == 10880
    assert any("--ffn-hidden-size 10880" in n for n in doc["notes"])
    _, _, stated = check_file(tmp_path / "b.sh", SCRIPT.format(
        ffn="--ffn-hidden-size 10880", mlp="--swiglu"), "--gpu", "h100-sxm")
    assert stated["derived"]["step_time_s"] == doc["derived"]["step_time_s"]


def test_gelu_without_a_width_keeps_4h(tmp_path: Path) -> None:
    _, _, doc = check_file(tmp_path / "a.sh", SCRIPT.format(ffn="", mlp=""), "--gpu", "h100-sxm")
    assert doc["config"]["ffn_hidden_size"] in (None, 4 * 4096)
    _, _, stated = check_file(tmp_path / "b.sh", SCRIPT.format(
        ffn="--ffn-hidden-size 16384", mlp=""), "--gpu", "h100-sxm")
    assert stated["derived"]["step_time_s"] == doc["derived"]["step_time_s"]


LLAMA = (
    "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py \\\n"
    "  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \\\n"
    "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 \\\n"
    "  --group-query-attention --num-query-groups 8 --swiglu --seq-length 8192 \\\n"
    "  --max-position-embeddings 8192 \\\n"
    "  --micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer \\\n"
    "  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 {drop}\n"
)


def test_megatrons_default_dropout_on_a_model_priced_without_it_is_a_warning(
        tmp_path: Path) -> None:
    """Llama 3 8B has no dropout; Megatron-LM runs 0.1 of each unless the script says 0."""
    _, found, doc = check_file(tmp_path / "a.sh", LLAMA.format(drop=""), "--gpu", "h100-sxm")
    assert doc["config"]["dropout"] is True and found.get("dropout-unpriced") == "warning"
    _, found, doc = check_file(tmp_path / "b.sh", LLAMA.format(
        drop="--hidden-dropout 0.0 --attention-dropout 0"), "--gpu", "h100-sxm")
    assert doc["config"]["dropout"] is False and "dropout-unpriced" not in found
    assert not any("dropout" in n for n in doc["notes"])  # read, not "ignored"


def test_a_dropout_that_is_no_probability_is_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pptune.cli.app import app

    path = tmp_path / "c.sh"
    path.write_text(LLAMA.format(drop="--hidden-dropout 1.5"))
    r = CliRunner().invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2
    assert "--hidden-dropout is '1.5'; expected a probability from 0 to 1" in r.output


def test_a_custom_swiglu_model_is_priced_llama_style_and_warned_of_dropout(
        tmp_path: Path) -> None:
    """A shape no preset matches, with --swiglu: RMSNorm, rotary, no dropout priced; a
    script that leaves Megatron-LM's dropout on hears so, one that sets 0 does not."""
    _, found, on = check_file(tmp_path / "a.sh", SCRIPT.format(ffn="", mlp="--swiglu"),
                              "--gpu", "h100-sxm")
    assert found.get("dropout-unpriced") == "warning"
    _, found, off = check_file(tmp_path / "b.sh", SCRIPT.format(
        ffn="", mlp="--swiglu --hidden-dropout 0 --attention-dropout 0"), "--gpu", "h100-sxm")
    assert "dropout-unpriced" not in found
    assert off["derived"]["step_time_s"] == on["derived"]["step_time_s"]


def test_a_model_named_beside_a_script_that_states_other_sizes_is_a_warning(
        tmp_path: Path) -> None:
    """--model llama3-70b on a script of Llama 3 8B's sizes: the file's sizes are named
    beside the model's (it had been priced as 70B's width at 8B's depth, silently)."""
    script = LLAMA.format(drop="--hidden-dropout 0 --attention-dropout 0")
    _, found, doc = check_file(tmp_path / "a.sh", script, "--gpu", "h100-sxm",
                               "--model", "llama3-70b")
    assert found.get("model-mismatch") == "warning"
    message = next(f["message"] for f in doc["findings"] if f["id"] == "model-mismatch")
    assert "hidden_size 4096 (the model: 8192)" in message
    _, found, _ = check_file(tmp_path / "b.sh", script, "--gpu", "h100-sxm",
                             "--model", "llama3-8b")
    assert "model-mismatch" not in found


def test_uniform_groups_of_n_layers_hold_fewer_inputs_and_rerun_more(tmp_path: Path) -> None:
    """--recompute-method uniform --recompute-num-layers N checkpoints 8 layers a stage in
    groups of N (pp 4, 1F1B, m 32: ranks hold 4, 3, 2, 1 micro-batches). A group keeps its
    input (s x h x 2 bytes = 8192 x 4096 x 2) and its backward re-creates the group's
    saved tensors, N x full less that input. Against N = 1, per rank:
      N = 2: full - held x 4 inputs (8 inputs kept a micro-batch -> 4)
      N = 4: that and another full - held x 2 inputs (4 -> 2)
    so the same ``full`` (one block's saved tensors) comes out of every rank; the step
    is the same (every layer reruns its forward once either way)."""
    def run(n: int) -> dict[str, Any]:
        text = LLAMA.format(drop="--hidden-dropout 0 --attention-dropout 0").replace(
            "--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 4").replace(
            "--recompute-num-layers 1", f"--recompute-num-layers {n}")
        return check_file(tmp_path / f"u{n}.sh", text, "--gpu", "h100-sxm")[2]

    one, two, four = run(1), run(2), run(4)
    assert (one["config"]["recompute_uniform_layers"], two["config"]["recompute_uniform_layers"],
            four["config"]["recompute_uniform_layers"]) == (None, 2, 4)
    assert one["derived"]["step_time_s"] == two["derived"]["step_time_s"] == (
        four["derived"]["step_time_s"])
    held, inputs = (4, 3, 2, 1), 8192 * 4096 * 2
    peaks = [d["derived"]["peak_memory_bytes"] for d in (one, two, four)]
    full = {peaks[1][k] - peaks[0][k] + 4 * held[k] * inputs for k in range(4)}
    assert len(full) == 1 and full.pop() > inputs
    block = peaks[1][3] - peaks[0][3] + 4 * inputs
    assert [peaks[2][k] - peaks[1][k] for k in range(4)] == [
        2 * block - 2 * held[k] * inputs for k in range(4)]
