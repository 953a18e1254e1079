"""check-config's best plan for a Megatron-LM script round-trips: written by the emitter
(the Megatron adapter's express and write, on the job the comparison priced it with), the
script is predicted by check-config at the step the slower-than-best finding promised;
and the finding names every setting the comparison priced differently, the loss kernel
included (a script without --cross-entropy-loss-fusion runs megatron-core's unfused loss,
while the comparison prices the fused one the emitter writes: trial u30 M2)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pptune.check import best as best_module
from pptune.check.rules import CheckOptions, CheckReport, check
from pptune.costmodel.search import Plan, Recompute
from pptune.frameworks.common.adapter import Adapter, Job
from pptune.frameworks.common.as_run import as_itself
from pptune.frameworks.megatron.adapter import ADAPTER
from pptune.frameworks.read import read_config
from pptune.options import CostOptions

# a small MoE model on 16 H100s, pp 4, ep 4, selective recomputation of two modules and
# megatron-core's default (unfused) loss: the comparison's best plan runs the fused one
SCRIPT = """\
torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py \\
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 \\
  --expert-model-parallel-size 4 --sequence-parallel \\
  --num-layers 16 --hidden-size 2048 --num-attention-heads 16 --ffn-hidden-size 8192 \\
  --swiglu --seq-length 4096 --max-position-embeddings 4096 \\
  --num-experts 32 --moe-router-topk 4 --moe-ffn-hidden-size 1024 --moe-grouped-gemm \\
  --hidden-dropout 0.0 --attention-dropout 0.0 --vocab-size 32000 \\
  --recompute-granularity selective --recompute-modules moe_act layernorm \\
  --use-distributed-optimizer \\
  --micro-batch-size 1 --global-batch-size 256 --bf16
"""


def checked(path: Path, compare: bool) -> CheckReport:
    read = read_config(path, gpu="h100-sxm")
    return check(read.config, path.parent, CheckOptions(
        costs=CostOptions(gpu="h100-sxm"), compare_best=compare), read.semantics)


@pytest.fixture
def compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
             ) -> tuple[CheckReport, dict, Job]:
    """The script checked with the comparison: its report, the slower-than-best finding's
    values and the job its best plan was priced with (as the comparison ran it)."""
    jobs: dict = {}

    def kept(adapter: Adapter, job: Job, plan: Plan) -> tuple[Job, Plan] | None:
        ran = as_itself(adapter, job, plan)
        if ran is not None:
            jobs[ran[1].spec] = ran[0]
        return ran

    monkeypatch.setattr(best_module, "as_itself", kept)
    path = tmp_path / "job.sh"
    path.write_text(SCRIPT)
    report = checked(path, compare=True)
    [found] = [f for f in report.findings if f.id == "slower-than-best"]
    assert report.best is not None
    return report, {"message": found.message, **found.values}, jobs[report.best.spec]


def test_the_finding_names_the_loss_kernel_it_priced(compared: tuple) -> None:
    _report, found, _job = compared
    # the file states no --cross-entropy-loss-fusion (reader.py: unfused); the best plan
    # is priced as a script runs it, with the fused loss (closest.kernels)
    assert found["differs"]["cross-entropy"] == ["unfused",
                                                 "fused (--cross-entropy-loss-fusion)"]
    assert "cross-entropy unfused -> fused (--cross-entropy-loss-fusion)" in " ".join(
        found["message"].split())


def test_the_best_plan_written_by_the_emitter_is_predicted_at_its_step(
        compared: tuple, tmp_path: Path) -> None:
    report, found, job = compared
    best = report.best
    stated = ADAPTER.express(job, best, 1)
    assert stated.exact and stated.plan.spec == best.spec
    script = ADAPTER.write(stated)["pretrain_megatron.sh"]
    # the file's modules, priced into every layer of the best plan (it recomputes no
    # whole block), are written with it
    assert best.recompute is Recompute.NONE
    assert "--recompute-granularity selective" in script
    assert "--recompute-modules layernorm moe_act" in script
    out = tmp_path / "written"
    out.mkdir()
    (out / "pretrain_megatron.sh").write_text(script)
    again = checked(out / "pretrain_megatron.sh", compare=False)
    assert again.plan is not None
    assert math.isclose(again.plan.step_time_s, found["best_step_time_s"], rel_tol=1e-9)
