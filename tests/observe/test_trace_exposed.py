"""trace-report's exposed communication: the time a rank's communication kernels run
while none of its compute kernels do, worked out by hand on synthetic traces written
to tmp_path (the CLI's table and JSON are tested in tests/cli/test_cli_trace_report.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.observe.trace_file import load_trace
from pptune.observe.trace_ranks import difference_length
from pptune.observe.trace_report import analyze

BASE_US = 5_092_807_120_000.0  # a profiler's clock: large, so rounding shows if it bites


def kernel(pid: int, stream: int, name: str, start_us: float, end_us: float) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": pid, "tid": stream,
            "ts": BASE_US + start_us, "dur": end_us - start_us}


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclWorkElem)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"

# one merged trace, ranks 0 and 1 (pids), window [0, 1000] us
MERGED = [
    # rank 0: compute [0, 400] + [300, 600] on two streams, then [850, 1000];
    # comm [500, 800] + [700, 900]: its union [500, 900], [600, 850] with no compute
    kernel(0, 7, GEMM, 0, 400), kernel(0, 13, GEMM, 300, 600), kernel(0, 7, GEMM, 850, 1000),
    kernel(0, 20, ALLREDUCE, 500, 800), kernel(0, 21, SENDRECV, 700, 900),
    # rank 1: compute [0, 200] and [760, 1000]; comm [100, 300] (hidden up to 200) and
    # [700, 760]; [300, 700] runs nothing
    kernel(1, 7, GEMM, 0, 200), kernel(1, 7, GEMM, 760, 1000),
    kernel(1, 20, SENDRECV, 100, 300), kernel(1, 20, SENDRECV, 700, 760),
]


def write(tmp_path: Path, events: list[dict], name: str = "merged.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_exposed_comm_is_comm_with_no_compute_beside_it(tmp_path: Path) -> None:
    r0, r1 = analyze([load_trace(write(tmp_path, MERGED))]).devices
    # rank 0: busy 600 + 150, comm 400, exposed [600, 850], idle 1000 - 750
    assert (r0.busy_s, r0.comm_s) == (pytest.approx(750e-6), pytest.approx(400e-6))
    assert r0.exposed_comm_s == pytest.approx(250e-6)
    assert r0.idle_s == pytest.approx(250e-6)  # all of its idle is exposed comm
    # rank 1: busy 200 + 240, comm 200 + 60, exposed [200, 300] + [700, 760], idle 560
    assert (r1.busy_s, r1.comm_s) == (pytest.approx(440e-6), pytest.approx(260e-6))
    assert r1.exposed_comm_s == pytest.approx(160e-6)
    assert r1.idle_s == pytest.approx(560e-6)  # 400 of it runs nothing at all


def test_exposed_comm_is_clipped_to_the_window(tmp_path: Path) -> None:
    path = write(tmp_path, MERGED)
    r0, r1 = analyze([load_trace(path)], window_start_us=650, window_end_us=950).devices
    # rank 0 in [650, 950]: compute [850, 950], comm [650, 900], exposed [650, 850]
    assert (r0.busy_s, r0.comm_s) == (pytest.approx(100e-6), pytest.approx(250e-6))
    assert r0.exposed_comm_s == pytest.approx(200e-6) and r0.idle_s == pytest.approx(200e-6)
    # rank 1 in [650, 950]: compute [760, 950], comm [700, 760], all of it exposed
    assert (r1.busy_s, r1.comm_s) == (pytest.approx(190e-6), pytest.approx(60e-6))
    assert r1.exposed_comm_s == pytest.approx(60e-6) and r1.idle_s == pytest.approx(110e-6)


def test_comm_under_compute_is_not_exposed_and_json_has_the_key(tmp_path: Path) -> None:
    """An all-reduce wholly under a GEMM on another stream exposes nothing; a rank with no
    communication exposes nothing either. Files one per rank."""
    hidden = write(tmp_path, [kernel(0, 7, GEMM, 0, 500), kernel(0, 20, ALLREDUCE, 100, 400)],
                   "rank0.json")
    alone = write(tmp_path, [kernel(0, 7, GEMM, 0, 300)], "rank1.json")
    report = analyze([load_trace(hidden), load_trace(alone)])
    d0, d1 = report.devices
    assert (d0.comm_s, d0.exposed_comm_s) == (pytest.approx(300e-6), 0.0)
    assert (d1.comm_s, d1.exposed_comm_s) == (0.0, 0.0)
    out = report.to_json()["devices"]
    assert [d["exposed_comm_s"] for d in out] == [0.0, 0.0]
    assert set(out[0]) >= {"rank", "busy_s", "comm_s", "idle_s", "busy_share", "source",
                           "label", "exposed_comm_s"}


intervals = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 60)).map(lambda t: (min(t), max(t))),
    max_size=10,
)


@settings(max_examples=150, deadline=None)
@given(intervals, intervals)
def test_difference_matches_a_unit_grid(a: list[tuple[int, int]],
                                        b: list[tuple[int, int]]) -> None:
    covered_a = {t for lo, hi in a for t in range(lo, hi)}
    covered_b = {t for lo, hi in b for t in range(lo, hi)}
    assert difference_length(a, b) == len(covered_a - covered_b)


def test_difference_length_exact() -> None:
    assert difference_length([], [(0, 5)]) == 0
    assert difference_length([(0, 10)], []) == 10
    assert difference_length([(0, 10), (5, 12)], [(2, 3), (11, 20)]) == 10  # [0,2] [3,11]
    assert difference_length([(0, 2), (4, 6)], [(1, 5)]) == 2
