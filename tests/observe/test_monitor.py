"""monitor's aggregation and sampling with a fake sampler, and its table (pure;
the command itself is tested in tests/cli/test_cli_monitor.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.observe.monitor import GpuReading, collect, n_samples, summarize
from pptune.observe.render import monitor_table
from pptune.report.render import render_plain

GIB = 2**30


def reading(pct: float, gib: float) -> GpuReading:
    return GpuReading(util_share=pct / 100, mem_used_bytes=int(gib * GIB))


# two GPUs, four samples: GPU 0 busy, GPU 1 starved by the bubble
SAMPLES = [
    [reading(90, 10), reading(40, 8)],
    [reading(100, 12), reading(30, 9)],
    [reading(80, 11), reading(70, 9.5)],
    [reading(98, 12), reading(20, 7)],
]


# ---------------------------------------------------------------- aggregation


def test_summarize_exact() -> None:
    r = summarize(
        SAMPLES, ["NVIDIA H100", "NVIDIA H100"], mem_total_bytes=[80 * GIB, 80 * GIB],
        interval_s=0.5, elapsed_s=1.5,
    )
    g0, g1 = r.gpus
    assert g0.avg_util_share == pytest.approx(0.92) and g0.min_util_share == pytest.approx(0.8)
    assert g0.peak_mem_bytes == 12 * GIB and g0.samples == 4 and not g0.flagged
    assert g1.avg_util_share == pytest.approx(0.40) and g1.min_util_share == pytest.approx(0.2)
    assert g1.peak_mem_bytes == int(9.5 * GIB) and g1.flagged
    assert r.flagged == [1]
    out = r.to_json()
    assert out["flagged"] == [1] and out["interval_s"] == 0.5
    assert out["gpus"][1] == {
        "index": 1, "name": "NVIDIA H100", "samples": 4, "avg_util_share": pytest.approx(0.4),
        "min_util_share": pytest.approx(0.2), "peak_mem_bytes": int(9.5 * GIB),
        "mem_total_bytes": 80 * GIB,
    }


def test_threshold_is_strict_and_adjustable() -> None:
    flat = [[reading(60, 1)]] * 3
    assert summarize(flat, ["g"]).flagged == []  # exactly 60% is not under 60%
    assert summarize(flat, ["g"], min_util=0.61).flagged == [0]
    assert summarize(SAMPLES, ["a", "b"], min_util=0.0).flagged == []


def test_summarize_refuses_empty_or_ragged_samples() -> None:
    with pytest.raises(ValueError, match="no samples"):
        summarize([], ["g"])
    with pytest.raises(ValueError, match="1 readings for 2 GPUs"):
        summarize([[reading(1, 1)]], ["a", "b"])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 100), min_size=3, max_size=3), min_size=1, max_size=30),
    st.floats(0, 1),
)
def test_average_lies_between_min_and_max(utils: list[list[int]], threshold: float) -> None:
    samples = [[reading(u, 1) for u in row] for row in utils]
    r = summarize(samples, ["a", "b", "c"], min_util=threshold)
    for g in r.gpus:
        col = [row[g.index] / 100 for row in utils]
        assert g.min_util_share == min(col)
        assert min(col) - 1e-12 <= g.avg_util_share <= max(col) + 1e-12
        assert g.flagged == (g.avg_util_share < threshold)


# ---------------------------------------------------------------- sampling


class FakeClock:
    """A clock that only moves when slept on, or when a read takes time."""

    def __init__(self) -> None:
        self.t = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s


def test_collect_samples_on_a_fixed_grid() -> None:
    clock = FakeClock()
    taken: list[float] = []

    def read():
        taken.append(clock.t)
        clock.t += 0.1  # each read costs 0.1 s: the grid must not drift
        return [reading(50, 1)]

    samples, elapsed, stopped = collect(read, 0.5, 2.0, sleep=clock.sleep, clock=clock)
    assert len(samples) == n_samples(0.5, 2.0) == 4
    assert taken == pytest.approx([100.0, 100.5, 101.0, 101.5])
    assert clock.sleeps == pytest.approx([0.4, 0.4, 0.4])
    assert elapsed == pytest.approx(1.6) and not stopped


def test_collect_takes_one_sample_for_a_short_duration() -> None:
    clock = FakeClock()
    samples, _, _ = collect(lambda: [reading(1, 1)], 1.0, 0.2, sleep=clock.sleep, clock=clock)
    assert len(samples) == 1 and clock.sleeps == []


def test_ctrl_c_keeps_what_was_sampled() -> None:
    clock = FakeClock()
    calls = iter([[reading(90, 2)], [reading(70, 3)]])

    def read():
        try:
            return next(calls)
        except StopIteration:
            raise KeyboardInterrupt from None

    samples, _, stopped = collect(read, 0.5, 10, sleep=clock.sleep, clock=clock)
    assert stopped and len(samples) == 2
    r = summarize(samples, ["g"], interval_s=0.5, elapsed_s=1.0, stopped_early=True)
    assert r.gpus[0].avg_util_share == pytest.approx(0.8) and r.to_json()["stopped_early"]


def test_collect_refuses_non_positive_times() -> None:
    with pytest.raises(ValueError):
        collect(list, 0, 1)


def test_monitor_table() -> None:
    r = summarize(
        SAMPLES, ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"],
        mem_total_bytes=[80 * GIB, 80 * GIB], interval_s=0.5, elapsed_s=1.5,
    )
    text = render_plain(monitor_table(r), width=100)
    assert "4 samples every 500.0 ms over 1.500 s" in text
    assert "flag under 60.0% average utilisation" in text
    rows = [line for line in text.splitlines() if "H100" in line]
    assert len(rows) == 2
    assert "92.0%" in rows[0] and "80.0%" in rows[0] and "12.00 GiB / 80.00 GiB" in rows[0]
    assert "LOW UTIL" not in rows[0]
    assert "40.0%" in rows[1] and "20.0%" in rows[1] and "LOW UTIL" in rows[1]
