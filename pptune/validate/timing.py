"""Timing inside a validate rank: op stamps, the loss alone, and contention.

- ``Stamper`` records (kind, micro-batch, stage, start, end) of the calls
  ``torch_hooks`` routes through it, on the host clock (CUDA events placed on
  it through an anchor event at the step start);
- ``time_loss`` times the loss alone on the rank holding the last stage (the
  profile's head excludes it; ``compare`` adds it to the prediction);
- ``contention`` measures how much the ranks slow each other down when they
  compute at once (``compare`` applies the ratio);
- ``time_accumulation`` times how much longer a stage's backward takes when its
  parameters already hold gradients, as every micro-batch after a step's first
  finds them (``compare`` adds it to the backward ops).

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
CONTENTION_ROUNDS = 2  # before the timed steps, and again after them
CONTENTION_REPEATS = 3
ACCUMULATION_REPEATS = 5  # each way, after one warm-up each


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
    cuda: bool, device: str, rounds: int = CONTENTION_ROUNDS,
) -> tuple[list[float], list[float], list[float]]:
    """This rank's reference work (its stages' training work) timed alone, then with every
    rank at once, ``rounds`` times.

    The reference work is what the rank's ops do in a step, one micro-batch of
    it: each of its stages' forward with autograd and the full backward (input
    and weight gradients, ``torch.autograd.grad``, which leaves ``.grad`` as it
    is), on an input the stage saw in the timed steps. A forward without
    autograd, the reference until pptune 0.1, neither saves activations nor
    reads them back, so on a CPU host it reads the caches and memory bandwidth
    the ranks share far less than their backward does: in the runs that
    reported 1.03 the ops ran ~20% over the profile (issue 22).

    ``CONTENTION_ROUNDS`` rounds, each: every rank in turn runs the work
    ``CONTENTION_REPEATS`` times while the others wait in a barrier, then all
    ranks run it over and over for the same wall-clock window (the slowest
    rank's alone time x repeats), so every timed run overlaps the others'.
    The round's ratio is the median together over the median alone; several
    rounds keep a burst of outside load to one round, not the figure.
    ``together / alone`` is the slowdown ranks inflict on each other when
    they compute at the same time: on a CPU host they share cores, caches and
    memory bandwidth (and the host's other load); on GPUs, one per rank, it
    stays near 1. The alone time, against the profile's forward, input and
    weight gradient of the same stages, is how fast this host runs the
    rank's work now (``compare.profile_speed``). The runner measures rounds
    before and after the timed steps, so the figures bracket them while the
    host's other load comes and goes. Returns each round's median alone and
    together times and their ratios.
    """
    if not inputs:
        return [], [], []

    def once() -> float:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter_ns()
        for i, x in inputs.items():
            x_in = x.detach().requires_grad_(True) if x.is_floating_point() else x
            y = modules[i](x_in)
            targets = [p for p in modules[i].parameters() if p.requires_grad]
            if x_in.requires_grad:
                targets.append(x_in)
            if targets and y.requires_grad:
                torch.autograd.grad(y, targets, torch.ones_like(y), allow_unused=True)
        if cuda:
            torch.cuda.synchronize(device)
        return (time.perf_counter_ns() - t0) / 1e9

    once()  # warm
    alones: list[float] = []
    togethers: list[float] = []
    ratios: list[float] = []
    for _ in range(rounds):
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
    return alones, togethers, ratios


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


def time_accumulation(torch: Any, modules: list[Any], inputs: dict[int, Any], cuda: bool,
                      device: str, split: bool) -> dict[int, tuple[float, float]]:
    """Per module index: the extra seconds of its backward when its parameters already
    hold gradients, as (whole backward, split W), medians, at least 0.

    Within a step only a stage's first micro-batch finds ``.grad`` empty; every later
    one's backward accumulates into it (torch's AccumulateGrad: the new gradient is
    added into the buffer, a read and a write of it beside the new one, where the
    first takes the new tensor as it is). The profile's backward is the first kind
    (``torch.autograd.grad``, and a split W into empty gradients). Timed here on an
    input the stage saw, each way ``ACCUMULATION_REPEATS`` times: the whole backward
    (``torch.autograd.backward``, as ``backward_one_chunk`` runs it), and with
    ``split`` torch's split backward (``stage_backward_input`` then
    ``stage_backward_weight``), whose W is what accumulates. The parameters'
    gradients are left empty afterwards."""
    from pptune.probe.layers import split_backward

    splitter = split_backward(torch) if split else None
    out: dict[int, tuple[float, float]] = {}
    for i, x in inputs.items():
        params = [p for p in modules[i].parameters() if p.requires_grad]
        if not params:
            continue
        # the gradients the timed steps left (no more memory), else zeros like them
        held = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        extra = []
        for pair in [None] if splitter is None else [None, splitter]:
            runs: dict[bool, list[float]] = {True: [], False: []}
            for r in range(ACCUMULATION_REPEATS + 1):
                for accumulate in (False, True):
                    for p, g in zip(params, held, strict=True):
                        p.grad = g if accumulate else None
                    t = _backward_s(torch, modules[i], x, params, pair, cuda, device)
                    if r:
                        runs[accumulate].append(t)
            extra.append(max(0.0, median(runs[True]) - median(runs[False])))
        for p in params:
            p.grad = None
        out[i] = (extra[0], extra[1] if len(extra) > 1 else 0.0)
    return out


def _backward_s(torch: Any, module: Any, x: Any, params: list[Any],
                split: tuple[Any, Any] | None, cuda: bool, device: str) -> float:
    """One forward, then the seconds of its whole backward, or (``split``: torch's
    stage_backward_input and stage_backward_weight) of its split W."""
    x_in = x.detach().requires_grad_(True) if x.is_floating_point() else x
    y = module(x_in)
    dy = torch.ones_like(y)
    if cuda:
        torch.cuda.synchronize(device)
    if split is None:
        t0 = time.perf_counter_ns()
        torch.autograd.backward(y, dy)
    else:
        inp = [x_in] if x_in.requires_grad else []
        _, groups = split[0]([y], [dy], inp, iter(params))
        t0 = time.perf_counter_ns()
        split[1](iter(params), groups)
    if cuda:
        torch.cuda.synchronize(device)
    return (time.perf_counter_ns() - t0) / 1e9
