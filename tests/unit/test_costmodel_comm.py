from __future__ import annotations

import pytest

from pptune.costmodel.comm import AllReduceLink, allreduce_s, compression_factor


def test_ring_allreduce_uses_bus_bandwidth_definition() -> None:
    # nccl-tests: busbw = algbw * 2(n-1)/n, so time = 2(n-1)/n * bytes / busbw
    link = AllReduceLink(latency_s=1e-5, busbw_bytes_per_s=100e9)
    assert allreduce_s(1e9, 8, link) == pytest.approx(1e-5 + 2 * 7 / 8 * 1e9 / 100e9)
    assert allreduce_s(1e9, 1, link) == 0.0


@pytest.mark.parametrize(
    "spec,factor",
    [(None, 1.0), ("none", 1.0), ("fp16", 0.5), ("bf16", 0.5), ("topk:0.01", 0.01 * 8 / 4)],
)
def test_compression_factor(spec: str | None, factor: float) -> None:
    assert compression_factor(spec) == pytest.approx(factor)


@pytest.mark.parametrize("spec", ["topk:0", "topk:x", "zip", "topk:2"])
def test_bad_compression_names_the_value(spec: str) -> None:
    with pytest.raises(ValueError, match="grad-compression"):
        compression_factor(spec)
