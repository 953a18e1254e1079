"""check-config on a launch script with a substitution, expansion, parenthesis or
compound command left open, or a word ending a compound command where none is open:
one line naming the file, the line and what is wrong, exit 2, nothing written; and a
script of the look-alikes bash reads, read (tests/frameworks/test_shell_unclosed.py
and test_shell_compound.py put each one to bash -n)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from tests.frameworks.test_shell_compound import ACCEPTED as COMPOUNDS
from tests.frameworks.test_shell_unclosed import ACCEPTED

Cli = Callable[..., Result]
ErrorLine = Callable[[Result], str]

LAUNCH = ("torchrun pretrain_gpt.py --pipeline-model-parallel-size 4 --num-layers 32 \\\n"
          "  --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 \\\n"
          "  --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64\n")

# (what the script holds before its launch line, line it opens on, what is open)
SCRIPTS = [
    ('DIR=$(dirname "$0"\nPP=4\n', 1, "the $("),
    ("PP=${PP:-4\n", 1, "the ${"),
    ("HOST=`hostname\n", 1, "the `"),
    ("# the model\nARGS=(\n  --bf16  # half\n", 2, "the ( of the array ARGS"),
    ("PP=4\n( cd /data\n", 2, "the ( of a subshell"),
    ("N=$(( 2 * 4\n", 1, "the $(("),
    ('if [ -n "$X" ]; then\n  PP=4\n', 1, "the if statement"),
    ("PP=4\n{ TP=2\n", 2, "the { group"),
    ("for i in 1 2; do\n  PP=4\n", 1, "the for loop"),
    ("while true\n", 1, "the while loop"),
]


@pytest.mark.parametrize(("head", "line", "opened"), SCRIPTS)
def test_check_config_refuses_the_script_in_one_line(
        cli: Cli, error_line: ErrorLine, tmp_path: Path, head: str, line: int,
        opened: str) -> None:
    path = tmp_path / "run.sh"
    path.write_text(head + LAUNCH)
    said = f"{path}: line {line}: {opened} opened here is never closed, so bash refuses"
    assert said in error_line(cli("check-config", path, "--no-compare"))
    result = cli("check-config", path, "--no-compare", "--output", "json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"].startswith(said)
    assert [p.name for p in tmp_path.iterdir()] == ["run.sh"]  # nothing written


# (what the script holds before its launch line, the refusal's start)
MISPLACED = [
    ("PP=4\nfi\n", "line 2: the fi here belongs to no open if"),
    ("if true; then\n  { PP=4\nfi\n",
     "line 3: the fi here stands where the { group opened at line 2 needs its }"),
    ("case $X in\n  a) PP=4;;\n",  # with no esac, the launch line is read as a pattern
     "line 5: the case statement opened at line 1 needs a ) to end the pattern, or its "
     "esac here"),
]


@pytest.mark.parametrize(("head", "said"), MISPLACED)
def test_check_config_refuses_a_misplaced_word_in_one_line(
        cli: Cli, error_line: ErrorLine, tmp_path: Path, head: str, said: str) -> None:
    path = tmp_path / "run.sh"
    path.write_text(head + LAUNCH)
    line = error_line(cli("check-config", path, "--no-compare"))
    assert f"{path}: {said}, so bash refuses the script (syntax error near unexpected" in line
    assert [p.name for p in tmp_path.iterdir()] == ["run.sh"]  # nothing written


@pytest.mark.parametrize("accepted", [ACCEPTED[:-1], COMPOUNDS[:-1]],
                         ids=["brackets", "compounds"])
def test_check_config_reads_the_look_alikes(cli: Cli, tmp_path: Path,
                                            accepted: list[str]) -> None:
    """Every construct above that bash accepts, in one launch script: read, not refused,
    and the launch line's values found."""
    path = tmp_path / "run.sh"
    path.write_text("".join(accepted) + LAUNCH)
    result = cli("check-config", path, "--no-compare", "--output", "json")
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    assert (report["config"]["pp"], report["config"]["num_layers"]) == (4, 32)
