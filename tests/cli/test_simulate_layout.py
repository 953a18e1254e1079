"""simulate --split takes Megatron-LM's pipeline layout too (trial u30, rough edge 7),
read by the layout parser check-config and pptune's config use, each stage's layers as
the cost table counts them (embedding, blocks, MTP layers, head: check/split.py
table_split); a layout simulate cannot price is refused in one line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.errors import BadInput
from pptune.options import CostOptions
from pptune.plan.whatif import SimSpec, run

runner = CliRunner()
SMALL = CostOptions(model="gpt-small", gpu="h100-sxm")  # 6 blocks: 8 layers with the ends


def test_a_layout_is_the_split_of_its_stages() -> None:
    # Ett|tt|t|tL: the embedding and two blocks, two, one, one and the head: 3,2,1,2
    laid = run(SimSpec(schedule="1f1b", pp=4, microbatches=8, costs=SMALL,
                       layout="Ett|tt|t|tL"))
    given = run(SimSpec(schedule="1f1b", pp=4, microbatches=8, costs=SMALL, split=[3, 2, 1, 2]))
    assert laid.stage_layers == [3, 2, 1, 2]
    assert laid.result.step_time_s == given.result.step_time_s


def test_an_interleaved_layout_lists_virtual_stages_in_order() -> None:
    # (t|)*4 between E t| and tL: six stages, rank i % 2 as virtual stage i // 2
    laid = run(SimSpec(schedule="interleaved-1f1b", pp=2, microbatches=4, virtual_stages=3,
                       costs=SMALL, layout="Et|(t|)*4tL"))
    assert laid.stage_layers == [2, 1, 1, 1, 1, 2]


@pytest.mark.parametrize(("schedule", "v", "layout", "said"), [
    # six stages for pp 2 x v 2 = 4 model chunks
    ("interleaved-1f1b", 2, "Et|(t|)*4tL", "--split Et|(t|)*4tL has 6 stages; "
     "interleaved-1f1b at --pp 2 -v 2 runs 4 model chunks (-v 3 runs 6)"),
    # the model has 6 blocks, the layout places 7: the seventh t stands at column 11
    ("1f1b", None, "Ett|tt|tt|tL", "--split: the layout places 7 transformer layers t; "
     "the model has 6 (column 11 of Ett|tt|tt|tL)"),
    ("1f1b", None, "Ett|tt|X|tL", "--split: unknown symbol 'X'; the layout uses"),
    ("zbv", None, "Et|t|t|t|t|tL", "--split takes a Megatron-LM layout for one stage a "
     "rank or interleaved-1f1b, whose stage order it states; zbv places its 4 model chunks "
     "otherwise: give layers per stage"),
])
def test_a_layout_simulate_cannot_price_is_refused(schedule: str, v: int | None, layout: str,
                                                    said: str) -> None:
    pp = 2 if schedule != "1f1b" else 4
    with pytest.raises(BadInput) as exc:
        run(SimSpec(schedule=schedule, pp=pp, microbatches=4, virtual_stages=v, costs=SMALL,
                    layout=layout))
    assert str(exc.value).startswith(said)
    assert "\n" not in str(exc.value)


def test_the_command_line_takes_a_layout() -> None:
    r = runner.invoke(app, ["simulate", "--model", "gpt-small", "--gpu", "h100-sxm", "--pp",
                            "4", "-m", "8", "--split", "Ett|tt|t|tL"])
    assert r.exit_code == 0, r.output
    again = runner.invoke(app, ["simulate", "--model", "gpt-small", "--gpu", "h100-sxm",
                                "--pp", "4", "-m", "8", "--split", "3,2,1,2"])
    # the same table; the layout's run says where its split came from
    assert r.stdout == again.stdout
