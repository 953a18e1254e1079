"""What torchtitan's main branch after 0.2.2 (pptune's "0.3.0", fqns.py) runs of a plan
where it differs from 0.2.2, and what its Python configs cannot state.

``recommend --emit torchtitan --framework-version torchtitan=0.3.0`` writes main's
config function (writer_main.py); the plan is priced as main runs it
(``Job.versions``), read at torchtitan main b5bcd76:

- attention: main's language models take ``attn_backend`` "flex" (the default of
  llama3, qwen3 and deepseek_v3's ``model_registry``), "flex_flash" or "varlen";
  "sdpa" raises "sdpa is no longer supported for language models"
  (models/common/config_utils.py ``get_attention_config``), and context parallelism
  refuses SDPA and varlen (models/common/decoder.py). The writer states "flex", which
  every model and every cp runs; pptune prices it as flash attention, as check-config
  prices a dump of it (attention.py, dump_batch.py);
- the K/V exchange: main's ParallelismConfig has no ``context_parallel_rotate_method``
  (torchtitan/config/configs.py), so a dump reads as 0.2.2's default, allgather;
- what no main config states: a layer-wise selective checkpointing (``SelectiveAC`` is
  per-op only, distributed/activation_checkpoint.py), expert tensor parallelism
  (no ``expert_tensor_parallel_degree``: "EP borrows ranks from FSDP and TP",
  ParallelismConfig.expert_parallel_degree), a BF16 gradient reduction
  (``mixed_precision_reduce: Literal["float32"]``), the float8 all-gather of FSDP
  (``Float8LinearConverter.Config`` has recipe_name, filter_fqns, emulate only) and
  the expert all-to-all overlapped in DualPipeV's F&B pairs (0.2.2's
  dual_pipe_v.py is gone).
"""

from __future__ import annotations

from pptune.costmodel.keys import Precision
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import Plan, Recompute, Sharding
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.torchtitan.attention import attn_type
from pptune.frameworks.torchtitan.fqns import reads_toml
from pptune.frameworks.torchtitan.reader import MAIN_NO_PIPELINE, NO_PIPELINE, flavor_of
from pptune.frameworks.torchtitan.widths import reduces_bf16
from pptune.options import CostOptions

MAIN_ATTENTION = "flex"  # the attn_backend the writer states (module docstring)


def writes_main(versions: Versions) -> bool:
    """Whether the files are main's Python config (torchtitan >= 0.3.0), not 0.2.2's TOML."""
    return not reads_toml(versions)


def attention_kind(model: str | None, shape: ModelShape | None, versions: Versions) -> str:
    """The attention its files run for the model: main's config states FlexAttention
    (``MAIN_ATTENTION``), 0.2.2's the flavor's attn_type (attention.py), SDPA for a
    model of no flavor."""
    flavor = flavor_of(model, shape)
    return MAIN_ATTENTION if writes_main(versions) else attn_type(*flavor) if flavor else "sdpa"


def no_pipeline(versions: Versions) -> tuple[str, ...]:
    """The models without pipelining: 0.2.2's TrainSpecs with pipelining_fn None, on main
    flux's ModelSpec only (reader.py)."""
    return MAIN_NO_PIPELINE if writes_main(versions) else NO_PIPELINE


def layerwise_refused(job: Job, plan: Plan) -> bool:
    """Whether the plan checkpoints every Nth block selectively, which main's configs
    cannot state (closest.py emits full recomputation instead, or the per-op policy
    where that fits and is faster, as for 0.2.2's recomputation by module)."""
    return (writes_main(job.versions) and plan.recompute is Recompute.SELECTIVE
            and bool(job.request.recompute_every))


def main_refusal(job: Job, plan: Plan) -> str | None:
    """What torchtitan main's config cannot state of ``plan`` (module docstring), in
    main's terms; None: it states it all, or the files are 0.2.2's."""
    if not writes_main(job.versions):
        return None
    c = job.cost_options or CostOptions()
    if layerwise_refused(job, plan):
        return (f"selective checkpointing of every {job.request.recompute_every}th block: "
                "main's SelectiveAC is per-op only (torchtitan/distributed/"
                "activation_checkpoint.py); drop --recompute-every")
    if plan.ep > 1 and plan.etp != 1:
        return (f"expert tensor parallelism (etp {plan.etp}): main's ParallelismConfig has no "
                "expert_tensor_parallel_degree (its experts borrow the FSDP and TP ranks: "
                "torchtitan/config/configs.py); plan with --etp 1")
    if reduces_bf16(job, plan):
        return ("a BF16 gradient reduction: main's TrainingConfig.mixed_precision_reduce "
                "takes float32 only (torchtitan/config/configs.py); drop --grad-compression")
    if c.fp8_params and plan.sharding is Sharding.FSDP and plan.precision is Precision.FP8:
        return ("FSDP's float8 all-gather: main's Float8LinearConverter.Config states none "
                "(recipe_name, filter_fqns, emulate: torchtitan/components/quantization/"
                "float8.py); drop --fp8-params")
    if plan.schedule is Schedule.DUALPIPEV and plan.ep > 1 and plan.a2a_overlap:
        return ("the expert all-to-all overlapped in DualPipeV's F&B pairs: main has no "
                "such overlap (0.2.2's distributed/dual_pipe_v.py is gone)")
    return None
