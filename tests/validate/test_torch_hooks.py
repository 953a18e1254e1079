"""The adapter to torch's private pipelining API: version check, refusal, hooks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pptune.errors import MissingDependency
from pptune.validate import torch_hooks


def test_version_note_only_for_another_minor_version() -> None:
    assert torch_hooks.major_minor("2.13.0+cpu") == (2, 13)
    assert torch_hooks.major_minor("nightly") is None
    assert torch_hooks.version_note("2.13.0+cpu") is None
    assert torch_hooks.version_note("2.13.1") is None
    note = torch_hooks.version_note("2.14.0")
    assert note is not None
    assert note.startswith("torch 2.14.0: validate's timing hooks use private")
    assert "written for torch 2.13" in note and "torch==2.13.0" in note
    assert torch_hooks.version_note("nightly") is not None


def test_stage_hooks_wrap_the_three_compute_methods() -> None:
    calls: list[tuple[str, int, int]] = []
    stage = SimpleNamespace(
        forward_one_chunk=lambda mb, *a: ("F", mb),
        backward_one_chunk=lambda mb, *a: ("B", mb),
        backward_weight_one_chunk=lambda mb, *a: ("W", mb),
    )

    def wrap(fn: Any, kind: str, index: int) -> Any:
        def timed(mb: int, *a: Any) -> Any:
            calls.append((kind, index, mb))
            return fn(mb, *a)

        return timed

    torch_hooks.hook_stage(stage, 3, wrap)
    assert stage.forward_one_chunk(0) == ("F", 0)
    assert stage.backward_one_chunk(1) == ("B", 1)
    assert stage.backward_weight_one_chunk(2) == ("W", 2)
    assert calls == [("F", 3, 0), ("B", 3, 1), ("W", 3, 2)]


def test_loss_hook_sees_every_argument_and_calls_torch_once() -> None:
    inner_calls: list[tuple[Any, ...]] = []
    schedule = SimpleNamespace(_maybe_compute_loss=lambda *a: inner_calls.append(a) or "loss")
    seen: list[tuple[Any, ...]] = []

    def around(call: Any, stage: Any, output: Any, target_mbs: Any, mb_index: int) -> Any:
        seen.append((stage, output, target_mbs, mb_index))
        return call()

    torch_hooks.hook_loss(schedule, around)
    assert schedule._maybe_compute_loss("s", "out", ["t0", "t1"], 1, {"k": 1}) == "loss"
    assert seen == [("s", "out", ["t0", "t1"], 1)]
    assert inner_calls == [("s", "out", ["t0", "t1"], 1, {"k": 1})]


@pytest.mark.torch
def test_installed_torch_has_every_hooked_method() -> None:
    torch = pytest.importorskip("torch")
    assert torch_hooks.missing_api(torch) == []
    note = torch_hooks.check(torch)
    assert (note is None) == (torch_hooks.major_minor(torch.__version__) == (2, 13))


@pytest.mark.torch
def test_a_torch_without_the_methods_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules, stage

    monkeypatch.delattr(stage._PipelineStageBase, "backward_weight_one_chunk")
    monkeypatch.setattr(
        schedules._PipelineSchedule, "_maybe_compute_loss",
        lambda self, stage, output, targets, mb_index: None,
    )
    with pytest.raises(MissingDependency) as err:
        torch_hooks.check(torch)
    text = str(err.value)
    assert text.startswith(f"pptune validate: torch {torch.__version__} lacks ")
    assert "_PipelineStageBase.backward_weight_one_chunk" in text
    assert "_maybe_compute_loss(stage, output, target_mbs, mb_index, ...) (this torch has " \
        "stage, output, targets, mb_index)" in text
    assert "written for torch 2.13" in text and "\n" not in text
