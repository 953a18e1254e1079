"""`pptune check-config`: read a training config, check it, render the findings."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import typer

from pptune import limits
from pptune.cli.file_flags import (
    env_option,
    framework_version_option,
    size_option,
    size_problems,
)
from pptune.cli.options import Use, option_for, uses
from pptune.cli.util import out_console as _out
from pptune.cli.util import say
from pptune.errors import BadInput, PptuneError
from pptune.files import dumps_json
from pptune.options import CostOptions, PlanSpace

CHECK_HELP = """CI sanity check of a training config: exit 0 when consistent and within
limits, 1 with findings (including anything the framework itself would refuse),
2 when the file cannot be read or a flag is wrong.

\b
  pptune check-config train.yaml
  pptune check-config ds_config.json --pp 4 --gpus 32 --output github
  pptune check-config pretrain_llama.sh --max-bubble 0.2 --strict
  pptune check-config job.toml --framework-version torchtitan=0.3.0
  pptune check-config --schema

Predicted bubble and slowdown over their limits are warnings unless you set
--max-bubble / --max-slowdown (or limits in the file) or pass --strict.

Reads pptune's own YAML/TOML/JSON, DeepSpeed JSON, Megatron-LM argument lists or
launch scripts, torchtitan TOML, and torchtitan main's Trainer.Config JSON dumps
(--debug.save_config_file; detected from the content; --format-in overrides).
"""


@uses(costs=Use(CostOptions, only=("model", "hf_config", "seq_len", "gpu", "profile",
                                   "gpu_spread"), more={
    "model": "overrides the file", "gpu": "overrides the file",
    "seq_len": "when the file lacks it (a DeepSpeed config states none)",
    "hf_config": "overrides the file; relative to the working folder",
    "profile": "overrides the file; relative to the working folder [default: the file's, "
    "else ./pptune-profile.json when the file names no model]"}))
def check_config(
    *,
    config: Path | None = typer.Argument(None, help="the training config file"),
    format_in: str | None = typer.Option(None, "--format-in", help="pptune, deepspeed, megatron or torchtitan"),
    pp: int | None = size_option("pp"),
    gpus: int | None = size_option("gpus"),
    tp: int | None = size_option("tp"),
    gpus_per_node: int | None = size_option("gpus_per_node"),
    micro_batch_size: int | None = size_option("micro_batch_size"),
    global_batch: int | None = size_option("global_batch"),
    env: list[str] | None = env_option(),
    precision: str | None = typer.Option(
        None, "--precision", help="the GEMM precision when the file cannot state it (a "
        "torchtitan main dump records no quantization converter): bf16, fp8 (torchao's "
        "float8 linears, rowwise: main's default, it has no tensorwise) or mxfp8; another "
        "file's own stands"),
    costs: CostOptions,
    max_bubble: float | None = typer.Option(None, "--max-bubble", help="bubble-rate limit (default 0.25 or the file's)"),
    max_slowdown: float | None = typer.Option(None, "--max-slowdown", help="step time limit vs the best plan (default 1.10)"),
    max_memory: float | None = option_for(PlanSpace, "max_memory", "the file's limits.memory_fraction where it sets one"),
    no_compare: bool = typer.Option(False, "--no-compare", help="skip the search for a faster plan"),
    strict: bool = typer.Option(False, "--strict", help="warnings fail too; bubble and slowdown limits are errors"),
    framework_version: list[str] | None = framework_version_option(),
    output: str = typer.Option("text", "--output", help="text, json or github (workflow annotations)"),
    as_json: bool = typer.Option(False, "--json", help="the same as --output json"),
    schema: bool = typer.Option(False, "--schema", help="print the JSON Schema of pptune's config and exit"),
) -> None:
    from pptune import schemas

    if schema:
        typer.echo(dumps_json(schemas.TrainingConfig.model_json_schema(), indent=2))
        return
    if output not in ("text", "json", "github"):
        raise BadInput(f"--output must be text, json or github (got {output!r})")
    try:
        if as_json:
            both, output = output == "github", "json"  # --json asked for the document
            if both:
                raise BadInput("--json and --output github ask for two outputs; give one")
        if config is None:
            raise BadInput("check-config needs a CONFIG file (or --schema)")
        if str(config) == "-" and not config.exists():  # a file named "-" is read as one
            raise BadInput("check-config reads CONFIG from a file, not from stdin ('-'): "
                           "save it to a file and give its path")
        report, read = _run(config, format_in, (pp, gpus, tp, gpus_per_node),
                            framework_version or [], (max_bubble, max_slowdown, max_memory),
                            CheckFlags(costs, not no_compare, strict, tuple(env or ()),
                                       (micro_batch_size, global_batch), precision))
    except PptuneError as exc:
        echo_error(output, config, str(exc), exc.exit_code)
        raise
    failing = report.errors() + (report.warnings() if strict else [])
    code = 1 if failing else 0
    from pptune.check.render import findings_github, findings_json, findings_text

    if output == "json":
        typer.echo(dumps_json(findings_json(config, read, report, code), indent=2))
    elif output == "github":
        typer.echo(findings_github(config, read, report))
    else:
        source = report.derived.get("cost_source")
        if source and source != "none":  # where the prediction's costs came from, as recommend says
            here = str(Path.cwd()) + os.sep  # --profile was made absolute: said as given
            say(f"costs: {source.replace(here, '')}")
        console = _out()
        console.print(findings_text(config, read, report, width=console.width),
                      highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(code)


def echo_error(output: str, config: Path | None, message: str, code: int) -> None:
    """What stdout gets when the check cannot run: the error document (json) or an
    annotation (github), so a CI job or a script never sees nothing; text: nothing."""
    text = " ".join(message.split())
    if output == "github":
        from pptune.check.render import github_error

        typer.echo(github_error(config, text))
    elif output == "json":
        typer.echo(dumps_json({"file": None if config is None else str(config),
                               "exit_code": code, "error": text}, indent=2))


class CheckFlags(NamedTuple):
    costs: CostOptions  # --model, --gpu, --profile
    compare_best: bool
    strict: bool
    env: tuple[str, ...] = ()  # --env NAME=VALUE
    batch: tuple[int | None, int | None] = (None, None)  # --micro-batch-size, --global-batch
    precision: str | None = None  # --precision, for a file that cannot state it


def _run(config: Path, format_in: str | None,
         sizes: tuple[int | None, int | None, int | None, int | None], versions: list[str],
         bounds: tuple[float | None, float | None, float | None],
         flags: CheckFlags) -> tuple[Any, Any]:
    pp, gpus, tp, gpus_per_node = sizes  # --pp, --gpus, --tp, --gpus-per-node
    max_bubble, max_slowdown, max_memory = bounds  # --max-bubble, --max-slowdown, --max-memory
    found = limits.problems(*(
        limits.problem(flag, value, lo, hi, lo_open=flag == "--max-memory",
                       capped=flag == "--max-slowdown")
        for flag, value, lo, hi in (
            ("--max-bubble", max_bubble, 0, 1), ("--max-slowdown", max_slowdown, 1, 1e6),
            ("--max-memory", max_memory, 0, 1))
        if value is not None
    )) + size_problems({"pp": pp, "gpus": gpus, "tp": tp, "gpus_per_node": gpus_per_node,
                        "micro_batch_size": flags.batch[0], "global_batch": flags.batch[1]})
    from pptune.costs.resolve import check_options

    found += check_options(flags.costs)  # --seq-len, --gpu-spread: checked as recommend does
    if found:
        raise BadInput("; ".join(found))
    from pptune.costs.names import gpu_preset, model_preset

    if flags.costs.gpu is not None:  # a flag's typo is bad usage (exit 2), not a finding
        gpu_preset(flags.costs.gpu)
    if flags.costs.model is not None:
        model_preset(flags.costs.model)
    from pptune.check.rules import CheckOptions, check
    from pptune.frameworks.read import read_config

    read = read_config(config, format_in, pp=pp, gpus=gpus, tp=tp, framework_versions=versions,
                       gpus_per_node=gpus_per_node, env=list(flags.env),
                       micro_batch_size=flags.batch[0], global_batch=flags.batch[1],
                       gpu=flags.costs.gpu, precision=flags.precision)
    costs = flags.costs
    if costs.profile is not None:  # the command line's path is the working folder's
        costs = replace(costs, profile=Path.cwd() / costs.profile)
    if costs.hf_config is not None:
        hf = Path.cwd() / costs.hf_config
        costs = replace(costs, hf_config=hf)
        from pptune.costs.modelspec import read_hf_config

        read_hf_config(hf)  # a flag's bad file is bad usage (exit 2), not a finding
    config_read = read.config
    named = (f"--model {costs.model}" if costs.model is not None else
             f"--hf-config {flags.costs.hf_config}" if costs.hf_config is not None else None)
    if named is not None or costs.profile is not None:
        from pptune.frameworks.read import model_known

        model_known(read)
    for key in ("model", "hf_config") if named is not None else ():
        stated = getattr(config_read, key)
        if stated is not None and named != f"--{key.replace('_', '-')} {stated}":
            # the flags override the file
            read.notes.append(f"{named} names the model: the file's {key} {stated} is not read")
    if costs.seq_len is not None:  # like --gpus: fills what the file does not state
        if config_read.seq_len is None:
            config_read = config_read.model_copy(update={"seq_len": costs.seq_len})
            read.notes.append(f"seq_len {costs.seq_len} from --seq-len: the file does not "
                              "state a sequence length")
        elif config_read.seq_len != costs.seq_len:
            read.notes.append(f"--seq-len {costs.seq_len} ignored: the file states "
                              f"seq_len = {config_read.seq_len}")
        costs = replace(costs, seq_len=None)
        read = replace(read, config=config_read)
    if costs.profile is not None:  # a bad file, or one of another model, is bad usage
        from pptune.check.costs import stated_model
        from pptune.check.profile_match import problem
        from pptune.schemas import load_profile

        why = problem(config_read, stated_model(config_read, config.parent, costs), costs,
                      load_profile(costs.profile), f"--profile {flags.costs.profile}")
        if why:
            raise BadInput(why)
    if not flags.compare_best:  # no comparison to keep the held sizes in
        from pptune.frameworks.common.planned import HELD_NOTE

        read.notes[:] = [n for n in read.notes if not n.startswith(HELD_NOTE)]
    opts = CheckOptions(max_bubble=max_bubble, max_slowdown=max_slowdown,
                        max_memory=max_memory, costs=costs,
                        compare_best=flags.compare_best, strict=flags.strict)
    return check(read.config, config.parent, opts, read.semantics), read
