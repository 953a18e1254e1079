"""Megatron-LM's timers in its training log (``--timing-log-level`` 1 or 2): the
step's measured parts beside the iteration line, as ``Timers.log`` prints them."""

from __future__ import annotations

import pytest

from pptune.frameworks.common.joblog import steady_timers_ms
from pptune.frameworks.registry import ADAPTERS, Framework
from tests.frameworks.test_job_logs import megatron_iteration


def megatron_timers(times: dict[str, tuple[float, float]], option: str = "minmax") -> str:
    """megatron/core/timers.py ``Timers.get_all_timers_string`` (NVIDIA/Megatron-LM
    00caa53): per timer its (min, max) over the ranks, already divided by the log
    interval (``training_log`` passes ``normalizer=args.log_interval``)."""
    if option == "all":
        out = "times across ranks (ms):"
        for name, (low, high) in times.items():
            out += f"\n  {name}:"
            out += f"\n     rank {0:2d}: {low:.2f}"
            out += f"\n     rank {1:2d}: {high:.2f}"
        return out
    out = "max time across ranks (ms):" if option == "max" else (
        "(min, max) time across ranks (ms):")
    for name, (low, high) in times.items():
        if option == "max":
            out += "\n    {}: {:.2f}".format((name + " ").ljust(48, "."), high)
        else:
            out += "\n    {}: ({:.2f}, {:.2f})".format((name + " ").ljust(48, "."), low, high)
    return out


TIMES = {"forward-backward": (11800.5, 12001.25), "all-grads-sync": (80.0, 95.5),
         "params-all-gather": (40.0, 41.0), "optimizer": (150.0, 160.75)}


@pytest.mark.parametrize("option", ["minmax", "max", "all"])
def test_each_iteration_line_takes_the_timers_printed_after_it(option: str) -> None:
    lines = []
    # a log as releases before megatron-core 0.16 print it: no line after the first
    # iteration, each line its interval's (0.16's first-iteration line:
    # test_megatron_first_iteration.py)
    for i, scale in ((10, 2.0), (20, 1.0), (30, 1.0), (40, 1.1)):
        lines.append(megatron_iteration(i, 12400.0 * scale))
        lines.append(megatron_timers({k: (lo * scale, hi * scale)
                                      for k, (lo, hi) in TIMES.items()}, option))
    log = ADAPTERS[Framework.MEGATRON].read_log("\n".join(lines))
    assert log is not None
    # the slowest rank's time of each (what the step waits for), per iteration line
    assert dict(log.steps[1].timers_ms) == {k: hi for k, (_, hi) in TIMES.items()}
    assert dict(log.steps[0].timers_ms)["forward-backward"] == pytest.approx(24002.5)
    assert dict(log.steps[-1].timers_ms) == pytest.approx(  # the block that ends the log
        {k: hi * 1.1 for k, (_, hi) in TIMES.items()}, abs=0.006)
    # the median over the lines the step's median used (iterations 20-40): 1.0, 1.0, 1.1
    steady = steady_timers_ms(log, (20, 30, 40))
    assert steady == pytest.approx({k: hi for k, (_, hi) in TIMES.items()})


def test_a_timer_block_ends_at_the_first_other_line_and_prefixes_are_kept_apart() -> None:
    # srun --label prefixes every line with its task; the logger may prefix the header
    head, *rows = megatron_timers(TIMES).splitlines()
    text = "\n".join([megatron_iteration(10, 12400.0), "7: INFO:megatron.core.timers:" + head,
                      *("7: " + r for r in rows),
                      "7: some other line: (1.00, 2.00)",
                      "    optimizer ......................................: (9.00, 9.00)"])
    log = ADAPTERS[Framework.MEGATRON].read_log(text)
    assert log is not None
    assert dict(log.steps[0].timers_ms) == {k: hi for k, (_, hi) in TIMES.items()}


def test_lines_without_timers_give_none() -> None:
    text = "\n".join(megatron_iteration(i, 12400.0) for i in (1, 10, 20))
    log = ADAPTERS[Framework.MEGATRON].read_log(text)
    assert log is not None and all(not s.timers_ms for s in log.steps)
    assert steady_timers_ms(log, (10, 20)) == {}
