"""Chrome trace-event export: structure, counts, durations, transfers."""

import json
from collections import Counter, defaultdict

import pytest

from pptune.costmodel.simulate import Link, simulate, uniform_stages
from pptune.report.trace import chrome_trace, trace_json, write_trace


def by_phase(trace: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for e in trace["traceEvents"]:
        out[e["ph"]].append(e)
    return out


def test_written_trace_loads_back_with_one_event_per_op(tmp_path) -> None:
    r = simulate("1f1b", 4, 8, uniform_stages(4, 1e-3, 2e-3))
    path = tmp_path / "step.trace.json"
    write_trace(path, r)
    trace = json.loads(path.read_text())
    assert trace["displayTimeUnit"] == "ms"
    assert trace["otherData"]["schedule"] == "1f1b"
    assert trace["otherData"]["p"] == 4 and trace["otherData"]["m"] == 8
    complete = by_phase(trace)["X"]
    assert len(complete) == len(r.events) == 4 * 8 * 2
    assert Counter(e["pid"] for e in complete) == {d: 16 for d in range(4)}
    # durations (microseconds) sum to each device's busy time
    busy_us: dict[int, float] = defaultdict(float)
    for e in complete:
        assert e["tid"] == 0
        busy_us[e["pid"]] += e["dur"]
    for d, dev in enumerate(r.devices):
        assert busy_us[d] == pytest.approx(dev.busy_s * 1e6)
    # the last op ends at the makespan
    assert max(e["ts"] + e["dur"] for e in complete) == pytest.approx(r.step_time_s * 1e6)
    assert not list(tmp_path.glob(".*"))  # no temp file left behind


def test_event_names_args_and_colours() -> None:
    r = simulate("zbv", 2, 4, uniform_stages(4, 1.0, 1.0, 1.0))
    complete = by_phase(chrome_trace(r))["X"]
    first = min((e for e in complete if e["pid"] == 1), key=lambda e: e["ts"])
    assert first["name"] == "F0 s1"
    assert first["args"] == {"mb": 0, "stage": 1, "kind": "F"}
    assert first["ts"] == pytest.approx(1e6) and first["dur"] == pytest.approx(1e6)
    assert {e["args"]["kind"] for e in complete} == {"F", "B", "W"}
    assert {e["cname"] for e in complete} == {"good", "bad", "rail_response"}
    # zbv: device 0 runs both the first and the last stage
    assert {e["args"]["stage"] for e in complete if e["pid"] == 0} == {0, 3}


def test_metadata_names_each_device_track() -> None:
    trace = chrome_trace(simulate("1f1b", 3, 3, uniform_stages(3, 1.0, 1.0)), name="demo")
    meta = by_phase(trace)["M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert names == {0: "dev0", 1: "dev1", 2: "dev2"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    # no transfers on a free link -> no p2p thread
    assert threads == {(d, 0): "compute" for d in range(3)}
    assert trace["otherData"]["name"] == "demo"


def test_transfers_go_on_the_senders_p2p_thread() -> None:
    r = simulate(
        "1f1b", 4, 8, uniform_stages(4, 1e-3, 2e-3, out_bytes=1e6),
        link=lambda _s, _d: Link(latency_s=1e-5, bytes_per_s=1e9),
    )
    trace = chrome_trace(r)
    sends = [e for e in by_phase(trace)["X"] if e["tid"] == 1]
    # every forward but the last stage's sends forward; every backward but stage 0's sends back
    assert len(sends) == len(r.transfers) == 2 * 3 * 8
    for e in sends:
        assert e["dur"] == pytest.approx((1e-5 + 1e6 / 1e9) * 1e6)
        assert e["pid"] == e["args"]["src"]
        assert abs(e["args"]["dst"] - e["args"]["src"]) == 1
    assert sends[0]["name"].startswith("send F0 s0 -> dev1")
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in by_phase(trace)["M"] if e["name"] == "thread_name"
    }
    assert threads[(0, 1)] == "p2p send"
    # compute events still one per op
    assert sum(1 for e in by_phase(trace)["X"] if e["tid"] == 0) == len(r.events)


def test_zero_length_result_is_valid_json() -> None:
    r = simulate("gpipe", 2, 2, uniform_stages(2, 0.0, 0.0))
    trace = json.loads(trace_json(r))
    complete = by_phase(trace)["X"]
    assert len(complete) == len(r.events) == 8
    assert all(e["dur"] == 0 for e in complete)
