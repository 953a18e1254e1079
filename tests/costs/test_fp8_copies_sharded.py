"""FP8 weight copies under sharded weights (ZeRO-3 / Megatron-FSDP): Transformer Engine
caches each GEMM weight's FP8 copy and transpose for the whole step when the caller
passes ``is_first_microbatch`` (TE 2.9 module/linear.py: ``get_weight_workspace(...,
cache_name="weight")``), and megatron-core always does (extensions/transformer_engine.py
``TELinear.forward``; ``disable_parameter_transpose_cache`` has no command-line flag,
training/arguments.py). The cache is of the gathered weight, so Megatron-FSDP keeps one
for every layer on every rank: the copies are not sharded over dp. FP8 parameters
(``--fp8-param-gather``) replace them: the layer's FP8 weight is gathered and its
transpose dropped with it (megatron_fsdp.py ``release_params_fp8_transpose_cache``)."""

from __future__ import annotations

import pytest

from pptune.costmodel import presets
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import PlanRequest, PlanSpec, Sharding, evaluate
from pptune.costs.profiles import preset_tables
from tests.conftest import Cli

# 2 blocks, h = 1024, 8 query heads of 128, 2 key/value heads, SwiGLU FFN 4096
GQA = presets.ModelShape("t", 2, 1024, 8, 2, 4096, 4096, 512, 8, True, False, "test")
# a block's GEMM weights: QKV 1024 x (8 + 2 x 2) x 128, output 1024 x 1024, MLP 3 x 1024 x 4096
BLOCK_GEMM = 1024 * 1536 + 1024 * 1024 + 3 * 1024 * 4096
FP8 = CostKey(precision=Precision.FP8)


def _state(key: CostKey, **options: object) -> tuple[float, float]:
    """(state, FP8 copies) bytes of pp 1, dp 8, ZeRO-3, 8 micro-batches of 1."""
    tables = preset_tables(GQA, "h100-sxm", [1], **options)
    req = PlanRequest(gpus=8, global_batch=64, cost_keys=(key,),
                      fp8_param_gather=bool(options.get("fp8_params")))
    spec = PlanSpec(Schedule.ONE_F_ONE_B, 1, 1, 8, (4,), sharding=Sharding.ZERO3, key=key)
    mem = evaluate(tables(key), req, spec).memory[0]
    return mem.state_bytes, mem.fp8_copies_bytes


def test_zero3_keeps_every_layers_fp8_copies_unsharded() -> None:
    assert BLOCK_GEMM == 15_204_352
    bf16, none = _state(CostKey())
    # ZeRO-3 over 8 ranks: (2 + 2 + 12) / 8 = 2 bytes a parameter of the embedding and
    # head (4096 x 1024 each), the final norm and both blocks with their two norms
    params = 2 * 4096 * 1024 + 1024 + 2 * (BLOCK_GEMM + 2 * 1024)
    assert none == 0 and bf16 == pytest.approx(2 * params) and 2 * params == 77_604_864
    fp8, copies = _state(FP8)
    # FP8 and its transpose, 1 + 1 bytes, of both blocks' GEMM weights on the rank,
    # not divided by dp
    assert copies == 2 * 2 * BLOCK_GEMM == 60_817_408
    assert fp8 == pytest.approx(bf16 + copies)


def test_fp8_parameters_keep_no_copies() -> None:
    bf16, _ = _state(CostKey())
    assert _state(FP8, fp8_params=True) == (pytest.approx(bf16), 0.0)


def test_torchao_float8_casts_on_every_use_and_keeps_none() -> None:
    """torchtitan's float8 (torchao Float8Linear) casts the weight in each forward and
    saves the BF16 weight, whose storage FSDP2 frees after the forward."""
    from pptune.costmodel.precision import Fp8Kernels

    bf16, _ = _state(CostKey())
    assert _state(FP8, fp8_kernels=Fp8Kernels.TORCHAO) == (pytest.approx(bf16), 0.0)


def test_the_winner_line_names_the_copies_and_the_gather_not_searched(cli: Cli) -> None:
    flags = ("recommend", "--model", "llama3-8b", "--gpus", "8", "--precision", "fp8",
             "--sharding", "zero3", "--global-batch", "64", "--micro-batch-sizes", "1",
             "--recompute", "none")
    r = cli(*flags)
    assert r.exit_code == 0, r.stderr
    # Llama 3 8B: 32 blocks of 4096 x 6144 + 4096 x 4096 + 3 x 4096 x 14336 GEMM weights,
    # 2 bytes each: 13,958,643,712 bytes
    assert "(state 27.96 GiB with 13.00 GiB of FP8 weight copies," in r.stdout
    text = " ".join(r.stdout.split())  # the notes wrap at the terminal's width
    note = text[text.index("note: not searched: --fp8-param-gather"):]
    assert note.startswith("note: not searched: --fp8-param-gather (Megatron-LM: FP8 "
                           "weights all-gathered in FP8")
    # the same plan without the 13 GiB of copies: 64.43 - 13.00 = 51.43 GiB
    assert ("with it the best plan would be pp=1 dp=8 tp=1 fp8 1f1b, 8 x 1, sharding zero3, "
            "recompute none") in note
    assert ("peak 51.43 GiB a GPU (the winner's fullest GPU holds 13.00 GiB of FP8 weight "
            "copies)") in note
    for given in (("--fp8-param-gather",), ("--no-fp8-param-gather",)):
        r = cli(*flags, *given)
        assert r.exit_code == 0 and "--fp8-param-gather" not in r.stdout, r.stdout
    r = cli(*[f if f != "fp8" else "bf16" for f in flags])  # no FP8 searched: no note
    assert r.exit_code == 0 and "--fp8-param-gather" not in r.stdout
