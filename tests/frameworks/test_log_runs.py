"""Logs of several runs (relaunches, restarts) and lines that are no steady measurement:
the last run kept, its warm-up left out, what was left out said. The lines are built with
the frameworks' own format strings (tests/frameworks/test_job_logs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.errors import BadInput
from pptune.frameworks.common.joblog import (
    GIB,
    MIB,
    JobLog,
    JobSize,
    LoggedStep,
    steady_step_s,
)
from pptune.frameworks.common.logruns import runs
from pptune.frameworks.logs import read_log
from pptune.frameworks.registry import Framework
from tests.frameworks.test_job_logs import (
    deepspeed_pipe,
    megatron_after_first,
    megatron_iteration,
    megatron_memory,
    megatron_world,
    torchtitan_step,
)


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_runs_split_at_a_start_up_and_where_iterations_go_back() -> None:
    def its(steps: list[tuple[int, int]]) -> list[list[int]]:
        return [[s.iteration for s in run]
                for run in runs([LoggedStep(i, start=k) for i, k in steps])]

    assert its([(1, 0), (10, 0), (20, 0), (1, 1), (10, 1)]) == [[1, 10, 20], [1, 10]]
    # a restart from an earlier checkpoint, no start-up line: 21 after 30
    assert its([(1, 0), (10, 0), (20, 0), (30, 0), (21, 0), (30, 0)]) == [
        [1, 10, 20, 30], [21, 30]]
    # one iteration printed twice in a row (two ranks' copies) is not a restart
    assert its([(10, 0), (10, 0), (20, 0)]) == [[10, 10, 20]]


def test_a_relaunch_in_the_same_log_is_left_out_with_its_world_and_memory(
        tmp_path: Path) -> None:
    path = _write(tmp_path, [
        megatron_world(8, 4), megatron_iteration(1, 30000.0), megatron_memory(0, 1, 70000.0),
        megatron_iteration(10, 20000.0), megatron_iteration(20, 20100.0),
        "===== relaunch =====",
        megatron_world(16, 8), megatron_iteration(1, 25000.0), megatron_memory(0, 1, 60000.0),
        megatron_iteration(10, megatron_after_first(25000.0, 10000.0)),
        megatron_iteration(20, 10200.0),
        megatron_iteration(30, 10100.0)])
    log = read_log(path, Framework.MEGATRON)
    assert [s.iteration for s in log.steps] == [1, 10, 20, 30]
    assert log.world_size == 16  # the last run's, not the first's 8
    assert log.peak_memory_bytes == pytest.approx(60000.0 * MIB)  # not the first run's 70000
    assert log.notes[-1] == ("it holds 2 runs (split at a start-up line): calibrating the last, "
                         "iterations 1-30 on 16 GPUs (4 line(s)); left out: iterations 1-20 "
                         "on 8 GPUs (3 line(s))")
    steady = steady_step_s(log, None, "train.log")
    # the last run's own first line (25 s) is its warm-up: median of 10.0, 10.2, 10.1
    assert steady.skipped == (1,) and steady.step_s == pytest.approx(10.1)
    assert log.notes[0].startswith("iteration 10's mean includes the run's first, 1 ")


@pytest.mark.parametrize(("resume", "why"), [
    # megatron/training/checkpointing.py _load_base_checkpoint, on resuming
    (" loading distributed checkpoint from /lustre/ckpt at iteration 20", "a start-up line"),
    (None, "iteration 21 after 30"),
])
def test_a_restart_that_replays_iterations_is_its_own_run(tmp_path: Path, resume: str | None,
                                                          why: str) -> None:
    lines = [megatron_world(16, 8), megatron_iteration(1, 30000.0),
             *(megatron_iteration(i, 10000.0) for i in (10, 20, 30))]
    lines += [resume] if resume else []
    lines += [megatron_iteration(21, 50000.0),  # 30: the mean of 21..30, 21 included
              megatron_iteration(30, megatron_after_first(50000.0, 12000.0)),
              megatron_iteration(40, 12400.0)]
    log = read_log(_write(tmp_path, lines), Framework.MEGATRON)
    assert log.notes[-1] == (f"it holds 2 runs (split at {why}): calibrating the last, iterations "
                         "21-40 on 16 GPUs (3 line(s)); left out: iterations 1-30 on 16 GPUs "
                         "(4 line(s))")
    steady = steady_step_s(log, JobSize(128, 8192, 16), "train.log")
    # 21 is the restart's warm-up (50 s); not one median over both runs (10 s)
    assert steady.skipped == (21,) and steady.step_s == pytest.approx((12.0 + 12.4) / 2)


def test_a_last_run_of_warm_up_alone_is_refused_naming_the_runs_left_out(
        tmp_path: Path) -> None:
    lines = [megatron_iteration(i, 10000.0) for i in (1, 10, 20)] + [
        megatron_iteration(11, 40000.0)]
    log = read_log(_write(tmp_path, lines), Framework.MEGATRON)
    with pytest.raises(BadInput, match=r"^x\.log: its 1 Megatron-LM iteration line\(s\) are "
                       r"all warm-up \(the first line printed\) \(the log's last run; left "
                       r"out: iterations 1-20 \(3 line\(s\)\)\); give a longer log"):
        steady_step_s(log, None, "x.log")


def test_intervals_with_skipped_or_nan_iterations_are_left_out(tmp_path: Path) -> None:
    # Megatron-LM prints a nan average as {:.6E} does: NAN
    lines = [megatron_iteration(1, 30000.0), megatron_iteration(10, 11000.0),
             megatron_iteration(20, 9000.0, skipped=2), megatron_iteration(30, 11200.0),
             megatron_iteration(40, 9500.0, nan=1, loss=float("nan")),
             megatron_iteration(50, 11100.0)]
    log = read_log(_write(tmp_path, lines), Framework.MEGATRON)
    assert [s.unsteady for s in log.steps] == [
        "", "", "skipped iterations", "", "nan iterations, a nan loss", ""]
    steady = steady_step_s(log, None, "x.log")
    assert steady.used == (10, 30, 50) and steady.step_s == pytest.approx(11.1)
    assert steady.notes == ["iterations 20, 40 left out (skipped iterations, nan iterations "
                            "or a nan loss in their intervals)"]
    bad = [megatron_iteration(1, 30000.0)] + [megatron_iteration(i, 9000.0, skipped=10)
                                                for i in (10, 20)]
    with pytest.raises(BadInput, match="every steady Megatron-LM line counts skipped "
                                       "iterations in its interval"):
        steady_step_s(read_log(_write(tmp_path, bad), Framework.MEGATRON), None, "x.log")


def test_one_steady_line_is_said_to_be_one() -> None:
    log = JobLog("megatron", "Megatron-LM", (LoggedStep(1, step_s=30.0),
                                             LoggedStep(10, step_s=11.0)))
    steady = steady_step_s(log, None, "x.log")
    assert steady.step_s == 11.0
    assert steady.notes == ["the step is one line's, iteration 10, not a median over "
                            "several: a longer log gives a steadier figure"]


def test_the_global_batch_the_lines_state_is_the_jobs(tmp_path: Path) -> None:
    size = JobSize(128, 8192, 16)
    ramp = [megatron_iteration(1, 5000.0, batch=32), megatron_iteration(10, 5000.0, batch=64),
            megatron_iteration(20, 5100.0, batch=64), megatron_iteration(30, 9000.0),
            megatron_iteration(40, 9200.0)]
    log = read_log(_write(tmp_path, ramp), Framework.MEGATRON)
    steady = steady_step_s(log, size, "x.log")
    assert steady.used == (30, 40) and steady.step_s == pytest.approx(9.1)
    assert steady.notes == ["iterations 10, 20 left out: their global batch size, 64, is not "
                            "the job's 128 (a batch-size ramp-up)"]
    other = [megatron_iteration(i, 9000.0, batch=256) for i in (1, 10, 20)]
    with pytest.raises(BadInput) as err:
        steady_step_s(read_log(_write(tmp_path, other), Framework.MEGATRON), size, "x.log")
    assert str(err.value) == (
        "x.log: its Megatron-LM lines state a global batch size of 256, but the config's job "
        "has 128 (samples a step): the log is of another job; give the log of the job the "
        "config describes, or --global-batch where the config leaves the batch open")


def test_torchtitan_runs_split_at_the_mesh_and_a_nan_loss_is_left_out(tmp_path: Path) -> None:
    mesh = "[titan] 2025-07-15 13:49:00,000 - root - INFO - Building 1-D device mesh with " \
           "['dp_shard'], [{}]"
    nan = torchtitan_step(30, 9000, 100, 30, 51.0).replace(
        f"loss: {7.1234:8.5f}", f"loss: {float('nan'):8.5f}")  # metrics.py's {loss:8.5f}
    lines = [mesh.format(8), torchtitan_step(1, 900, 10, 3, 60.0),
             torchtitan_step(10, 5000, 100, 30, 61.0),
             mesh.format(16), torchtitan_step(1, 900, 10, 3, 50.0),
             torchtitan_step(10, 8000, 100, 30, 51.0), torchtitan_step(20, 8200, 100, 30, 51.5),
             nan]
    log = read_log(_write(tmp_path, lines), Framework.TORCHTITAN)
    assert log.world_size == 16 and log.peak_memory_bytes == pytest.approx(51.5 * GIB)
    assert log.notes[0].endswith("left out: steps 1-10 on 8 GPUs (2 line(s))")
    steady = steady_step_s(log, JobSize(16, 8192, 16), "x.log")
    # steps 10 and 20 (30's loss is nan): 16 x 8192 / (16 x tps), median of the two
    assert steady.used == (10, 20)
    assert steady.step_s == pytest.approx((8192 / 8000 + 8192 / 8200) / 2)
    assert steady.notes == ["step 30 left out (a nan loss in its interval)"]


def test_deepspeed_steps_keep_the_order_printed(tmp_path: Path) -> None:
    # a restart from step 10 printing steps again: the earlier 10-30 are another run
    lines = [deepspeed_pipe(i, t) for i, t in ((10, 0.5), (20, 0.5), (30, 0.5), (10, 0.9),
                                                (20, 0.7), (30, 0.71))]
    log = read_log(_write(tmp_path, lines), Framework.DEEPSPEED)
    assert [s.step_s for s in log.steps] == [0.9, 0.7, 0.71]
    assert steady_step_s(log, None, "x.log").step_s == pytest.approx(0.705)


def test_a_restart_with_only_its_warm_up_gives_way_to_the_run_before(tmp_path: Path) -> None:
    # a trial: the restart's one line (95 s) was all that was left, and --warmup 0, which
    # the refusal suggested, calibrated on it (6x slow)
    lines = [megatron_world(16, 8), megatron_iteration(1, 30000.0),
             megatron_iteration(10, megatron_after_first(30000.0, 16000.0)),
             megatron_iteration(20, 16100.0), megatron_iteration(30, 15900.0),
             " loading distributed checkpoint from /ckpt at iteration 30",
             megatron_world(16, 8), megatron_iteration(31, 95000.0)]
    log = read_log(_write(tmp_path, lines), Framework.MEGATRON)
    assert [s.iteration for s in log.steps] == [1, 10, 20, 30]
    assert log.notes[-1] == (
        "it holds 2 runs (split at a start-up line): calibrating the one before the last, "
        "whose iteration 31 on 16 GPUs (1 line(s)) is only its warm-up so far, on the same "
        "GPUs, iterations 1-30 on 16 GPUs (4 line(s)); left out: iteration 31 on 16 GPUs "
        "(1 line(s))")
    assert steady_step_s(log, None, "train.log").step_s == pytest.approx(16.0, abs=1e-4)
    # on other GPUs the restart is another job: kept, and refused as all warm-up
    other = [*lines[:-2], megatron_world(8, 4), megatron_iteration(31, 95000.0)]
    log = read_log(_write(tmp_path, other), Framework.MEGATRON)
    assert [s.iteration for s in log.steps] == [31]
