"""`pptune calibrate`: a calibrated profile from the jobs you run, or from validate results.

Two forms:

- ``--run CONFIG (--step-s S | --log LOG)``, repeatable: each ``--run`` takes
  the ``--step-s`` or ``--log`` that follows it on the command line
  (``pptune.tune.jobs``, ``pptune.tune.jobfit``);
- ``RESULTS... --profile P``: ``pptune validate --json`` results folded into a
  probe profile's per-layer costs (``pptune.tune.model``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from pptune.cli.util import out_console as _out
from pptune.cli.util import say as _say
from pptune.errors import BadInput

HELP = """Calibrate pptune on the jobs you already run, or on earlier validate results.

From a running job: its config (anything check-config reads) with its measured
seconds per step, or its log (Megatron-LM, torchtitan or DeepSpeed lines; the
median over the steady iterations, the first one left out):

\b
  pptune calibrate --run pretrain_llama.sh --log train.log -o calibrated.json
  pptune calibrate --run a.sh --step-s 10.2 --run b.sh --step-s 7.9 -o calibrated.json
  pptune recommend --gpus 64 --profile calibrated.json --tp 4

The calibration scales the analytic model's rates (compute, memory,
communication): one run fits one common factor, several runs as many as their
steps tell apart (least squares; the residual of each run is printed). The
profile keeps the model and GPU, so recommend, simulate and check-config
--profile price other configurations of them.

From validate results (this machine's probe profile):

\b
  pptune validate --plan 1 --profile profile.json --json > run1.json
  pptune calibrate run1.json run2.json --profile profile.json -o calibrated.json

Every result must have run the profile's model. The per-layer forward,
input-gradient and weight-gradient factors are fitted per micro-batch size to
the measured op medians, the p2p latency to the measured step times.
"""

ORDER = "pptune.calibrate.order"
PAIRED = ("--run", "--step-s", "--log")


class InOrder(TyperCommand):
    """Keeps the order of --run, --step-s and --log as given (click keeps each option's
    values, not their interleaving)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta[ORDER] = flag_order(args)
        return super().parse_args(ctx, args)


def flag_order(args: list[str]) -> list[str]:
    """The paired flags in the order they appear (``--run X`` and ``--run=X`` alike)."""
    out = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--":
            break
        name = a.split("=", 1)[0]
        if name in PAIRED:
            out.append(name)
            skip = "=" not in a
    return out


def pair(order: list[str], runs: list[Path], steps: list[float],
         logs: list[Path]) -> list[Any]:
    """Each --run with the --step-s or --log after it (module docstring)."""
    from pptune.tune.jobs import Measurement

    it_run, it_step, it_log = iter(runs), iter(steps), iter(logs)
    out: list[Measurement] = []
    pending: Path | None = None
    for flag in order:
        if flag == "--run":
            if pending is not None:
                raise BadInput(f"--run {pending} has no --step-s or --log after it; give one "
                               "after each --run")
            pending = next(it_run)
            continue
        if pending is None:
            raise BadInput(f"{flag} comes before any --run; give each --run CONFIG followed "
                           "by its --step-s SECONDS or --log FILE")
        if flag == "--step-s":
            out.append(Measurement(pending, step_s=next(it_step)))
        else:
            out.append(Measurement(pending, log=next(it_log)))
        pending = None
    if pending is not None:
        raise BadInput(f"--run {pending} has no --step-s or --log after it; give one after "
                       "each --run")
    return out


def calibrate(
    ctx: typer.Context,
    results: list[Path] | None = typer.Argument(None, help="validate --json outputs"),
    run: list[Path] | None = typer.Option(None, "--run", help="a job's config (repeatable; "
                                          "each followed by its --step-s or --log)"),
    step_s: list[float] | None = typer.Option(None, "--step-s", help="the job's measured "
                                              "seconds per step"),
    log: list[Path] | None = typer.Option(None, "--log", help="the job's own training log"),
    warmup: int | None = typer.Option(None, "--warmup", help="--log: leave out iterations up to "
                                      "N [default: the first line printed]"),
    gpu: str | None = typer.Option(None, "--gpu", help="--run: the jobs' GPU preset "
                                   "[default: the config's, else h100-sxm]"),
    model: str | None = typer.Option(None, "--model", help="--run: model preset, overrides "
                                     "the config's"),
    profile: Path | None = typer.Option(None, "--profile", help="RESULTS: the profile the runs "
                                        "are priced with"),
    output: Path = typer.Option(..., "--output", "-o", help="where the calibrated profile goes"),
    as_json: bool = typer.Option(False, "--json", help="--run: the calibration as JSON on "
                                 "stdout"),
) -> None:
    from pptune.files import check_output

    order = ctx.meta.get(ORDER, [])
    if run or step_s or log:
        if results or profile is not None:
            raise BadInput("--run and RESULTS/--profile are two forms of calibrate; give one")
        if warmup is not None and warmup < 0:
            raise BadInput(f"--warmup must be 0 or more (got {warmup})")
        measurements = pair(order, list(run or []), list(step_s or []), list(log or []))
        check_output(output, "-o")
        _from_jobs(measurements, gpu, model, warmup, output, as_json)
        return
    if not results or profile is None:
        raise BadInput("calibrate needs --run CONFIG with --step-s or --log, or validate "
                       "RESULTS with --profile")
    for flag, value in (("--gpu", gpu), ("--model", model), ("--warmup", warmup)):
        if value is not None:
            raise BadInput(f"{flag} is for --run; RESULTS are priced with --profile")
    _from_results(results, profile, output)


def _from_jobs(measurements: list[Any], gpu: str | None, model: str | None,
               warmup: int | None, output: Path, as_json: bool) -> None:
    from pptune.report.calibration import calibration_json, calibration_text
    from pptune.schemas import write_atomic
    from pptune.tune import jobfit, jobs

    loaded = [jobs.load(m, gpu, model, warmup) for m in measurements]
    outcome = jobfit.calibrate(loaded)
    for j in loaded:  # after the checks: a refused run prints its one error line alone
        for note in (*j.read.notes, *j.notes):
            _say(note)
    cal = outcome.profile.calibration
    assert cal is not None
    write_atomic(output, outcome.profile.model_dump_json(indent=2) + "\n")
    if as_json:
        typer.echo(json.dumps(calibration_json(cal), indent=2))
    else:
        _out().print(calibration_text(cal), highlight=False, markup=False)
    _say(f"wrote {output}")


def _from_results(results: list[Path], profile: Path, output: Path) -> None:
    from pptune.schemas import load_profile, write_atomic
    from pptune.tune import model, validate_json

    base = load_profile(profile)
    trials = [validate_json.trial(path, base) for path in results]
    if output.exists() and output.resolve() == profile.resolve():
        raise BadInput(f"-o {output} is the --profile itself; write the calibration elsewhere")
    cal = model.calibrate(base, trials, by="pptune calibrate")
    write_atomic(output, model.calibrated_profile(base, cal).model_dump_json(indent=2) + "\n")
    for note in cal.notes:
        _say(note)
    _say(f"wrote {output}")
