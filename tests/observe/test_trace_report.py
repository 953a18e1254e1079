"""trace-report's analysis: interval arithmetic, rank rules, fixtures with exact
answers (pure; the command itself is tested in tests/cli/test_cli_trace_report.py)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.errors import BadInput
from pptune.observe.render import trace_report_table
from pptune.observe.trace_file import load_trace, parse_trace
from pptune.observe.trace_ranks import (
    SOURCE_CPU,
    SOURCE_GPU,
    clip,
    is_comm,
    merge_intervals,
    union_length,
)
from pptune.observe.trace_report import analyze
from pptune.report.render import render_plain

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"
GPU = [TRACES / "gpu_rank0.json", TRACES / "gpu_rank1.json"]


# ---------------------------------------------------------------- intervals


def test_union_length_exact() -> None:
    assert union_length([]) == 0
    assert union_length([(0, 2), (1, 3), (5, 6)]) == 4
    assert union_length([(0, 10), (2, 3), (4, 5)]) == 10  # nested
    assert union_length([(0, 1), (1, 2)]) == 2  # touching
    assert union_length([(3, 3), (5, 4)]) == 0  # empty and reversed ignored
    assert merge_intervals([(5, 6), (0, 2), (1, 3)]) == [(0, 3), (5, 6)]
    assert clip([(0, 10), (20, 30)], 5, 25) == [(5, 10), (20, 25)]


intervals = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 60)).map(lambda t: (min(t), max(t))),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(intervals)
def test_union_matches_a_unit_grid(ivs: list[tuple[int, int]]) -> None:
    covered = {t for a, b in ivs for t in range(a, b)}
    assert union_length(ivs) == len(covered)
    merged = merge_intervals(ivs)
    assert all(a < b for a, b in merged)
    assert all(merged[i][1] < merged[i + 1][0] for i in range(len(merged) - 1))
    assert union_length(merged) == union_length(list(reversed(ivs)))


def test_comm_names() -> None:
    for name in (
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
        "nccl:all_reduce",
        "gloo:send",
        "c10d::allreduce_",
        "record_param_comms",
    ):
        assert is_comm(name), name
    for name in ("ampere_sgemm_128x64_tn", "aten::mm", "Forward 0", "ProfilerStep#3"):
        assert not is_comm(name), name


def test_deepep_kernels_are_communication() -> None:
    # DeepSeek's own training trace (deepseek-ai/profile-data train.json) and DeepEP's
    # kernels (deepseek-ai/DeepEP csrc/kernels: namespaces deep_ep::intranode,
    # deep_ep::internode, deep_ep::internode_ll)
    for name in (
        "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*, "
        "dpsk::ep::internode::SourceMeta*, int)",
        "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*)",
        "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int)",
        "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)",
        "void deep_ep::internode_ll::combine<false, 7168>(void*, void*, int*)",
        "DeepEP::Buffer::dispatch",
    ):
        assert is_comm(name), name
    # a merged trace: a DeepEP combine beside a GEMM is communication, not busy time
    obj = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16", "pid": 0, "tid": 7,
         "ts": 0, "dur": 100},
        {"ph": "X", "cat": "kernel", "name": "void dpsk::ep::internode::combine<false, 8>()",
         "pid": 0, "tid": 8, "ts": 100, "dur": 50},
    ]}
    (d,) = analyze([parse_trace(obj, "deepep")]).devices
    assert d.busy_s == pytest.approx(100e-6) and d.comm_s == pytest.approx(50e-6)


# ---------------------------------------------------------------- fixtures


def test_gpu_ranks_one_file_each() -> None:
    r = analyze([load_trace(p) for p in GPU])
    assert r.window_s == pytest.approx(2000e-6)  # not the profiler's own [-400, 2600] span
    d0, d1 = r.devices
    assert (d0.rank, d1.rank) == (0, 1)
    assert d0.source == d1.source == SOURCE_GPU
    assert d0.busy_s == pytest.approx(1300e-6) and d0.comm_s == pytest.approx(200e-6)
    assert d1.busy_s == pytest.approx(400e-6) and d1.comm_s == pytest.approx(1100e-6)
    assert d0.idle_s == pytest.approx(700e-6) and d1.idle_s == pytest.approx(1600e-6)
    assert d0.busy_share == pytest.approx(0.65) and d1.busy_share == pytest.approx(0.2)
    assert r.flagged == [1]


def test_rank_comes_from_distributed_info_not_argument_order() -> None:
    r = analyze([load_trace(p) for p in reversed(GPU)])
    assert [(d.rank, round(d.busy_share, 6)) for d in r.devices] == [(0, 0.65), (1, 0.2)]


def test_clock_bases_align_files() -> None:
    # without baseTimeNanoseconds the files sit 1 s apart and everything looks idle
    raw = [json.loads(p.read_text()) for p in GPU]
    for obj in raw:
        del obj["baseTimeNanoseconds"]
    r = analyze([parse_trace(obj, f"r{i}") for i, obj in enumerate(raw)])
    assert r.window_s == pytest.approx(1.002, rel=1e-3)
    assert r.flagged == [0, 1]


def test_steps_pick_the_last_profiler_steps() -> None:
    r = analyze([load_trace(p) for p in GPU], steps=1)
    assert r.steps == [2]
    assert r.window_s == pytest.approx(1000e-6) and r.window_start_us == pytest.approx(1000)
    assert [round(d.busy_share, 6) for d in r.devices] == [0.65, 0.2]
    r2 = analyze([load_trace(p) for p in GPU], steps=2)
    assert r2.steps == [1, 2] and r2.window_s == pytest.approx(2000e-6)


def test_explicit_window_is_clipped_to_the_trace() -> None:
    r = analyze([load_trace(p) for p in GPU], window_start_us=100, window_end_us=500)
    d0, d1 = r.devices
    assert r.window_s == pytest.approx(400e-6)
    assert d0.busy_share == pytest.approx(1.0)  # [100, 500] is all compute on rank 0
    assert d1.busy_s == 0 and d1.comm_s == pytest.approx(400e-6)
    r = analyze([load_trace(p) for p in GPU], window_start_us=1500, window_end_us=10_000)
    assert r.window_s == pytest.approx(500e-6)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"steps": 3}, "only 2 ProfilerStep"),
        ({"steps": 0}, "at least 1"),
        ({"steps": 1, "window_end_us": 10}, "not both"),
        ({"window_start_us": 50, "window_end_us": 50}, "empty"),
        ({"window_start_us": 5000}, "misses the trace"),
        ({"min_busy": 1.5}, "[0, 1]"),
    ],
)
def test_window_and_threshold_errors(kwargs: dict, needle: str) -> None:
    with pytest.raises(BadInput, match=None) as exc:
        analyze([load_trace(p) for p in GPU], **kwargs)
    assert needle in str(exc.value)


def test_merged_gpu_trace_splits_by_kernel_pid() -> None:
    """One file on one clock: GPU pids 0 and 1 are the ranks; host pids are not."""
    r0, r1 = (json.loads(p.read_text()) for p in GPU)
    events = r0["traceEvents"] + [
        {**e, "ts": e["ts"] + 1e6} if "ts" in e else e for e in r1["traceEvents"]
    ]
    r = analyze([parse_trace({"traceEvents": events}, "merged")])
    assert [d.label for d in r.devices] == ["merged pid 0", "merged pid 1"]
    assert [round(d.busy_share, 6) for d in r.devices] == [0.65, 0.2]


def test_cpu_merged_trace_counts_top_level_ops_not_markers() -> None:
    r = analyze([load_trace(TRACES / "cpu_merged.json")])
    d0, d1 = r.devices
    assert d0.source == d1.source == SOURCE_CPU
    assert r.window_s == pytest.approx(1000e-6)
    # busy [0, 300] + [250, 700]; the Forward marker and the send stay out
    assert d0.busy_s == pytest.approx(700e-6)
    assert d0.comm_s == pytest.approx(60e-6)  # c10d::send [300, 350] and gloo:send [310, 360]
    assert d1.busy_s == pytest.approx(300e-6) and d1.comm_s == pytest.approx(500e-6)
    assert r.flagged == [1]


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=3)
)
loose = st.dictionaries(
    st.sampled_from(["ph", "ts", "dur", "pid", "tid", "cat", "name"]),
    st.one_of(scalars, st.lists(scalars, max_size=2)),
)
timed = st.fixed_dictionaries(
    {"ph": st.just("X"), "ts": st.floats(-1e3, 1e13), "dur": st.floats(-1, 1e4)},
    optional={
        "pid": st.one_of(st.integers(0, 3), st.text(max_size=2), st.lists(st.integers())),
        "tid": st.integers(0, 2),
        "cat": st.sampled_from(["kernel", "cpu_op", "user_annotation", "gpu_memcpy", "Trace"]),
        "name": st.sampled_from(["aten::mm", "ncclDevKernel_SendRecv", "ProfilerStep#1", "F"]),
    },
)
events = st.one_of(loose, timed)


@settings(max_examples=100, deadline=None)
@given(st.lists(events, max_size=8), st.sampled_from([None, 1]))
def test_arbitrary_events_give_a_report_or_bad_input(evs: list, steps: int | None) -> None:
    try:
        r = analyze([parse_trace({"traceEvents": evs}, "fuzz")], steps=steps)
    except BadInput:
        return
    for d in r.devices:
        assert 0 <= d.busy_share <= 1 + 1e-9
        assert d.busy_s + d.idle_s == pytest.approx(r.window_s)
        assert 0 <= d.exposed_comm_s <= min(d.comm_s, d.idle_s) + 1e-7  # ts near 1e13 us


def test_bare_list_and_gzip(tmp_path: Path) -> None:
    r = analyze([load_trace(TRACES / "bare_list.json")])
    assert r.devices[0].busy_share == pytest.approx(1.0) and r.flagged == []
    gz = tmp_path / "rank0.pt.trace.json.gz"
    gz.write_bytes(gzip.compress((TRACES / "gpu_rank0.json").read_bytes()))
    assert analyze([load_trace(gz)]).devices[0].busy_share == pytest.approx(0.65)


def test_files_without_rank_take_their_position_and_clashes_are_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    shutil.copy(TRACES / "bare_list.json", plain)
    r = analyze([load_trace(plain), load_trace(TRACES / "gpu_rank1.json")])
    assert [d.rank for d in r.devices] == [0, 1]
    with pytest.raises(BadInput, match="same rank") as exc:
        analyze([load_trace(TRACES / "gpu_rank1.json"), load_trace(plain)])
    assert "rank 1: " in str(exc.value)


def test_table_rows_and_flag() -> None:
    r = analyze([load_trace(p) for p in GPU], steps=1)
    text = render_plain(trace_report_table(r), width=80)
    assert "measured over 1.0 ms (ProfilerStep #2)" in text
    assert "busy = gpu kernels (comm apart), flag < 60.0%" in text
    row0 = next(line for line in text.splitlines() if "rank0" in line)
    row1 = next(line for line in text.splitlines() if "rank1" in line)
    assert "650.0 us" in row0 and "65.0%" in row0 and "BUBBLE" not in row0
    assert "200.0 us" in row1 and "550.0 us" in row1 and "20.0%" in row1 and "BUBBLE" in row1


def test_a_rank_file_with_two_gpus_is_reported_per_gpu() -> None:
    """Rank 0's distributedInfo over kernels of GPUs 0 and 1 (one process driving two
    cards, or files merged by hand): two rows, as without distributedInfo, each with
    its GPU, and a note; not one row busy over the union of both GPUs."""
    r0, r1 = (json.loads(p.read_text()) for p in GPU)
    events = r0["traceEvents"] + [
        {**e, "ts": e["ts"] + 1e6} if "ts" in e else e for e in r1["traceEvents"]
    ]
    with_info = analyze([parse_trace({**r0, "traceEvents": events}, "merged")])
    without = analyze([parse_trace({"traceEvents": events}, "merged")])
    for r in (with_info, without):
        assert [(d.rank, d.device, d.label) for d in r.devices] == [
            (0, 0, "merged pid 0"), (1, 1, "merged pid 1")]
        assert [round(d.busy_share, 6) for d in r.devices] == [0.65, 0.2]
        assert r.flagged == [1]
    assert with_info.notes == [
        "merged is rank 0 (its distributedInfo) but its kernels ran on 2 GPUs (pids 0, 1); "
        "a rank runs on one GPU, so each is reported apart, as ranks 0-1 (rows are "
        "numbered in rank, then pid order)"]
    assert without.notes == []


def test_a_split_file_is_numbered_before_the_next_rank() -> None:
    """Files keep their rank order; the two GPUs of rank 0's file become rows 0 and 1,
    rank 1's file row 2. Rank files on one GPU each keep their ranks and say nothing."""
    r0, r1 = (json.loads(p.read_text()) for p in GPU)
    two = {**r0, "traceEvents": r0["traceEvents"] + [
        {**e, "pid": 5, "args": {**e["args"], "device": 5}}
        for e in r0["traceEvents"] if e.get("cat") == "kernel"]}
    r = analyze([parse_trace(r1, "b.json"), parse_trace(two, "a.json")])
    assert [(d.rank, d.device, d.label) for d in r.devices] == [
        (0, 0, "a.json pid 0"), (1, 5, "a.json pid 5"), (2, 1, "b.json")]
    assert len(r.notes) == 1 and "as ranks 0-1" in r.notes[0]
    plain = analyze([load_trace(p) for p in GPU])
    assert [(d.rank, d.device) for d in plain.devices] == [(0, 0), (1, 1)] and not plain.notes
    assert [d["device"] for d in plain.to_json()["devices"]] == [0, 1]
