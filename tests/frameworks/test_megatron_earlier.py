"""An earlier --framework-version megatron-core (a user trial, u30 M3): pptune holds no
rules of earlier releases, so core_v0.16.1's judge it and a note says so; the
unknown-flag rule still refuses a flag that no release read defines (a misspelling),
and takes one that an earlier release defined and core_v0.16.1 removed or renamed
(earlier_flags.py, derived by bench/megatron_flags.py --earlier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.frameworks.megatron import earlier_flags, known_flags
from pptune.frameworks.megatron.split import MEGATRON
from tests.frameworks.test_megatron_unknown_flags import launch

OLD = ("--framework-version", "megatron-core=0.12")


def test_a_misspelt_flag_is_still_an_error_at_an_earlier_release(tmp_path: Path) -> None:
    code, found, doc = launch(tmp_path, "--num-virtual-stage-per-pipeline-rank 2",
                              "pretrain_gpt.py", *OLD)
    assert code == 1
    assert found["megatron-unknown-flag"].startswith(
        "--num-virtual-stage-per-pipeline-rank (did you mean "
        "--num-virtual-stages-per-pipeline-rank?) is not a flag of any Megatron-LM release "
        "from core_v0.4.0 to core_v0.16.1: parse_args exits with argparse's "
        "'pretrain_gpt.py: error: unrecognized arguments: "
        "--num-virtual-stage-per-pipeline-rank 2'")
    assert not any("--num-virtual-stage-per-pipeline-rank" in n for n in doc["notes"]
                   if n.startswith("ignored"))


def test_the_earlier_release_is_said_to_be_judged_by_0_16_1(tmp_path: Path) -> None:
    _code, _found, doc = launch(tmp_path, "", "pretrain_gpt.py", *OLD)
    notes = " ".join(doc["notes"])
    assert ("--framework-version megatron-core=0.12 is earlier than 0.16.1, whose rules "
            "pptune follows: pptune has no rules of its own for earlier releases, so "
            "0.16.1's apply; a rule or flag that 0.12 does not have yet is not caught") in notes
    assert ("megatron-core 0.12's flags are judged against every Megatron-LM release pptune "
            "has read (core_v0.4.0 to core_v0.16.1): a flag none of them defines is an error, "
            "one that a later release adds and 0.12 lacks is not caught") in notes
    # 0.16 names 0.16.1's minor release: nothing earlier to say
    _code, _found, doc = launch(tmp_path, "", "pretrain_gpt.py", "--framework-version",
                                "megatron-core=0.16")
    assert not any("is earlier than" in n or "judged against every" in n for n in doc["notes"])


def test_a_flag_removed_since_is_taken_at_the_release_that_had_it(tmp_path: Path) -> None:
    """--use-custom-fsdp is core_v0.12.0's (megatron/training/arguments.py
    ``group.add_argument('--use-custom-fsdp', ...)``), renamed --use-megatron-fsdp
    later: an error at core_v0.16.1, an ignored flag at 0.12."""
    assert "--use-custom-fsdp" in earlier_flags.FLAGS
    assert "--use-custom-fsdp" not in known_flags.FLAGS
    code, found, _ = launch(tmp_path, "--use-custom-fsdp")
    assert code == 1 and "megatron-unknown-flag" in found
    code, found, doc = launch(tmp_path, "--use-custom-fsdp", "pretrain_gpt.py", *OLD)
    assert "megatron-unknown-flag" not in found, found
    assert "ignored 1 other flag: --use-custom-fsdp" in doc["notes"]


def test_the_earlier_list_holds_none_of_the_current_flags() -> None:
    assert not earlier_flags.FLAGS & known_flags.FLAGS
    assert earlier_flags.FIRST == "core_v0.4.0"


@pytest.mark.parametrize(("release", "default"), [
    ("0.12", "0.16.1"), ("0.16.0", "0.16.1"), ("0.16", None), ("0.16.1", None),
    ("0.18", None)])
def test_earlier_than_read(release: str, default: str | None) -> None:
    assert MEGATRON.earlier_than_read(release) == default
