"""Which cost keys a command prices (pptune.costs.dims)."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel.context import CpComm
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.presets import GPUS, MODELS, ModelShape
from pptune.costs.dims import cp_not_searched, default_cp, default_ep, search_keys, single_key
from pptune.errors import BadInput
from pptune.options import CostOptions

H100 = GPUS["h100-sxm"]
LLAMA8B = MODELS["llama3-8b"]  # 32 heads, 8 KV heads, sequence 8192
MIXTRAL = MODELS["mixtral-8x7b"]  # 8 experts
QWEN3_30B = MODELS["qwen3-30b-a3b"]  # 128 experts


def test_recommend_searches_tp_within_a_node_and_cp_leaving_2k_tokens() -> None:
    keys = search_keys(CostOptions(), LLAMA8B, H100, gpus=8, gpus_per_node=8)
    pairs = [(k.tp, k.cp) for k in keys]
    # tp 1, 2, 4, 8 x cp 1, 2, 4 (8192 / 4 = 2048 tokens a rank), tp x cp dividing 8
    assert pairs == [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (8, 1)]
    assert {k.ep for k in keys} == {1} and {k.precision for k in keys} == {Precision.BF16}


def test_defaults_follow_the_model() -> None:
    assert default_cp(MODELS["gpt3-1.3b"], CostOptions(), 64) == (1,)  # 2048 tokens: no cp
    assert default_cp(LLAMA8B, CostOptions(), 2) == (1, 2)  # no more than the GPUs
    assert default_ep(MIXTRAL, 64) == (1, 2, 4, 8)  # powers of two dividing 8 experts
    assert default_ep(LLAMA8B, 64) == (1,)
    # a GB200 NVL72 domain still searches tp up to 8
    keys = search_keys(CostOptions(cp=(1,)), LLAMA8B, GPUS["gb200"], 72, 72)
    assert [k.tp for k in keys] == [1, 2, 4, 8]


def test_recommend_says_when_no_cp_above_1_is_searched() -> None:
    """Llama 3 8B at 131,073 tokens on 8 GPUs: cp 2, 4 and 8 would be tried (65,536 or
    more tokens a rank), and an odd sequence refuses them all: one note, cp 2's reason.
    At 131,072 they are searched; at 2,048 tokens (GPT-3 1.3B) none is in range (1,024
    a rank at cp 2): nothing to say."""
    odd = dataclasses.replace(LLAMA8B, seq_len=131073)
    assert default_cp(odd, CostOptions(), 8) == (1,)
    assert cp_not_searched(odd, CostOptions(), 8) == (
        "context parallelism (cp > 1) was not searched: cp 2: sequence 131073 is odd: "
        "context parallelism splits it into 2 x cp chunks (causal load balancing), which no "
        "cp above 1 divides; use an even sequence length or cp 1")
    even = dataclasses.replace(LLAMA8B, seq_len=131072)
    assert default_cp(even, CostOptions(), 8) == (1, 2, 4, 8)
    assert cp_not_searched(even, CostOptions(), 8) is None
    assert cp_not_searched(MODELS["gpt3-1.3b"], CostOptions(), 64) is None
    assert cp_not_searched(odd, CostOptions(), 1) is None  # one GPU: no cp to try


def test_given_sizes_are_searched_and_checked() -> None:
    keys = search_keys(CostOptions(tp=(2,), cp=(1, 2), precision=(Precision.BF16, Precision.FP8)),
                       LLAMA8B, H100, 8, 8)
    assert keys == (CostKey(2, 1), CostKey(2, 2), CostKey(2, 1, precision=Precision.FP8),
                    CostKey(2, 2, precision=Precision.FP8))
    with pytest.raises(BadInput) as err:
        search_keys(CostOptions(tp=(3,), cp=(3,), ep=(2,)), LLAMA8B, H100, 8, 8)
    line = str(err.value)
    assert "--tp 3: does not divide --gpus 8" in line
    assert "--cp 3: does not divide --gpus 8" in line
    assert "--ep 2: llama3-8b has no experts to split" in line
    with pytest.raises(BadInput, match="sequence 8192 is not divisible by 2 x cp = 6"):
        search_keys(CostOptions(cp=(3,)), LLAMA8B, H100, 12, 8)
    with pytest.raises(BadInput, match="--precision mxfp8 needs microscaling FP8"):
        search_keys(CostOptions(precision=(Precision.MXFP8,)), LLAMA8B, H100, 8, 8)
    with pytest.raises(BadInput, match="--ep 3: does not divide the 8 routed experts"):
        search_keys(CostOptions(ep=(3,)), MIXTRAL, H100, 8, 8)


def test_one_layout_for_the_other_commands() -> None:
    assert single_key(CostOptions()) == CostKey()
    assert single_key(CostOptions(tp=2, cp=4)) == CostKey(tp=2, cp=4)
    with pytest.raises(BadInput, match="simulate prices one layout: give one value to --tp"):
        single_key(CostOptions(tp=(1, 2)), "simulate")


def at(name: str, seq_len: int) -> ModelShape:
    return dataclasses.replace(MODELS[name], seq_len=seq_len)


def pairs_of(keys: tuple[CostKey, ...]) -> list[tuple[int, int]]:
    return list(dict.fromkeys((k.tp, k.cp) for k in keys))


def test_searched_pairs_ulysses_cannot_split_are_left_out() -> None:
    """Ulysses (a2a) splits each tensor-parallel rank's heads over cp: Llama 3 8B's
    8 KV heads leave 8 / tp a rank, so cp 8 runs with tp 1 only, cp 4 with tp <= 2, cp 2
    with tp <= 4; tp 8 (1 KV head) only without cp. No pair is refused for the run."""
    opts = CostOptions(cp_comm=CpComm.A2A, precision=(Precision.FP8,))
    keys = search_keys(opts, at("llama3-8b", 131072), H100, 64, 8)
    assert pairs_of(keys) == [(1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4),
                              (4, 1), (4, 2), (8, 1)]


def test_a_given_pair_ulysses_cannot_split_is_one_line() -> None:
    """tp 8 leaves Llama 3.1 405B 1 of its 8 KV heads a rank: not divisible by cp 16."""
    shape = at("llama3.1-405b", 131072)
    opts = CostOptions(tp=(8,), cp=(16,), cp_comm=CpComm.A2A)
    with pytest.raises(BadInput) as err:
        search_keys(opts, shape, H100, 16384, 8)
    assert str(err.value) == (
        "tp 8 x cp 16: --cp-comm a2a splits heads over cp: 1 key/value head per "
        "tensor-parallel rank (8 / tp 8) is not divisible by cp = 16; use p2p or a2a+p2p")
    # --cp alone: no tensor-parallel size makes the model's 8 KV heads divisible by 16
    with pytest.raises(BadInput, match="--cp 16: --cp-comm a2a splits heads over cp: the "
                       "model's 8 key/value heads are not divisible by cp = 16"):
        search_keys(CostOptions(cp=(16,), cp_comm=CpComm.A2A), shape, H100, 16384, 8)
    # a list keeps the pairs that run (tp 1: 8 KV heads over cp 8)
    keys = search_keys(CostOptions(tp=(1, 8), cp=(8,), cp_comm=CpComm.A2A), shape, H100,
                       16384, 8)
    assert pairs_of(keys) == [(1, 8)]


def test_sequence_parallelism_needs_tp_to_divide_a_cp_ranks_tokens() -> None:
    """8,200 tokens: cp 2 leaves 4,100 a rank (4,100 % 8 = 4), cp 4 leaves 2,050
    (2,050 % 4 = 2): with sequence parallelism those tp x cp pairs are left out."""
    shape = at("llama3-8b", 8200)
    keys = search_keys(CostOptions(), shape, H100, 16, 8)
    assert pairs_of(keys) == [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2),
                              (8, 1)]
    with pytest.raises(BadInput) as err:
        search_keys(CostOptions(tp=(8,), cp=(2,)), shape, H100, 16, 8)
    assert str(err.value) == (
        "tp 8 x cp 2: sequence parallelism splits each context-parallel rank's 4100 tokens "
        "(sequence 8200 / cp 2) over tp 8, which does not divide them (megatron-core asserts "
        "it); use a sequence that is a multiple of 16, another tp or cp, or "
        "--no-sequence-parallel")
    # without sequence parallelism nothing splits the tokens over tp
    keys = search_keys(CostOptions(tp=(8,), cp=(2,), sequence_parallel=False), shape, H100,
                       16, 8)
    assert pairs_of(keys) == [(8, 2)]


def test_no_layout_says_the_numbers() -> None:
    """tp x cp must divide the GPUs, and ep x etp fit a pipeline stage's ranks (at most
    all of them): the message gives the sizes and what they exceed, as check-config's
    moe-world finding does."""
    with pytest.raises(BadInput) as err:
        search_keys(CostOptions(ep=(8,), etp=(2,), tp=(1,)), MIXTRAL, H100, 8, 8)
    assert str(err.value) == (
        "no layout of 8 GPUs: ep x etp = 8 x 2 = 16 does not divide them (the experts of a "
        "pipeline stage split over ep x etp of its tp x cp x dp ranks, which divide the "
        "GPUs); choose sizes whose product divides --gpus 8")
    with pytest.raises(BadInput) as err:  # 32 is under 48 but divides no stage of 48 ranks
        search_keys(CostOptions(ep=(32,), tp=(1,)), QWEN3_30B, H100, 48, 8)
    assert str(err.value).startswith(
        "no layout of 48 GPUs: ep x etp = 32 x 1 = 32 does not divide them")
    with pytest.raises(BadInput) as err:
        search_keys(CostOptions(ep=(16, 32), tp=(1,)), QWEN3_30B, H100, 40, 8)
    assert str(err.value).startswith(
        "no layout of 40 GPUs: no ep x etp from {16, 32} divides them")
    with pytest.raises(BadInput) as err:  # each divides 8, their product 16 does not
        search_keys(CostOptions(tp=(4,), cp=(4,)), LLAMA8B, H100, 8, 8)
    assert str(err.value) == ("no layout of 8 GPUs: no tp x cp from {4} x {4} divides them; "
                              "choose sizes whose product divides --gpus 8")


def test_latent_attention_searches_cp_over_the_exchanges_transformer_engine_runs() -> None:
    """DeepSeek-V3 (4,096 tokens) searches cp 1 and 2 with p2p and a2a+p2p; a2a and
    all-gather are refused for MLA by Transformer Engine 2.5-2.14 (context.MLA_REFUSED)."""
    ds = MODELS["deepseek-v3"]
    for comm in (CpComm.P2P, CpComm.A2A_P2P):
        assert default_cp(ds, CostOptions(cp_comm=comm), 1024) == (1, 2)
    for comm in (CpComm.A2A, CpComm.ALL_GATHER):
        assert default_cp(ds, CostOptions(cp_comm=comm), 1024) == (1,)
        with pytest.raises(BadInput, match=f"--cp 2: --cp-comm {comm.value} with deepseek-v3's "
                           "latent attention: Transformer Engine 2.5 to 2.14"):
            search_keys(CostOptions(cp=(2,), cp_comm=comm), ds, H100, 1024, 8)
    keys = search_keys(CostOptions(tp=(2,), cp=(2,), ep=(64,)), ds, H100, 1024, 8)
    assert [(k.tp, k.cp, k.ep) for k in keys] == [(2, 2, 64)]


def test_moe_flags_on_a_dense_model_are_refused() -> None:
    """--moe-imbalance and --moe-dispatcher change nothing on a model without experts: said,
    as --ep is, rather than accepted silently; their defaults pass."""
    from pptune.costmodel.dispatch import Dispatcher

    with pytest.raises(BadInput) as err:
        search_keys(CostOptions(moe_imbalance=2.0, moe_dispatcher=Dispatcher.DEEPEP),
                    LLAMA8B, H100, 8, 8)
    assert str(err.value) == ("--moe-imbalance 2.0: llama3-8b has no experts to route; "
                              "--moe-dispatcher deepep: llama3-8b has no experts to route")
    assert search_keys(CostOptions(tp=(1,)), LLAMA8B, H100, 8, 8)
