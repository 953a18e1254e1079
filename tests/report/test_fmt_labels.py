"""Run labels in calibrate's output: two sizes of one script are told apart."""

from __future__ import annotations

from pptune.report.fmt import run_labels


def test_a_shared_name_takes_its_gpu_count_then_its_position() -> None:
    assert run_labels(["a.sh", "b.sh"], [8, 16]) == ["a.sh", "b.sh"]
    assert run_labels(["a.sh", "a.sh"], [8, 16]) == ["a.sh (8 GPUs)", "a.sh (16 GPUs)"]
    assert run_labels(["a.sh", "a.sh"], [8, 8]) == ["a.sh (8 GPUs) #1", "a.sh (8 GPUs) #2"]
    assert run_labels(["a.sh", "a.sh"], [None, None]) == ["a.sh #1", "a.sh #2"]
