"""Every field of every option group is a flag of every command that takes its group,
and every planning field round-trips through the plan file's request.

The fields are read from the groups (``pptune.options``), not listed here:
a field added to a group is checked by these tests with no edit, unless it
is a text or a path (a model name, a file), whose sample ``SAMPLES`` must give.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from typer.testing import Result

from pptune.costmodel.keys import Precision
from pptune.costmodel.sharding import Sharding
from pptune.costs.profiles import analytic_profile
from pptune.options import CostOptions, Field, OutputOptions, PlanSpace, RunOptions, fields_of
from pptune.options.kinds import Ints, ListOf, OneOf
from pptune.options.record import PlanFileRequest
from pptune.schemas import PlanFile, load_json_model

Cli = Callable[..., Result]
ALL = None
# which command takes which group (None: every field; else the fields it honours)
TAKES: dict[str, list[tuple[type, tuple[str, ...] | None]]] = {
    "simulate": [(CostOptions, ALL), (OutputOptions, ALL)],
    "recommend": [(PlanSpace, ALL), (CostOptions, ALL), (OutputOptions, ALL)],
    "tune": [(PlanSpace, ALL), (CostOptions, ALL), (RunOptions, ALL), (OutputOptions, ("as_json",))],
    "validate": [(CostOptions, ("model", "hf_config", "seq_len", "profile")), (RunOptions, ALL),
                 (OutputOptions, ALL)],
    "check-config": [(CostOptions, ("model", "gpu", "profile"))],
}
CASES = [(command, group, f) for command, groups in TAKES.items() for group, only in groups
         for f in fields_of(group) if only is None or f.name in only]


def _params(app: typer.Typer, command: str) -> dict[str, Any]:
    """The command's options as click parses them (typer carries its own click)."""
    group: Any = typer.main.get_command(app)
    return {p.name: p for p in group.commands[command].params if p.name}


@pytest.mark.parametrize(("command", "group", "f"), CASES,
                         ids=[f"{c}-{f.flag.name}" for c, _, f in CASES])
def test_the_command_exposes_the_field_as_declared(app: typer.Typer, cli: Cli, command: str,
                                                    group: type, f: Field) -> None:
    param = _params(app, command)[f.name]
    names = [n for name in f.flag.names for n in name.split("/")]
    assert sorted(param.opts + param.secondary_opts) == sorted(names)
    assert param.required is f.flag.required
    if not f.flag.required:
        assert param.default == f.flag.kind.text(f.default)
    assert f.flag.name in cli(command, "--help").stdout


def test_simulate_recommend_and_tune_expose_the_same_cost_options(app: typer.Typer) -> None:
    cost = {f.name for f in fields_of(CostOptions)}
    seen = {c: {n for n in _params(app, c) if n in cost} for c in ("simulate", "recommend", "tune")}
    assert seen["simulate"] == seen["recommend"] == seen["tune"] == cost


# ---------------------------------------------------------------- round trip

BASE = {"gpus": "4", "model": "gpt-small", "schedules": "1f1b", "sharding": "none",
        "recompute": "none", "micro_batch_sizes": "1"}
# fields whose sample needs context (a preset, a file); "drop": base flags that would conflict
SAMPLES: dict[str, dict[str, Any]] = {
    "model": {"text": "gpt3-1.3b"},
    "gpu": {"text": "a100-80gb"},
    "grad_compression": {"text": "bf16"},
    "profile": {"file": "profile.json", "drop": ("model",)},
    "hf_config": {"file": "hf.json", "drop": ("model",)},
    "sharded_optimizer": {"drop": ("sharding",)},
    # the expert dimensions need a mixture of experts, mxfp8 a Blackwell GPU
    "ep": {"text": "2", "value": (2,), "base": {"model": "mixtral-8x7b"}},
    "etp": {"text": "2", "value": (2,), "base": {"model": "mixtral-8x7b"}},
    "precision": {"text": "mxfp8", "value": (Precision.MXFP8,), "base": {"gpu": "b200"}},
    "moe_imbalance": {"text": "1.5", "value": 1.5, "base": {"model": "mixtral-8x7b"}},
    "moe_dispatcher": {"base": {"model": "mixtral-8x7b"}},
    # the FP8 flags act only on FP8 plans (refused without one)
    "fp8_param_gather": {"base": {"precision": "fp8"}},
    "fp8_recipe": {"base": {"precision": "fp8"}},
    "fp8_kernels": {"base": {"precision": "fp8"}},
    # moments below fp32 need the distributed optimizer (the precision-aware optimizer)
    "exp_avg_dtype": {"base": {"sharding": "zero1"}},
    "exp_avg_sq_dtype": {"base": {"sharding": "zero1"}},
}
TINY_HF = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
           "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 4,
           "vocab_size": 256, "max_position_embeddings": 64}


def _sample(f: Field, tmp: Path) -> tuple[list[str], Any]:
    """Flags giving ``f`` a value other than its default, and that value."""
    kind, default, given = f.flag.kind, f.default, SAMPLES.get(f.name, {})
    if "file" in given:
        path = (tmp / given["file"]).resolve()
        return [f.flag.name, str(path)], path
    if "text" in given:
        return [f.flag.name, given["text"]], given.get("value", given["text"])
    if kind.cli_type is bool:
        flag = f.flag.names[0].split("/")[-1] if default else f.flag.name
        return [flag], not default
    if isinstance(kind, Ints):
        return [f.flag.name, "2"], (2,)
    if isinstance(kind, ListOf | OneOf):
        last: Enum = list(kind.shown or list(kind.enum))[-1]
        return [f.flag.name, str(last.value)], (last,) if isinstance(kind, ListOf) else last
    if kind.cli_type is int:
        value = 2 * default if isinstance(default, int) else 8
        return [f.flag.name, str(value)], value
    if kind.cli_type is float:
        value = 2 * default if default else 0.5
        return [f.flag.name, str(value)], value
    raise AssertionError(f"add a sample for {f.flag.name} to SAMPLES")


PLANNING = [(group, f) for group in (CostOptions, PlanSpace) for f in fields_of(group)]


@pytest.mark.parametrize(("group", "f"), PLANNING, ids=[f.flag.name for _, f in PLANNING])
def test_every_planning_field_round_trips_through_the_plan_file(
        group: type, f: Field, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./pptune-profile.json
    (tmp_path / "profile.json").write_text(
        analytic_profile("gpt-small", "h100-sxm", [1]).model_dump_json())
    (tmp_path / "hf.json").write_text(json.dumps(TINY_HF))
    flags, value = _sample(f, tmp_path)
    assert value != f.default
    given = SAMPLES.get(f.name, {})
    base = {k: v for k, v in (BASE | given.get("base", {})).items()
            if k != f.name and k not in given.get("drop", ())}
    argv = [x for k, v in base.items() for x in (f"--{k.replace('_', '-')}", v)] + flags
    r = cli("recommend", *argv, "--json")
    # 1: no plan fits; --json prints the document either way (-o writes it only with plans)
    assert r.exit_code in (0, 1), r.stderr
    (tmp_path / "plan.json").write_text(r.stdout)
    request: PlanFileRequest = load_json_model(tmp_path / "plan.json", PlanFile, "plan").request
    holder = request.costs if group is CostOptions else request.space
    assert getattr(holder, f.name) == value


# ---------------------------------------------------------------- the mechanism


def test_a_group_becomes_options_parsed_all_at_once(tmp_path: Path) -> None:
    """A toy group through ``uses``: its fields are the command's flags, in place, and
    every bad value is one clause of one error line (exit 2, as every bad input)."""
    from dataclasses import dataclass

    from typer.testing import CliRunner

    from pptune.cli.app import _guard
    from pptune.cli.errors import OneLineErrors
    from pptune.cli.options import Use, uses
    from pptune.options.groups import INTS, SHARDINGS, option

    @dataclass(frozen=True, kw_only=True)
    class Toy:
        depths: tuple[int, ...] | None = option(None, "--depths", kind=INTS, help="depths")
        sharding: tuple[Any, ...] | None = option(None, "--sharding", kind=SHARDINGS, help="s")

    seen: list[Toy] = []
    toy = typer.Typer(cls=OneLineErrors)

    @toy.command("go")
    @_guard
    @uses(toy=Use(Toy, more={"depths": "e.g. 2,4"}))
    def go(*, first: int = typer.Option(1, "--first"), toy: Toy) -> None:
        seen.append(toy)

    @toy.command("other")
    def other() -> None: ...

    runner = CliRunner()
    assert "depths; e.g. 2,4" in runner.invoke(toy, ["go", "--help"]).stdout
    assert runner.invoke(toy, ["go", "--depths", "2,4", "--sharding", "zero1"]).exit_code == 0
    assert seen == [Toy(depths=(2, 4), sharding=(Sharding.ZERO1,))]
    r = runner.invoke(toy, ["go", "--depths", "2,x", "--sharding", "zero9"])
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "pptune: error: --depths takes comma-separated integers, e.g. 1,2,4 (got '2,x'); "
        "--sharding takes a comma list of none, zero1, zero2, zero3, fsdp (got 'zero9')")
