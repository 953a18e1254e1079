"""recommend --emit megatron with tensor parallelism, round-tripped through check-config:
the script states what megatron-core needs beside tp > 1 (sequence parallelism for MoE
layers, whatever ep, and for --tp-comm-overlap) and Transformer Engine's TP overlap where
the plan was priced with it, and check-config reads back the emitted step time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.plan.emit import Emitted, Framework, emit, write
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
FILES = {Framework.MEGATRON: "pretrain_megatron.sh", Framework.PPTUNE: "pptune.yaml"}


def round_trip(framework: Framework, tmp_path: Path, **flags: Any) -> tuple[Emitted, dict]:
    run = recommend(RecommendSpec.of(top=1, **flags))
    emitted = emit(framework, run)
    write(emitted, tmp_path)
    r = runner.invoke(app, ["check-config", str(tmp_path / FILES[framework]), "--output",
                            "json", "--no-compare"])
    assert r.exit_code == 0, r.stdout
    return emitted, json.loads(r.stdout)


@pytest.mark.parametrize("framework", list(FILES))
def test_tp_comm_overlap_round_trips(framework: Framework, tmp_path: Path) -> None:
    emitted, doc = round_trip(framework, tmp_path, gpus=16, model="llama3-8b", tp="2",
                              tp_comm_overlap=True, attention="cudnn")
    text = emitted.files[FILES[framework]]
    assert ("--tp-comm-overlap" in text if framework is Framework.MEGATRON
            else "tp_comm_overlap: true" in text)
    assert doc["config"]["tp_comm_overlap"] is True
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)


def test_tp_comm_overlap_without_sequence_parallelism_is_written_with_it(
        tmp_path: Path) -> None:
    """validate_args asserts sequence parallelism under --tp-comm-overlap: the script
    states both, the plan re-priced so, with a note."""
    emitted, doc = round_trip(Framework.MEGATRON, tmp_path, gpus=16, model="llama3-8b",
                              tp="2", tp_comm_overlap=True, sequence_parallel=False)
    text = emitted.files["pretrain_megatron.sh"]
    assert "--sequence-parallel" in text and "--tp-comm-overlap" in text
    assert any("sequence parallelism with --tp-comm-overlap" in n for n in emitted.notes)
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)


def test_eager_attention_runs_no_tp_overlap(tmp_path: Path) -> None:
    """Eager attention is written as --transformer-impl local, whose linear layers overlap
    nothing: no --tp-comm-overlap, the plan re-priced with the collectives exposed."""
    emitted, doc = round_trip(Framework.MEGATRON, tmp_path, gpus=16, model="llama3-8b",
                              tp="2", tp_comm_overlap=True, attention="eager")
    text = emitted.files["pretrain_megatron.sh"]
    assert "--transformer-impl local" in text and "--tp-comm-overlap" not in text
    assert any("no tensor-parallel overlap with --transformer-impl local" in n
               for n in emitted.notes)
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)


def test_moe_with_tp_and_ep_1_is_written_with_sequence_parallelism(tmp_path: Path) -> None:
    """megatron-core's MoELayer.forward raises without sequence parallelism whenever
    tp > 1, ep 1 included: --no-sequence-parallel is re-priced with it, with a note."""
    emitted, doc = round_trip(Framework.MEGATRON, tmp_path, gpus=16, model="qwen3-30b-a3b",
                              tp="2", ep="1", sequence_parallel=False)
    assert "--sequence-parallel" in emitted.files["pretrain_megatron.sh"]
    assert any("sequence parallelism with MoE layers and tp > 1" in n for n in emitted.notes)
    assert doc["errors"] == 0 and doc["config"]["sequence_parallel"] is True
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
