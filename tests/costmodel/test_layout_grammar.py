"""Megatron-LM layout strings: NVIDIA's recipes, hostile strings, megatron-core's
own rules, and the writer's round trip."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.costmodel.layout_grammar import (
    KNOB,
    LayerKind,
    LayoutError,
    expand,
    parse_layout,
    stages_from_counts,
    write_layout,
)

E, T, M, L = LayerKind.EMBEDDING, LayerKind.DECODER, LayerKind.MTP, LayerKind.LOSS

LLAMA3_70B_FP8 = "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"  # NVIDIA's Llama-3-70B FP8 recipe
DEEPSEEK_V3 = "Et|(tt|)*30mL"  # DeepSeek-V3 with its MTP layer


def megatron_parse_str_to_list(layout_str: str) -> list[str]:
    """megatron-core 0.16.1 PipelineParallelLayerLayout.parse_str_to_list
    (megatron/core/transformer/pipeline_parallel_layer_layout.py), transcribed
    with layer types as their letters: the oracle the parser must agree with."""
    layout_str = layout_str.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        layout_str = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), layout_str)
    out = []
    for stage in layout_str.split("|"):
        for ch in stage:
            assert ch in "ELtm", f"Invalid layer character: {ch}"
        out.append(stage)
    return out


def letters(stages: object) -> list[str]:
    return ["".join(k.value for k in s) for s in stages]  # type: ignore[attr-defined]


def expanded(text: str) -> list[str]:
    return ["".join(ch for ch, _ in s) for s in expand(text)]


# --- the recipes ----------------------------------------------------------------


def test_llama3_70b_recipe_reads_forty_stages() -> None:
    # 1 + 34 + 1 + 3 + 1 stages; 2 + 68 + 3 + 6 + 1 = 80 transformer layers
    for pp, vp in ((8, 5), (4, 10), (2, 20), (40, 1)):
        layout = parse_layout(LLAMA3_70B_FP8, pp, vp, num_layers=80)
        assert (layout.vp, len(layout.stages)) == (vp, 40)
    layout = parse_layout(LLAMA3_70B_FP8, 8, num_layers=80)
    assert layout.layers_per_stage() == [2] * 35 + [3] + [2] * 3 + [1]
    assert layout.stages[0] == (E, T, T) and layout.stages[-1] == (T, L)
    assert layout.stage(pp_rank=3, vp_stage=4) == layout.stages[35] == (T, T, T)
    assert letters(layout.stages) == megatron_parse_str_to_list(LLAMA3_70B_FP8)


def test_deepseek_v3_recipe_reads_thirty_two_stages() -> None:
    layout = parse_layout(DEEPSEEK_V3, 8, 4, num_layers=61, mtp_layers=1)
    assert len(layout.stages) == 32
    assert layout.layers_per_stage() == [1] + [2] * 30 + [0]
    assert layout.layers_per_stage(LayerKind.MTP) == [0] * 31 + [1]
    # megatron-core's layout[pp_rank][vpp_rank]: rank 7's last virtual stage holds m and L
    assert layout.by_rank()[7] == ((T, T), (T, T), (T, T), (M, L))
    assert layout.by_rank()[0][0] == (E, T)
    assert (layout.count(T), layout.count(M), layout.count(E), layout.count(L)) == (61, 1, 1, 1)
    assert letters(layout.stages) == megatron_parse_str_to_list(DEEPSEEK_V3)


def test_grammar_corners_agree_with_megatron() -> None:
    for text, want in [
        ("Ettt|(tt|)*2,m|L", ["Ettt", "tt", "tt", "m", "L"]),
        ("E,t*3|L", ["Ettt", "L"]),
        ("Et||tL", ["Et", "", "tL"]),  # an empty stage
        ("Et|*3tL", ["Et", "", "", "tL"]),  # a repeated stage end
        ("Et|tL|", ["Et", "tL", ""]),  # a trailing empty stage
        ("(|Et)*1,|L", ["", "Et", "L"]),
        ("Et*1,0|L", ["Etttttttttt", "L"]),  # commas go first, even inside a count
        ("E(t*2|)*02L", ["Ett", "tt", "L"]),
    ]:
        assert expanded(text) == want == megatron_parse_str_to_list(text)


# --- hostile strings: one line, the column --------------------------------------


@pytest.mark.parametrize("text,column,needle", [
    ("Etx|L", 3, "unknown symbol 'x'"),
    ("Et |L", 3, "unknown symbol ' '"),
    ("Et\n|L", 3, "unknown symbol '\\n'"),
    ("Et|(tt|*30mL", 4, "this '(' is never closed"),
    ("Et|tt)|L", 6, "this ')' closes nothing"),
    ("E((t)*2)*3L", 3, "nested parentheses"),
    ("Et|(tt|)L", 4, "a group needs a count"),
    ("E()*3L", 2, "empty parentheses"),
    ("Et*0|L", 3, "a count of 0"),
    ("E(t|)*0L", 6, "a count of 0"),
    ("E(tt)*2*3|L", 8, "a second count"),
    ("Et*|L", 3, "'*' needs a count"),
    ("E*2*|L", 4, "a second count"),
    ("*3E|L", 1, "'*' repeats nothing"),
    ("E(*2t)*2L", 3, "'*' repeats nothing"),
    ("Et3|L", 3, "digit '3' outside a count"),
    ("m*2(0)*2L", 5, "digit '0' outside a count"),  # megatron-core: 200 MTP layers
    ("Et*9999999L", 3, "count 9999999 is too large"),
    ("Et*99999999999999999999|L", 3, "count 99999999999999999999 is too large"),  # as given
    ("Et*" + "9" * 5000 + "|L", 3, "count of 5,000 digits is too large"),
    # one rule for digits with every number pptune reads: ASCII 0-9 (megatron-core's \\d
    # would read the fullwidth 3 as 3)
    ("Et*\uff13|L", 4, "non-ASCII digit '\uff13' (U+FF13): write counts with ASCII digits"),
    ("Et*1\uff12|L", 5, "non-ASCII digit '\uff12' (U+FF12)"),
    ("Et\uff13|L", 3, "non-ASCII digit '\uff13' (U+FF13)"),
    ("Et*\u00b2|L", 4, "non-ASCII digit '\u00b2' (U+00B2)"),
    ("t*99999(t|)*99999", 8, "expands past 100000"),
])
def test_hostile_layouts_point_at_the_column(text: str, column: int, needle: str) -> None:
    with pytest.raises(LayoutError) as err:
        expand(text)
    assert isinstance(err.value, ValueError)  # the CLI maps it to exit 2
    message = str(err.value)
    assert err.value.column == column
    assert f"at column {column}: " in message and needle in message
    assert message.startswith(KNOB) and "\n" not in message


def test_a_long_layout_is_shown_around_the_column() -> None:
    text = "Et|" + "tt|" * 200 + "x|L"
    with pytest.raises(LayoutError) as err:
        expand(text)
    assert err.value.column == 604
    assert "'...tt|tt|" in str(err.value) and "tt|x|L'" in str(err.value)
    assert len(str(err.value)) < 300


def test_a_huge_layout_is_refused_before_reading() -> None:
    with pytest.raises(LayoutError, match="a layout of 10001 characters"):
        expand("t" * 10_001)


@pytest.mark.parametrize("text,pp,vp,kw,column,needle", [
    (DEEPSEEK_V3, 8, 2, {}, 7, "32 stages where pp x vp = 8 x 2 = 16 are needed"),
    (DEEPSEEK_V3, 6, None, {}, 14, "32 stages where a multiple of pp = 6 are needed"),
    ("Et|tt|tL", 2, 2, {}, 9, "3 stages where pp x vp = 2 x 2 = 4"),
    (DEEPSEEK_V3, 8, 4, {"num_layers": 60}, 6, "places 61 transformer layers t; the model has 60"),
    (DEEPSEEK_V3, 8, 4, {"num_layers": 62}, 14, "places 61 transformer layers t; the model has 62"),
    (DEEPSEEK_V3, 8, 4, {"mtp_layers": 0}, 12, "places 1 MTP layers m; the model has 0"),
    ("tE|L", 2, None, {}, 1, "the first layer must be the embedding E"),
    ("|tL", 2, None, {}, 2, "the first layer must be the embedding E"),
    ("Et|Lt", 2, None, {}, 5, "the last layer must be the loss L"),
    ("EtE|L", 2, None, {}, 3, "a second embedding E"),
    ("Et|LtL", 2, None, {}, 4, "a loss L before the last one"),
    ("Em|tL", 2, None, {}, 4, "a transformer layer t after an MTP layer m"),
    ("Et|m|m|L", 2, None, {}, 6, "MTP layers in more than one stage"),
    ("Et|m|t|L", 2, None, {}, 6, "a transformer layer t after an MTP layer m"),
    ("Et|tm|t|L", 2, None, {}, 7, "a transformer layer t after an MTP layer m"),
    ("Et|tm|L|", 2, None, {}, 5, "MTP layers outside the last virtual stage"),
])
def test_megatron_layout_rules(text: str, pp: int, vp: int | None, kw: dict[str, int],
                               column: int, needle: str) -> None:
    with pytest.raises(LayoutError) as err:
        parse_layout(text, pp, vp, **kw)
    assert err.value.column == column and needle in str(err.value)


def test_mtp_in_its_own_last_stage_is_allowed() -> None:
    # megatron-core's "standalone" MTP: the last virtual stage of a rank that
    # is not the last one (here rank 0 of 2, virtual stage 1)
    layout = parse_layout("Et|tt|m|L", 2, 2, num_layers=3, mtp_layers=1)
    assert layout.stage(0, 1) == (M,) and layout.stage(1, 1) == (L,)


def test_bad_pipeline_sizes_are_value_errors() -> None:
    with pytest.raises(ValueError, match="pp and vp must be >= 1"):
        parse_layout(DEEPSEEK_V3, 0)


# --- writing --------------------------------------------------------------------


def test_writer_shortens_the_recipes() -> None:
    llama = parse_layout(LLAMA3_70B_FP8, 8)
    assert write_layout(llama.stages) == "Ett|(tt|)*34ttt|(tt|)*3tL"
    assert write_layout(parse_layout(DEEPSEEK_V3, 8).stages) == DEEPSEEK_V3


def test_writer_from_layer_counts() -> None:
    stages = stages_from_counts([1] + [2] * 30, mtp_layers=1)
    assert write_layout(stages) == "Et|(tt|)*29ttmL"
    assert write_layout(stages_from_counts([4, 0, 0, 0, 0, 4])) == "Et*4|*5t*4L"
    assert write_layout(stages_from_counts([1, 0, 0, 1])) == "Et|||tL"
    assert write_layout([[]] * 12) == "|*11"
    assert write_layout(stages_from_counts([3, 3, 3, 3])) == "Ettt|ttt|ttt|tttL"  # a tie: literal
    assert write_layout(stages_from_counts([3] * 5)) == "Ettt|(ttt|)*3tttL"
    assert write_layout(stages_from_counts([2])) == "EttL"
    with pytest.raises(ValueError, match=">= 0"):
        stages_from_counts([2, -1])


kinds = st.sampled_from(list(LayerKind))
stage_lists = st.lists(st.lists(kinds, max_size=7), min_size=1, max_size=14)


@settings(max_examples=300, deadline=None)
@given(stage_lists)
def test_written_layouts_read_back_identically(stages: list[list[LayerKind]]) -> None:
    text = write_layout(stages)
    want = ["".join(k.value for k in s) for s in stages]
    assert expanded(text) == want
    assert megatron_parse_str_to_list(text) == want
    # never longer than writing every stage out
    assert len(text) <= len("|".join(want))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=12), st.integers(0, 2),
       st.sampled_from([1, 2, 4]))
def test_layer_counts_round_trip_through_parse(decoders: list[int], mtp: int, pp: int) -> None:
    stages = stages_from_counts(decoders, mtp)
    if len(stages) % pp:
        return
    layout = parse_layout(write_layout(stages), pp, num_layers=sum(decoders),
                          mtp_layers=mtp if len(stages) // pp == 1 or mtp == 0 else None)
    assert layout.stages == stages
    assert layout.layers_per_stage() == decoders


ALPHABET = ["E", "t", "m", "L", "|", "(", ")", "*", ",", "0", "1", "2", "3", "t", "|",
            "*2", "*3", "(t|)*2", "(tt|)"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(ALPHABET), max_size=14).map("".join))
def test_accepted_strings_agree_with_megatron(text: str) -> None:
    try:
        ours = expanded(text)
    except LayoutError:
        return  # pptune refuses a superset of what megatron-core refuses
    assert megatron_parse_str_to_list(text) == ours


@pytest.mark.parametrize(("text", "reads"), [
    ("Et*\uff13|L", True),  # its \d+ takes the fullwidth 3: t*3
    ("Et*1\uff12|L", True),  # t*12
    ("Et\uff13|L", False),  # outside a count: 'Invalid layer character'
    ("Et*\u00b2|L", False),  # a superscript is no decimal digit: '*' is left unread
])
def test_a_non_ascii_digit_says_whether_megatron_reads_it(text: str, reads: bool) -> None:
    with pytest.raises(LayoutError) as err:
        expand(text)
    assert err.value.megatron_reads is reads
    try:
        megatron = megatron_parse_str_to_list(text)
    except AssertionError:
        megatron = None
    assert (megatron is not None) is reads
    if reads:
        assert megatron == ["E" + "t" * int(text[3:-2]), "L"]
