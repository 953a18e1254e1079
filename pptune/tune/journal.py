"""``tune.jsonl``: one JSON line per trial, appended and flushed as each finishes.

A line is written with one ``write`` of the whole line and ``fsync``ed, so a
tune killed mid-trial leaves every finished trial on disk and at worst no
line for the trial it was running. ``load`` reads the lines back for
``--resume``; a torn last line (the process died while writing it) is
ignored with a note, any other bad line is an error naming the line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput
from pptune.files import dumps_json, loads_json
from pptune.report.fmt import json_safe
from pptune.tune.model import Trial

FILE = "tune.jsonl"


def append(path: Path, record: dict[str, Any]) -> None:
    line = dumps_json(json_safe(record)) + "\n"
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise BadInput(f"cannot append to {path}: {exc.strerror or exc}") from None


def load(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record of ``path`` (none when it does not exist) and notes."""
    if not path.exists():
        return [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {path}: {exc}") from None
    records, notes = [], []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = loads_json(line, f"{path} line {i}", "a tune record")
            if not isinstance(rec, dict) or "key" not in rec or "status" not in rec:
                raise ValueError("not a trial record (needs key and status)")
        except ValueError as exc:
            if i == len(lines):
                notes.append(f"{path} line {i} is incomplete (interrupted while writing): ignored")
                continue
            raise BadInput(f"{path} line {i} is not a tune record: {exc}") from None
        records.append(rec)
    return records, notes


def trial_record(trial: Trial) -> dict[str, Any]:
    """The measured part of a journal line."""
    return {
        "key": trial.key,
        "schedule": trial.schedule.value,
        "pp": trial.pp,
        "virtual_stages": trial.virtual_stages,
        "micro_batch_size": trial.micro_batch_size,
        "num_microbatches": trial.microbatches,
        "stage_layers": list(trial.stage_layers),
        "measured_step_s": trial.measured_s,
        "step_times_s": list(trial.step_times_s),
        "noise": trial.noise,
        "ops": [
            {"kind": k, "stage": s, "measured_s": t}
            for (k, s), t in sorted(trial.op_medians_s.items())
        ],
        "loss_s": list(trial.loss_s) if trial.loss_s is not None else None,
        "contention": trial.contention,
    }


def trial_of(rec: dict[str, Any]) -> Trial:
    """A measured journal line back as a Trial; BadInput when fields are missing."""
    try:
        loss = rec.get("loss_s")
        return Trial(
            key=str(rec["key"]),
            schedule=Schedule(rec["schedule"]),
            pp=int(rec["pp"]),
            microbatches=int(rec["num_microbatches"]),
            virtual_stages=int(rec["virtual_stages"]),
            micro_batch_size=int(rec["micro_batch_size"]),
            stage_layers=tuple(int(x) for x in rec["stage_layers"]),
            step_times_s=tuple(float(x) for x in rec["step_times_s"]),
            op_medians_s={(str(o["kind"]), int(o["stage"])): float(o["measured_s"])
                          for o in rec["ops"]},
            loss_s=(float(loss[0]), float(loss[1])) if loss else None,
            contention=float(rec["contention"]) if rec.get("contention") is not None else None,
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise BadInput(f"tune record {rec.get('key', '?')!r} lacks a measured field: {exc}") from None
