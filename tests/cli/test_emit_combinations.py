"""Every combination of plan settings the planner produces, through every framework's
file and back through check-config: same step time, bubble and per-rank peak memory.

Where a framework cannot state a setting, emit switches to the closest plan it can
state and says so in a note; the comparison is then against that emitted plan. A size
the plan forced (here pp 2) is not switched: DeepSpeed, which runs AutoTP without a
pipeline, refuses the tp 2 cases (plan/kept.py).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.errors import NoFeasiblePlan
from pptune.plan.emit import Framework, emit, write
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
MODEL = ["--model", "gpt3-1.3b", "--gpu", "a100-80gb"]
FILES = {
    Framework.MEGATRON: ("pretrain_megatron.sh", MODEL),
    Framework.TORCHTITAN: ("torchtitan.toml", MODEL),
    Framework.PPTUNE: ("pptune.yaml", []),
    Framework.DEEPSPEED: ("ds_config.json", ["--gpus", "8", *MODEL]),
}
SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipe", "dualpipev"]
# pipeline plans hold these shardings (ZeRO-2/3 only without a pipeline)
SHARDINGS = ["none", "zero1", "fsdp"]
RECOMPUTES = ["none", "selective", "full"]
# A torchtitan TOML does not carry the node shape (torchrun's --nproc_per_node does):
# check-config takes it from --gpus-per-node for the multi-node cases (plans made for 2).
CASES = [
    # schedule x sharding x recompute, attention alternating; tensor parallelism with
    # sequence parallelism and 2 GPUs per node on a few
    pytest.param(*case)
    for case in (
        (sched, shard, rc, "eager" if i % 2 else "flash", i % 5 == 0, i % 7 == 0)
        for i, (sched, shard, rc) in enumerate(
            itertools.product(SCHEDULES, SHARDINGS, RECOMPUTES))
    )
]


def _spec(sched: str, shard: str, rc: str, attention: str, tp2: bool,
          gpus_per_node: int = 8) -> RecommendSpec:
    return RecommendSpec.of(
        gpus=8, model="gpt3-1.3b", gpu="a100-80gb", pp=[2], schedules=[sched],
        global_batch=32, micro_batch_sizes=[1], gpus_per_node=gpus_per_node,
        sharding=shard, recompute=rc, attention=attention, tp=2 if tp2 else 1,
        sequence_parallel=tp2, top=1,
    )


@pytest.mark.parametrize(("sched", "shard", "rc", "attention", "tp2", "multi_node"), CASES)
def test_every_setting_round_trips(sched: str, shard: str, rc: str, attention: str,
                                   tp2: bool, multi_node: bool, tmp_path: Path) -> None:
    spec = _spec(sched, shard, rc, attention, tp2, gpus_per_node=2 if multi_node else 8)
    run = recommend(spec)
    assert run.result.plans, f"no plan for {sched}/{shard}/{rc}"
    plan = run.result.plans[0]
    assert (plan.schedule.value, plan.sharding.value, plan.recompute.value) == (sched, shard, rc)
    for framework, (name, extra) in FILES.items():
        if framework is Framework.DEEPSPEED and tp2:
            with pytest.raises(NoFeasiblePlan, match=r"^forced --pp 2, which DeepSpeed files "
                                                     r"cannot state"):
                emit(framework, run)
            continue
        out = emit(framework, run)
        folder = tmp_path / framework.value
        write(out, folder)
        node = (["--gpus-per-node", "2"] if multi_node and framework is Framework.TORCHTITAN
                else [])
        r = runner.invoke(app, ["check-config", str(folder / name), "--output", "json", *extra,
                                *node])
        doc = json.loads(r.stdout)
        where = f"{framework.value} {sched}/{shard}/{rc}/{attention} tp2={tp2}: {out.notes}"
        assert doc["exit_code"] in (0, 1), where
        assert not [f for f in doc["findings"] if f["severity"] == "error"], (where, doc)
        got = doc["derived"]
        assert got["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9), where
        assert got["bubble_rate"] == pytest.approx(out.plan.bubble_rate, rel=1e-9, abs=1e-12), where
        assert got["peak_memory_bytes"] == pytest.approx(list(out.plan.peak_memory_bytes),
                                                         rel=1e-9), where
        if out.exact:  # what was planned is what was written
            assert (out.plan.schedule, out.plan.sharding, out.plan.recompute) == (
                plan.schedule, plan.sharding, plan.recompute), where
