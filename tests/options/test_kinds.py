"""The parsers of option values: the error lines pptune has always printed, and
values given in code going through the same checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.costmodel.memory import Recompute
from pptune.costmodel.ops import Attention
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.sharding import Sharding
from pptune.errors import BadInput
from pptune.options import CostOptions, PlanSpace, build
from pptune.options.groups import ATTENTION, INTS, PATH, SCHEDULE, SCHEDULES, SHARDINGS


@pytest.mark.parametrize(("kind", "flag", "raw", "line"), [
    (SHARDINGS, "--sharding", "nope",
     "--sharding takes a comma list of none, zero1, zero2, zero3, fsdp (got 'nope')"),
    (SHARDINGS, "--sharding", ",", "--sharding takes a comma list of none, zero1, zero2, zero3, "
     "fsdp (got ',')"),
    (SCHEDULES, "--schedules", "1f1b,bogus",
     "unknown schedule 'bogus'; choose from gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv, "
         "dualpipe, dualpipev"),
    (SCHEDULES, "--schedules", ",", "--schedules is empty"),
    (SCHEDULE, "--schedule", "pipedream",
     "unknown schedule 'pipedream'; choose from gpipe, 1f1b, interleaved-1f1b, zb-h1, "
         "zbv, dualpipe, dualpipev"),
    (ATTENTION, "--attention", "sparse", "--attention must be one of flash, cudnn, eager, sdpa (got 'sparse')"),
    (INTS, "--pp", "2,,4", "--pp has an empty item (got '2,,4'): separate the values with "
     "single commas"),
    (INTS, "--pp", "2,", "--pp has an empty item (got '2,'): separate the values with "
     "single commas"),
    (INTS, "--pp", "", "--pp takes comma-separated integers, e.g. 1,2,4 (got '')"),
    (INTS, "--pp", "\uff18", "--pp takes ASCII digits 0-9, as every number pptune reads "
     "(got '\uff18')"),
    (SCHEDULES, "--schedules", "1f1b,,zbv", "--schedules has an empty item (got "
     "'1f1b,,zbv'): separate the values with single commas"),
    (SHARDINGS, "--sharding", "zero1, ,none", "--sharding has an empty item (got "
     "'zero1, ,none'): separate the values with single commas"),
    (INTS, "--pp", "0", "--pp needs positive integers (got '0')"),
])
def test_a_bad_value_is_the_one_line_pptune_always_printed(kind: object, flag: str, raw: str,
                                                           line: str) -> None:
    with pytest.raises(BadInput) as err:
        kind.parse(raw, flag)  # type: ignore[attr-defined]
    assert str(err.value) == line


def test_text_and_values_given_in_code_parse_alike() -> None:
    assert SHARDINGS.parse("zero1, none,zero1", "--sharding") == (Sharding.ZERO1, Sharding.NONE)
    assert SHARDINGS.parse(["zero1", Sharding.NONE], "--sharding") == (Sharding.ZERO1,
                                                                       Sharding.NONE)
    assert SCHEDULES.parse("1f1b,1F1B", "--schedules") == (Schedule.ONE_F_ONE_B,)  # once
    assert ATTENTION.parse(Attention.EAGER, "--attention") is Attention.EAGER
    assert INTS.parse([4, 8], "--pp") == INTS.parse("4,8", "--pp") == (4, 8)
    assert PATH.parse("a/b.json", "--profile") == Path("a/b.json")
    for kind in (SHARDINGS, SCHEDULES, ATTENTION, INTS, PATH):
        assert kind.parse(None, "--x") is None


def test_defaults_show_as_the_command_line_writes_them() -> None:
    assert INTS.text((2, 3, 4)) == "2,3,4"
    assert SHARDINGS.text((Sharding.NONE, Sharding.FSDP)) == "none,fsdp"
    assert ATTENTION.text(Attention.FLASH) == "flash"


def test_build_lists_every_bad_value_at_once_and_keeps_the_defaults() -> None:
    space = build(PlanSpace, {"gpus": 8, "recompute": "full", "pp": "2,4"})
    assert (space.gpus, space.recompute, space.pp) == (8, (Recompute.FULL,), (2, 4))
    assert (space.gpus_per_node, space.virtual_stages, space.sharding) == (None, (2, 3, 4), None)
    with pytest.raises(BadInput) as err:
        build(PlanSpace, {"gpus": 8, "recompute": "half", "pp": "x"})
    assert str(err.value) == ("--pp takes comma-separated integers, e.g. 1,2,4 (got 'x'); "
                              "--recompute takes a comma list of none, selective, full, "
                              "modules (got 'half')")
    with pytest.raises(TypeError, match="has no option colour"):
        build(CostOptions, {"colour": "red"})


def test_a_split_takes_the_runs_recommend_writes() -> None:
    from pptune.options.kinds import parse_split
    from pptune.report.fmt import compact_split

    assert parse_split("5,4x3,2", "--split") == [5, 4, 4, 4, 2]
    layers = [5] + [4] * 14 + [3]
    assert compact_split(layers) == "5,4x14,3" and parse_split("5,4x14,3", "--split") == layers
    assert parse_split("1x4098", "--split") == [1] * 4098  # MAX_LIST_ITEMS
    assert parse_split(None, "--split") is None


def test_a_repeated_size_is_searched_once() -> None:
    """--tp 2,2 searched every tp-2 plan twice (a user trial: 5,184 candidates for 2,592);
    a repeat is dropped, the first kept, order kept."""
    assert INTS.parse("2,2", "--tp") == (2,)
    assert INTS.parse("4,2,4,8,2", "--pp") == (4, 2, 8)
    assert INTS.parse([8, 8], "--pp") == (8,)
