"""Whether a CPU trial's ranks fit in this host's memory, judged before any starts (no torch).

A trial (``pptune validate``, and each of ``pptune tune``'s trials) runs one
pipeline; on the CPU every rank is a process of this host (runner.run_spawned), so
all of them draw on its memory at once. A trial that needs more than the host has
free is ended by the kernel's OOM killer, rank by rank, after it has taken the
machine's memory (a tune of Llama 3 70B on a 23 GiB host: a rank at 22 GB
anon-rss, killed 80 s in); validate and tune refuse it first, in one line.

What the ranks of a trial hold together is counted here from what runner.rank_main
allocates. All of it is alive while the ranks run the contention rounds after
their timed steps (timing.contention, the ranks in step through its barriers):

- every layer's weights at the run's dtype (fp32 on the CPU unless ``--dtype``
  says otherwise; workload.torch_dtype), each layer on one stage of one rank;
- their gradients, as many bytes: the last timed backward leaves them (a rank
  clears them only at a step's start) and timing.time_accumulation times into
  them;
- torch's receive buffers: a ``PipelineStage`` allocates one per micro-batch
  for its input (every stage but the first) and one for its output's gradient
  (every stage but the last), kept for the schedule's life (torch 2.13
  torch/distributed/pipelining/stage.py, ``PipelineStage._setup_forward_recv_info``
  and ``_create_grad_recv_info``), each ``b x s x h`` elements. Only those the
  other rank writes are counted: untouched pages take no memory, and stages on
  one rank (the V placement's middle pair) hand tensors over without them;
- the inputs: each stage's copy of the first micro-batch it saw
  (timing.keep_first_input: token ids for the first stage, ``b x s x h``
  elements for the others) and every rank's step batch and targets
  (workload.make_batch: ``b x m`` sequences of ``s`` token ids each).

Left out: activations (a rank keeps them only within a step), the logits, and
each process's torch runtime. The sum is a floor: refusing above it never
refuses a trial that would fit. On GPUs the layers live in device memory, and a
rank that runs out raises torch's error (a failed trial), so only CPU trials are
judged.
"""

from __future__ import annotations

from dataclasses import dataclass

from pptune.costmodel.presets import ModelShape
from pptune.probe.models import layer_param_counts
from pptune.report.fmt import fmt_bytes
from pptune.validate.spec import RunSpec

# token ids and targets: torch.randint's default dtype, torch.int64
TOKEN_BYTES = 8


@dataclass(frozen=True)
class TrialMemory:
    """What a CPU trial's ranks hold at once (module docstring), in bytes."""

    params: int  # the model's parameters, every layer once
    dtype_bytes: int  # bytes an element of the weights, gradients and activations
    weights_bytes: float
    gradients_bytes: float
    buffers_bytes: float  # torch's receive buffers the ranks write
    inputs_bytes: float  # the stages' kept inputs and every rank's batch and targets

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.buffers_bytes + self.inputs_bytes


def trial_memory(shape: ModelShape, spec: RunSpec, dtype_bytes: int) -> TrialMemory:
    """The floor of what the trial ``spec`` of the transformer ``shape`` holds at once."""
    params = sum(layer_param_counts(shape))
    b, m, s = spec.micro_batch_size, spec.microbatches, shape.seq_len
    hidden_bytes = b * s * shape.hidden * dtype_bytes  # one micro-batch between stages
    owner = {k: r for r in range(spec.pp) for k in spec.stages_of(r)}
    n = spec.n_stages
    crossings = sum(1 for k in range(n - 1) if owner[k] != owner[k + 1])
    buffers = 2 * crossings * m * hidden_bytes  # the input forward, its gradient back
    kept = b * s * TOKEN_BYTES + (n - 1) * hidden_bytes
    batches = spec.pp * 2 * b * m * s * TOKEN_BYTES
    weights = float(params * dtype_bytes)
    return TrialMemory(params, dtype_bytes, weights, weights, float(buffers),
                       float(kept + batches))


def model_floor(shape: ModelShape, dtype_bytes: int) -> TrialMemory:
    """What any trial of ``shape`` holds at least: one copy of its weights and their
    gradients (every rank a process of this host; no buffers, no inputs)."""
    params = sum(layer_param_counts(shape))
    weights = float(params * dtype_bytes)
    return TrialMemory(params, dtype_bytes, weights, weights, 0.0, 0.0)


def refusal(need: TrialMemory, available_bytes: int | None, what: str, fix: str) -> str | None:
    """The one line refusing ``what`` (a trial, a candidate) when ``need`` exceeds the
    host's free memory (None: unknown, nothing refused); ``fix``: what to do instead."""
    if available_bytes is None or need.total_bytes <= available_bytes:
        return None
    rest = need.buffers_bytes + need.inputs_bytes
    others = f"; torch's receive buffers and the inputs {fmt_bytes(rest)}" if rest else ""
    return (f"{what} would hold at least {fmt_bytes(need.total_bytes)} of this host's memory "
            f"at once ({_count(need.params)} parameters as weights and gradients of "
            f"{need.dtype_bytes} bytes each, {fmt_bytes(2 * need.weights_bytes)}, every rank "
            f"a process here{others}), more than the {fmt_bytes(available_bytes)} it has free "
            f"(MemAvailable); {fix}")


def _count(params: int) -> str:
    if params >= 10**9:
        return f"{params / 1e9:.1f}B"
    return f"{params / 1e6:.1f}M" if params >= 10**6 else f"{params:,}"
