"""check-config's best plan for a torchtitan file is one torchtitan runs: its experts
borrow FSDP ranks (ep x etp must divide dp_shard x cp x tp: the reader's
torchtitan-ep-mesh rule) and it shards over the context-parallel ranks whatever the shard
degree (parallel_dims.py fsdp_enabled). A B200 user trial had been told to write a plan
without FSDP at cp 2, ep 8, which check-config itself then refused."""

from __future__ import annotations

from pathlib import Path

from pptune.check.rules import CheckOptions, check
from pptune.costmodel import presets
from pptune.costmodel.keys import CostKey
from pptune.costmodel.memory import Recompute
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import PlanRequest, PlanSpec, Sharding, evaluate
from pptune.costs.modelspec import with_seq_len
from pptune.costs.resolve import analytic_costs
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.read import read_config
from pptune.frameworks.torchtitan.adapter import ADAPTER
from pptune.frameworks.torchtitan.experts import mesh_problem
from pptune.options import CostOptions

ROOT = Path(__file__).resolve().parents[1] / "data"
SCOUT = ROOT / "configs" / "torchtitan_llama4_scout_ep8.toml"


def test_shardings_a_torchtitan_file_states_at_a_key() -> None:
    every = tuple(Sharding)
    assert ADAPTER.key_shardings(CostKey(ep=8), every) == tuple(
        s for s in every if s is not Sharding.NONE)  # 8 does not divide cp x tp = 1
    assert ADAPTER.key_shardings(CostKey(tp=2, cp=4, ep=8), every) == tuple(
        s for s in every if s is not Sharding.NONE)  # cp 4: FSDP over the cp ranks
    assert ADAPTER.key_shardings(CostKey(tp=8, ep=8), every) == every
    assert mesh_problem(8, 1, 1, 2, 1) and mesh_problem(8, 1, 8, 2, 1) is None


def test_the_best_plan_is_one_torchtitan_runs(tmp_path: Path) -> None:
    """The trial's file (ep 8, FSDP over 64 B200s): its best plan is one torchtitan
    builds an expert mesh for and shards over any cp ranks; written out, check-config
    reads it back as it was priced, without the torchtitan-ep-mesh error the trial met.
    (The best plan was ep 8 with FSDP at 7.354 s; since refinement tries the split
    without the per-chunk memory share, ep 2 over tp 2 at 7.326 s.)"""
    read = read_config(SCOUT, gpus=64, gpu="b200")
    report = check(read.config, tmp_path, CheckOptions(costs=CostOptions(gpu="b200"),
                                                       max_slowdown=1.0), read.semantics)
    best = report.best
    assert best is not None and best.ep > 1
    shard = best.dp if best.sharding is Sharding.FSDP else 1
    assert mesh_problem(best.ep, best.etp, shard, best.cp, best.tp) is None
    assert best.cp == 1 or best.sharding is Sharding.FSDP
    (said,) = [f for f in report.findings if f.id == "slower-than-best"]
    assert "sharding fsdp -> none" not in said.message or best.cp == 1


def test_emit_states_a_cp_plan_with_fsdp() -> None:
    """A plan without sharding at cp 2 is written with FSDP and priced so: torchtitan
    shards over the cp ranks whatever the shard degree (a 24-layer Llama 4 variant had
    been written as cp 4 without FSDP, predicted 14.3 s, checked 45.9 s)."""
    shape = with_seq_len(presets.MODELS["llama3-8b"], 8192)
    key = CostKey(cp=2)
    table, _ = analytic_costs(shape, "h100-sxm", (1,), key, sequence_parallel=False)
    req = PlanRequest(gpus=16, global_batch=64, cost_keys=(key,), shardings=tuple(Sharding))
    split = (shape.num_blocks + 2,)
    plan = evaluate(table, req, PlanSpec(Schedule.ONE_F_ONE_B, 1, 1, 8, split, 1,
                                         sharding=Sharding.NONE, recompute=Recompute.FULL,
                                         key=key))
    job = Job(table, req, tuple(table.names), 64, "analytic llama3-8b", shape, "llama3-8b",
              "h100-sxm", "sdpa", False, False)
    stated = ADAPTER.express(job, plan, 1)
    assert stated.plan.sharding is Sharding.FSDP and stated.plan.cp == 2 and not stated.exact
    assert any("shards the training state over the cp 2 ranks" in n for n in stated.notes)
    text = ADAPTER.write(stated)["torchtitan.toml"]
    assert ("data_parallel_replicate_degree = 1\n"
            f"data_parallel_shard_degree = {stated.plan.dp}") in text
