"""probe's plain progress (stderr no terminal) says a step still running after
``every_s`` seconds, at most one line every ``every_s`` seconds (the user trial's R7: one
CPU step of a large MoE block printed nothing for six minutes, which a CI log reads as a
hang); its thread stops with the phase: no line after the step ended, no hang at exit."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

import pytest
from rich.console import Console

from pptune.cli.probe import RichReporter

LABEL = "pptune: layers of m on cpu: "


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _reporter(terminal: bool = False, poll_s: float = 3600.0) -> tuple[RichReporter, Clock,
                                                                       io.StringIO]:
    out, clock = io.StringIO(), Clock()
    console = Console(file=out, force_terminal=terminal, width=200)
    return RichReporter(console, clock=clock, poll_s=poll_s), clock, out


def _lines(out: io.StringIO) -> list[str]:
    return [line.removeprefix(LABEL) for line in out.getvalue().splitlines()]


def test_a_slow_step_says_it_is_still_running_once_every_30_s() -> None:
    """poll_s an hour: the thread never ticks; ``beat`` is what it calls each tick."""
    reporter, clock, out = _reporter()
    reporter.start("layers of m on cpu", 3)
    clock.now += 5
    reporter.advance("layer.0 @ micro-batch 1")  # the first step's line: 5 s
    reporter.begin("layer.1 @ micro-batch 1")
    for at in (134.0, 135.0, 150.0, 165.0):  # 29, 30, 45 and 60 s into step 2
        clock.now = at
        reporter.beat()
    clock.now = 170.0
    reporter.advance("layer.1 @ micro-batch 1")  # 5 s after the last line: none
    clock.now = 194.0
    reporter.beat()  # the line 29 s ago, step 3 24 s in: none
    clock.now = 200.0
    reporter.beat()  # 35 s since the last line but step 3 only 30 s in: it says so
    clock.now = 201.0
    reporter.advance("layer.2 @ micro-batch 1")
    reporter.beat()  # the phase is over: nothing is running
    reporter.finish()
    assert _lines(out) == [
        "0/3 ...",
        "1/3, 5 s, layer.0 @ micro-batch 1",
        "2/3 (layer.1 @ micro-batch 1): still running after 30 s",
        "2/3 (layer.1 @ micro-batch 1): still running after 60 s",
        "3/3: still running after 30 s",  # no begin() for it: no description
        "3/3 done, 101 s",
    ]


def test_the_first_step_too() -> None:
    reporter, clock, out = _reporter()
    reporter.start("layers of m on cpu", 2)
    clock.now += 31
    reporter.beat()
    reporter.finish()
    assert _lines(out) == ["0/2 ...", "1/2: still running after 31 s", "0/2 done, 31 s"]


def _until(check: Callable[[], bool], limit_s: float = 10.0) -> bool:
    end = time.monotonic() + limit_s
    while not check() and time.monotonic() < end:
        time.sleep(0.001)
    return check()


def test_the_thread_says_it_and_stops_with_the_phase() -> None:
    reporter, clock, out = _reporter(poll_s=0.001)
    reporter.start("layers of m on cpu", 2)
    thread = reporter.beating
    assert thread is not None and thread.daemon and thread.is_alive()
    reporter.begin("layer.0 @ micro-batch 1")
    clock.now += 45
    assert _until(lambda: "still running" in out.getvalue()), out.getvalue()
    reporter.finish()
    assert not thread.is_alive() and reporter.beating is None  # joined, not left behind
    said = out.getvalue()
    clock.now += 1000
    time.sleep(0.02)  # twenty polls, were it still polling
    assert out.getvalue() == said
    assert _lines(out) == ["0/2 ...", "1/2 (layer.0 @ micro-batch 1): still running after 45 s",
                           "0/2 done, 45 s"]


def test_a_terminal_has_no_thread() -> None:
    reporter, clock, out = _reporter(terminal=True, poll_s=0.001)
    reporter.start("layers of m on cpu", 1)
    assert reporter.beating is None
    reporter.begin("layer.0 @ micro-batch 1")
    clock.now += 100
    reporter.beat()
    reporter.advance("layer.0 @ micro-batch 1")
    reporter.finish()
    assert "still running" not in out.getvalue()


@pytest.mark.torch
def test_the_probe_names_the_step_running() -> None:
    """A real CPU probe of gpt-small with every_s 0: a step running is said, by the name
    measure_model gives it before timing it (none while its layer is built); nothing
    after the phase's last line."""
    from pptune.probe.build import run_probe
    from pptune.probe.options import ProbeOptions

    out = io.StringIO()

    class Waiting(RichReporter):
        """Holds the first named step until the thread has said it (a CPU step of
        gpt-small takes less than a poll on a loaded host: without the wait, whether the
        thread looks while it runs is the scheduler's choice)."""

        def begin(self, description: str) -> None:
            super().begin(description)
            deadline = time.monotonic() + 10
            while (description.startswith("embed") and "still running" not in out.getvalue()
                   and time.monotonic() < deadline):
                time.sleep(0.001)

    reporter = Waiting(Console(file=out, force_terminal=False, width=200), every_s=0.0,
                       poll_s=0.001)
    run_probe(ProbeOptions(model="gpt-small", comm=False, micro_batch_sizes=[1], repeats=1,
                           warmup=0, seq_len=8), reporter)
    assert reporter.beating is None
    lines = out.getvalue().splitlines()
    assert any(x.endswith("(embed @ micro-batch 1): still running after 0 s") for x in lines)
    assert lines[-1].startswith("pptune: layers of gpt-small on cpu: 8/8 done, "), lines
