"""Per-layer costs: forward (F), input-gradient (B) and weight-gradient (W) time, bytes.

How each repeat runs one layer on one micro-batch:

1. F: ``y = layer(x)`` with ``x`` a fresh leaf that requires grad.
2. B: ``torch.autograd.grad(y, x, dy, retain_graph=True)``. autograd runs
   only the graph nodes on the path to ``x`` and, inside each node, only the
   input-gradient outputs (the engine's needed-output mask), so no weight
   gradient is formed: this is the zero-bubble "B" pass (Qi et al. 2023;
   torch.distributed.pipelining's ``stage_backward_input`` does the same).
3. Full: ``torch.autograd.grad(y, [x, *params], dy)`` on the retained graph.
   W is the full backward minus B of the same repeat. A separate pass w.r.t.
   the parameters alone would recompute the input-gradient chain through the
   layer and count it twice, so ``bwd_s + wgrad_s`` would exceed a real
   backward; the difference keeps ``bwd_s + wgrad_s`` = one full backward,
   which is what the simulator adds up.
4. Split, as torch.distributed.pipelining runs a zero-bubble backward: a
   fresh forward, then ``stage_backward_input`` (B: the input gradient, and
   the intermediates each parameter group's weight gradient starts from)
   and ``stage_backward_weight`` (W: one autograd pass per parameter group
   from them), each timed: ``split_bwd_s`` and ``split_wgrad_s``. On a CPU
   they came to 1.15-1.25x B and 1.4-1.7x W of steps 2-3 for a gpt-small
   block (the graph walk and the per-group passes are real work a split
   schedule pays); zero-bubble and V schedules' B and W ops take them.
   Only layers with both an input gradient and weights have them (torch
   runs the first stage's whole backward as its W anyway).

A layer whose input is not floating point (the embedding's token ids) has no
input gradient: B = 0 and W = the whole backward. A layer without parameters
has W = 0.

Timing: on CUDA, events recorded around the call after a device synchronize
(the call is asynchronous; host clocks would time the launch); on CPU,
``time.perf_counter_ns``. Garbage collection is paused while a layer is
timed. The reported figure is the median over repeats after warm-up, with
the spread (IQR / median) beside it.

Activation bytes are the tensors autograd saves for backward, seen through
``torch.autograd.graph.saved_tensors_hooks`` during one forward, counted
once per storage (views and repeated saves of one tensor are not double
counted; the storage is what stays alive), with the layer's parameters and
buffers left out. The layer input counts when an op saves it, as it must
stay alive until backward (nn.Linear(64, 64) on an (8, 64) fp32 input saves
exactly that input: 2,048 bytes). Output bytes are what the layer hands to
the next stage: ``y.numel() * y.element_size()``.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pptune.errors import BadInput
from pptune.launch.stats import median, spread


@dataclass
class LayerCosts:
    """Samples of one layer at one micro-batch size (seconds), and its bytes."""

    fwd_s: list[float]
    bwd_s: list[float]
    wgrad_s: list[float]
    act_bytes: int
    out_bytes: int
    # B and W as torch's split backward runs them (empty: not timed, see measure_layer)
    split_bwd_s: list[float] = field(default_factory=list)
    split_wgrad_s: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        out = {
            "fwd_s": median(self.fwd_s),
            "bwd_s": median(self.bwd_s),
            "wgrad_s": median(self.wgrad_s),
            "act_bytes": float(self.act_bytes),
            "out_bytes": float(self.out_bytes),
            "fwd_spread": spread(self.fwd_s),
            "bwd_spread": spread(self.bwd_s),
            "wgrad_spread": spread(self.wgrad_s),
        }
        if self.split_bwd_s:
            out["split_bwd_s"] = median(self.split_bwd_s)
            out["split_wgrad_s"] = median(self.split_wgrad_s)
        return out


@dataclass
class LayerResult:
    name: str
    param_bytes: int
    expert_param_bytes: int = 0  # the routed experts' part (a MoE block's routed_parameters)
    per_micro_batch: dict[int, LayerCosts] = field(default_factory=dict)


class Timer:
    """``timer(fn, *args) -> (fn(*args), seconds)``: CUDA events on a GPU, perf_counter_ns on CPU."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.cuda = str(device).startswith("cuda")
        if self.cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
        if self.cuda:
            self.torch.cuda.synchronize()
            self.start.record()
            out = fn(*args)
            self.end.record()
            self.end.synchronize()
            return out, self.start.elapsed_time(self.end) / 1e3  # ms -> s
        t0 = time.perf_counter_ns()
        out = fn(*args)
        return out, (time.perf_counter_ns() - t0) / 1e9


def saved_tensor_bytes(
    torch: Any, fn: Callable[[], Any], exclude_ptrs: set[int]
) -> tuple[Any, int]:
    """Run ``fn`` and count the bytes autograd saves for backward, once per storage."""
    seen: dict[tuple[str, int], int] = {}

    def pack(t: Any) -> Any:
        try:
            storage = t.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError, AttributeError):
            return t  # no plain storage (sparse, nested): not counted
        if ptr in exclude_ptrs:
            return t
        seen[(str(t.device), ptr)] = nbytes
        return t

    def unpack(t: Any) -> Any:
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = fn()
    return out, sum(seen.values())


def storage_ptrs(*modules: Any) -> set[int]:
    """Storage addresses of every parameter and buffer (never counted as saved)."""
    ptrs = set()
    for module in modules:
        for t in list(module.parameters()) + list(module.buffers()):
            try:
                ptrs.add(t.untyped_storage().data_ptr())
            except (RuntimeError, NotImplementedError):
                pass
    return ptrs


def _grad(torch: Any, y: Any, targets: tuple[Any, ...], dy: Any, retain: bool) -> Any:
    return torch.autograd.grad(y, targets, dy, retain_graph=retain, allow_unused=True)


def split_backward(torch: Any) -> tuple[Any, Any] | None:
    """torch.distributed.pipelining's ``stage_backward_input`` and
    ``stage_backward_weight`` (None where torch has no distributed package)."""
    try:
        from torch.distributed.pipelining import _backward
    except ImportError:
        return None
    return _backward.stage_backward_input, _backward.stage_backward_weight


def measure_layer(
    torch: Any,
    layer: Any,
    x: Any,
    repeats: int,
    warmup: int,
    timer: Timer,
    label: str = "layer",
) -> LayerCosts:
    """F, B, W samples of ``layer`` on input ``x`` (see the module docstring)."""
    layer.train()
    params = tuple(p for p in layer.parameters() if p.requires_grad)
    input_grad = bool(x.is_floating_point() or x.is_complex())

    def fresh() -> Any:
        return x.detach().requires_grad_(True) if input_grad else x

    inp = fresh()
    y, act_bytes = saved_tensor_bytes(torch, functools.partial(layer, inp), storage_ptrs(layer))
    if not isinstance(y, torch.Tensor):
        raise BadInput(
            f"{label} returned a {type(y).__name__}; each layer must return one tensor "
            "(the next layer's input)"
        )
    out_bytes = y.numel() * y.element_size()
    has_backward = bool(y.requires_grad) and y.is_floating_point()
    dy = torch.randn_like(y) if has_backward else None
    del y, inp

    fwd: list[float] = []
    bwd: list[float] = []
    wgrad: list[float] = []
    split_b: list[float] = []
    split_w: list[float] = []
    # a layer with an input gradient and weights: its split backward as well (step 4)
    splitter = split_backward(torch) if has_backward and input_grad and params else None
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(warmup + repeats):
            inp = fresh()
            y, t_f = timer(layer, inp)
            t_b = t_w = 0.0
            if has_backward:
                if input_grad:
                    _, t_b = timer(_grad, torch, y, (inp,), dy, bool(params))
                if params:
                    targets = ((inp,) if input_grad else ()) + params
                    _, t_full = timer(_grad, torch, y, targets, dy, False)
                    t_w = max(0.0, t_full - t_b)
            del y, inp
            if splitter is not None:
                inp = fresh()
                y = layer(inp)
                (_, groups), t_sb = timer(splitter[0], [y], [dy], [inp], iter(params))
                _, t_sw = timer(splitter[1], iter(params), groups)
                for p in params:
                    p.grad = None
                del y, inp, groups
                if i >= warmup:
                    split_b.append(t_sb)
                    split_w.append(t_sw)
            if i >= warmup:
                fwd.append(t_f)
                bwd.append(t_b)
                wgrad.append(t_w)
    finally:
        if gc_was_enabled:
            gc.enable()
    return LayerCosts(fwd, bwd, wgrad, act_bytes, out_bytes, split_b, split_w)


def measure_model(
    torch: Any,
    plan: Any,
    micro_batch_sizes: list[int],
    repeats: int,
    warmup: int,
    device: str,
    on_step: Callable[[str, int], None] = lambda name, b: None,
    smaller: str = "lower --micro-batch-sizes or --seq-len",
    on_begin: Callable[[str, int], None] = lambda name, b: None,
) -> list[LayerResult]:
    """Measure every layer of a ``ModelPlan`` at every micro-batch size, one layer at a time;
    ``on_begin`` before each layer and size is timed (a progress line may name it while
    it runs: one step of a large MoE block on CPU takes minutes), ``on_step`` after."""
    timer = Timer(torch, device)
    inputs = {b: plan.make_input(b) for b in micro_batch_sizes}
    results: list[LayerResult] = []
    last = len(plan.layer_names) - 1
    for i, name in enumerate(plan.layer_names):
        label = f"layer {i} ({name})"
        layer = plan.build_layer(i)
        param_bytes = sum(p.numel() * p.element_size() for p in layer.parameters())
        routed = getattr(layer, "routed_parameters", None)
        experts = sum(p.numel() * p.element_size() for p in routed()) if callable(routed) else 0
        result = LayerResult(name=name, param_bytes=param_bytes, expert_param_bytes=experts)
        for b in micro_batch_sizes:
            on_begin(name, b)
            try:
                result.per_micro_batch[b] = measure_layer(
                    torch, layer, inputs[b], repeats, warmup, timer, label
                )
            except torch.OutOfMemoryError:
                raise BadInput(
                    f"out of memory measuring {label} at micro-batch size {b}; {smaller}"
                ) from None
            except (RuntimeError, TypeError, ValueError) as exc:
                first = (str(exc).strip().splitlines() or [""])[0]
                raise BadInput(
                    f"{label} failed at micro-batch size {b}: {type(exc).__name__}: {first}"
                ) from None
            on_step(name, b)
        if i < last:
            with torch.no_grad():
                for b in micro_batch_sizes:
                    inputs[b] = layer(inputs[b]).detach()
        results.append(result)
        del layer  # freed by refcount; no gc.collect: it costs ~0.2 s per call with torch loaded
    return results
