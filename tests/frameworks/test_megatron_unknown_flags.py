"""A flag Megatron-LM does not define: its parse_args (megatron/training/arguments.py,
``argparse.ArgumentParser(allow_abbrev=False)``, ``parser.parse_args()``) exits with
argparse's "unrecognized arguments" before anything runs. The flags it defines at
core_v0.16.1 are data (pptune/frameworks/megatron/known_flags.py, bench/megatron_flags.py
re-derives them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pptune.frameworks.megatron import known_flags
from tests.check_json import check_file

REPO = Path(__file__).resolve().parents[2]
BASE = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
        "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 "
        "--tensor-model-parallel-size 8")


def launch(tmp_path: Path, extra: str, entry: str = "pretrain_gpt.py",
           *flags: str) -> tuple[int, dict[str, str], dict]:
    text = f"torchrun --nproc_per_node 8 {entry} {BASE} {extra}\n"
    return check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm", *flags, by="message")


def test_a_misspelt_flag_is_the_error_argparse_makes(tmp_path: Path) -> None:
    code, found, doc = launch(tmp_path, "--pipeline-model-paralel-size 4")
    assert code == 1
    assert found["megatron-unknown-flag"] == (
        "--pipeline-model-paralel-size (did you mean --pipeline-model-parallel-size?) is not "
        "a flag of Megatron-LM core_v0.16.1: parse_args exits with argparse's 'pretrain_gpt.py: "
        "error: unrecognized arguments: --pipeline-model-paralel-size 4' "
        "(megatron/training/arguments.py: parser.parse_args() with allow_abbrev=False); for a "
        "later release's flags, --framework-version megatron-core=VERSION checks the file "
        "without this rule")
    assert doc["config"]["pp"] == 1
    assert not any("other flag" in note for note in doc["notes"])


def test_every_unknown_flag_is_quoted_as_argparse_lists_them(tmp_path: Path) -> None:
    code, found, doc = launch(tmp_path, "--lr 3e-4 --tensor-model-paralell-size=2 "
                              "--pipeline-model-parallel 2 --use-mcore-models")
    assert code == 1
    message = found["megatron-unknown-flag"]
    # allow_abbrev=False: a prefix of a real flag is no flag either
    assert message.startswith(
        "--tensor-model-paralell-size (did you mean --tensor-model-parallel-size?), "
        "--pipeline-model-parallel (did you mean --pipeline-model-parallel-size?) are not "
        "flags of Megatron-LM core_v0.16.1")
    assert ("unrecognized arguments: --tensor-model-paralell-size=2 "
            "--pipeline-model-parallel 2'") in message
    # flags Megatron-LM defines and pptune does not read stay a note
    assert "ignored 2 other flags: --lr, --use-mcore-models" in doc["notes"]


def test_extra_args_of_the_entry_script_are_flags(tmp_path: Path) -> None:
    """pretrain_gpt.py passes extra_args_provider=add_modelopt_args
    (megatron/post_training/arguments.py); pretrain_bert.py passes none."""
    code, found, _ = launch(tmp_path, "--export-te-mcore-model")
    assert code == 0 and "megatron-unknown-flag" not in found, found
    code, found, _ = launch(tmp_path, "--export-te-mcore-model", "pretrain_bert.py")
    assert code == 1 and "'pretrain_bert.py: error: unrecognized arguments: " \
        "--export-te-mcore-model'" in found["megatron-unknown-flag"]


@pytest.mark.parametrize(("entry", "flags"), [
    ("pretrain_mine.py", ()),  # not Megatron-LM's: its own extra_args_provider may add it
    ("pretrain_gpt.py", ("--framework-version", "megatron=0.18")),  # a later release
])
def test_unknown_flags_are_not_judged_where_the_parser_is_unknown(
        tmp_path: Path, entry: str, flags: tuple[str, ...]) -> None:
    _, found, doc = launch(tmp_path, "--my-flag 3", entry, *flags)
    assert "megatron-unknown-flag" not in found
    assert "ignored 1 other flag: --my-flag" in doc["notes"]


def test_an_argument_file_is_not_judged(tmp_path: Path) -> None:
    """A file of arguments names no entry script (whose extra flags are unknown)."""
    text = BASE.replace(" --", "\n--") + "\n--my-flag 3\n"
    _, found, doc = check_file(tmp_path / "args.txt", text, "--gpus", "8", "--gpu",
                                  "h100-sxm")
    assert "megatron-unknown-flag" not in found
    assert "ignored 1 other flag: --my-flag" in doc["notes"]


def test_the_flags_include_what_pptune_reads() -> None:
    from pptune.frameworks.megatron import flags

    read = {*flags.VALUE_FLAGS, *flags.BOOL_FLAGS, *flags.NOTED_FLAGS, *flags.UNMODELLED_FLAGS,
            *flags.LIST_FLAGS}
    assert read - flags.LATER_FLAGS <= known_flags.FLAGS  # later releases' flags, named so
    assert not flags.LATER_FLAGS & known_flags.FLAGS
    assert len(known_flags.FLAGS) == 682 and known_flags.TAG == "core_v0.16.1"
    assert "pretrain_gpt.py" in known_flags.ENTRIES


@pytest.mark.slow
def test_the_flags_are_re_derived_from_megatron_lm() -> None:
    """MEGATRON_LM_GIT: a clone or mirror of NVIDIA/Megatron-LM (skipped without it)."""
    git_dir = os.environ.get("MEGATRON_LM_GIT")
    if not git_dir or not Path(git_dir).exists():
        pytest.skip("MEGATRON_LM_GIT does not name a Megatron-LM git repository")
    done = subprocess.run([sys.executable, "-m", "bench.megatron_flags", git_dir],
                          capture_output=True, text=True, cwd=REPO, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "matches core_v0.16.1" in done.stdout


def test_a_later_releases_flag_names_the_release_and_the_way_past_it(tmp_path: Path) -> None:
    """Megatron-FSDP's gradient widths of releases after core_v0.16.1 (a user trial of
    NVIDIA's DeepSeek-V3 Megatron-FSDP example): at core_v0.16.1 argparse refuses them,
    and the finding says which release's flags it judged; judged as a later release they
    are a warning that names what pptune prices, not an "ignored" note."""
    flag = "--megatron-fsdp-main-grads-dtype bf16"
    code, found, _ = launch(tmp_path, flag)
    said = found["megatron-unknown-flag"]
    assert code == 1 and said.startswith("--megatron-fsdp-main-grads-dtype (did you mean "
                                         "--main-grads-dtype?) is not a flag of Megatron-LM "
                                         "core_v0.16.1")
    assert said.endswith("--framework-version megatron-core=VERSION checks the file without "
                         "this rule")
    code, found, doc = launch(tmp_path, flag, "pretrain_gpt.py", "--framework-version",
                              "megatron-core=0.18")
    assert code == 0 and "megatron-unknown-flag" not in found
    assert found["megatron-unmodelled-flag"].startswith(
        "--megatron-fsdp-main-grads-dtype: not read (a Megatron-FSDP width of Megatron-LM "
        "releases after core_v0.16.1)")
    assert not any("--megatron-fsdp-main-grads-dtype" in n for n in doc["notes"])


def test_a_hybrid_model_is_warned_as_not_modelled(tmp_path: Path) -> None:
    """--is-hybrid-model (Mamba layers; the Hugging Face reader refuses hybrids) and
    --moe-latent-size were listed as ignored while every layer was priced as a transformer
    block (a trial on Megatron-LM's nemotron3 tests): each is a warning naming what is
    priced instead."""
    code, found, doc = launch(tmp_path, "--is-hybrid-model --hybrid-override-pattern M*M- "
                              "--moe-latent-size 1024")
    assert code == 0, found
    warned = [f["message"] for f in doc["findings"] if f["id"] == "megatron-unmodelled-flag"
              and f["severity"] == "warning"]
    assert any(m.startswith("--is-hybrid-model: hybrid models' Mamba") for m in warned)
    assert any(m.startswith("--hybrid-override-pattern: hybrid models' Mamba") for m in warned)
    assert any(m.startswith("--moe-latent-size: the experts' latent") for m in warned)
    assert not any("--is-hybrid-model" in n for n in doc["notes"])
