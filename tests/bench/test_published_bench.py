"""The published-runs benchmark's exact part: Zero Bubble's Table 5 bubble
rates from its Table 9 profiled times, through pptune's simulator."""

from __future__ import annotations

import pytest

from bench.published import zb_bubbles
from bench.published_data import MEGATRON_TABLE1, MEGATRON_TABLE1_SCRIPT
from bench.published_layer import layer_rows
from bench.published_megatron import _blocks_recomputed, megatron_model_flops
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.search import CostTable, LayerCosts
from pptune.costmodel.simulate import Link


def test_zero_bubble_table5_from_table9_profiled_times() -> None:
    rows = zb_bubbles()
    assert len(rows) == 36  # 12 runs x (1F1B, ZB-H1, 1F1B-I)
    exact = [r for r in rows if r["schedule"] in ("1F1B", "ZB-H1")]
    assert all(abs(r["predicted"] - r["published"]) <= 0.0005 for r in exact), exact
    first = next(r for r in rows if (r["model"], r["microbatches"], r["schedule"])
                 == ("1.5B", 24, "1F1B"))
    assert first["predicted"] == pytest.approx(0.2431, abs=5e-5)


def test_megatron_eq3_flops_of_the_1t_row() -> None:
    # 96 B s l h^2 (1 + s/6h + V/16lh) = 5.14e19 FLOPs; at the published 163
    # TFLOP/s on 3072 GPUs that is a 102.6 s step (and 502 PFLOP/s aggregate)
    row = next(r for r in MEGATRON_TABLE1 if r.params_billion == 1008.0)
    flops = megatron_model_flops(row)
    s, h, n, v = 2048, 25600, 128, 51200
    assert flops == pytest.approx(96 * 3072 * s * n * h**2 * (1 + s / (6 * h) + v / (16 * n * h)))
    assert flops / (3072 * 163e12) == pytest.approx(102.63, abs=0.01)
    assert flops / 102.63 / 1e15 == pytest.approx(row.aggregate_pflops, rel=0.005)


def test_table1_script_settings_are_runnable_as_megatron_requires() -> None:
    # every row has its script line; an interleaved row splits a stage's
    # layers into whole chunks, and Megatron-LM v2 asserts that the number of
    # micro-batches is a multiple of the pipeline size for interleaving
    scripts = {s.params_billion: s for s in MEGATRON_TABLE1_SCRIPT}
    assert set(scripts) == {r.params_billion for r in MEGATRON_TABLE1}
    for row in MEGATRON_TABLE1:
        run = scripts[row.params_billion]
        dp = row.num_gpus // (row.tensor_parallel * row.pipeline_parallel)
        assert row.batch_size % (dp * run.micro_batch_size) == 0
        m = row.batch_size // (dp * run.micro_batch_size)
        assert (run.ddp_impl == "torch") == (row.pipeline_parallel == 1)
        if run.layers_per_virtual_stage:
            per_stage = row.layers // row.pipeline_parallel
            assert per_stage % run.layers_per_virtual_stage == 0
            assert m % row.pipeline_parallel == 0


def test_megatron_recomputes_the_blocks_only() -> None:
    # embedding 1/2/0, block 3/5/4, head 7/11/6 (fwd/bwd/wgrad s): the block's
    # backward gains its forward (5 + 3), the embedding's and head's do not
    link = AllReduceLink(0.0, 1e9)
    by = {1: LayerCosts([1.0, 3.0, 7.0], [2.0, 5.0, 11.0], [0.0, 4.0, 6.0],
                        [9.0, 9.0, 9.0], [1.0, 1.0, 1.0])}
    table = CostTable(["embedding", "block0", "head"], [1.0, 1.0, 1.0], 2, by, 128, 1e15,
                      Link(), Link(), link, link)
    got = _blocks_recomputed(table).by_mb[1]
    assert list(got.bwd_s) == [2.0, 8.0, 11.0]
    assert list(got.fwd_s) == [1.0, 3.0, 7.0]
    assert list(got.act_bytes) == [9.0, 1.0, 9.0]  # the block keeps only its input


def test_korthikanti_rows_recompute_what_the_paper_recomputes() -> None:
    rows = {r["experiment"]: r for r in layer_rows("a100-80gb")}
    assert len(rows) == 5
    base, full = rows["Baseline no recompute"], rows["Baseline with recompute"]
    # full recomputation adds one forward to the backward, nothing else
    assert full["backward_ms_predicted"] == pytest.approx(
        base["backward_ms_predicted"] + base["forward_ms_predicted"], abs=0.011)
    selective = rows["Selective Recompute"]
    added = selective["backward_ms_predicted"] - base["backward_ms_predicted"]
    assert 0 < added < base["forward_ms_predicted"]
    # sequence parallelism splits the norms and dropouts: a cheaper forward
    assert rows["Sequence Parallelism"]["forward_ms_predicted"] < base["forward_ms_predicted"]
