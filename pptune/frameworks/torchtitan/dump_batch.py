"""torchtitan main's token batch, and its attention rules, for a dump (dump.py).

Main counts tokens, not samples (torchtitan/trainer.py ``Trainer.__init__``, at b5bcd76):

- a micro-batch is ``training.num_tokens_per_microbatch_per_dp_rank`` (N) tokens on each
  data-parallel rank, one packed row (components/data/packing.py: documents concatenated,
  or first-fit packed, into rows of N tokens; positions restart at each document and every
  ``max_context_length`` (L) tokens, and the block-causal mask keeps attention within
  them: models/common/attention.py ``get_document_mask_mod``). pptune prices whole
  sequences, so N = k x L is k sequences of L tokens, N <= L one of N tokens (no span is
  longer than the row), and an N between multiples of L the next multiple up, with a
  warning (a memory check that errs safe);
- ``num_pp_microbatches`` (m) such micro-batches run one pipeline schedule ("ignored when
  pipeline parallelism is disabled": ``self.num_pp_microbatches = ... if pp_enabled else
  1``);
- ``num_tokens_per_train_step`` (T) defaults to N x m x dp; otherwise it must be a
  multiple of it ("training.num_tokens_per_train_step (T) must be divisible by the number
  of tokens processed globally in one gradient accumulation iteration (N x m x dp).") and
  the quotient is the gradient-accumulation steps, each a run of the schedule. dp is the
  "batch" mesh, dp_replicate x dp_shard (distributed/parallel_dims.py).

So, in pptune's terms: micro_batch_size k, m micro-batches a pipeline run,
pipeline_flushes the runs, grad_accum_steps m x runs. Main also checks N, not the
sequence, against the sequence and context split: "The number of tokens per pipeline
microbatch (N) must be divisible by D for the configured sequence/context parallelism.",
D = (tp with enable_sequence_parallel, else 1) x (2 x cp where cp > 1).
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.batch_words import TokenBatch
from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.torchtitan.dump import MainRun
from pptune.frameworks.torchtitan.facts import facts
from pptune.frameworks.torchtitan.main_rules import cp_backend, model_refusals

CITE = "(torchtitan/trainer.py Trainer.__init__)"


def main_batch(ctx: Ctx, run: MainRun, pp: int, dp: int | None, tp: int, cp: int
               ) -> dict[str, Any]:
    """micro_batch_size, seq_len, grad_accum_steps, pipeline_flushes and global_batch of a
    main dump (module docstring), with main's refusals."""
    n, length = run.tokens, run.context
    divisor = (tp if run.sequence_parallel else 1) * (2 * cp if cp > 1 else 1)
    if n % divisor:
        ctx.refuse("torchtitan-cp-seq",
                   f"training.num_tokens_per_microbatch_per_dp_rank {n} with tensor parallel "
                   f"{tp}{' (sequence parallel)' if run.sequence_parallel else ''} and "
                   f"context parallel {cp}: torchtitan raises 'The number of tokens per "
                   f"pipeline microbatch ({n}) must be divisible by {divisor} for the "
                   f"configured sequence/context parallelism.' {CITE}; use a multiple of "
                   f"{divisor}")
    m = run.pp_microbatches if pp > 1 else 1
    if pp == 1 and run.pp_microbatches != 1:
        ctx.note(f"parallelism.num_pp_microbatches {run.pp_microbatches} ignored: torchtitan "
                 "ignores it without pipeline parallelism (pipeline_parallel_degree 1)")
    seq, micro = _rows(ctx, n, length)
    ctx.semantics.batch_words = TokenBatch(
        micro="num_tokens_per_microbatch_per_dp_rank", count="num_pp_microbatches",
        step="num_tokens_per_train_step", tokens=n, seq_len=seq, size=micro)
    record = facts(ctx.semantics)
    record.main_tokens = n
    record.global_batch_stated = run.step_tokens != -1
    per_run = n * m
    runs: int | None = 1
    if run.step_tokens != -1 and dp is None:
        runs = None
        ctx.note("training.num_tokens_per_train_step is set and dp is unknown: the "
                 "gradient-accumulation steps are left unset (pass --gpus)")
    elif run.step_tokens != -1 and dp is not None:
        if run.step_tokens % (per_run * dp):
            ctx.refuse("torchtitan-global-batch",
                       f"training.num_tokens_per_train_step {run.step_tokens} is not a multiple "
                       f"of num_tokens_per_microbatch_per_dp_rank {n} x num_pp_microbatches {m} "
                       f"x dp {dp}: torchtitan raises 'training.num_tokens_per_train_step "
                       f"({run.step_tokens}) must be divisible by the number of tokens "
                       "processed globally in one gradient accumulation iteration "
                       f"({per_run * dp}).' {CITE}")
            ctx.semantics.batch_refused = True
        else:
            runs = run.step_tokens // (per_run * dp)
    ctx.note(f"torchtitan main's batch: {n:,} tokens a micro-batch per dp rank at context "
             f"{length:,} = {micro} sequence{'s' * (micro > 1)} of {seq:,}; {m} a pipeline "
             f"run; {'?' if runs is None else runs} run{'s' * (runs != 1)} a step")
    out: dict[str, Any] = {"micro_batch_size": micro, "seq_len": seq}
    if pp == 1:
        out.update(grad_accum_steps=runs, pipeline_flushes=1)
    else:
        out.update(grad_accum_steps=None if runs is None else m * runs,
                   pipeline_flushes=runs or 1)
    out["global_batch"] = None if runs is None or dp is None else micro * m * runs * dp
    return out


def _rows(ctx: Ctx, n: int, length: int) -> tuple[int, int]:
    """(sequence length, sequences) pptune prices a row of ``n`` tokens at context
    ``length`` as (module docstring)."""
    if n <= length:
        return n, 1
    count = -(-n // length)
    if n % length:
        ctx.unmodelled("torchtitan-unmodelled",
                       f"training.num_tokens_per_microbatch_per_dp_rank {n} is not a multiple "
                       f"of max_context_length {length}: pptune prices whole sequences, here "
                       f"{count} of {length} ({count * length - n} tokens more than the row)")
    return length, count


def main_attention(ctx: Ctx, run: MainRun, kind: str, cp: int, pp: int = 1) -> None:
    """Main's refusals of context parallelism in its order (main_rules.py): the SPMD
    backend's, then varlen or SDPA attention's (every decoder's, before qwen3's own), then
    the MTP decoder's and the models' own; and the warning that flex attention is priced
    as flash (attention.py read_attention's)."""
    cp_backend(ctx, run.spmd_backend, cp)
    if cp > 1 and kind in ("varlen", "sdpa"):
        ctx.refuse("torchtitan-cp-attention",
                   f"context_parallel_degree {cp} with {kind} attention (model_spec.model's "
                   "inner_attention): torchtitan raises 'Context Parallel is not supported "
                   "with ScaledDotProductAttention or VarlenAttention. Use FlexAttention or "
                   "disable CP.' (torchtitan/models/common/decoder.py "
                   "Decoder.Config.update_from_config); use cp 1 or FlexAttention")
    model_refusals(ctx, run.name, run.model, cp, pp)
    if kind == "flex":
        ctx.unmodelled("torchtitan-flex-attention",
                       f"{run.name} {run.flavor} runs FlexAttention (model_spec.model's "
                       "inner_attention: block_size, kernel_options): pptune has no "
                       "FlexAttention rate and prices it as flash attention (SDPA) over the "
                       f"whole causal sequence of {min(run.tokens, run.context):,} tokens, its "
                       "closest modelled kernel (the block-causal mask, attention within each "
                       "document, does less work)")
