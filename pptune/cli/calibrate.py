"""`pptune calibrate`: a calibrated profile from the jobs you run, or from validate results.

Two forms:

- ``--run CONFIG (--step-s S | --log LOG)``, repeatable: each ``--run`` takes
  the ``--step-s`` or ``--log`` that follows it on the command line
  (``pptune.tune.jobs``, ``pptune.tune.jobfit``), and the check-config flags
  that fill what its file leaves open (``--gpus``, ``--env``, ...,
  pptune/cli/file_flags.py) given after it; given before the first ``--run``
  they apply to every run (a run's own value wins);
- ``RESULTS... --profile P``: ``pptune validate --json`` results folded into a
  probe profile's per-layer costs (``pptune.tune.model``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from pptune.cli.file_flags import SIZES, env_option, size_option, size_problems
from pptune.cli.util import out_console as _out
from pptune.cli.util import say as _say
from pptune.cli.util import wrote
from pptune.errors import BadInput
from pptune.files import dumps_json
from pptune.options.kinds import preset_name

HELP = """Calibrate pptune on the jobs you already run, or on earlier validate results.

From a running job: its config (anything check-config reads) with its measured
seconds per step, or its log (Megatron-LM, torchtitan or DeepSpeed lines; the
median over the steady iterations, the first one left out):

\b
  pptune calibrate --run pretrain_llama.sh --log train.log -o calibrated.json
  pptune calibrate --run a.sh --step-s 10.2 --run b.sh --step-s 7.9 \\
    -o cal.json
  pptune calibrate --run job.toml --gpus 8 --log 8.log \\
    --run job.toml --gpus 16 --log 16.log -o cal.json
  pptune recommend --gpus 64 --profile calibrated.json --tp 4

--gpus, --pp, --tp, --gpus-per-node, --micro-batch-size, --global-batch and
--env fill what a config leaves open, as in check-config: after a --run they
are that run's, before the first --run every run's. A run whose GPU count
neither its file, its flags nor its log states is refused.

The calibration scales the analytic model's rates (compute, memory,
communication): one run fits one common factor, several runs as many as their
steps tell apart (least squares; the residual of each run is printed and, with
two runs or more, its error when the others alone predict it; either beyond
10% is a warning). The profile keeps the model, the GPU and the jobs' GEMM
precision, so recommend, simulate and check-config --profile price other
configurations of them.

From validate results (this machine's probe profile):

\b
  pptune validate --plan 1 --profile profile.json --json > run1.json
  pptune calibrate run1.json run2.json --profile profile.json -o cal.json

Every result must have run the profile's model. The per-layer forward,
input-gradient and weight-gradient factors are fitted per micro-batch size to
the measured op medians, the p2p latency to the measured step times.
"""

ORDER = "pptune.calibrate.order"
PAIRED = ("--run", "--step-s", "--log")
MEASURED = ("--step-s", "--log")
PER_RUN = (*(flag for flag, _, _ in SIZES.values()), "--env")  # check-config's flags
FLAG_OF = {name: flag for name, (flag, _, _) in SIZES.items()}
RUN_CLAUSE = "; after a --run: that run's, before the first --run: every run's"


class InOrder(TyperCommand):
    """Keeps the order of --run, --step-s, --log and the per-run flags as given (click
    keeps each option's values, not their interleaving)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta[ORDER] = flag_order(args)
        return super().parse_args(ctx, args)


def flag_order(args: list[str]) -> list[str]:
    """The paired and per-run flags in the order they appear (``--run X`` and
    ``--run=X`` alike)."""
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--":
            break
        name = a.split("=", 1)[0]
        if name in PAIRED or name in PER_RUN:
            out.append(name)
            skip = "=" not in a
    return out


def pair(order: list[str], runs: list[Path], steps: list[float], logs: list[Path],
         per_run: dict[str, list[Any]] | None = None) -> list[Any]:
    """Each --run with the --step-s or --log after it and the per-run flags (``per_run``:
    flag -> its values in order) after it, those before the first --run shared (module
    docstring)."""
    from pptune.frameworks.common.fields import Flags
    from pptune.tune.jobs import Measurement

    values = {"--run": iter(runs), "--step-s": iter(steps), "--log": iter(logs),
              **{flag: iter(v) for flag, v in (per_run or {}).items()}}
    shared: dict[str, Any] = {"--env": []}
    given: list[dict[str, Any]] = []  # each run's flags, "--run" its config
    for flag in order:
        value = next(values[flag])
        if flag == "--run":
            if given:
                _measured(given[-1])
            given.append({"--run": value, "--env": []})
            continue
        if flag in MEASURED and not given:
            raise BadInput(f"{flag} comes before any --run; give each --run CONFIG followed "
                           "by its --step-s SECONDS or --log FILE")
        target = given[-1] if given else shared
        if flag == "--env":
            target["--env"].append(value)
            continue
        if flag in target or (flag in MEASURED and set(MEASURED) & set(target)):
            first = next(f for f in (flag, *MEASURED) if f in target)
            if flag in MEASURED:
                raise BadInput(f"--run {target['--run']} has {first} {target[first]} and "
                               f"{flag} {value} after it; give one --step-s or --log after "
                               "each --run")
            whose = f"--run {target['--run']}" if given else "the runs (before any --run)"
            raise BadInput(f"{flag} is given twice for {whose}: {target[flag]} and {value}; "
                           f"give {flag} once after each --run, or once before the first")
        target[flag] = value
    if not given:
        raise BadInput("calibrate needs --run CONFIG with --step-s or --log")
    _measured(given[-1])
    out = []
    for g in given:
        both = {**shared, **g}
        flags = Flags(**{name: both.get(flag) for name, flag in FLAG_OF.items()})
        out.append(Measurement(g["--run"], step_s=g.get("--step-s"), log=g.get("--log"),
                               flags=flags, env=(*shared["--env"], *g["--env"])))
    return out


def _measured(run: dict[str, Any]) -> None:
    if not set(MEASURED) & set(run):
        raise BadInput(f"--run {run['--run']} has no --step-s or --log after it; give one "
                       "after each --run")


def calibrate(
    ctx: typer.Context,
    results: list[Path] | None = typer.Argument(None, help="validate --json outputs"),
    run: list[Path] | None = typer.Option(None, "--run", metavar="<path>", help="a job's config (repeatable; "
                                          "each followed by its --step-s or --log)"),
    step_s: list[float] | None = typer.Option(None, "--step-s", metavar="<float>", help="the job's measured "
                                              "seconds per step"),
    log: list[Path] | None = typer.Option(None, "--log", metavar="<path>", help="the job's own training log"),
    pp: list[int] | None = size_option("pp", RUN_CLAUSE),
    gpus: list[int] | None = size_option("gpus", RUN_CLAUSE),
    tp: list[int] | None = size_option("tp", RUN_CLAUSE),
    gpus_per_node: list[int] | None = size_option("gpus_per_node", RUN_CLAUSE),
    micro_batch_size: list[int] | None = size_option("micro_batch_size", RUN_CLAUSE),
    global_batch: list[int] | None = size_option("global_batch", RUN_CLAUSE),
    env: list[str] | None = env_option(RUN_CLAUSE),
    warmup: int | None = typer.Option(None, "--warmup", help="--log: leave out iterations up to "
                                      "N [default: the first line printed]"),
    precision: str | None = typer.Option(
        None, "--precision", help="--run: the GEMM precision of configs that cannot state it "
        "(a torchtitan main dump records no quantization converter): bf16, fp8 or mxfp8, as "
        "check-config --precision"),
    gpu: str | None = typer.Option(None, "--gpu", help="--run: the jobs' GPU preset "
                                   "[default: the config's, else the GPU its --log names, "
                                   "else h100-sxm]"),
    model: str | None = typer.Option(None, "--model", help="--run: model preset, overrides "
                                     "the config's"),
    hf_config: Path | None = typer.Option(None, "--hf-config", help="--run: the jobs' model as "
                                          "a Hugging Face config.json, overrides the config's"),
    profile: Path | None = typer.Option(None, "--profile", help="RESULTS: the profile the runs "
                                        "are priced with"),
    output: Path | None = typer.Option(None, "--output", "-o", help="where the calibrated "
                                       "profile goes  [required]"),
    as_json: bool = typer.Option(False, "--json", help="--run: the calibration as JSON on "
                                 "stdout"),
) -> None:
    from pptune.files import PROFILE, check_output

    order = ctx.meta.get(ORDER, [])
    sizes = {"pp": pp, "gpus": gpus, "tp": tp, "gpus_per_node": gpus_per_node,
             "micro_batch_size": micro_batch_size, "global_batch": global_batch}
    per_run = {FLAG_OF[name]: v for name, v in sizes.items() if v} | (
        {"--env": env} if env else {})
    if run or step_s or log:
        if results or profile is not None:
            raise BadInput("--run and RESULTS/--profile are two forms of calibrate; give one")
        if warmup is not None and warmup < 0:
            raise BadInput(f"--warmup must be 0 or more (got {warmup})")
        if warmup is not None and not log:
            raise BadInput(f"--warmup {warmup} leaves iterations of a --log out; every run "
                           "here gives --step-s: drop --warmup, or give the runs' logs")
        found = [p for name, values in sizes.items() for v in values or ()
                 for p in size_problems({name: v})]
        if found:
            raise BadInput("; ".join(dict.fromkeys(found)))
        measurements = [dataclasses.replace(m, flags=dataclasses.replace(
            m.flags, precision=precision)) for m in pair(
                order, list(run or []), list(step_s or []), list(log or []), per_run)]
        output = _given_output(output)
        check_output(output, "-o", [*(("--run", r) for r in run or ()),
                                    *(("--log", g) for g in log or ()),
                                    ("--hf-config", hf_config)], PROFILE)
        if model is not None and hf_config is not None:
            raise BadInput("--model and --hf-config both name the jobs' model; give one")
        _from_jobs(measurements, preset_name(gpu),
                   (preset_name(model), hf_config.absolute() if hf_config else None),
                   warmup, output, as_json)
        return
    if not results or profile is None:
        from pptune.tune.validate_json import RUN_FORM

        raise BadInput("calibrate needs --run CONFIG with --step-s or --log, or validate "
                       "RESULTS with --profile" + (f"; {RUN_FORM}" if results else ""))
    for flag, value in (("--gpu", gpu), ("--model", model), ("--hf-config", hf_config),
                        ("--warmup", warmup), ("--precision", precision),
                        *((f, True) for f in per_run)):
        if value is not None:
            raise BadInput(f"{flag} is for --run; RESULTS are priced with --profile")
    output = _given_output(output)
    check_output(output, "-o", [("--profile", profile), *(("RESULTS", r) for r in results)],
                 PROFILE)
    _from_results(results, profile, output)


def _from_jobs(measurements: list[Any], gpu: str | None, model: tuple[str | None, Path | None],
               warmup: int | None, output: Path, as_json: bool) -> None:
    """``model``: --model and --hf-config (at most one given)."""
    from pydantic import ValidationError

    from pptune.report.calibration import calibration_json, calibration_text
    from pptune.report.wrap import hanging
    from pptune.schemas import write_atomic
    from pptune.tune import jobfit, jobs

    try:
        loaded = [jobs.load(m, gpu, model[0], warmup, model[1]) for m in measurements]
        outcome = jobfit.calibrate(loaded)
    except ValidationError as exc:  # a schema's range, reached by the runs: one line
        raise jobfit.unpriced(exc) from None
    for j in loaded:  # after the checks: a refused run prints its one error line alone
        for note in (*j.read.notes, *j.notes):
            _say(note)
    cal = outcome.profile.calibration
    assert cal is not None
    for warning in cal.warnings:
        _say(f"warning: {warning}")
    written = write_atomic(output, outcome.profile.model_dump_json(indent=2) + "\n")
    if as_json:
        typer.echo(dumps_json(calibration_json(cal), indent=2))
    else:
        console = _out()
        console.print("\n".join(hanging(calibration_text(cal), console.width)),
                      highlight=False, markup=False, soft_wrap=True)
    wrote(written)


def _given_output(output: Path | None) -> Path:
    """``-o``, asked for after the runs were checked (a run's mistake is said first)."""
    if output is None:
        raise BadInput("calibrate needs -o FILE: where the calibrated profile goes")
    return output


def _from_results(results: list[Path], profile: Path, output: Path) -> None:
    from pptune.schemas import load_profile, write_atomic
    from pptune.tune import model, validate_json

    base = load_profile(profile)
    kept, twice = validate_json.distinct(results)
    trials = [validate_json.trial(path, base) for path in kept]
    cal = model.calibrate(base, trials, by="pptune calibrate")
    written = write_atomic(output,
                           model.calibrated_profile(base, cal).model_dump_json(indent=2) + "\n")
    for note in twice:  # after the checks: a refusal is its one line alone
        _say(note)
    for warning in cal.warnings:
        _say(f"warning: {warning}")
    wrote(written)
    for line in cal.notes:  # the fit is the report: stdout, as the --run form's table
        typer.echo(line)
