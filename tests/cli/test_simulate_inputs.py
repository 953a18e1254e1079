"""simulate's answers to a second user trial: a pipeline deeper than anything simulate
lists, the combined order Megatron-LM does not run, what "peak in-flight" counts,
list items and digits across flags, recommend's split notation pasted back, and
timelines too narrow for their op names."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

Cli = Callable[..., Result]  # the ``cli`` fixture of tests/conftest.py
ErrorLine = Callable[[Result], str]
TEXTBOOK = ("--fwd-ms", "1", "--bwd-ms", "2")


def test_a_pipeline_past_the_cap_is_refused_in_one_line(cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("simulate", "-s", "1f1b", "--pp", "100000", "-m", "1", *TEXTBOOK))
    assert line == ("pptune: error: --pp must be <= 4,096 (got 100000): pptune's cap, "
                    "see docs/limits.md")


def test_a_pipeline_at_the_cap_runs(cli: Cli) -> None:
    """1f1b, pp 4096, one micro-batch, F 1 ms, B 2 ms, free links: the micro-batch walks
    down and back, 4096 x 3 ms = 12.288 s; dev0 holds its one micro-batch."""
    r = cli("simulate", "-s", "1f1b", "--pp", "4096", "-m", "1", *TEXTBOOK, "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["step_time_s"] == pytest.approx(12.288, rel=1e-12)
    assert len(doc["devices"]) == 4096 and doc["devices"][0]["peak_inflight_microbatches"] == 1


A2A = ("--fwd-ms", "1", "--bwd-ms", "1", "--wgrad-ms", "1", "--a2a-ms", "0.5", "--a2a-overlap")


def test_the_combined_order_with_a_pipeline_needs_virtual_stages(cli: Cli,
                                                                 error_line: ErrorLine) -> None:
    line = error_line(cli("simulate", "-s", "1f1b", "--pp", "4", "-m", "8", *A2A))
    assert line == (
        "pptune: error: --a2a-overlap with 1f1b at pp 4: megatron-core 0.16 runs its "
        "combined order with a pipeline only interleaved (TransformerConfig asserts 'If "
        "enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified "
        "when pipeline_model_parallel_size > 1'); use -s interleaved-1f1b, or --pp 1")


def test_the_combined_interleaved_order_is_checked_before_the_run(
        cli: Cli, error_line: ErrorLine) -> None:
    line = error_line(cli("simulate", "-s", "interleaved-1f1b", "--pp", "4", "-m", "6", *A2A))
    assert line == ("pptune: error: the combined interleaved order needs micro-batches (6) "
                    "to be a multiple of pipeline depth (4); try 4 or 8")


def test_the_combined_order_without_a_pipeline_runs(cli: Cli) -> None:
    """pp 1, m 8, F 1 + 0.5 ms all-to-all, B + W 2 + 0.5 ms: plainly 8 x 4 = 32 ms.
    Combined: F0 (1.5 ms), seven pairs F(i+1)&B(i) of max(1 + 2, 0.5 + 0.5, 1 + 0.5,
    2 + 0.5) = 3 ms, then B7 (2.5 ms): 25 ms."""
    steps = []
    for extra in ((), ("--a2a-overlap",)):
        r = cli("simulate", "-s", "1f1b", "--pp", "1", "-m", "8", *A2A[:-1], *extra, "--json")
        assert r.exit_code == 0 and r.stderr == "", r.stderr
        steps.append(json.loads(r.stdout)["step_time_s"])
    assert steps == [pytest.approx(0.032, rel=1e-12), pytest.approx(0.025, rel=1e-12)]


def test_peak_in_flight_says_it_counts_chunk_passes(cli: Cli) -> None:
    """interleaved pp 8, v 4, m 16: Megatron-LM's warm-up on rank r is (p - r - 1) x 2 +
    (v - 1) x p forwards, one more before the first backward: 39 chunk passes on dev0,
    39 - 2r on rank r (16 micro-batches x 4 chunks pass each device)."""
    args = ("simulate", "-s", "interleaved-1f1b", "--pp", "8", "-v", "4", "-m", "16",
            *TEXTBOOK)
    r = cli(*args, "--json")
    assert [d["peak_inflight_microbatches"] for d in json.loads(r.stdout)["devices"]] == [
        39 - 2 * rank for rank in range(8)]
    text = cli(*args).stdout
    assert "peak in-flight: chunk passes (micro-batch x chunk)" in text
    one_chunk = cli("simulate", "-s", "1f1b", "--pp", "4", "-m", "8", *TEXTBOOK).stdout
    assert "chunk passes" not in one_chunk  # one chunk a device: passes are micro-batches


@pytest.mark.parametrize(("args", "line"), [
    (("recommend", "--gpus", "8", "--schedules", "1f1b,,zbv"),
     "--schedules has an empty item (got '1f1b,,zbv'): separate the values with single "
     "commas"),
    (("recommend", "--gpus", "8", "--sharding", "zero1,"),
     "--sharding has an empty item (got 'zero1,'): separate the values with single commas"),
    (("recommend", "--gpus", "8", "--pp", "2,,4"),
     "--pp has an empty item (got '2,,4'): separate the values with single commas"),
    (("simulate", "--model", "gpt3-1.3b", "--split", "2,,2,4"),
     "--split has an empty item (got '2,,2,4'): separate the values with single commas"),
    (("simulate", "--model", "gpt3-1.3b", "--split", "２,2,2,2"),
     "--split takes ASCII digits 0-9, as every number pptune reads (got '２,2,2,2')"),
    (("simulate", "--model", "gpt3-1.3b", "--split", "²,2,2,2"),
     "--split takes ASCII digits 0-9, as every number pptune reads (got '²,2,2,2')"),
    (("probe", "--micro-batch-sizes", "\u00b2"),  # passes str.isdigit(), not int()
     "--micro-batch-sizes takes ASCII digits 0-9, as every number pptune reads (got '\u00b2')"),
    (("simulate", "--model", "gpt3-1.3b", "--split", "9" * 30),  # past int()'s reach too
     f"--split takes integers of up to 18 digits (got '{'9' * 30}')"),
    (("probe", "--micro-batch-sizes", "1,,2"),
     "--micro-batch-sizes has an empty item (got '1,,2'): separate the values with single "
     "commas"),
    (("recommend", "--gpus", "8", "--pp", "８"),
     "--pp takes ASCII digits 0-9, as every number pptune reads (got '８')"),
])
def test_list_items_and_digits_follow_one_rule(cli: Cli, error_line: ErrorLine,
                                               args: tuple[str, ...], line: str) -> None:
    assert error_line(cli(*args)) == f"pptune: error: {line}"


MEGATRON = """torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 1 \\
  --pipeline-model-parallel-size 2 {extra} --num-layers 8 --hidden-size 1024 \\
  --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 \\
  --micro-batch-size 1 --global-batch-size 16 --bf16
"""


@pytest.mark.parametrize(("extra", "line"), [
    ("--pipeline-model-parallel-layout 'Et*\uff14|t*4L'",
     "--pipeline-model-parallel-layout 'Et*\uff14|t*4L' at column 4: non-ASCII digit "
     "'\uff14' (U+FF14): write counts with ASCII digits 0-9, as every number pptune reads; "
     "megatron-core's parse_str_to_list reads it as meant "
     "(megatron/core/transformer/pipeline_parallel_layer_layout.py)"),
    ("--context-parallel-size 4 --hierarchical-context-parallel-sizes '\u00b2 2'",
     "--hierarchical-context-parallel-sizes \u00b2 2: expected whole numbers >= 1 (inner "
     "first)"),
])
def test_a_launch_script_with_digits_pptune_does_not_read(cli: Cli, error_line: ErrorLine,
                                                          tmp_path: Path, extra: str,
                                                          line: str) -> None:
    script = tmp_path / "train.sh"
    script.write_text(MEGATRON.format(extra=extra))
    assert error_line(cli("check-config", script)) == f"pptune: error: {script}: {line}"


def test_a_typed_number_flag_refuses_a_fullwidth_digit_too(cli: Cli,
                                                          error_line: ErrorLine) -> None:
    assert "--pp" in error_line(cli("simulate", "--pp", "４", *TEXTBOOK))


def test_recommends_split_notation_pastes_back(cli: Cli) -> None:
    """gpt3-1.3b: 24 blocks + embedding + head = 26 layers; 7,6x2,7 is 7,6,6,7."""
    docs = []
    for split in ("7,6,6,7", "7,6x2,7", "7, 6x2 ,7"):
        r = cli("simulate", "--model", "gpt3-1.3b", "--gpu", "h100-sxm", "--pp", "4", "-m", "8",
                "--split", split, "--json")
        assert r.exit_code == 0, r.stderr
        docs.append(json.loads(r.stdout))
    assert [d["stage_layers"] for d in docs] == [[7, 6, 6, 7]] * 3
    assert docs[0]["step_time_s"] == docs[1]["step_time_s"] == docs[2]["step_time_s"]


@pytest.mark.parametrize(("split", "line"), [
    ("7,6x0,7", "--split needs positive integers (got '7,6x0,7')"),
    ("7,0x2,7", "--split needs positive integers (got '7,0x2,7')"),
    ("7,6x,7", "--split takes comma-separated integers, NxM for M stages of N layers, "
               "e.g. 5,4x14,3 (got '7,6x,7')"),
    ("7,x2,7", "--split takes comma-separated integers, NxM for M stages of N layers, "
               "e.g. 5,4x14,3 (got '7,x2,7')"),
    ("6x2x2", "--split takes comma-separated integers, NxM for M stages of N layers, "
              "e.g. 5,4x14,3 (got '6x2x2')"),
    ("1x100000", "--split lists 100,000 values; pptune takes up to 4,098"),
    ("1x" + "9" * 5000, "--split takes integers of up to 18 digits (got '1x" + "9" * 5000
     + "')"),
])
def test_a_bad_split_item_is_one_line(cli: Cli, error_line: ErrorLine, split: str,
                                      line: str) -> None:
    r = cli("simulate", "--model", "gpt3-1.3b", "--pp", "4", "--split", split)
    assert error_line(r) == f"pptune: error: {line}"


LABEL = re.compile(r"F\d+&B\d+|BW\d+|[FBW]\d+")


def test_a_timeline_too_narrow_for_its_op_names_leaves_them_all_out(cli: Cli) -> None:
    """dualpipev pp 4, m 8 at the default 80 columns: some ops are narrower than their
    names, so no row names any op and a line says so, with a width that names every one
    (tests/report/test_report_timeline.py counts the names there)."""
    args = ("simulate", "-s", "dualpipev", "--pp", "4", "-m", "8", *A2A[:-1], "--timeline")
    text = cli(*args).stdout
    rows = [line for line in text.splitlines() if line.startswith("dev")]
    assert len(rows) == 4 and not any(LABEL.search(row) for row in rows)
    said = re.search(r"op names left out: at 80 columns some ops' bars are shorter than their "
                     r"names; --width (\d+) names every op", " ".join(text.split()))
    assert said, text
    wide = cli(*args, "--width", said[1]).stdout
    assert "op names left out" not in wide
    assert all(LABEL.match(row[5:].lstrip(".")) for row in wide.splitlines()
               if row.startswith("dev"))
