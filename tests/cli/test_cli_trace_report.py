"""`pptune trace-report` through the CLI: table and finding, JSON contract, flags,
bad input as one line, and real torch.profiler traces (CPU; GPU where there is one)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.observe.trace_report import SOURCE_CPU, SOURCE_GPU
from tests.report.columns import check_columns

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"
GPU = [TRACES / "gpu_rank0.json", TRACES / "gpu_rank1.json"]
Cli = Callable[..., Result]  # the ``cli`` fixture of tests/conftest.py
ErrorLine = Callable[[Result], str]  # its ``error_line`` fixture

@pytest.fixture
def run(cli: Cli) -> Cli:
    return lambda *args: cli("trace-report", *args)


# ---------------------------------------------------------------- CLI


def test_cli_table_and_finding(run: Cli) -> None:
    res = run(*GPU)
    assert res.exit_code == 1
    assert "rank0" in res.stdout and "rank1" in res.stdout and "BUBBLE" in res.stdout
    assert "pptune: finding: rank 1 busy 20.0%" in res.stderr
    assert "rank 0" not in res.stderr


def test_a_trace_given_twice_counts_once_and_says_so(run: Cli, tmp_path: Path) -> None:
    copy = tmp_path / "copy.json"
    copy.write_bytes(GPU[1].read_bytes())
    res = run(GPU[0], GPU[1], GPU[0], copy, "--json")
    assert [d["rank"] for d in json.loads(res.stdout)["devices"]] == [0, 1]
    assert (f"pptune: {GPU[0]} is given twice: counted once (one trace is one rank's, or one "
            "merged file of every rank's)") in res.stderr
    assert f"pptune: {copy} holds the same bytes as {GPU[1]}: counted once" in res.stderr


def test_cli_threshold_decides_the_exit_code(run: Cli) -> None:
    assert run(*GPU, "--min-busy", "0.1").exit_code == 0
    assert run(*GPU, "--min-busy", "0.7").exit_code == 1
    assert run(TRACES / "bare_list.json").exit_code == 0


def test_cli_json_contract(run: Cli) -> None:
    res = run(*GPU, "--json", "--steps", "2")
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    assert set(out) >= {"devices", "window_s", "flagged"}
    assert out["flagged"] == [1] and out["window_s"] == pytest.approx(0.002)
    assert out["steps"] == [1, 2]
    d0 = out["devices"][0]
    assert set(d0) >= {"rank", "busy_s", "comm_s", "idle_s", "busy_share"}
    assert (d0["rank"], d0["busy_s"], d0["comm_s"], d0["idle_s"]) == (0, 0.0013, 0.0002, 0.0007)


def test_cli_exposed_comm_in_json_table_and_finding(
        run: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu_rank0: its SendRecv [500, 600] us of each step runs beside no kernel (200 us in
    two steps); gpu_rank1: its SendRecv [50, 600] ends as its GEMM starts (1.1 ms)."""
    out = json.loads(run(*GPU, "--json").stdout)
    assert [d["exposed_comm_s"] for d in out["devices"]] == [0.0002, 0.0011]
    monkeypatch.setenv("COLUMNS", "80")
    res = run(*GPU)
    check_columns(res.stdout, 80, ["exposed comm = comm with no compute beside it"])
    header = next(line for line in res.stdout.splitlines() if "device" in line)
    assert all(name in header for name in ("busy", "comm", "exposed", "idle", "busy %"))
    row1 = next(line for line in res.stdout.splitlines() if "rank1" in line)
    assert "1.1 ms" in row1 and "1.6 ms" in row1  # exposed 1.1 ms of idle 1.6 ms
    assert "(idle 1.6 ms, of it exposed comm 1.1 ms; comm 1.1 ms)" in res.stderr


def test_help_says_how_exposed_comm_meets_the_predicted_bubble(run: Cli) -> None:
    text = " ".join(run("--help").stdout.split())
    assert "exposed comm" in text and "predicted bubble" in text


def test_cli_window_flags(run: Cli) -> None:
    res = run(*GPU, "--json", "--window-start-us", "100", "--window-end-us", "500")
    out = json.loads(res.stdout)
    assert out["window_s"] == pytest.approx(400e-6)
    assert [d["busy_share"] for d in out["devices"]] == [pytest.approx(1.0), 0.0]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b"{not json", "not JSON"),
        (b'{"schemaVersion": 1}', "without 'traceEvents'"),
        (b'{"traceEvents": {"ph": "X"}}', "expected a list"),
        (b'"a string"', "not a Chrome trace"),
        (b'{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "no timed events"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "binary data"),
        (b"\x1f\x8b\x08\x00garbage", "broken gzip"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_cli_bad_input_is_one_line(
    tmp_path: Path, content: bytes | None, needle: str, run: Cli, error_line: ErrorLine
) -> None:
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_bytes(content)
    line = error_line(run(path))
    assert needle in line and str(path) in line


def test_cli_directory_and_bad_flags(tmp_path: Path, run: Cli, error_line: ErrorLine) -> None:
    assert "is a directory" in error_line(run(tmp_path))
    assert "--min-busy" in error_line(run(*GPU, "--min-busy", "60"))
    assert "only 2 ProfilerStep" in error_line(run(*GPU, "--steps", "5"))


def test_help_has_an_example(run: Cli) -> None:
    res = run("--help")
    assert res.exit_code == 0
    assert "pptune trace-report rank0.json" in res.stdout
    for flag in ("--json", "--min-busy", "--steps", "--window-start-us", "--window-end-us"):
        assert flag in res.stdout


# ---------------------------------------------------------------- real traces


def _profile_tiny_model(path: Path, device: str, steps: int = 4) -> None:
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)
    ).to(device)
    x = torch.randn(16, 64, device=device)
    with profile(
        activities=acts,
        schedule=schedule(wait=0, warmup=1, active=steps - 1, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(steps):
            model(x).sum().backward()
            if device == "cuda":
                torch.cuda.synchronize()
            time.sleep(0.002)  # a known gap: the share cannot be 1
            prof.step()


@pytest.mark.torch
def test_real_cpu_trace_from_torch_profiler(tmp_path: Path, run: Cli) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "trace.json"
    _profile_tiny_model(path, "cpu")
    res = run(path, "--json", "--min-busy", "0.6")
    out = json.loads(res.stdout)
    (dev,) = out["devices"]
    assert dev["source"] == SOURCE_CPU
    assert 0 < dev["busy_share"] <= 1
    assert dev["busy_s"] + dev["idle_s"] == pytest.approx(out["window_s"], rel=1e-6)
    assert res.exit_code == (1 if dev["busy_share"] < 0.6 else 0)
    assert out["flagged"] == ([0] if res.exit_code == 1 else [])
    # the 2 ms sleeps are idle, so demanding 100% busy is a finding; 0% never is
    assert run(path, "--min-busy", "1").exit_code == 1
    assert run(path, "--min-busy", "0").exit_code == 0
    # the schedule recorded ProfilerStep annotations: --steps reads them
    res = run(path, "--json", "--steps", "2")
    assert res.exit_code in (0, 1)
    steps_out = json.loads(res.stdout)
    assert len(steps_out["steps"]) == 2
    assert 0 < steps_out["window_s"] <= out["window_s"]


@pytest.mark.gpu
def test_real_gpu_trace_counts_kernels(tmp_path: Path, run: Cli) -> None:
    path = tmp_path / "trace.json"
    _profile_tiny_model(path, "cuda")
    res = run(path, "--json", "--min-busy", "0")
    assert res.exit_code == 0
    out = json.loads(res.stdout)
    assert [d["source"] for d in out["devices"]] == [SOURCE_GPU]
    assert 0 < out["devices"][0]["busy_share"] <= 1


def test_reads_the_trace_simulate_writes(cli: Cli, tmp_path: Path) -> None:
    """simulate --trace writes one pid a device with "compute" and "p2p" events: read as
    pptune ops, each device's busy time is the simulator's own."""
    trace = tmp_path / "sim.json"
    r = cli("simulate", "--pp", "2", "-m", "4", "--fwd-ms", "1", "--bwd-ms", "2", "--json",
            "--trace", str(trace))
    assert r.exit_code == 0, r.stderr
    sim = json.loads(r.stdout)
    r = cli("trace-report", str(trace), "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    busy = [d["busy_s"] for d in doc["devices"]]
    assert busy == pytest.approx([d["busy_s"] for d in sim["devices"]], rel=1e-6)
    assert {d["source"] for d in doc["devices"]} == {"pptune ops"}


def test_a_trace_without_ops_is_refused_in_one_line(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"traceEvents": [
        {"name": "x", "ph": "X", "ts": 0, "dur": 5, "pid": 0, "tid": 0}]}))
    r = cli("trace-report", str(path))
    assert r.exit_code == 2 and "not a torch.profiler" in r.stderr


def test_a_rank_file_over_two_gpus_is_said_and_reported_per_gpu(run: Cli, tmp_path: Path
                                                                ) -> None:
    r0, r1 = (json.loads(p.read_text()) for p in GPU)
    r0["traceEvents"] += [{**e, "ts": e["ts"] + 1e6} if "ts" in e else e
                          for e in r1["traceEvents"]]
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps(r0))
    res = run(merged, "--json")
    assert res.exit_code == 1  # GPU 1 is busy 20%: flagged, as in its own file
    out = json.loads(res.stdout)
    assert [(d["rank"], d["device"]) for d in out["devices"]] == [(0, 0), (1, 1)]
    assert out["flagged"] == [1]
    assert f"pptune: {merged} is rank 0 (its distributedInfo) but its kernels ran on 2 GPUs" \
        in res.stderr
