"""A ``pptune validate --json`` result read back as a trial (for ``pptune calibrate``).

A result calibrates a profile only when it ran that profile's model: its
``model_info`` (the model validate built: name, sequence length, hidden size,
blocks, experts; the fields of a profile's ``model`` section) must match the
profile's sizes, not only its layer count (a 6-block model of hidden 128 is
not gpt-small). A result written before validate recorded ``model_info`` is
compared by its ``model`` label where that names a preset. The same result
given twice is one trial (``distinct``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pptune.costmodel.presets import MODELS
from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput
from pptune.files import distinct_inputs, loads_json, read_limited
from pptune.schemas import Profile
from pptune.tune.candidates import plan_key
from pptune.tune.model import Trial

MAX_RESULT_BYTES = 64 << 20  # a validate result is a few KiB; its op table grows with pp x m
# the keys a validate result holds that a trial is read from (a missing one is named)
REQUIRED = ("schedule", "pp", "num_microbatches", "virtual_stages", "micro_batch_size",
            "stage_layers", "measured", "ops")
# model_info fields compared with a profile's model section (ModelInfo)
SIZES = ("seq_len", "hidden_size", "num_blocks", "experts", "top_k")
# what a file that is no result is pointed to (a training log is calibrate --run's)
RUN_FORM = ("a job's launch script and training log go as --run SCRIPT --log LOG, not as "
            "RESULTS")


def distinct(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """``paths`` without repeats (one file under two names, or two copies of one result:
    the same trial), and a note for each one left out."""
    return distinct_inputs(paths, "validate result", MAX_RESULT_BYTES, "one result is one trial")


def trial(path: Path, profile: Profile) -> Trial:
    """BadInput naming the file when it is not a validate result for ``profile``'s model."""
    data = read_limited(Path(path), "validate result", MAX_RESULT_BYTES)
    try:
        doc: Any = loads_json(data.decode("utf-8-sig"), f"validate result {path}",
                              "a validate result")
    except UnicodeDecodeError:
        raise BadInput(f"cannot read validate result {path}: binary data, not JSON; "
                       f"{RUN_FORM}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"cannot read validate result {path}: not JSON ({exc}); "
                       f"{RUN_FORM}") from None
    return trial_from(doc, f"{path.name}: ", profile, label=str(path))


def _what_is_missing(doc: Any, path: str) -> str | None:
    """One line naming what a non-result lacks (None: it has every key)."""
    if not isinstance(doc, dict):
        return (f"{path} is not a pptune validate --json result: it holds a JSON "
                f"{type(doc).__name__}, not an object")
    missing = [k for k in REQUIRED if k not in doc]
    if not missing:
        return None
    seems = (" (it looks like a profile: give it as --profile)"
             if {"layers", "links", "device"} <= set(doc) else "")
    shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4
                                      else "")
    return (f"{path} is not a pptune validate --json result: it lacks {shown} of the keys "
            f"validate writes{seems}; give the output of pptune validate ... --json")


def trial_from(doc: Any, key: str, profile: Profile, label: str = "the result") -> Trial:
    """A validate result already parsed; ``key`` names the trial (a prefix when it ends
    with ': ', followed by the plan's key). BadInput naming ``label`` when it is not one."""
    path = label
    why = _what_is_missing(doc, path)
    if why:
        raise BadInput(why)
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
    except KeyError as exc:
        raise BadInput(f"{path} is not a pptune validate --json result: a measured step or op "
                       f"lacks its {exc.args[0]!r}") from None
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        raise BadInput(f"{path} is not a pptune validate --json result: a value is not what "
                       f"validate writes ({exc})") from None
    if sum(split) != len(profile.layers):
        raise BadInput(f"{path} ran {sum(split)} layers but the profile has "
                       f"{len(profile.layers)}: give the profile of that model")
    other = _other_model(doc, profile)
    if other:
        raise BadInput(f"{path} ran {other}, not the profile's model: a calibration folds "
                       "results of the profile's own model; give the profile it was priced "
                       "with (its cost_source), or validate this model against it")
    if not times:
        raise BadInput(f"{path} has no timed steps")
    if str(b) not in profile.layers[0].per_micro_batch:
        raise BadInput(f"{path} ran micro-batch size {b}; the profile has no costs for it")
    return t


def _other_model(doc: dict[str, Any], profile: Profile) -> str:
    """What the result ran, where it is not the profile's model (empty: it is, or the
    result does not say)."""
    ours = profile.model
    info = doc.get("model_info")
    if isinstance(info, dict):
        differ = [f"{k} {info.get(k)} (the profile: {getattr(ours, k)})" for k in SIZES
                  if info.get(k) is not None and getattr(ours, k) is not None
                  and info.get(k) != getattr(ours, k)]
        return f"{info.get('name', 'a model')} of {', '.join(differ)}" if differ else ""
    label = doc.get("model")  # older results: the model's label alone
    if isinstance(label, str) and label in MODELS and ours.name in MODELS and label != ours.name:
        return f"{label} (the profile: {ours.name})"
    if isinstance(label, str) and label not in MODELS and ours.name in MODELS and \
            ours.hf_config is None and label.startswith(("--hf-config", "--module")):
        return f"{label[:80]} (the profile: the preset {ours.name})"
    return ""
