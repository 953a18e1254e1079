"""The README's usage stays in step with --help (sqlite-utils' test_docs idea)."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
runner = CliRunner()


def _commands() -> list[str]:
    out = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    block = out.split("Commands:", 1)[1]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


def test_every_command_is_documented_and_every_documented_command_exists() -> None:
    commands = _commands()
    assert {"simulate", "recommend", "probe", "check-config", "presets", "schema"} <= set(commands)
    for name in commands:
        assert f"pptune {name}" in README, f"README does not mention `pptune {name}`"
    root_help = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    for name in set(re.findall(r"`pptune ([a-z-]+)", README)):
        if name.startswith("--"):  # an option of pptune itself (--version)
            assert name in root_help, f"README names `pptune {name}`, which does not exist"
            continue
        assert name in commands, f"README names `pptune {name}`, which does not exist"


def test_every_flag_in_the_readme_exists() -> None:
    helps = " ".join(
        runner.invoke(app, [*c, "--help"], env={"COLUMNS": "200"}).stdout
        for c in [[], *([c] for c in _commands())]
    )
    documented = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", README))
    # flags of other tools quoted in the README (Megatron-LM, torchrun, deepspeed)
    foreign = {f for f in documented if f.startswith(("--decoder-", "--num-layers-per", "--nproc",
                                                        "--use-distributed", "--deepspeed",
                                                        "--use-tp-pp-dp", "--account-for-",
                                                        "--global-batch-size", "--microbatch-group",
                                                        "--num-virtual-stages",
                                                        "--pipeline-model-parallel",
                                                        "--recompute-method"))}
    missing = sorted(f for f in documented - foreign if f not in helps)
    assert not missing, f"README documents flags no command has: {missing}"


def test_every_command_help_has_an_example() -> None:
    for name in _commands():
        text = runner.invoke(app, [name, "--help"], env={"COLUMNS": "200"}).stdout
        assert f"pptune {name}" in text, f"`pptune {name} --help` shows no example"
