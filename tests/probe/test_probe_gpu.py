"""The probe's GPU paths on real cards: NVML inventory, CUDA-event timing, NCCL sweeps.

Marked ``gpu``: skipped, with the reason (tests/conftest.py), where torch sees
no CUDA device.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from typer.testing import Result  # noqa: E402

from pptune.probe.comm import CommPlan, comm_entry, message_sizes, spawn_ranks  # noqa: E402
from pptune.probe.inventory import nvml_inventory  # noqa: E402
from pptune.probe.layers import Timer, measure_model  # noqa: E402
from pptune.probe.models import plan_preset  # noqa: E402
from pptune.schemas import Profile  # noqa: E402

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.gpu


def test_nvml_inventory_names_every_gpu_and_each_pair_link() -> None:
    inv = nvml_inventory()
    assert inv.kind == "gpu"
    assert inv.count >= GPUS  # NVML ignores CUDA_VISIBLE_DEVICES
    assert inv.memory_bytes > 1e9
    assert inv.driver
    assert all(g["name"] for g in inv.gpus)
    assert len(inv.links) == inv.count * (inv.count - 1) // 2
    assert {link.kind for link in inv.links} <= {"NVLink", "PCIe"}


def test_cuda_event_timer_measures_what_the_stream_waited() -> None:
    # the stream is idle: the start event fires at once, the end event when
    # it is recorded after the host slept, so the events see the sleep
    timer = Timer(torch, "cuda")
    samples = [timer(time.sleep, 0.010)[1] for _ in range(5)]
    assert sorted(samples)[2] == pytest.approx(0.010, rel=0.05)


def test_gpt_small_layers_on_cuda_in_bf16() -> None:
    plan = plan_preset("gpt-small", "cuda", torch.bfloat16)
    results = measure_model(torch, plan, [1, 4], 5, 2, "cuda")
    assert plan.param_dtype_bytes == 2
    embed, block = results[0], results[1]
    assert embed.per_micro_batch[1].bwd_s == [0.0] * 5
    c = block.per_micro_batch[4].summary()
    assert c["fwd_s"] > 0 and c["bwd_s"] > 0 and c["wgrad_s"] >= 0
    assert c["out_bytes"] == 4 * 128 * 256 * 2
    assert block.per_micro_batch[4].act_bytes > block.per_micro_batch[1].act_bytes


@pytest.mark.skipif(GPUS < 2, reason="NCCL sweep needs 2 GPUs; this machine has fewer")
def test_nccl_sweep_between_two_gpus() -> None:
    plan = CommPlan(
        backend="nccl", device="cuda", sizes=message_sizes(64 * 1024**2), repeats=5, warmup=2,
        timeout_s=120.0,
    )
    result = spawn_ranks(comm_entry, (plan,), GPUS, 120.0)
    sweeps = {(s["scope"], s["op"]): s for s in result["sweeps"]}
    big = sweeps[("intra_node", "p2p")]["rows"][-1]
    assert big["busbw_bytes_per_s"] > 1e9  # anything slower than 1 GB/s is no GPU link


def test_cli_probe_on_the_gpu(tmp_path: Path, cli: Callable[..., Result]) -> None:
    out = tmp_path / "p.json"
    r = cli(
        "probe", "--device", "cuda", "--micro-batch-sizes", "1,2", "--repeats", "3",
        "--warmup", "1", "--max-bytes", "16M", "-o", out,
    )
    assert r.exit_code == 0, r.stderr
    p = Profile.model_validate(json.loads(out.read_text()))
    assert p.param_dtype_bytes == 2
    assert p.device.count >= 1 and p.device.memory_bytes > 1e9
    if GPUS < 2:
        assert any("one GPU: no link to measure" in n for n in p.notes)
    else:
        assert p.raw["links_fit"]["intra_node.p2p"]["source"].startswith("measured, nccl")  # type: ignore[index]
