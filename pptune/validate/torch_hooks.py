"""The one place pptune reaches into torch's private pipelining API.

``validate`` times every compute op of a real torch.distributed.pipelining
run. torch has no public hook for that, so this adapter replaces, per stage,
``forward_one_chunk``, ``backward_one_chunk`` and
``backward_weight_one_chunk`` (first argument: the micro-batch index), and,
per schedule, the private ``_maybe_compute_loss(stage, output, target_mbs,
mb_index, ...)``. Those names and parameters are torch 2.13's
(torch/distributed/pipelining/stage.py and schedules.py); torch may change
them in any release. ``check`` says clearly, before any rank starts, when
the installed torch is not the version this was written for, and refuses it
when the methods or their parameters are gone.

torch is passed in, never imported here: ``import pptune.validate`` works
without it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pptune.errors import MissingDependency
from pptune.launch.deps import INSTALL_HINT

WRITTEN_FOR = (2, 13)  # torch major, minor whose private API this adapter uses

# method -> the parameters it must take, in order, after ``self``
STAGE_METHODS = {
    "forward_one_chunk": ("fwd_chunk_id",),
    "backward_one_chunk": ("bwd_chunk_id",),
    "backward_weight_one_chunk": ("bwd_chunk_id",),
}
STAGE_KINDS = {"forward_one_chunk": "F", "backward_one_chunk": "B", "backward_weight_one_chunk": "W"}
LOSS_METHOD = "_maybe_compute_loss"
LOSS_PARAMS = ("stage", "output", "target_mbs", "mb_index")


def major_minor(version: str) -> tuple[int, int] | None:
    """(2, 13) from "2.13.0+cpu"; None when the text is not a version."""
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def version_note(version: str) -> str | None:
    """A warning line when torch ``version`` is not the one the hooks were written for."""
    if major_minor(version) == WRITTEN_FOR:
        return None
    want = ".".join(map(str, WRITTEN_FOR))
    return (
        f"torch {version}: validate's timing hooks use private torch.distributed.pipelining "
        f"methods written for torch {want}; the timings may be wrong or a rank may fail. "
        f"For trusted figures: {INSTALL_HINT}"
    )


def missing_api(torch: Any) -> list[str]:
    """The hooked methods (or parameters) this torch lacks; empty when all are there."""
    from torch.distributed.pipelining import schedules, stage

    wanted: list[tuple[Any, str, tuple[str, ...]]] = [
        (stage._PipelineStageBase, name, params) for name, params in STAGE_METHODS.items()
    ]
    wanted.append((schedules._PipelineSchedule, LOSS_METHOD, LOSS_PARAMS))
    missing = []
    for cls, name, params in wanted:
        fn = getattr(cls, name, None)
        where = f"{cls.__name__}.{name}"
        if fn is None:
            missing.append(where)
            continue
        got = tuple(inspect.signature(fn).parameters)[1 : 1 + len(params)]
        if got != params:
            missing.append(f"{where}({', '.join(params)}, ...) (this torch has {', '.join(got)})")
    return missing


def check(torch: Any) -> str | None:
    """Refuse a torch without the hooked methods; a warning line for another version."""
    missing = missing_api(torch)
    if missing:
        want = ".".join(map(str, WRITTEN_FOR))
        raise MissingDependency(
            f"pptune validate: torch {torch.__version__} lacks {'; '.join(missing)}, which "
            f"validate's timing hooks (written for torch {want}) use: {INSTALL_HINT}"
        )
    return version_note(str(torch.__version__))


Wrap = Callable[[Callable[..., Any], str, int], Callable[..., Any]]  # (method, kind, stage)


def hook_stage(stage: Any, stage_index: int, wrap: Wrap) -> None:
    """Replace the stage's three compute methods by ``wrap(method, kind, stage_index)``;
    kind is F (forward), B (input gradient) or W (weight gradient)."""
    for name, kind in STAGE_KINDS.items():
        setattr(stage, name, wrap(getattr(stage, name), kind, stage_index))


LossHook = Callable[[Callable[[], Any], Any, Any, Any, int], Any]


def hook_loss(schedule: Any, around: LossHook) -> None:
    """Route the schedule's loss through ``around(call, stage, output, target_mbs,
    mb_index)``; ``call()`` runs torch's own ``_maybe_compute_loss``."""
    inner = getattr(schedule, LOSS_METHOD)

    def hooked(stage: Any, output: Any, target_mbs: Any, mb_index: int, *a: Any, **kw: Any) -> Any:
        def call() -> Any:
            return inner(stage, output, target_mbs, mb_index, *a, **kw)

        return around(call, stage, output, target_mbs, mb_index)

    setattr(schedule, LOSS_METHOD, hooked)
