"""The notes calibrate stores with its factors: what was fitted, and why no more.

- one run: one equation, one common factor;
- several runs whose steps split alike (the fit's smallest singular value under
  ``fit.MIN_SINGULAR``): one common factor, with each run's sensitivity to
  communication and what the runs already differ in, so the advice names only
  what they do not (another tp where they differ in dp and GPU count alone);
- a fit of several factors the runs determined but outside the physical range
  (``fit.FitResult.set_aside``): its factors and why each is out of range, and
  what is fitted instead;
- the runs' precisions where they differ, a reserve below zero, factors near
  the floor (``jobdoubts.near_floor``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pptune.costmodel import presets
from pptune.costmodel.calibration import RateGroup, problems, said
from pptune.costmodel.fit import MIN_SINGULAR, FitResult
from pptune.tune.jobdoubts import listed, near_floor
from pptune.tune.jobs import Job

GIB = 1024**3
# what tells runs' steps apart, as the notes name it: (name, its value in a job)
SIZES: tuple[tuple[str, Callable[[Job], int]], ...] = (
    ("tp", lambda j: j.read.config.tp),
    ("pp", lambda j: j.read.config.pp),
    ("dp", lambda j: j.size.gpus // max(1, j.read.config.tp * j.read.config.pp
                                          * j.read.config.cp)),
    ("cp", lambda j: j.read.config.cp),
    ("ep", lambda j: j.read.config.ep),
    ("GPUs", lambda j: j.size.gpus),
)
# what separates compute from communication, as the advice names it (SIZES' names)
SEPARATE = (("tp", "tp"), ("dp", "dp"), ("GPUs", "GPU count"))


def notes(res: FitResult, jobs: Sequence[Job], reserves: Sequence[float]) -> list[str]:
    """The calibration's notes (module docstring); ``reserves``: each log's peak beyond
    pptune's tensors."""
    out = []
    if res.set_aside:
        out.append(_set_aside(res, jobs))
    elif len(res.fitted) == 1:
        if len(jobs) == 1:
            out.append("one run gives one equation: one factor common to compute, memory and "
                       "communication; how the step splits between them is the model's (give "
                       "runs that communicate more or less, e.g. another tp or dp, to fit them "
                       "apart)")
        else:
            out.append(_alike(res, jobs))
    else:
        tied = [" and ".join(g.value for g in tie) for tie in res.fitted if len(tie) > 1]
        out.append(f"{len(res.fitted)} factors fitted from {len(jobs)} runs"
                   + (f"; {tied[0]} share one (the runs do not tell them apart)" if tied else ""))
    precisions = sorted({j.precision for j in jobs})
    if len(precisions) > 1:
        out.append(f"the runs ran {' and '.join(precisions)}: the profile records the first "
                   f"run's, {jobs[0].precision}, which recommend prices unless --precision is given")
    neg = [r for r in reserves if r < 0]
    if neg:
        out.append(f"the logs' peak memory is {-min(neg) / GIB:.2f} GiB below pptune's "
                   "tensors: the reserve is taken as 0 and memory stays over-predicted")
    return out + near_floor(res)


def _alike(res: FitResult, jobs: Sequence[Job]) -> str:
    """Several runs, one common factor: their steps split alike."""
    comm = ", ".join(f"{e.get(RateGroup.COMMUNICATION, 0.0):.2g}" for e in res.elasticity)
    varied = {name: values for name, value in SIZES
              if len(set(values := [value(j) for j in jobs])) > 1}
    differ = [f"{name} ({', '.join(map(str, values))})" for name, values in varied.items()]
    untried = [said_as for name, said_as in SEPARATE if name not in varied]
    if not differ:
        advice = ("runs with another tp, dp or GPU count separate compute from communication "
                  "where they change its share of the step")
    elif untried:
        advice = (f"they differ in {listed(differ)}, which leaves their shares of "
                  f"communication alike; a run with another {listed(untried)} separates "
                  "compute from communication where it changes that share")
    else:
        advice = (f"they differ in {listed(differ)}, which leaves their shares of "
                  "communication alike; a run whose step holds another share of it (another "
                  "tp or ep, a group spanning more nodes) separates compute from it")
    return (f"the {len(jobs)} runs split their steps alike: their sensitivities to "
            "compute-and-memory and to communication have a smallest singular value of "
            f"{res.smallest_singular or 0:.3g}, under the {MIN_SINGULAR:g} that fitting them "
            f"apart needs (their sensitivity to communication: {comm}), so one common factor "
            f"is fitted; {advice}")


def _set_aside(res: FitResult, jobs: Sequence[Job]) -> str:
    """Several factors fitted apart, outside the physical range: set aside for fewer."""
    gpu = presets.GPUS[jobs[0].gpu]
    tried = []
    for a in res.set_aside:
        values = ", ".join(f"{' and '.join(g.value for g in tie)} "
                           f"x{said(a.factors.of(tie[0]), tie[0] in a.clamped)}"
                           for tie in a.fitted)
        tried.append(f"{values}, where {'; '.join(problems(gpu, a.factors, clamped=a.clamped))}")
    if len(res.fitted) == 1:
        kept = f"one common factor is fitted instead, x{res.factors.compute:.3g}"
    else:
        kept = f"{len(res.fitted)} factors are fitted instead"
    return (f"fitted apart, the {len(jobs)} runs give {'; or '.join(tried)}: no factors in "
            f"the physical range give each run's step, so {kept}; the held-out errors say "
            "how far it carries to each run")
