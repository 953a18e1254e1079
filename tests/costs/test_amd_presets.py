"""The AMD Instinct presets: each figure as its source gives it (presets_amd.py cites them)."""

from __future__ import annotations

import pytest

from pptune.costmodel import presets
from pptune.costmodel.keys import Precision
from pptune.costmodel.precision import problems

MIB = 2**20
GB = 1e9


def test_mi300x_is_rocm_s_table_and_the_published_measurements() -> None:
    g = presets.GPUS["mi300x"]
    # ROCm's MI300X peak table: 1307.4 dense BF16, 2614.9 FP8 (FNUZ); 304 CUs; 5.3 TB/s
    assert (g.peak_flops, g.fp8_peak_flops, g.sm_count) == (1307.4e12, 2614.9e12, 304)
    assert g.hbm_bytes_per_s == 5300 * GB and g.memory_bytes == 196592 * MIB  # torch's figure
    # mamf-finder BF16 668.4 TFLOP/s; hipBLASLt FP8 8192^3 1159.23; STREAM triad 4.09 TB/s
    assert g.gemm_fraction == round(668.4 / 1307.4, 3) == 0.511
    assert g.fp8_gemm_fraction == round(1159.23 / 2614.9, 3) == 0.443
    assert g.hbm_fraction == 0.77
    assert (g.mxfp8, g.fp4_peak_flops, g.gpus_per_node) == (False, None, 8)
    # 7 xGMI links of 64 GB/s a direction; one 400 Gb/s NIC a GPU
    assert (g.nvlink_bytes_per_s, g.ib_bytes_per_s) == (448 * GB, 50 * GB)
    f = g.fabric
    assert f is not None and f.nvls_busbw_bytes_per_s is None
    assert (f.mesh_link_bytes_per_s, f.p2p_bytes_per_s, f.ring_busbw_bytes_per_s,
            f.nic_busbw_bytes_per_s) == (46.552 * GB, 46.552 * GB, 318.98 * GB, 47 * GB)


def test_mi300x_attention_is_the_rocm_forward_sweep_over_the_peak() -> None:
    g = presets.GPUS["mi300x"]
    # Triton FA2 forward, d 128, no mask: 287.5 TFLOP/s at 1k, 361.4 at 8k (ROCm docs)
    assert dict(g.full_attention)[1024] == pytest.approx(287.528411 / 1307.4)
    assert dict(g.full_attention)[8192] == pytest.approx(361.369510 / 1307.4)
    # the causal curve at H100's causal-over-unmasked ratio (FlashAttention-2: 308 / 335 at 8k)
    assert dict(g.causal_attention)[8192] == pytest.approx(361.369510 / 1307.4 * 308 / 335)
    assert g.attention_fraction == g.causal_attention[-1][1]
    assert not g.cudnn_causal_attention and g.priced_kernel("sdpa") == "flash"


def test_mi325x_is_mi300x_compute_with_its_own_memory() -> None:
    a, b = presets.GPUS["mi300x"], presets.GPUS["mi325x"]
    assert (b.peak_flops, b.fp8_peak_flops, b.sm_count) == (a.peak_flops, a.fp8_peak_flops, 304)
    assert b.memory_bytes == 256 * GB and b.hbm_bytes_per_s == 6000 * GB
    assert b.gemm_fraction == round(784.9 / 1307.4, 3)  # mamf-finder's MI325X row
    assert b.fp8_gemm_fraction == a.fp8_gemm_fraction and b.fabric == a.fabric  # assumed


def test_no_microscaling_fp8_on_mi300() -> None:
    for name in ("mi300x", "mi325x"):
        assert problems(Precision.MXFP8, presets.GPUS[name])
        assert not problems(Precision.FP8, presets.GPUS[name])


@pytest.mark.parametrize(("device", "key"), [
    ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI300X VF", "mi300x"),
    ("AMD Instinct MI325X", "mi325x"), ("AMD Instinct MI300A", None),
])
def test_the_preset_of_an_amd_device_name(device: str, key: str | None) -> None:
    assert presets.gpu_key_for(device) == key


def test_a_profile_file_carries_the_mesh_and_a_switched_node_s_file_is_unchanged() -> None:
    from pptune.costs.profiles import analytic_profile, cost_table
    from pptune.schemas import Profile

    mi = analytic_profile("gpt-small", "mi300x", [1])
    again = Profile.model_validate_json(mi.model_dump_json())
    fabric = cost_table(again).fabric
    assert fabric is not None and fabric.mesh_link_bytes_per_s == 46.552 * GB
    h100 = analytic_profile("gpt-small", "h100-sxm", [1]).model_dump()
    assert "mesh_link_bytes_per_s" not in h100["links"]["fabric"]
