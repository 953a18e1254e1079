"""The profile's links from sweep points, and the documented defaults for the
links that were not measured (pure: no torch, no process)."""

from __future__ import annotations

import pytest

from pptune.costmodel import presets
from pptune.probe.fit import AlphaBeta
from pptune.probe.inventory import Inventory, PairLink
from pptune.probe.links import default_links, links_from_points

CPU = Inventory(kind="cpu", name="x86_64", memory_bytes=0.0, count=1)


def test_cpu_links_not_measured_take_the_loopback_defaults_with_a_note_each() -> None:
    notes: list[str] = []
    links, raw = links_from_points({}, default_links(CPU, "cpu"), notes)
    assert (links.intra_node.p2p.latency_s, links.intra_node.p2p.bytes_per_s) == (100e-6, 1e9)
    assert (links.intra_node.allreduce.latency_s, links.intra_node.allreduce.bytes_per_s) == (
        200e-6, 0.5e9,
    )
    assert links.inter_node == links.intra_node  # a CPU has no NIC figure: copied
    assert [n.split(":")[0] for n in notes] == [
        "intra-node p2p link NOT measured",
        "inter-node p2p link NOT measured",
        "intra-node allreduce link NOT measured",
        "inter-node allreduce link NOT measured",
    ]
    assert raw["inter_node.p2p"] == {"source": "copy of intra_node"}
    assert raw["intra_node.p2p"]["source"].startswith("default: CPU loopback defaults")


def test_gpu_defaults_nvlink_preset_and_pcie_otherwise() -> None:
    h100 = Inventory(kind="gpu", name="NVIDIA H100 80GB HBM3", memory_bytes=80e9, count=8,
                     links=[PairLink(0, 1, "NVLink", "18 links")])
    values, source = default_links(h100, "cuda")
    gpu = presets.GPUS["h100-sxm"]
    assert values["p2p"] == AlphaBeta(presets.P2P_LATENCY_INTRA_S, gpu.nvlink_bytes_per_s)
    assert values["inter.allreduce"] == AlphaBeta(presets.ALLREDUCE_LATENCY_INTER_S, gpu.ib_bytes_per_s)
    assert "h100-sxm NVLink" in source

    # no NVLink between GPUs 0 and 1, and a card that is not a preset:
    # PCIe 4.0 x16 at ~80% of 31.5 GB/s, one 200 Gb/s NIC (25 GB/s) per GPU
    t4 = Inventory(kind="gpu", name="Tesla T4", memory_bytes=16e9, count=2)
    values, source = default_links(t4, "cuda")
    assert values["p2p"].bytes_per_s == 25e9
    assert values["inter.p2p"].bytes_per_s == 25e9
    assert "PCIe 4.0 x16" in source


def test_measured_points_are_fitted_and_only_the_rest_defaulted() -> None:
    # points on t = 20 us + bytes / 2 GB/s exactly: the fit gives them back
    pts = [(float(n), 20e-6 + n / 2e9) for n in (1 << 10, 1 << 16, 1 << 20, 1 << 24)]
    notes: list[str] = []
    links, raw = links_from_points(
        {("intra_node", "p2p"): (pts, "measured, gloo, 2 ranks")}, default_links(CPU, "cpu"), notes
    )
    assert links.intra_node.p2p.latency_s == pytest.approx(20e-6, rel=1e-6)
    assert links.intra_node.p2p.bytes_per_s == pytest.approx(2e9, rel=1e-6)
    assert raw["intra_node.p2p"]["points"] == 4
    assert links.inter_node.p2p == links.intra_node.p2p  # copied on CPU
    assert not any(n.startswith("intra-node p2p") for n in notes)
    assert any(n.startswith("intra-node allreduce link NOT measured") for n in notes)


def test_a_measured_all_to_all_is_fitted_and_an_unmeasured_one_left_out() -> None:
    # all-to-all over 2 ranks: busbw = algbw x (n-1)/n; points on 50 us + bus bytes / 1 GB/s
    algbw_bytes = (1 << 12, 1 << 18, 1 << 22)
    pts = [(n * 0.5, 50e-6 + n * 0.5 / 1e9) for n in algbw_bytes]
    links, raw = links_from_points({("intra_node", "alltoall"): (pts, "measured, gloo, 2 ranks")},
                                   default_links(CPU, "cpu"), [])
    a2a = links.intra_node.all_to_all
    assert a2a is not None and a2a.bytes_per_s == pytest.approx(1e9, rel=1e-6)
    assert a2a.latency_s == pytest.approx(50e-6, rel=1e-6)
    assert links.inter_node.all_to_all is None  # never defaulted
    assert "all_to_all" not in links.inter_node.model_dump()
    assert raw["intra_node.alltoall"]["points"] == 3


def test_a_sweep_that_never_leaves_the_latency_bound_sizes_measures_no_bandwidth() -> None:
    # p2p at 1..64 KiB on t = 300 us + bytes / 1 GB/s: 64 KiB takes 365.5 us, 1.21x the
    # 1 KiB message's 301.0 us, under the 2x at which the transfer outlasts the latency:
    # the latency is measured (each time less its bytes at the default 1 GB/s: 300 us),
    # the bandwidth is the default's
    pts = [(float(n), 300e-6 + n / 1e9) for n in (1 << k for k in range(10, 17))]
    notes: list[str] = []
    links, raw = links_from_points({("intra_node", "p2p"): (pts, "measured, gloo, 2 ranks")},
                                   default_links(CPU, "cpu"), notes)
    assert links.intra_node.p2p.latency_s == pytest.approx(300e-6)
    assert links.intra_node.p2p.bytes_per_s == 1e9
    assert notes[0] == (
        "warning: intra-node p2p (measured, gloo, 2 ranks, 1.00 KiB..64.00 KiB): bandwidth "
        "unresolved: its largest message took 1.21x the smallest's time, under the 2x at "
        "which a transfer outlasts the latency: the sweep never left the latency-bound sizes, "
        "so no bandwidth shows; its latency is taken as measured, its bandwidth the default's "
        "(1 GB/s); raise --max-bytes (the default: 64M on CPU, 256M on GPU) to measure it")
    assert raw["intra_node.p2p"]["source"] == ("measured, gloo, 2 ranks: latency only, "
                                               "bandwidth unresolved (default)")
    assert raw["intra_node.p2p"]["points"] == 7 and "1.21x" in raw["intra_node.p2p"]["unresolved"]
    assert not any(n.startswith("intra-node p2p link NOT measured") for n in notes)
    # an all-to-all has no default: it is left out
    links, _ = links_from_points({("intra_node", "alltoall"): (pts, "measured, gloo, 2 ranks")},
                                 default_links(CPU, "cpu"), notes)
    assert links.intra_node.all_to_all is None
    assert any(n.startswith("warning: intra-node alltoall") and "not written (no default)" in n
               for n in notes)


def test_unresolved_needs_three_sizes_and_a_doubled_time() -> None:
    from pptune.probe.fit import unresolved

    assert unresolved([(1024.0, 1e-3)]) == (
        "1 message size(s); a latency-and-bandwidth fit needs at least 3")
    # 1 KiB, 4 KiB, 16 KiB at 100 us + bytes / 10 MB/s: 102.4 us .. 1738.4 us, 17x
    assert unresolved([(float(n), 100e-6 + n / 1e7) for n in (1024, 4096, 16384)]) is None
