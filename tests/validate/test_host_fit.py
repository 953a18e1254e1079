"""What a CPU trial's ranks hold at once, counted by hand for a tiny model, and the
refusal above the host's free memory (given, never read or allocated here)."""

from __future__ import annotations

from dataclasses import replace

from pptune.costmodel.presets import MODELS
from pptune.costmodel.schedules import Schedule
from pptune.validate.host_fit import refusal, trial_memory
from pptune.validate.spec import RunSpec

# GPT-style (learned positions, 2-matrix MLP): d 8, 2 heads of 4, ffn 32, vocab 16, seq 4
TINY = replace(MODELS["gpt-small"], name="tiny", num_blocks=2, hidden=8, heads=2, kv_heads=2,
               ffn=32, vocab=16, seq_len=4, kv_channels=0)
# embedding 16 x 8 + positions 4 x 8 = 160; a block: qkv 8 x 24 + proj 8 x 8 = 256,
# MLP 2 x 8 x 32 = 512 -> 768; head 16 x 8 = 128: 160 + 2 x 768 + 128 = 1,824
PARAMS = 1824


def test_a_two_rank_1f1b_trial_of_a_tiny_model() -> None:
    """1f1b pp 2, 4 micro-batches of 2, fp32, split [embed, block0 | block1, head].
    Weights 1,824 x 4 = 7,296 B, gradients as many. One crossing between the ranks:
    4 receive buffers forward and 4 back, each b s h x 4 = 2 x 4 x 8 x 4 = 256 B: 2,048.
    Kept inputs: stage 0's token ids 2 x 4 x 8 = 64, stage 1's 256: 320. Every rank's
    batch and targets: 2 ranks x 2 x (2 x 4 x 4 tokens) x 8 = 1,024."""
    spec = RunSpec(Schedule.ONE_F_ONE_B, 2, 4, 1, 2, (2, 2))
    need = trial_memory(TINY, spec, 4)
    assert need.params == PARAMS
    assert (need.weights_bytes, need.gradients_bytes) == (7296, 7296)
    assert (need.buffers_bytes, need.inputs_bytes) == (2048, 320 + 1024)
    assert need.total_bytes == 17984


def test_the_v_placements_middle_pair_takes_no_receive_buffers() -> None:
    """zbv pp 2: stages 0 and 3 on rank 0, 1 and 2 on rank 1; stage 1 hands stage 2 its
    output on the rank (torch's set_local_fwd_input), so 2 of the 3 boundaries cross:
    2 x 2 x 4 x 256 = 4,096 B. Kept: 64 + 3 x 256 = 832; batches 1,024 as above."""
    spec = RunSpec(Schedule.ZBV, 2, 4, 1, 2, (1, 1, 1, 1))
    assert spec.stages_of(0) == [0, 3] and spec.stages_of(1) == [1, 2]
    need = trial_memory(TINY, spec, 4)
    assert (need.buffers_bytes, need.inputs_bytes) == (4096, 832 + 1024)


def test_one_rank_in_bf16_has_no_buffers() -> None:
    """pp 1, 2 micro-batches of 1, 2-byte elements: 1,824 x 2 x 2 = 7,296 of weights and
    gradients; kept: the token ids 1 x 4 x 8 = 32; batch and targets 2 x 2 x 4 x 8 = 128."""
    need = trial_memory(TINY, RunSpec(Schedule.ONE_F_ONE_B, 1, 2, 1, 1, (4,)), 2)
    assert (need.weights_bytes + need.gradients_bytes, need.buffers_bytes,
            need.inputs_bytes) == (7296, 0, 160)


def test_refused_only_above_the_free_memory_given() -> None:
    need = trial_memory(TINY, RunSpec(Schedule.ONE_F_ONE_B, 2, 4, 1, 2, (2, 2)), 4)
    assert refusal(need, 17984, "trial x", "fix it") is None
    assert refusal(need, None, "trial x", "fix it") is None  # MemAvailable unreadable
    assert refusal(need, 17983, "trial x", "fix it") == (
        "trial x would hold at least 17.56 KiB of this host's memory at once (1,824 "
        "parameters as weights and gradients of 4 bytes each, 14.25 KiB, every rank a "
        "process here; torch's receive buffers and the inputs 3.31 KiB), more than the "
        "17.56 KiB it has free (MemAvailable); fix it")


def test_llama3_70b_on_one_cpu_rank_needs_over_500_gib() -> None:
    """The user's trial: 1f1b pp 1, 2 micro-batches of 1 (sequence 8192), fp32: the
    weights and gradients alone, 70.6e9 x 8 bytes, are 526 GiB; it had been killed on a
    23 GiB host."""
    spec = RunSpec(Schedule.ONE_F_ONE_B, 1, 2, 1, 1, (82,))
    need = trial_memory(MODELS["llama3-70b"], spec, 4)
    assert 70.5e9 < need.params < 70.6e9
    assert 525 * 2**30 < need.total_bytes < 527 * 2**30
    line = refusal(need, 23 * 2**30, "trial 'x'", "use a GPU host")
    assert line is not None and "more than the 23.00 GiB it has free" in line
