"""A ``pptune validate --json`` result read back as a trial (for ``pptune calibrate``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput
from pptune.schemas import Profile
from pptune.tune.candidates import plan_key
from pptune.tune.model import Trial


def trial(path: Path, profile: Profile) -> Trial:
    """BadInput naming the file when it is not a validate result for ``profile``'s model."""
    try:
        doc: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"validate result not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"cannot read validate result {path}: {exc}") from None
    return trial_from(doc, f"{path.name}: ", profile, label=str(path))


def trial_from(doc: Any, key: str, profile: Profile, label: str = "the result") -> Trial:
    """A validate result already parsed; ``key`` names the trial (a prefix when it ends
    with ': ', followed by the plan's key). BadInput naming ``label`` when it is not one."""
    path = label
    try:
        schedule = Schedule(doc["schedule"])
        split = tuple(int(x) for x in doc["stage_layers"])
        m, b = int(doc["num_microbatches"]), int(doc["micro_batch_size"])
        times = tuple(float(x) for x in doc["measured"]["step_times_s"])
        ops = {(str(o["kind"]), int(o["stage"])): float(o["measured_s"]) for o in doc["ops"]}
        loss = doc.get("loss_s")
        name = key + plan_key(schedule, int(doc["pp"]), 1, int(doc["virtual_stages"]), b, m,
                              split) if key.endswith(": ") else key
        t = Trial(
            key=name,
            schedule=schedule, pp=int(doc["pp"]), microbatches=m,
            virtual_stages=int(doc["virtual_stages"]), micro_batch_size=b, stage_layers=split,
            step_times_s=times, op_medians_s=ops,
            loss_s=(float(loss[0]), float(loss[1])) if loss else None,
            contention=float(doc["contention"]) if doc.get("contention") is not None else None,
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise BadInput(f"{path} is not a pptune validate --json result: {exc!r}") from None
    if sum(split) != len(profile.layers):
        raise BadInput(f"{path} ran {sum(split)} layers but the profile has "
                       f"{len(profile.layers)}: give the profile of that model")
    if not times:
        raise BadInput(f"{path} has no timed steps")
    if str(b) not in profile.layers[0].per_micro_batch:
        raise BadInput(f"{path} ran micro-batch size {b}; the profile has no costs for it")
    return t
