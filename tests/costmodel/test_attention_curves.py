"""Blackwell's measured attention curves (attention_curves.py), derived by hand from the
published forward and backward TFLOP/s they are built from."""

from __future__ import annotations

import pytest

from pptune.costmodel.presets import GPUS


def _at(curve: tuple[tuple[int, float], ...], length: int) -> float:
    return dict(curve)[length]


def test_b200_cudnn_causal_share_at_8k() -> None:
    # forward 1171.278, backward 942.509 TFLOP/s; the backward does 2.5x the forward's
    # FLOPs: 3.5 / (1 / 1171.278 + 2.5 / 942.509) = 998.21 TFLOP/s of 2,250
    assert _at(GPUS["b200"].cudnn_causal_attention, 8192) == pytest.approx(0.44365, abs=1e-5)


def test_b200_unmasked_takes_h100s_mask_ratio() -> None:
    # H100 cuDNN at 8k: unmasked 600 / 518 -> 539.04, causal 529 / (518 x 529 / 600) ->
    # 475.27 TFLOP/s, a ratio of 1.13420 applied to B200's causal 0.44365
    assert _at(GPUS["b200"].cudnn_full_attention, 8192) == pytest.approx(0.50319, abs=1e-4)
    # past H100's longest length (16k) its ratio at 16k holds: 1.0
    h100 = GPUS["h100-sxm"]
    ratio_16k = _at(h100.cudnn_full_attention, 16384) / _at(h100.cudnn_causal_attention, 16384)
    b200 = GPUS["b200"]
    assert _at(b200.cudnn_full_attention, 131072) == pytest.approx(
        _at(b200.cudnn_causal_attention, 131072) * ratio_16k)


def test_gb200_flash_at_2k_and_the_flat_share() -> None:
    # torch's FlashAttention-2 on GB200 at 2,048 tokens: 336 forward, 268 backward TFLOP/s
    # -> 3.5 / (1 / 336 + 2.5 / 268) = 284.45 of 2,500
    gb200 = GPUS["gb200"]
    assert _at(gb200.causal_attention, 2048) == pytest.approx(0.11378, abs=1e-5)
    # the flat share (MLA's causal kernels) is the longest length's: 444 / 363 at 131,072
    assert gb200.attention_fraction == pytest.approx(3.5 / (1 / 444 + 2.5 / 363) / 2500)


def test_b300_borrows_b200s_curves_and_gb300_has_its_own() -> None:
    assert GPUS["b300"].cudnn_causal_attention == GPUS["b200"].cudnn_causal_attention
    assert GPUS["b300"].attention_rates_of == "b200"
    assert GPUS["gb300"].attention_rates_of is None
    assert GPUS["gb300"].cudnn_causal_attention != GPUS["gb200"].cudnn_causal_attention
