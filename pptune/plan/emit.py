"""From plan to launch: write a recommended plan in the user's framework.

Each framework's adapter (pptune.frameworks.registry) states the plan or,
when its files cannot, the closest plan they can, says so in one line and
reports that plan's own predicted numbers — never a silently different
plan (each adapter's ``closest.py`` says what its files state). Every file
runs on exactly the plan's GPUs (``launch_shape``); where a file states the
node shape it launches, the plan is re-predicted on that shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pptune.costmodel import presets
from pptune.costmodel.partition import strip_ends
from pptune.costmodel.search import Plan
from pptune.errors import BadInput
from pptune.files import write_all
from pptune.frameworks.common.adapter import Adapter, Job
from pptune.frameworks.common.express import placed
from pptune.frameworks.common.writing import launch_shape
from pptune.frameworks.registry import ADAPTERS, NAMES, Framework, find
from pptune.plan.recommend import RecommendRun
from pptune.report.fmt import fmt_pct, fmt_seconds


@dataclass
class Emitted:
    framework: Framework
    plan: Plan  # the plan written (the chosen one, or the closest expressible)
    files: dict[str, str]  # file name -> content
    notes: list[str] = field(default_factory=list)
    exact: bool = True

    def summary(self) -> str:
        p = self.plan
        return (
            f"{self.framework.value}: pp={p.pp} dp={p.dp} tp={p.tp} {p.schedule.value}"
            + (f" v={p.virtual_stages}" if p.virtual_stages > 1 else "")
            + f", {p.num_microbatches} x {p.micro_batch_size}, layers/stage "
            f"{','.join(map(str, strip_ends(p.stage_layers)))} (+ embedding first, head last)"
            f"; predicted step {fmt_seconds(p.step_time_s)}, bubble {fmt_pct(p.bubble_rate)}"
        )


def parse_framework(framework: Framework | str) -> Framework:
    adapter = find(framework)
    if adapter is None:
        raise BadInput(f"unknown --emit {framework!r}; choose {', '.join(NAMES)}")
    return Framework(adapter.name)


def job_of(run: RecommendRun) -> Job:
    """The job as the adapters see it: the one place a run's ``request`` is read."""
    costs = run.request.costs
    return Job(
        table=run.table, request=run.plan_request, layer_names=tuple(run.names),
        global_batch=run.global_batch, origin=run.origin,
        shape=run.shape or presets.MODELS.get(str(costs.model)),
        model=costs.model, device=costs.gpu,
        attention=costs.attention.value if costs.attention else None,
        sequence_parallel=costs.sequence_parallel,
        tp_comm_overlap=costs.tp_comm_overlap,
    )


def emit(framework: Framework | str, run: RecommendRun, rank: int = 1) -> Emitted:
    """Render plan ``rank`` (1-based) of a recommendation for ``framework``."""
    fw = parse_framework(framework)
    adapter: Adapter = ADAPTERS[fw]
    plans = run.result.plans
    if not 1 <= rank <= len(plans):
        raise BadInput(f"--plan {rank} is not among the {len(plans)} ranked plans")
    stated = adapter.express(job_of(run), plans[rank - 1], rank)
    files = adapter.write(stated)
    chosen, notes = stated.plan, list(stated.notes)
    if adapter.states_node_shape:
        where = placed(stated.job, chosen)
        if where is not chosen:
            nodes, per_node = launch_shape(chosen.pp * chosen.dp * chosen.tp,
                                           stated.job.request.gpus_per_node)
            notes.append(
                f"launched as {nodes} nodes x {per_node} GPUs (torchrun runs the same number "
                f"of ranks on every node); predicted for that placement: step "
                f"{fmt_seconds(where.step_time_s)} (plan: {fmt_seconds(chosen.step_time_s)})")
            chosen = where
    return Emitted(fw, chosen, files, notes, stated.exact)


def file_names(framework: str) -> list[str]:
    """The files ``--emit FRAMEWORK -o DIR`` writes (checked before the search)."""
    return list(ADAPTERS[parse_framework(framework)].files)


def write(emitted: Emitted, directory: Path, force: bool = False) -> list[Path]:
    """All files or none; existing ones only with ``force`` (``pptune.files.write_all``)."""
    modes = {name: 0o777 if name.endswith(".sh") else 0o666 for name in emitted.files}
    return write_all(directory, emitted.files, force, modes)
