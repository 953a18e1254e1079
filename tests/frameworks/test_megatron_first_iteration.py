"""Megatron-LM logs from megatron-core 0.16 on: the line after a run's first iteration
resets nothing (training.py ``should_reset = not is_first_iteration``), so the next
line's mean includes that first iteration; and logs copied while the job still writes
them. Values derived by hand below."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.errors import BadInput
from pptune.frameworks.common.joblog import steady_step_s
from pptune.frameworks.logs import read_log
from pptune.frameworks.megatron.log import read
from tests.frameworks.test_job_logs import megatron_iteration


def _log(tmp_path: Path, lines: list[str], end: str = "\n") -> Path:
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + end)
    return path


def test_the_line_after_the_first_iteration_is_taken_without_it(tmp_path: Path) -> None:
    # iteration 1 took 95 s, every later one 16 s: megatron-core 0.16 prints iteration 10
    # as the mean of 1..10, (95 + 9 x 16) / 10 = 23.9 s; without iteration 1,
    # (10 x 23.9 - 95) / 9 = 16 s exactly
    lines = [megatron_iteration(1, 95000.0, tflops=100.0), megatron_iteration(10, 23900.0,
             tflops=200.0), megatron_iteration(20, 16000.0, tflops=298.75)]
    log = read_log(_log(tmp_path, lines), "megatron")
    by = {s.iteration: s for s in log.steps}
    assert by[10].step_s == pytest.approx(16.0)
    assert by[10].tflops_per_gpu == pytest.approx(200.0 * 23.9 / 16.0)  # the same FLOPs
    assert by[1].step_s == pytest.approx(95.0) and by[20].step_s == pytest.approx(16.0)
    assert any("(10 x 23900.0 - 95000.0) / 9 = 16000.0 ms" in n for n in log.notes)
    steady = steady_step_s(log, None, "log")
    assert steady.step_s == pytest.approx(16.0) and steady.used == (10, 20)


def test_its_timers_are_divided_by_the_log_interval() -> None:
    # timers.log(normalizer=log_interval=10): after iteration 1 forward-backward reads
    # 90 / 10 = 9 ms; at iteration 10, (90 + 9 x 15) / 10 = 22.5 ms; without iteration 1
    # 10 x (22.5 - 9) / 9 = 15 ms an iteration
    block = "(min, max) time across ranks (ms):\n    forward-backward ......: ({lo}, {hi})"
    text = "\n".join(["    log_interval .................................... 10",
                      megatron_iteration(1, 95000.0), block.format(lo=8.0, hi=9.0),
                      megatron_iteration(10, 23900.0), block.format(lo=20.0, hi=22.5),
                      megatron_iteration(20, 16000.0), block.format(lo=14.0, hi=15.0)])
    log = read(text + "\n")
    timers = {s.iteration: dict(s.timers_ms) for s in log.steps}
    assert timers[10]["forward-backward"] == pytest.approx(15.0)
    assert timers[20]["forward-backward"] == pytest.approx(15.0)


def test_after_a_resume_the_runs_first_line_is_its_first_iteration() -> None:
    # resumed at 500: lines at 501, 510, 520; 510's mean covers 501..510, n = 10
    text = "\n".join([" loading distributed checkpoint from /ckpt at iteration 500",
                      megatron_iteration(501, 60000.0), megatron_iteration(510, 20400.0),
                      megatron_iteration(520, 16000.0)])
    by = {s.iteration: s.step_s for s in read(text + "\n").steps}
    assert by[510] == pytest.approx((10 * 20.4 - 60.0) / 9)  # 16 s


def test_a_log_of_an_earlier_release_is_read_as_printed() -> None:
    # before 0.16 no line at the first iteration: the first at a multiple of the interval
    # (left out as warm-up), each later one its own interval's mean
    text = "\n".join(megatron_iteration(i, ms) for i, ms in
                     ((10, 21000.0), (20, 16000.0), (30, 16100.0)))
    log = read(text + "\n")
    assert [s.step_s for s in log.steps] == pytest.approx([21.0, 16.0, 16.1])
    assert not log.notes


def test_at_interval_one_the_first_lines_neighbour_is_left_out() -> None:
    # every iteration printed: 0.16 on, line 2 is the mean of 1 and 2; earlier releases
    # line 2 alone; the lines cannot tell, so line 2 is no steady measurement
    text = "\n".join(megatron_iteration(i, ms) for i, ms in
                     ((1, 95000.0), (2, 55500.0), (3, 16000.0), (4, 16200.0)))
    steady = steady_step_s(read(text + "\n"), None, "log")
    assert steady.used == (3, 4) and steady.step_s == pytest.approx(16.1)
    # its figure is (t1 + t2) / 2 under 0.16 (training.py should_reset = not
    # is_first_iteration): said so, not as "the run's first iteration in its interval"
    assert ("iteration 2 left out (its figure averages in iteration 1 too: megatron-core "
            "0.16 on does not reset the interval timer after the run's first line "
            "(training.py should_reset))") in steady.notes


def test_at_interval_one_a_log_of_two_lines_is_refused_in_those_words() -> None:
    text = "\n".join(megatron_iteration(i, ms) for i, ms in ((1, 95000.0), (2, 55500.0)))
    with pytest.raises(BadInput, match=r"every steady Megatron-LM line is left out \(its "
                                       r"figure averages in iteration 1 too"):
        steady_step_s(read(text + "\n"), None, "log")


def test_a_last_line_still_being_written_is_left_out(tmp_path: Path) -> None:
    lines = [megatron_iteration(i, 16000.0) for i in (10, 20, 30)]
    cut = megatron_iteration(40, 16000.0).split("elapsed time per iteration (ms): ")[0]
    log = read_log(_log(tmp_path, [*lines, cut + "elapsed time per iteration (ms): 1"],
                        end=""), "megatron")
    assert [s.iteration for s in log.steps] == [10, 20, 30]
    assert any("last line has no line break" in n for n in log.notes)
    whole = read_log(_log(tmp_path, lines, end=""), "megatron")  # its line is whole, but
    assert [s.iteration for s in whole.steps] == [10, 20]  # unfinished as far as told


def test_a_gzipped_log_is_read_and_a_damaged_one_named(tmp_path: Path) -> None:
    import gzip

    from pptune.errors import BadInput

    text = "\n".join(megatron_iteration(i, 16000.0) for i in (10, 20, 30)) + "\n"
    path = tmp_path / "train.log.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert [s.iteration for s in read_log(path, "megatron").steps] == [10, 20, 30]
    path.write_bytes(gzip.compress(text.encode())[:40])  # cut: no gzip trailer
    with pytest.raises(BadInput, match="is gzip-compressed but cannot be uncompressed"):
        read_log(path, "megatron")


def test_every_ranks_copy_of_the_line_is_taken_alike() -> None:
    # two ranks' output gathered: each line twice in a row (one run, logruns.runs)
    lines = [megatron_iteration(i, ms) for i, ms in ((1, 95000.0), (10, 23900.0),
                                                    (20, 16000.0)) for _ in range(2)]
    log = read("\n".join(lines) + "\n")
    assert [s.step_s for s in log.steps] == pytest.approx([95.0, 95.0, 16.0, 16.0, 16.0, 16.0])
    assert len(log.notes) == 1
