"""Training logs as the frameworks print them: each line below is built with the
frameworks' own format strings, copied from their logging code (cited per test), so
the ``.format`` calls stay as the frameworks write them."""

# ruff: noqa: UP032

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
    warm_up_left_out,
)
from pptune.frameworks.logs import read_log
from pptune.frameworks.registry import ADAPTERS, Framework


def megatron_iteration(iteration: int, ms: float, tflops: float | None = None,
                       stamp: bool = True, batch: int = 128, loss: float = 7.25,
                       skipped: int = 0, nan: int = 0) -> str:
    """megatron/training/training.py ``training_log`` (NVIDIA/Megatron-LM d98e8a6,
    lines 3567-3620), the keys in its order; ``skipped`` and ``nan`` are the counts of
    the interval the line closes (reset after each line)."""
    log_string = " [2026-08-22 15:22:22.123456]" if stamp else ""
    log_string += ' iteration {:8d}/{:8d} |'.format(iteration, 5000)
    log_string += ' consumed samples: {:12d} |'.format(iteration * batch)
    log_string += ' elapsed time per iteration (ms): {:.1f} |'.format(ms)
    if tflops is not None:
        log_string += f' throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |'
    log_string += f' learning rate: {3e-4:.6E} |'
    log_string += f' global batch size: {batch:5d} |'
    log_string += ' {}: {:.6E} |'.format("lm loss", loss)
    log_string += f' loss scale: {1.0:.1f} |'
    log_string += f' grad norm: {1.234:.3f} |'
    log_string += ' number of skipped iterations: {:3d} |'.format(skipped)
    log_string += ' number of nan iterations: {:3d} |'.format(nan)
    return log_string


def megatron_after_first(first_ms: float, ms: float, n: int = 10) -> float:
    """What megatron-core 0.16 on prints on the line after a run's first iteration, when
    every later iteration takes ``ms``: the mean over the run's first ``n`` iterations,
    the first included (training.py ``should_reset = not is_first_iteration``)."""
    return (first_ms + (n - 1) * ms) / n


def megatron_world(world: int, dp: int, pp: int = 1, cp: int = 1) -> str:
    """megatron/training/arguments.py ``validate_args``, on rank 0 at start-up."""
    return (f"using world size: {world}, data-parallel size: {dp}, context-parallel size: "
            f"{cp}, hierarchical context-parallel sizes: None, tensor-model-parallel size: "
            f"{world // (dp * pp * cp)}, pipeline-model-parallel size: {pp}")


def megatron_memory(rank: int, iteration: int, max_reserved_mb: float) -> str:
    """megatron/training/utils/common_utils.py ``report_memory`` (lines 313-334)."""
    string = f"(after {iteration} iterations)" + ' memory (MB)'
    string += f" | allocated: {max_reserved_mb * 0.6:.2f}"
    string += f" | max allocated: {max_reserved_mb * 0.9:.2f}"
    string += f" | reserved: {max_reserved_mb:.2f}"
    string += f" | max reserved: {max_reserved_mb:.2f}"
    return "[Rank {}] {}".format(rank, string)


RED, GREEN, ORANGE, TURQUOISE, BLUE, CYAN, MAGENTA, RESET = (
    "\033[31m", "\033[32m", "\033[38;2;180;60;0m", "\033[38;2;54;234;195m", "\033[34m",
    "\033[36m", "\033[35m", "\033[39m")  # torchtitan/tools/utils.py Color (v0.2.2)


def torchtitan_step(step: int, tps: float, tflops: float, mfu: float | None,
                    gib: float) -> str:
    """torchtitan/components/metrics.py ``MetricsProcessor.log`` (v0.2.2, lines 461-470),
    through the ``[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s`` logger."""
    mfu_str = f"{mfu:.2f}%" if mfu is not None else "N/A"
    message = (
        f"{RED}step: {step:2}  "
        f"{GREEN}loss: {7.1234:8.5f}  "
        f"{ORANGE}grad_norm: {1.2345:7.4f}  "
        f"{TURQUOISE}memory: {gib:5.2f}GiB"
        f"({gib / 80 * 100:.2f}%)  "
        f"{BLUE}tps: {round(tps):,}  "
        f"{CYAN}tflops: {tflops:,.2f}  "
        f"{MAGENTA}mfu: {mfu_str}{RESET}"
    )
    return f"[titan] 2025-07-15 13:49:37,000 - root - INFO - {message}"


def deepspeed_pipe(step: int, iter_time: float, batch: int = 64) -> str:
    """deepspeed/runtime/pipe/engine.py ``train_batch`` (deepspeedai/DeepSpeed edaa722,
    lines 398-409)."""
    log_str = f'steps: {step} loss: {2.3456:0.4f} '
    log_str += f'iter time (s): {iter_time:0.3f} samples/sec: {batch / iter_time:0.3f}'
    return log_str


def deepspeed_timer(step: int, step_s: float, max_gb: float, batch: int = 64) -> str:
    """deepspeed/utils/timer.py ``ThroughputTimer.stop`` (lines 263-272), through
    DeepSpeed's logger."""
    msg = ("epoch={}/micro_step={}/global_step={}, RunningAvgSamplesPerSec={}, "
           "CurrSamplesPerSec={}, MemAllocated={}GB, MaxMemAllocated={}GB".format(
               0, step * 8, step, batch / step_s * 0.98, batch / step_s, round(max_gb * 0.5, 2),
               round(max_gb, 2)))
    return f"[2026-08-22 12:19:04,000] [INFO] [timer.py:264:stop] {msg}"


def test_megatron_iteration_lines_and_memory(tmp_path: Path) -> None:
    lines = [megatron_iteration(1, 19138.8, 80.2), megatron_memory(0, 1, 16334.0),
             megatron_memory(2, 1, 13236.0)]
    printed = megatron_after_first(19138.8, 12936.1)  # 13556.37 ms, 113.3 TFLOP/s
    lines += [megatron_iteration(10, printed, 118.7 * 12936.1 / printed)]
    lines += [megatron_iteration(i, ms, 118.7) for i, ms in
              ((20, 12900.0), (30, 13050.5), (40, 12990.0))]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    log = read_log(path, Framework.MEGATRON)
    assert [s.iteration for s in log.steps] == [1, 10, 20, 30, 40]
    # iteration 10 without iteration 1 in its mean (and its TFLOP/s so)
    assert log.steps[1] == LoggedStep(10, step_s=pytest.approx(12.9361, abs=1e-4),
                                      tflops_per_gpu=pytest.approx(118.7, rel=1e-3),
                                      global_batch=128)
    assert log.steps[0].memory_bytes == pytest.approx(16334.0 * MIB)  # reported after it
    assert log.peak_memory_bytes == pytest.approx(16334.0 * MIB)
    steady = steady_step_s(log, None, "train.log")
    # iteration 1 (start-up) is left out; the median of 12.9361, 12.9, 13.0505, 12.99
    assert steady.skipped == (1,) and steady.used == (10, 20, 30, 40)
    assert steady.step_s == pytest.approx((12.9361 + 12.99) / 2, abs=1e-4)


def test_megatron_2021_lines_without_timestamp_or_throughput() -> None:
    text = "\n".join(megatron_iteration(i, 1500.0 + i, stamp=False) for i in (100, 200, 300))
    log = ADAPTERS[Framework.MEGATRON].read_log(text)
    assert log is not None and [s.step_s for s in log.steps] == pytest.approx([1.6, 1.7, 1.8])
    assert log.peak_memory_bytes is None


def test_torchtitan_metrics_lines_in_colour() -> None:
    text = "\n".join([
        torchtitan_step(1, 812.0, 40.1, 4.05, 61.2),
        torchtitan_step(10, 5678.4, 123.45, 39.12, 70.5),
        torchtitan_step(20, 5702.0, 124.0, None, 70.9),  # mfu N/A under FP8
        "[titan] 2025-07-15 13:50:00,000 - root - INFO - validate step: 20  loss:  7.0000  "
        "memory: 10.00GiB(12.50%)  tps: 9,999",
    ])
    log = ADAPTERS[Framework.TORCHTITAN].read_log(text)
    assert log is not None
    assert [s.iteration for s in log.steps] == [1, 10, 20]
    assert log.steps[1].tokens_per_s_per_gpu == 5678  # printed rounded with a comma
    assert log.steps[1].mfu == pytest.approx(0.3912) and log.steps[2].mfu is None
    assert log.peak_memory_bytes == pytest.approx(70.9 * GIB)
    # 8 GPUs, global batch 32 of 8192 tokens: a step is 32 x 8192 / (8 x tps)
    steady = steady_step_s(log, JobSize(32, 8192, 8), "titan.log")
    assert steady.step_s == pytest.approx(32 * 8192 / 8 / ((5678 + 5702) / 2), rel=1e-3)


def test_deepspeed_pipeline_lines_win_over_the_throughput_timer() -> None:
    text = "\n".join([deepspeed_timer(10, 0.52, 23.4), deepspeed_pipe(10, 0.512),
                      deepspeed_timer(20, 0.50, 23.9), deepspeed_pipe(20, 0.498),
                      deepspeed_pipe(30, 0.505)])
    log = ADAPTERS[Framework.DEEPSPEED].read_log(text)
    assert log is not None and [s.step_s for s in log.steps] == [0.512, 0.498, 0.505]
    assert log.peak_memory_bytes == pytest.approx(23.9 * GIB)
    assert "max allocated" in log.memory_what


def test_deepspeed_throughput_timer_alone_gives_the_step_from_the_batch() -> None:
    text = "\n".join(deepspeed_timer(i, 0.4 + i / 1000, 12.0) for i in (10, 20, 30, 40))
    log = ADAPTERS[Framework.DEEPSPEED].read_log(text)
    assert log is not None
    steady = steady_step_s(log, JobSize(64, 2048, 16), "ds.log")
    assert steady.step_s == pytest.approx(0.43, rel=1e-6)  # median of 0.42, 0.43, 0.44


def test_a_log_of_another_framework_is_named(tmp_path: Path) -> None:
    path = tmp_path / "titan.log"
    path.write_text(torchtitan_step(10, 5000, 100, 30, 50) + "\n")
    with pytest.raises(BadInput, match=r"is a torchtitan log .* the config is Megatron-LM's"):
        read_log(path, Framework.MEGATRON)


def test_a_log_without_iteration_lines(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_text("building GPT model ...\n> number of parameters on rank 0: 1234\n")
    with pytest.raises(BadInput, match="has no DeepSpeed iteration lines"):
        read_log(path, Framework.DEEPSPEED)
    with pytest.raises(BadInput, match="pptune reads no log format of pptune configs"):
        read_log(path, Framework.PPTUNE)


def test_only_warm_up_lines_are_refused() -> None:
    log = JobLog("megatron", "Megatron-LM", (LoggedStep(1, step_s=2.0),))
    with pytest.raises(BadInput, match="all warm-up"):
        steady_step_s(log, None, "x.log")
    steps = tuple(LoggedStep(i, step_s=float(i)) for i in (10, 20, 30))
    got = steady_step_s(JobLog("megatron", "Megatron-LM", steps), None, "x.log", warmup=20)
    assert got.step_s == 30.0 and got.skipped == (10, 20)


def test_an_iteration_several_ranks_printed_counts_once() -> None:
    # ranks 3 and 7 both print iterations 10-40 (torchrun's [default3]: prefixes): four
    # iterations, not eight lines; 10 the warm-up, the median of 20, 30 and 40 (2, 3, 4 s)
    steps = tuple(LoggedStep(i, step_s=i / 10) for i in (10, 10, 20, 20, 30, 30, 40, 40))
    got = steady_step_s(JobLog("megatron", "Megatron-LM", steps), None, "x.log")
    assert got.used == (20, 30, 40) and got.skipped == (10,)
    assert got.step_s == 3.0
    assert got.notes == ["4 line(s) repeat iterations already printed (several ranks' "
                         "output): each iteration counted once"]


def test_the_warm_up_left_out_is_said_as_lines() -> None:
    assert warm_up_left_out((10,), None) == "the warm-up line, iteration 10, left out"
    assert warm_up_left_out((10, 20), 20) == (
        "the warm-up lines, iterations 10, 20, left out: --warmup 20")
    assert warm_up_left_out((10, 20, 30, 40, 50), 50) == (
        "5 warm-up lines, iterations 10 to 50, left out: --warmup 50")
    assert warm_up_left_out((), 0) == "no warm-up left out: --warmup 0"


def test_a_zero_step_in_the_log_is_refused() -> None:
    steps = (LoggedStep(1, step_s=1.0), LoggedStep(2, step_s=0.0))
    with pytest.raises(BadInput, match="states a step of 0 s"):
        steady_step_s(JobLog("deepspeed", "DeepSpeed", steps), None, "x.log")


def test_the_world_size_the_logs_state() -> None:
    # torchtitan ParallelDims.build_mesh: f"Building {len(dims)}-D device mesh with
    # {names}, {dims}", a dimension of 1 left out
    mesh = ("[rank0]:2025-02-13 11:33:12,140 - root - INFO - Building 2-D device mesh with "
            "['dp_shard', 'tp'], [4, 2]")
    titan = ADAPTERS[Framework.TORCHTITAN].read_log(
        "\n".join([mesh, torchtitan_step(10, 5000, 100, 30, 50)]))
    assert titan is not None and titan.world_size == 8
    one = ADAPTERS[Framework.TORCHTITAN].read_log(
        "Building 0-D device mesh with [], []\n" + torchtitan_step(10, 5000, 100, 30, 50))
    assert one is not None and one.world_size == 1
    # torchtitan 0.2.1 and later: the degrees by name; ep and etp are carved from the rest
    degrees = ("[rank0]:[titan] 2026-01-11 20:13:44,956 - root - INFO - Building device mesh "
               "with parallelism: pp=2, dp_replicate=2, dp_shard=16, cp=2, tp=8, ep=8, etp=1")
    titan = ADAPTERS[Framework.TORCHTITAN].read_log(
        "\n".join([degrees, torchtitan_step(10, 5000, 100, 30, 50)]))
    assert titan is not None and titan.world_size == 2 * 2 * 16 * 2 * 8
    # Megatron-LM validate_args (rank 0) and _print_args' dump
    for line in ("using world size: 16, data-parallel size: 4, context-parallel size: 1, "
                 "tensor-model-parallel size: 2, pipeline-model-parallel size: 2",
                 "  world_size ...................................... 16"):
        log = ADAPTERS[Framework.MEGATRON].read_log(line + "\n" + megatron_iteration(10, 900.0))
        assert log is not None and log.world_size == 16
    assert ADAPTERS[Framework.MEGATRON].read_log(megatron_iteration(10, 900.0)).world_size is None  # type: ignore[union-attr]


def test_a_megatron_deepspeed_log_is_timed_by_megatrons_lines() -> None:
    # deepspeed/utils/timer.py lines beside Megatron-DeepSpeed's iteration lines (the
    # latter without a timestamp, as Megatron-DeepSpeed prints them)
    text = "\n".join([deepspeed_timer(10, 0.40, 12.0), megatron_iteration(10, 450.0, stamp=False),
                      deepspeed_timer(20, 0.41, 12.0), megatron_iteration(20, 460.0, stamp=False)])
    log = ADAPTERS[Framework.DEEPSPEED].read_log(text)
    assert log is not None and log.title == "Megatron-DeepSpeed"
    assert [s.step_s for s in log.steps] == [0.45, 0.46]
    assert log.peak_memory_bytes == pytest.approx(12.0 * GIB)  # the timer's: Megatron's absent


def test_a_nemo_log_is_named_with_the_step_its_lines_give(tmp_path: Path) -> None:
    path = tmp_path / "nemo.log"
    # NeMo 2's progress line (Lightning's logged train_step_timing), as printed
    path.write_text("\n".join(
        f"Training epoch 0, iteration {i}/99 | lr: 6.897e-06 | global_batch_size: 128 | "
        f"global_step: {i} | reduced_train_loss: 11.96 | train_step_timing in s: {t} | "
        f"consumed_samples: {128 * i}" for i, t in ((1, 9.5), (2, 6.1), (3, 6.3), (4, 6.2))))
    for fmt in (Framework.MEGATRON, Framework.PPTUNE):
        with pytest.raises(BadInput, match=r"is a NeMo log \(4 train_step_timing line\(s\), "
                           r"median after the first 6\.2 s\).*--step-s"):
            read_log(path, fmt)
