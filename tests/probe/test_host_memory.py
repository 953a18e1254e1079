"""A CPU probe that would not fit in the host's free memory is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.costmodel import presets
from pptune.errors import BadInput
from pptune.probe import host_memory


def test_mem_available_is_read_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemAvailable:   20971520 kB\n")
    assert host_memory.available_bytes(meminfo) == 20 * 2**30
    meminfo.write_text("MemTotal:       25165824 kB\n")  # no MemAvailable line
    assert host_memory.available_bytes(meminfo) is None
    assert host_memory.available_bytes(tmp_path / "absent") is None


def test_llama3_8b_at_eight_sequences_needs_its_head() -> None:
    need, which = host_memory.probe_need(presets.MODELS["llama3-8b"], [8], 4)
    # head: 2 x 128,256 x 4,096 x 4 (weights, gradients) + 2 x 65,536 x 128,256 x 4
    # (logits, their gradient); inputs: 8 x 8,192 x 4,096 x 4
    assert need == 2 * 128256 * 4096 * 4 + 2 * 65536 * 128256 * 4 + 8 * 8192 * 4096 * 4
    assert "head" in which and "65,536 tokens" in which


def test_refused_only_when_it_does_not_fit() -> None:
    who = "a CPU probe of m"
    with pytest.raises(BadInput, match=r"^a CPU probe of m needs at least 3.0 GiB for its "
                                        r"head, more than the 2.0 GiB this machine has free"):
        host_memory.require(3 * 2**30, who, "its head", "lower it", 2 * 2**30)
    host_memory.require(3 * 2**30, who, "its head", "lower it", 4 * 2**30)
    host_memory.require(3 * 2**30, who, "its head", "lower it", None)  # unknown: no refusal


@pytest.mark.torch
def test_the_probe_refuses_before_building_a_layer(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    need, _ = host_memory.probe_need(presets.MODELS["llama3-8b"], [8], 4)
    free = host_memory.available_bytes()
    if free is None or free >= need:
        pytest.skip(f"this machine has {free} bytes free (MemAvailable): the probe would fit")
    out = tmp_path / "p.json"
    r = cli("probe", "--model", "llama3-8b", "--micro-batch-sizes", "8", "--quick", "--no-comm",
            "-o", out)
    # the probe's own notes come first (NVML, the model's size); then one error line
    last = r.stderr.strip().splitlines()[-1]
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert last.startswith("pptune: error: a CPU probe of llama3-8b at micro-batch size 8 "
                           "needs at least 67.5 GiB for its head")
    assert not out.exists()
