"""Timing inside a validate rank: op stamps, the loss alone, and contention.

- ``Stamper`` records (kind, micro-batch, stage, start, end) of the calls
  ``torch_hooks`` routes through it, on the host clock (CUDA events placed on
  it through an anchor event at the step start);
- ``time_loss`` times the loss alone on the rank holding the last stage (the
  profile's head excludes it; ``compare`` adds it to the prediction);
- ``contention`` measures how much the ranks slow each other down when they
  compute at once (``compare`` applies the ratio).

torch is passed in, never imported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pptune.launch.stats import median
from pptune.validate.measure import OpStamp

LOSS_REPEATS = 7
LOSS_WARMUP = 2
CONTENTION_ROUNDS = 3
CONTENTION_REPEATS = 3


class Stamper:
    """Records (kind, mb, stage, start, end) of wrapped calls on the host clock."""

    def __init__(self, torch: Any, cuda: bool, whole_backward: str = "B") -> None:
        self.torch = torch
        self.cuda = cuda
        # the kind a whole backward (backward_one_chunk(full_backward=True)) is stamped
        # as: B, or BW in a schedule that also runs split ones beside it (DualPipeV)
        self.whole_backward = whole_backward
        self.open: list[tuple[str, int, int, Any, Any]] = []
        self.anchor: Any = None
        self.t0_ns = 0

    def begin(self, t0_ns: int) -> None:
        self.open = []
        self.t0_ns = t0_ns
        if self.cuda:
            self.anchor = self.torch.cuda.Event(enable_timing=True)
            self.anchor.record()

    def wrap(self, fn: Callable[..., Any], kind: str, stage: int) -> Callable[..., Any]:
        """``fn`` stamped as op ``kind`` of ``stage``; its first argument is the micro-batch."""
        def timed(*args: Any, **kwargs: Any) -> Any:
            mb = int(args[0]) if args else int(next(iter(kwargs.values()), -1))
            shown = self.whole_backward if kind == "B" and kwargs.get("full_backward") else kind
            start = self.now()
            try:
                return fn(*args, **kwargs)
            finally:
                self.open.append((shown, mb, stage, start, self.now()))

        return timed

    def now(self) -> Any:
        if self.cuda:
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter_ns()

    def resolve(self) -> tuple[OpStamp, ...]:
        """The step's ops in nanoseconds (call after the step, once synchronised)."""
        if not self.cuda:
            return tuple(OpStamp(*op) for op in self.open)
        out = []
        for kind, mb, stage, a, b in self.open:
            start = self.t0_ns + int(self.anchor.elapsed_time(a) * 1e6)
            end = self.t0_ns + int(self.anchor.elapsed_time(b) * 1e6)
            out.append(OpStamp(kind, mb, stage, start, end))
        return tuple(out)


def keep_first_input(store: dict[int, Any], index: int) -> Callable[..., None]:
    def hook(module: Any, args: tuple[Any, ...]) -> None:
        if index not in store and args and hasattr(args[0], "is_meta") and not args[0].is_meta:
            store[index] = args[0].detach().clone()

    return hook


def contention(
    torch: Any, dist: Any, modules: list[Any], inputs: dict[int, Any], rank: int, world: int,
    cuda: bool, device: str,
) -> tuple[float | None, float | None, list[float]]:
    """This rank's reference work (its stages' forwards) timed alone, then with every rank at once.

    ``CONTENTION_ROUNDS`` rounds, each: every rank in turn runs the work
    ``CONTENTION_REPEATS`` times while the others wait in a barrier, then all
    ranks run it over and over for the same wall-clock window (the slowest
    rank's alone time x repeats), so every timed run overlaps the others'.
    The round's ratio is the median together over the median alone; several
    rounds keep a burst of outside load to one round, not the figure.
    ``together / alone`` is the slowdown ranks inflict on each other when
    they compute at the same time: on a CPU host they share cores, caches and
    memory bandwidth (and the host's other load); on GPUs, one per rank, it
    stays near 1. Returns the median alone and together times and the ratios.
    """
    if not inputs:
        return None, None, []

    def once() -> float:
        with torch.no_grad():
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter_ns()
            for i, x in inputs.items():
                modules[i](x)
            if cuda:
                torch.cuda.synchronize(device)
        return (time.perf_counter_ns() - t0) / 1e9

    once()  # warm
    alones: list[float] = []
    togethers: list[float] = []
    ratios: list[float] = []
    for _ in range(CONTENTION_ROUNDS):
        alone = 0.0
        for r in range(world):
            dist.barrier()
            if r == rank:
                alone = median([once() for _ in range(CONTENTION_REPEATS)])
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, alone)
        window = max(float(a) for a in everyone) * CONTENTION_REPEATS
        dist.barrier()
        deadline = time.perf_counter() + window
        runs = [once()]
        while time.perf_counter() < deadline:
            runs.append(once())
        together = median(runs)
        alones.append(alone)
        togethers.append(together)
        if alone > 0:
            ratios.append(together / alone)
    dist.barrier()
    return median(alones), median(togethers), ratios


def time_loss(
    torch: Any, loss_fn: Callable[[Any, Any], Any], last: dict[str, Any], device: str, cuda: bool
) -> tuple[float, float]:
    """Median forward and backward time of ``loss_fn`` alone, on a tensor like the last output."""
    fwd, bwd = [], []
    target = last["target"]
    for i in range(LOSS_WARMUP + LOSS_REPEATS):
        out = torch.randn(last["shape"], dtype=last["dtype"], device=device, requires_grad=True)
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter_ns()
        loss = loss_fn(out, target)
        if cuda:
            torch.cuda.synchronize(device)
        t1 = time.perf_counter_ns()
        loss.backward()
        if cuda:
            torch.cuda.synchronize(device)
        t2 = time.perf_counter_ns()
        if i >= LOSS_WARMUP:
            fwd.append((t1 - t0) / 1e9)
            bwd.append((t2 - t1) / 1e9)
    return median(fwd), median(bwd)
