"""Reading nccl-tests output: both column layouts, which test, which link, the fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.errors import BadInput
from pptune.probe.fit import fit_alpha_beta
from pptune.probe.nccl_tests import load_nccl_tests, parse_nccl_tests

DATA = Path(__file__).resolve().parent.parent / "data" / "nccl"


def _fit(table):  # type: ignore[no-untyped-def]
    f = table.bus_factor()
    return fit_alpha_beta([(r.size_bytes * f, r.time_s) for r in table.rows])


def test_current_layout_all_reduce_8_gpus_one_host() -> None:
    (t,) = load_nccl_tests(DATA / "all_reduce_perf_8xh100.txt")
    assert t.test == "all_reduce"
    assert t.layout == "#wrong"
    assert t.ranks == 8
    assert t.scope == "intra_node"
    assert t.devices[0] == "NVIDIA H100 80GB HBM3"
    assert len(t.rows) == 28  # 8 B .. 1 GiB
    first, last = t.rows[0], t.rows[-1]
    assert (first.size_bytes, first.count, first.dtype, first.redop, first.root) == (8, 2, "float", "sum", -1)
    assert last.size_bytes == 1 << 30
    assert last.check == "0"
    # units: time us -> s, GB/s -> bytes/s; busbw = algbw * 2(n-1)/n
    assert last.time_s == pytest.approx(last.size_bytes / last.algbw_bytes_per_s, rel=0.01)
    assert t.bus_factor() == pytest.approx(1.75)
    assert last.busbw_bytes_per_s == pytest.approx(1.75 * last.algbw_bytes_per_s, rel=0.01)
    assert last.inplace_time_s is not None and last.inplace_time_s > 0
    fit = _fit(t)
    assert fit.latency_s == pytest.approx(24e-6, rel=0.1)
    assert fit.bytes_per_s == pytest.approx(360e9, rel=0.15)  # bus bandwidth


def test_current_layout_sendrecv_across_two_hosts_skips_interleaved_log_lines() -> None:
    (t,) = load_nccl_tests(DATA / "sendrecv_perf_2nodes.txt")
    assert t.test == "sendrecv"
    assert t.scope == "inter_node"
    assert sorted(set(t.hosts)) == ["gpu-a", "gpu-b"]
    assert len(t.rows) == 19  # the NCCL INFO line inside the table is not a row
    assert t.bus_factor() == 1.0
    assert all(r.busbw_bytes_per_s == r.algbw_bytes_per_s for r in t.rows)
    fit = _fit(t)
    assert fit.latency_s == pytest.approx(18.5e-6, rel=0.1)
    assert fit.bytes_per_s == pytest.approx(46e9, rel=0.1)


def test_older_layout_error_column_no_root_detected_from_columns() -> None:
    # no "Collective test starting" line, no test name in the file name:
    # redop "sum", root absent, busbw == algbw with 2 ranks -> all-reduce
    (t,) = load_nccl_tests(DATA / "old_layout_2xv100.log")
    assert t.layout == "error"
    assert t.test == "all_reduce"
    assert t.ranks == 2
    assert t.rows[0].root is None
    assert t.rows[0].check == "0e+00"
    fit = _fit(t)
    assert fit.latency_s == pytest.approx(11.2e-6, rel=0.1)
    assert fit.bytes_per_s == pytest.approx(21.5e9, rel=0.1)


def test_older_layout_sendrecv_named_by_file_with_na_check_column() -> None:
    (t,) = load_nccl_tests(DATA / "sendrecv_perf_old_2xv100.txt")
    assert (t.test, t.layout, t.scope) == ("sendrecv", "error", "intra_node")
    assert t.rows[0].check == "N/A"
    fit = _fit(t)
    assert fit.latency_s == pytest.approx(9.7e-6, rel=0.1)
    assert fit.bytes_per_s == pytest.approx(11.8e9, rel=0.1)


def test_two_runs_in_one_file_give_two_tables() -> None:
    text = (DATA / "all_reduce_perf_8xh100.txt").read_text() + (
        DATA / "sendrecv_perf_2nodes.txt"
    ).read_text()
    tables = parse_nccl_tests(text, "both.log")
    assert [(t.test, t.scope, len(t.rows)) for t in tables] == [
        ("all_reduce", "intra_node", 28),
        ("sendrecv", "inter_node", 19),
    ]


def _retitle(text: str, test: str) -> str:
    return text.replace("all_reduce_perf", f"{test}_perf")


def test_other_collectives_are_refused_with_their_name(tmp_path: Path) -> None:
    src = (DATA / "all_reduce_perf_8xh100.txt").read_text()
    path = tmp_path / "gather.txt"
    path.write_text(_retitle(src, "all_gather"))
    with pytest.raises(BadInput, match=r"all_gather_perf output; pptune reads all_reduce_perf"):
        load_nccl_tests(path)


def test_all_gather_told_apart_from_sendrecv_by_bus_ratio() -> None:
    # no title: redop none, busbw = algbw * (n-1)/n -> all_gather, not sendrecv
    rows = "\n".join(
        f"{s:12d} {s // 4:13d}     float    none      -1    {t:6.1f} {s / t / 1e3:7.2f} "
        f"{s / t / 1e3 * 0.75:7.2f}      0    {t:6.1f} {s / t / 1e3:7.2f} {s / t / 1e3 * 0.75:7.2f}      0"
        for s, t in ((1 << 20, 100.0), (1 << 22, 300.0), (1 << 24, 1100.0))
    )
    head = [
        ln for ln in (DATA / "all_reduce_perf_8xh100.txt").read_text().splitlines()
        if ln.startswith("#") and ("out-of-place" in ln or "size" in ln or "(B)" in ln)
    ]
    (t,) = parse_nccl_tests("\n".join(head) + "\n" + rows, "x.txt")
    assert t.test == "all_gather"


def test_no_table_is_a_one_line_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_text("mpirun: command not found\n")
    with pytest.raises(BadInput, match="no nccl-tests result table") as err:
        load_nccl_tests(path)
    assert "\n" not in str(err.value)
    with pytest.raises(BadInput, match="file not found"):
        load_nccl_tests(tmp_path / "missing.txt")


def test_single_rank_all_reduce_measures_no_link(tmp_path: Path) -> None:
    lines = (DATA / "all_reduce_perf_8xh100.txt").read_text().splitlines()
    one = [ln for ln in lines if "Rank  1 " not in ln and "Rank  2" not in ln
           and "Rank  3" not in ln and "Rank  4" not in ln and "Rank  5" not in ln
           and "Rank  6" not in ln and "Rank  7" not in ln]
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text("\n".join(one))
    with pytest.raises(BadInput, match="1 rank"):
        load_nccl_tests(path)
