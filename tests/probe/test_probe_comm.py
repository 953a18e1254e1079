"""Bandwidth probe: the sweep plan, process handling, and a real 2-process gloo sweep."""

from __future__ import annotations

import time

import pytest
from probe_spawn_helpers import crash_entry, fail_entry, hang_entry, ok_entry

from pptune.errors import BadInput, RunFailed
from pptune.probe.comm import (
    CommPlan,
    Measurement,
    comm_entry,
    iters_for,
    message_sizes,
    plan_measurements,
    spawn_ranks,
)
from pptune.probe.fit import fit_alpha_beta
from pptune.probe.links import points_from_comm


def test_message_sizes_double_from_1_kib_like_nccl_tests() -> None:
    assert message_sizes(8192) == [1024, 2048, 4096, 8192]
    assert message_sizes(10000) == [1024, 2048, 4096, 8192]
    assert message_sizes(64 * 1024**2)[-1] == 64 * 1024**2
    assert len(message_sizes(64 * 1024**2)) == 17
    with pytest.raises(BadInput, match="--max-bytes 512"):
        message_sizes(512)


def test_iterations_per_repeat_move_about_one_mib() -> None:
    assert iters_for(1024) == 20
    assert iters_for(256 * 1024) == 4
    assert iters_for(64 * 1024**2) == 1


def test_plan_one_host() -> None:
    todo, missing = plan_measurements(["h", "h"])
    assert todo == [
        Measurement("intra_node", "p2p", (0, 1)),
        Measurement("intra_node", "allreduce", (0, 1)),
        Measurement("intra_node", "alltoall", (0, 1)),
    ]
    assert len(missing) == 1 and missing[0].startswith("inter_node")


def test_plan_two_nodes_pairs_rank_0_with_a_rank_on_another_host() -> None:
    hosts = ["a", "a", "a", "a", "b", "b", "b", "b"]
    todo, missing = plan_measurements(hosts)
    assert todo == [
        Measurement("intra_node", "p2p", (0, 1)),
        Measurement("intra_node", "allreduce", (0, 1, 2, 3)),
        Measurement("intra_node", "alltoall", (0, 1, 2, 3)),
        Measurement("inter_node", "p2p", (0, 4)),
        Measurement("inter_node", "allreduce", tuple(range(8))),
        Measurement("inter_node", "alltoall", tuple(range(8))),
    ]
    assert missing == []


def test_plan_one_rank_per_node_has_no_intra_pair() -> None:
    todo, missing = plan_measurements(["a", "b"])
    assert [m.scope for m in todo] == ["inter_node"] * 3
    assert missing[0].startswith("intra_node")


@pytest.mark.slow
def test_spawned_ranks_report_and_finish() -> None:
    seen: list[object] = []
    result = spawn_ranks(ok_entry, (), 2, 30.0, seen.append)
    assert result == {"rank": 0, "world": 2}
    assert sorted(seen, key=str) == [("ok", 0), ("ok", 1)]


@pytest.mark.slow
def test_a_hanging_rank_is_bounded_by_the_timeout_and_named() -> None:
    t0 = time.monotonic()
    with pytest.raises(RunFailed, match=r"rank\(s\) 1 of 2 gave no word for 1.5 s \(--timeout 1.5\)"):
        spawn_ranks(hang_entry, (1,), 2, 1.5)
    assert time.monotonic() - t0 < 15


@pytest.mark.slow
def test_a_failing_rank_is_reported_at_once() -> None:
    t0 = time.monotonic()
    with pytest.raises(RunFailed, match="comm probe failed on rank 1 of 2: ValueError: boom"):
        spawn_ranks(fail_entry, (), 2, 60.0)
    assert time.monotonic() - t0 < 15


@pytest.mark.slow
def test_a_rank_that_dies_silently_is_reported() -> None:
    with pytest.raises(RunFailed, match="rank 1 of 2 exited with code 3 without a result"):
        spawn_ranks(crash_entry, (), 2, 60.0)


@pytest.mark.slow
@pytest.mark.torch
def test_real_gloo_sweep_between_two_processes() -> None:
    pytest.importorskip("torch")
    plan = CommPlan(
        # up to 8 MiB: the largest transfer (~8 ms on loopback) dwarfs latency noise
        # even when the 2 cores are busy with other work
        backend="gloo", device="cpu", sizes=message_sizes(8 * 1024**2), repeats=3, warmup=1,
        timeout_s=60.0,
    )
    progress: list[object] = []
    result = spawn_ranks(comm_entry, (plan,), 2, 60.0, progress.append)
    assert result["backend"] == "gloo" and result["world_size"] == 2
    assert len(progress) == 3 * len(plan.sizes)
    sweeps = {(s["scope"], s["op"]): s for s in result["sweeps"]}
    # torch 2.13's gloo runs all_to_all_single: the expert dispatch is swept on CPU too
    assert set(sweeps) == {("intra_node", "p2p"), ("intra_node", "allreduce"),
                           ("intra_node", "alltoall")}
    for sweep in sweeps.values():
        assert [r["bytes"] for r in sweep["rows"]] == plan.sizes
        for row in sweep["rows"]:
            assert len(row["samples_s"]) == 3
            assert row["time_s"] > 0
            assert row["algbw_bytes_per_s"] == pytest.approx(row["bytes"] / row["time_s"])
            # 2 ranks: all-reduce busbw = algbw * 2(n-1)/n = algbw; p2p busbw = algbw;
            # all-to-all busbw = algbw * (n-1)/n = algbw / 2
            factor = 0.5 if sweep["op"] == "alltoall" else 1.0
            assert row["busbw_bytes_per_s"] == pytest.approx(factor * row["algbw_bytes_per_s"])
    found = points_from_comm(result)
    for points, _source in found.values():
        fit = fit_alpha_beta(points)
        assert fit.latency_s >= 0
        assert 1e6 < fit.bytes_per_s < 1e12  # loopback: between 1 MB/s and 1 TB/s
