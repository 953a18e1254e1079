"""Saved-for-backward bytes alive at once (validate's measured activation peak), on CPU."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch


def test_live_saved_bytes_rise_with_forwards_and_fall_with_backwards() -> None:
    import torch

    from pptune.validate.saved import SavedTensorPeak, parameter_ptrs

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    tracker = SavedTensorPeak(torch, parameter_ptrs([model]))
    x = torch.randn(32, 64)
    with tracker:
        y1 = model(x)
        y2 = model(x)
        # x (saved by both forwards, counted once: 32*64 fp32) and, per forward, the
        # first Linear's output (GELU input) and the GELU output (second Linear's input)
        assert tracker.live_bytes == 32 * 64 * 4 + 2 * (2 * 32 * 128 * 4)
        y1.sum().backward()
        assert tracker.live_bytes == 32 * 64 * 4 + 2 * 32 * 128 * 4
        y2.sum().backward()
    assert tracker.live_bytes == 0
    assert tracker.peak_bytes == 32 * 64 * 4 + 2 * (2 * 32 * 128 * 4)
    tracker.reset()
    assert tracker.peak_bytes == 0
