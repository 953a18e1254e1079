"""Megatron-LM's required arguments (validate_args, megatron/training/arguments.py at
core_v0.16.1: 'either num-layers or encoder-num-layers should be specified', then
required_args = ['num_layers', 'hidden_size', 'num_attention_heads',
'max_position_embeddings'], each '{arg} argument is None'), and the hint for a comment
line that ends a backslash-continued launch (a user trial, u30 B1 and rough edge 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.check_json import check_file
from tests.frameworks.test_megatron_trial_rules import DENSE

TEXT = DENSE.format(tp=2, extra="--sequence-parallel")


def test_the_dense_script_gives_every_required_argument(tmp_path: Path) -> None:
    code, found, _ = check_file(tmp_path / "run.sh", TEXT, "--gpu", "h100-sxm")
    assert code == 0 and "megatron-required-arg" not in found, found


@pytest.mark.parametrize(("cut", "said"), [
    ("--num-layers 32 ", "--num-layers is not given: Megatron-LM validate_args stops at "
     "'either num-layers or encoder-num-layers should be specified' (its required "
     "arguments, megatron/training/arguments.py), on every rank before training starts; "
     "add --num-layers N (pptune's --model, --hf-config or --profile price a model but do "
     "not give Megatron-LM its flags)"),
    ("--hidden-size 4096 ", "--hidden-size is not given: Megatron-LM validate_args stops "
     "at 'hidden_size argument is None' (its required arguments,"),
    ("--num-attention-heads 32 ", "--num-attention-heads is not given: Megatron-LM "
     "validate_args stops at 'num_attention_heads argument is None' (its required"),
])
def test_each_missing_required_argument_is_an_error(tmp_path: Path, cut: str,
                                                    said: str) -> None:
    code, found, _ = check_file(tmp_path / "run.sh", TEXT.replace(cut, ""), "--gpu",
                                "h100-sxm", by="message")
    assert code == 1
    assert found["megatron-required-arg"].startswith(said)


def test_all_three_missing_are_one_finding_in_validate_args_order(tmp_path: Path) -> None:
    text = TEXT
    for cut in ("--num-layers 32 ", "--hidden-size 4096 ", "--num-attention-heads 32 "):
        text = text.replace(cut, "")
    code, found, doc = check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm",
                                  by="message")
    assert code == 1
    assert found["megatron-required-arg"].startswith(
        "--num-layers, --hidden-size, --num-attention-heads are not given: Megatron-LM "
        "validate_args stops at 'either num-layers or encoder-num-layers should be "
        "specified' (then 'hidden_size argument is None', 'num_attention_heads argument is "
        "None', once that is given)")
    assert [f["id"] for f in doc["findings"]].count("megatron-required-arg") == 1


def test_a_model_preset_does_not_stand_in_for_the_flags(tmp_path: Path) -> None:
    """--model prices llama3-8b, but Megatron-LM never sees it: still exit 1, and no step
    is predicted for a script that does not start."""
    code, found, doc = check_file(tmp_path / "run.sh", TEXT.replace("--num-layers 32 ", ""),
                                  "--gpu", "h100-sxm", "--model", "llama3-8b")
    assert code == 1 and found["megatron-required-arg"] == "error"
    assert doc["derived"]["step_time_s"] is None


def test_encoder_num_layers_gives_num_layers(tmp_path: Path) -> None:
    """validate_args sets args.num_layers = args.encoder_num_layers; both given is its
    'cannot have both num-layers and encoder-num-layers specified'."""
    code, found, doc = check_file(tmp_path / "run.sh", TEXT.replace(
        "--num-layers 32", "--encoder-num-layers 32"), "--gpu", "h100-sxm")
    assert code == 0 and "megatron-required-arg" not in found, found
    assert doc["config"]["num_layers"] == 32
    assert "--encoder-num-layers" not in doc["ignored"]
    code, found, _ = check_file(tmp_path / "run.sh", TEXT.replace(
        "--num-layers 32", "--num-layers 32 --encoder-num-layers 32"), "--gpu", "h100-sxm",
        by="message")
    assert code == 1 and "'cannot have both num-layers and encoder-num-layers specified'" in (
        found["megatron-required-arg"])


@pytest.mark.parametrize("more", ['"$@"', "$EXTRA_ARGS", "--use-checkpoint-args",
                                  "--yaml-cfg cfg.yaml"])
def test_not_an_error_where_words_out_of_sight_may_give_them(tmp_path: Path,
                                                             more: str) -> None:
    text = TEXT.replace("--hidden-size 4096 ", "").rstrip() + f" {more}\n"
    _, found, _ = check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm")
    assert "megatron-required-arg" not in found


# --- a comment line inside a continued command ------------------------------------------

CUT = """#!/bin/bash
torchrun --nproc_per_node 8 pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \\
    --seq-length 4096 --max-position-embeddings 4096 \\
    # --pipeline-model-parallel-size 8 \\
    --micro-batch-size 1 --global-batch-size 64 --bf16
"""


def test_a_comment_that_ends_the_launch_is_named(tmp_path: Path) -> None:
    """bash ends the command at line 5's comment (its backslash is the comment's), so line
    6's flags are a command of their own: --micro-batch-size is missing, and the error
    names line 5."""
    from typer.testing import CliRunner

    from pptune.cli.app import app

    path = tmp_path / "run.sh"
    path.write_text(CUT)
    r = CliRunner().invoke(app, ["check-config", str(path), "--no-compare"])
    assert r.exit_code == 2
    said = " ".join(r.stderr.split())
    assert "--micro-batch-size is missing or unresolved" in said
    assert ("line 5, a comment inside the backslash-continued command "
            "('# --pipeline-model-parallel-size 8'), ends that command as bash does") in said


def test_the_required_argument_error_names_the_comment_too(tmp_path: Path) -> None:
    text = ("torchrun --nproc_per_node 8 pretrain_gpt.py \\\n"
            "    --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 \\\n"
            "    # --pipeline-model-parallel-size 8 \\\n"
            "    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --bf16\n")
    code, found, _ = check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm", by="message")
    assert code == 1
    assert found["megatron-required-arg"].startswith("--num-layers, --hidden-size, "
                                                     "--num-attention-heads are not given")
    assert found["megatron-required-arg"].endswith(
        "; line 3, a comment inside the backslash-continued command "
        "('# --pipeline-model-parallel-size 8'), ends that command as bash does: the lines "
        "after it are not its arguments (delete the comment line, or move it above the "
        "command)")


def test_no_hint_for_a_comment_above_the_command(tmp_path: Path) -> None:
    from pptune.frameworks.megatron.launch import comment_cut

    above = "# --micro-batch-size 1 \\\ntorchrun pretrain_gpt.py \\\n  --bf16\n--x 1\n"
    assert comment_cut(above, 2) == ""
    # a comment that closes the command with nothing cut off after it
    closing = "torchrun pretrain_gpt.py \\\n  --bf16 \\\n# end\necho done\n"
    assert comment_cut(closing, 1) == ""
    # an escaped backslash (\\) is no continuation
    assert comment_cut("torchrun pretrain_gpt.py \\\\\n# x\n--bf16\n", 1) == ""
    assert comment_cut(CUT, 2).startswith("; line 5, ")
