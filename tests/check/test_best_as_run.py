"""check-config's best plan is timed as the config's framework runs it (Adapter.as_run, the
step ``--emit`` starts from): a torchtitan file that compiles its model is compared with a
split-backward plan priced with its SwiGLU eager, since torch's zero-bubble and DualPipeV
schedules refuse a compiled model, and the finding says compile has to change."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pptune.check import best as best_module
from pptune.check.costs import costs
from pptune.check.job import config_job
from pptune.check.rules import CheckOptions, CheckReport, check
from pptune.costmodel.op_sac import OP_SAC
from pptune.costmodel.partition import add_ends, even_split
from pptune.costmodel.schedules import SPLIT_BACKWARD, Schedule
from pptune.costmodel.search import Recompute, Sharding, evaluate, search
from pptune.frameworks.read import read_config
from pptune.frameworks.torchtitan.adapter import ADAPTER
from pptune.options import CostOptions

TOML = """\
[model]
name = "llama3"
flavor = "{flavor}"
hf_assets_path = "./assets/hf/model"

[training]
local_batch_size = {local}
seq_len = 8192

[parallelism]
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "1F1B"
pipeline_parallel_microbatch_size = 1
data_parallel_shard_degree = {dp}

[activation_checkpoint]
mode = "full"
"""
COMPILED = '\n[compile]\nenable = true\n'  # components default: model and loss
LOSS_ONLY = '\n[compile]\nenable = true\ncomponents = ["loss"]\n'
# llama3 70B on 16 B200s, pp 2 x dp 8 (FSDP), 4 micro-batches a rank: the best plan is
# ZBV over pp 8, compiled or not
ZBV_WINS = {"flavor": "70B", "local": 4, "dp": 8, "gpus": 16, "gpu": "b200"}
# llama3 8B on 8 H100s, pp 2 x dp 4, 16 micro-batches: ZBV over pp 2 is the fastest with
# the SwiGLU compiled, but does not fit with it eager
ZBV_OUTGROWS = {"flavor": "8B", "local": 16, "dp": 4, "gpus": 8, "gpu": "h100-sxm"}


@pytest.fixture(autouse=True)
def own_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """These cases time plans at the file's own tp, cp and ep: the comparison searches
    those alone here (check.layouts adds the other sizes recommend searches)."""
    monkeypatch.setattr(best_module, "searched_keys", lambda _costs, req, _held=(): req.keys()[:1])


def checked(tmp_path: Path, tables: str, case: dict) -> CheckReport:
    path = tmp_path / "job.toml"
    path.write_text(TOML.format(**case) + tables)
    read = read_config(path, gpus=case["gpus"], gpu=case["gpu"])
    return check(read.config, tmp_path, CheckOptions(costs=CostOptions(gpu=case["gpu"]),
                                                     max_slowdown=1.0), read.semantics)


def finding(report: CheckReport) -> dict:
    [found] = [f for f in report.findings if f.id == "slower-than-best"]
    return {"message": found.message, **found.values}


def test_a_split_backward_best_plan_is_priced_with_the_model_uncompiled(tmp_path: Path
                                                                         ) -> None:
    compiled = checked(tmp_path, COMPILED, ZBV_WINS)
    loss_only = checked(tmp_path, LOSS_ONLY, ZBV_WINS)
    assert compiled.best is not None and loss_only.best is not None
    best = compiled.best
    assert best.schedule is Schedule.ZBV and best.pp == 8
    # as torchtitan runs it: the file's loss compiled, its SwiGLU eager, which is the
    # table check-config prices a file compiling the loss alone with
    eager = evaluate(loss_only.table, loss_only.request, best.spec)
    assert best.step_time_s == eager.step_time_s
    assert best.peak_memory_bytes == eager.peak_memory_bytes
    # priced with the file's compiled SwiGLU, the same plan was faster (the optimism)
    assert evaluate(compiled.table, compiled.request, best.spec).step_time_s \
        < best.step_time_s
    # the fastest a torchtitan file runs: the file compiling the loss alone finds it too
    assert best.spec == loss_only.best.spec
    said = finding(compiled)
    assert said["differs"]["compile"] == ["model,loss", "loss"]
    assert "compile model,loss -> loss and the split" in said["message"]
    assert said["best_step_time_s"] == best.step_time_s
    assert "compile" not in finding(loss_only)["differs"]


def test_a_split_backward_plan_that_outgrows_the_gpu_uncompiled_gives_way(tmp_path: Path
                                                                          ) -> None:
    """The search's fastest plan, ZBV, needs more memory than the GPU has with its SwiGLU
    eager: the best plan is the fastest one torchtitan runs, which compiles the model."""
    compiled = checked(tmp_path, COMPILED, ZBV_OUTGROWS)
    searched = search(compiled.table, replace(compiled.request, top=1, with_best_pp1=False,
                                              shardings=(Sharding.FSDP, Sharding.NONE),
                                              recomputes=(Recompute.FULL, Recompute.NONE,
                                                          Recompute.SELECTIVE),
                                              micro_batch_sizes=(1, 2, 4, 8)))
    assert searched.plans[0].schedule is Schedule.ZBV  # with the model compiled
    loss_only = checked(tmp_path, LOSS_ONLY, ZBV_OUTGROWS)
    eager = evaluate(loss_only.table, loss_only.request, searched.plans[0].spec)
    assert max(eager.peak_memory_bytes) > loss_only.table.memory_bytes
    best = compiled.best
    assert best is not None and best.schedule not in SPLIT_BACKWARD
    assert best.step_time_s > searched.plans[0].step_time_s
    assert "compile" not in finding(compiled)["differs"]


def test_without_a_compiled_model_nothing_is_priced_again(tmp_path: Path) -> None:
    """A file compiling the loss alone: every plan runs as the file's table prices it, and
    compile is not among the differences."""
    loss_only = checked(tmp_path, LOSS_ONLY, ZBV_OUTGROWS)
    assert loss_only.best is not None
    assert loss_only.best.step_time_s == evaluate(loss_only.table, loss_only.request,
                                                  loss_only.best.spec).step_time_s
    assert "compile" not in finding(loss_only)["differs"]


def test_priced_again_the_layers_keep_the_per_op_policy(tmp_path: Path) -> None:
    """A file running torchtitan's per-op checkpointing (priced into every layer): a ZBV
    plan, priced as torchtitan runs it, costs what the same file compiling the loss alone
    prices it at, the policy kept."""
    case = {**ZBV_OUTGROWS, "local": 8}
    op = '\n[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n'
    reports, jobs = [], []
    for tables in (COMPILED, LOSS_ONLY):
        text = TOML.format(**case).replace('[activation_checkpoint]\nmode = "full"\n', op)
        path = tmp_path / "job.toml"
        path.write_text(text + tables)
        cfg = read_config(path, gpus=8, gpu="h100-sxm").config
        report = check(cfg, tmp_path, CheckOptions(costs=CostOptions(gpu="h100-sxm")))
        assert report.plan is not None and report.request is not None
        priced = costs(cfg, tmp_path, CostOptions(gpu="h100-sxm"), lambda *a, **k: None,
                       gpus=8)
        assert priced.modules == {OP_SAC}
        reports.append(report)
        jobs.append(config_job(cfg, priced, report.request))
    compiled, loss_only = reports
    plan = compiled.plan
    assert plan is not None
    spec = replace(plan.spec, schedule=Schedule.ZBV, virtual_stages=2,
                   stage_layers=tuple(add_ends(even_split(32, 4))))
    zbv = evaluate(compiled.table, compiled.request, spec)
    ran_job, ran = ADAPTER.as_run(jobs[0], zbv)
    assert ran.step_time_s == evaluate(loss_only.table, loss_only.request, spec).step_time_s
    assert ran.step_time_s > zbv.step_time_s
    assert (ADAPTER.run_settings(jobs[0], plan), ADAPTER.run_settings(ran_job, ran)) == (
        {"compile": "model,loss", "attention": "sdpa"}, {"compile": "loss", "attention": "sdpa"})
    # the file's own plan runs as the file prices it
    assert ADAPTER.as_run(jobs[0], plan)[1].step_time_s == plan.step_time_s
