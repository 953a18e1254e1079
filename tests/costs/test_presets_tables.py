"""GPU presets, their links at what NCCL achieves, and the cost tables per cost key."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.comm import AllReduceLink, group_link
from pptune.costmodel.context import CpComm
from pptune.costmodel.evaluate import dp_link
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import Group
from pptune.costmodel.search import PlanRequest, PlanSpec, Schedule, Sharding, evaluate
from pptune.costs.profiles import analytic_profile, cost_table, preset_links, preset_tables
from pptune.errors import BadInput
from pptune.schemas import Profile


@pytest.mark.parametrize("name", list(presets.GPUS))
def test_every_gpu_preset_states_its_numbers(name: str) -> None:
    g = presets.GPUS[name]
    assert g.source and g.fabric is not None and g.gpus_per_node >= 8
    assert 0 < g.gemm_fraction < 1 and 0 < g.hbm_fraction <= 1
    if g.fp8_peak_flops is not None:
        assert g.fp8_peak_flops == pytest.approx(2 * g.peak_flops, rel=1e-3)
        assert g.fp8_gemm_fraction is not None


def test_the_cited_matmul_fractions() -> None:
    # ml-engineering MAMF tables: 794.5 / 989, 1402.6 / 1979, 1745.0 / 2250, 3432.5 / 4500
    g = presets.GPUS
    assert g["h100-sxm"].gemm_fraction == round(794.5 / 989, 3)
    assert g["h100-sxm"].fp8_gemm_fraction == round(1402.6 / 1979, 3)
    assert g["b200"].gemm_fraction == round(1745.0 / 2250, 3)
    assert g["b200"].fp8_gemm_fraction == round(3432.5 / 4500, 3)
    assert g["gb200"].gpus_per_node == 72 and g["gb200"].fp4_peak_flops == 10000e12
    assert g["h800"].nvlink_bytes_per_s == 200e9  # 400 GB/s bidirectional


def test_a_host_of_an_nvlink_domain() -> None:
    """A GB200 or GB300 NVL72 domain of 72 GPUs spans compute trays of 4 (MLCommons
    GB200-NVL72 system description): a launcher node runs 4; a DGX node is its domain,
    and a domain given smaller than a tray is its own host."""
    g = presets.GPUS
    assert (g["gb200"].gpus_per_host, g["gb300"].gpus_per_host) == (4, 4)
    assert presets.host_gpus(g["gb200"], 72) == presets.host_gpus(g["gb300"], 72) == 4
    assert presets.host_gpus(g["gb200"], 2) == 2
    assert presets.host_gpus(g["h100-sxm"], 8) == presets.host_gpus(None, 8) == 8


def test_blackwell_ultra_presets_are_the_datasheets_per_gpu() -> None:
    g = presets.GPUS
    # GB300 NVL72: BF16 360 and FP8 720 PFLOPS with sparsity over 72 GPUs, 576 TB/s HBM
    assert g["gb300"].peak_flops == 360e15 / 72 / 2
    assert g["gb300"].fp8_peak_flops == 720e15 / 72 / 2
    assert g["gb300"].hbm_bytes_per_s == 576e12 / 72 and g["gb300"].gpus_per_node == 72
    # HGX B300: BF16 36 and FP8 72 PFLOPS with sparsity over 8 GPUs
    assert g["b300"].peak_flops == 36e15 / 8 / 2 and g["b300"].fp8_peak_flops == 72e15 / 8 / 2
    for name in ("b300", "gb300"):
        assert g[name].memory_bytes == 288e9  # 288 GB HBM3e (Blackwell Ultra blog)
        assert g[name].ib_bytes_per_s == 800e9 / 8  # one ConnectX-8 at 800 Gb/s a GPU
        # NCCL over it at the 47-of-50 share a 400 Gb/s NIC reaches (an assumption)
        assert g[name].fabric.nic_busbw_bytes_per_s == pytest.approx(  # type: ignore[union-attr]
            100e9 * 47 / 50)
    # no published matmul sweep: the Blackwell parts' measured fractions, stated as such
    assert g["b300"].gemm_fraction == g["b200"].gemm_fraction
    assert g["gb300"].fp8_gemm_fraction == g["gb200"].fp8_gemm_fraction


def test_the_40_gb_a100_is_the_80_gb_chip_with_its_own_memory() -> None:
    # A100 datasheet: SXM4 40GB, HBM2 at 1,555 GB/s; 80GB, HBM2e at 2,039 GB/s
    small, large = presets.GPUS["a100-40gb"], presets.GPUS["a100-80gb"]
    assert small.memory_bytes == 40 * 1024**3 and small.hbm_bytes_per_s == 1555e9
    assert dataclasses.replace(small, name=large.name, memory_bytes=large.memory_bytes,
                               hbm_bytes_per_s=large.hbm_bytes_per_s) == large


@pytest.mark.parametrize(("nvml", "key"), [
    ("NVIDIA GB300", "gb300"), ("NVIDIA B300 SXM6 AC", "b300"), ("NVIDIA GB200", "gb200"),
    ("NVIDIA B200", "b200"), ("NVIDIA H800", "h800"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA L40S", None),
])
def test_probe_names_the_preset_of_each_nvml_name(nvml: str, key: str | None) -> None:
    from pptune.probe.inventory import peak_flops_for

    peak, found = peak_flops_for(nvml)
    assert found == key
    assert peak == (presets.GPUS[key].peak_flops if key else None)


def test_preset_links_are_what_nccl_achieves() -> None:
    links = preset_links(presets.GPUS["h100-sxm"])
    assert links.intra_node.p2p.bytes_per_s == 396.4e9
    assert links.intra_node.allreduce.bytes_per_s == 367.2e9
    assert links.inter_node.allreduce.bytes_per_s == 47e9  # one member a node: one NIC
    assert links.fabric is not None and links.fabric.nvls_busbw_bytes_per_s == 480e9
    assert preset_links(presets.GPUS["h100-sxm"], nvls=False).fabric.nvls_enabled is False  # type: ignore[union-attr]


def test_a_measured_all_reduce_over_g_ranks_a_node_is_converted_to_one_nic() -> None:
    prof = analytic_profile("gpt-small", "h100-sxm", [1])
    doc = prof.model_dump()
    doc["links"]["fabric"] = None
    doc["links"]["inter_node"]["allreduce"] = {"latency_s": 40e-6, "bytes_per_s": 376e9,
                                               "ranks_per_node": 8}
    table = cost_table(Profile.model_validate(doc))
    assert table.ar_inter == AllReduceLink(40e-6, 47e9)
    assert table.fabric is None
    # a data-parallel group with 4 members a node drives 4 NICs (comm.group_link)
    assert dp_link(table, Sharding.NONE, Group(16, 4, 4), 16).busbw_bytes_per_s == 188e9
    assert group_link(Group(16, 4, 4), table.ar_intra, table.ar_inter).busbw_bytes_per_s \
        == 188e9


def test_tables_per_cost_key() -> None:
    tables = preset_tables("llama3-8b", "h100-sxm", [1])
    base, cp2, fp8 = (tables(CostKey()), tables(CostKey(cp=2)),
                      tables(CostKey(precision=Precision.FP8)))
    assert tables(CostKey(cp=2)) is cp2  # built once
    assert cp2.by_mb[1].act_bytes[1] == pytest.approx(base.by_mb[1].act_bytes[1] / 2)
    assert fp8.by_mb[1].fwd_s[1] < base.by_mb[1].fwd_s[1]
    # FP8 weight copies and transposes, 2 bytes a GEMM weight, held all step
    m = presets.MODELS["llama3-8b"]
    gemm_params = (m.hidden * (m.hidden + 2 * m.kv_heads * m.head_dim) + m.hidden ** 2
                   + 3 * m.hidden * m.ffn)
    assert fp8.cache_bytes is not None and fp8.cache_bytes[1] == pytest.approx(2 * gemm_params)
    assert base.cache_bytes is None and base.hbm_bytes_per_s == pytest.approx(3350e9 * 0.9)
    with pytest.raises(BadInput, match="expert"):
        tables(CostKey(ep=2))


def test_fp8_weight_copies_count_in_the_plans_memory() -> None:
    tables = preset_tables("llama3-8b", "h100-sxm", [1])
    req = PlanRequest(gpus=8, global_batch=64, cost_keys=(CostKey(),))
    spec = PlanSpec(Schedule.ONE_F_ONE_B, 1, 1, 8, (34,), sharding=Sharding.ZERO1)
    bf16 = evaluate(tables(CostKey()), req, spec)
    key = CostKey(precision=Precision.FP8)
    fp8 = evaluate(tables(key), dataclasses.replace(req, cost_keys=(key,)),
                   dataclasses.replace(spec, key=key))
    cache = sum(tables(key).cache_bytes or [])
    assert fp8.memory[0].state_bytes == pytest.approx(bf16.memory[0].state_bytes + cache)


@pytest.mark.parametrize(("kwargs", "words"), [
    (dict(gpu="a100-80gb", gemm_precision=Precision.FP8), ["--precision fp8", "a100-80gb"]),
    (dict(cp=3), ["2 x cp = 6"]),
    (dict(cp=16, cp_comm=CpComm.A2A), ["a2a", "key/value heads"]),
    (dict(cp=2, attention="eager"), ["--cp 2", "flash"]),
])
def test_bad_cp_and_precision_are_one_line_naming_the_knob(kwargs: dict, words: list[str]) -> None:
    args = {"gpu": "h100-sxm", **kwargs}
    gpu = str(args.pop("gpu"))
    with pytest.raises(BadInput) as err:
        analytic_profile("llama3-8b", gpu, [1], **args)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value)


def test_tensor_parallelism_across_nodes_runs_over_the_network() -> None:
    """tp 8 on nodes of 4 GPUs: each TP group spans 2 nodes, its collectives at NCCL's
    pick for that group (the NIC between the two halves), not NVLink; tp 4 on nodes of 6
    straddles too (ranks 4-7 sit on two nodes); tp 4 on nodes of 8 stays inside."""
    from pptune.costmodel import collectives
    from pptune.costmodel.collectives import Collective
    from pptune.costmodel.layout import contiguous_group
    from pptune.costs.profiles import _tp_link
    assert contiguous_group(8, 4) == Group(8, 4, 2)
    assert contiguous_group(4, 6) == Group(4, 2, 2)
    assert contiguous_group(4, 8) == Group(4, 4, 1)
    fabric = presets.GPUS["h100-sxm"].fabric_or_line()
    nbytes = 8192 * 8192 * 2
    within = _tp_link(fabric, 8, False, nbytes, 8)
    across = _tp_link(fabric, 8, False, nbytes, 4)
    link = collectives.link_for(Collective.ALL_REDUCE, nbytes, Group(8, 4, 2), fabric)
    assert across == (link.latency_s, link.busbw_bytes_per_s)
    # four NICs a node (47 GB/s each, 188) against NVLink SHARP's 480 inside one
    assert across[1] == 4 * 47e9 and within[1] == 480e9
    slow = analytic_profile("llama3-70b", "h100-sxm", [1], tp=8, gpus_per_node=4)
    fast = analytic_profile("llama3-70b", "h100-sxm", [1], tp=8, gpus_per_node=8)
    block = next(i for i, layer in enumerate(fast.layers) if layer.name.startswith("block"))
    assert slow.layers[block].per_micro_batch["1"].fwd_s > \
        1.2 * fast.layers[block].per_micro_batch["1"].fwd_s
