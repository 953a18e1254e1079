"""torchtitan: TOML job files (0.2.2 and before) and main's Trainer.Config dumps (JSON,
dump.py), read, judged; TOML files written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.search import Plan, PlanRequest, Recompute, Sharding
from pptune.costs.dims import KvHeads
from pptune.frameworks.common import batch_fix, torch_schedules
from pptune.frameworks.common.adapter import Adapter, Add, Job, Stated
from pptune.frameworks.common.fields import Ctx, Semantics
from pptune.frameworks.common.joblog import JobLog, LogFlops
from pptune.frameworks.common.source import Repeated, parse_json, parse_toml
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.torchtitan import closest, facts, log, writer, writer_main
from pptune.frameworks.torchtitan.attention import cp_refusal, priced_kernel
from pptune.frameworks.torchtitan.closest import stateable_request
from pptune.frameworks.torchtitan.cp_fp8 import seq_problem
from pptune.frameworks.torchtitan.dump import is_dump, read_dump
from pptune.frameworks.torchtitan.experts import key_shardings
from pptune.frameworks.torchtitan.fqns import TORCHTITAN
from pptune.frameworks.torchtitan.keys import looks_like_torchtitan
from pptune.frameworks.torchtitan.main_plan import attention_kind, writes_main
from pptune.frameworks.torchtitan.reader import flavor_of, read_torchtitan
from pptune.schemas import TrainingConfig


class TorchtitanAdapter(Adapter):
    name = "torchtitan"
    states_dims = frozenset({"cp", "ep", "etp", "precision"})
    builds_mtp = False  # no multi-token-prediction module (models/deepseek_v3, reader.NO_MTP)
    title = "torchtitan"
    grad_compressions = frozenset({"fp16", "bf16"})
    grad_reduce_held = True  # a BF16 gradient buffer / FSDP reduce dtype
    grad_reduce_setting = 'training.mixed_precision_reduce = "bfloat16"'
    bf16_setting = 'training.mixed_precision_param = "bfloat16"'
    memory_fixes = ("more pipeline stages (pipeline_parallel_degree)",
                    "FSDP over more ranks (data_parallel_shard_degree)",
                    "full activation checkpointing ([activation_checkpoint] mode \"full\")",
                    "a smaller local_batch_size")
    memory_fix_cp = "context parallelism over more ranks (context_parallel_degree)"
    memory_sharding = None
    kv_heads = KvHeads.SPLIT  # tp divides them (costs/dims.py KvHeads)
    # [model] converters' quantize.linear.float8 swaps in torchao's Float8Linear
    # (converters.py), which caches no FP8 weight (closest.py prices its files so)
    runs_fp8: str = "torchao"
    expert_cites = (
        ("moe-experts-ep", "torchtitan's ExpertParallel splits the experts evenly over ep: "
         "torchtitan/distributed/expert_parallel.py _token_dispatch's "
         "num_tokens_per_expert.view(ep_degree, -1) raises at the first step otherwise"),
        ("moe-etp-ffn", "torchtitan/distributed/expert_parallel.py shards w1 / w3 by columns "
         "and w2 by rows over the expert tensor-parallel ranks"))
    files = (writer.FILE,)
    syntaxes = ("toml", "json")  # JSON: main's Trainer.Config dumps (dump.py)
    versions = (TORCHTITAN,)
    # "tflops" is num_flops_per_token x tps / 1e12 (torchtitan/components/metrics.py,
    # MetricsProcessor.log), num_flops_per_token the model args' get_nparams_and_flops
    log_flops = (LogFlops(False, "torchtitan 0.1.0 to 0.2.2", "torchtitan/models/utils.py "
                          "get_dense_model_nparams_and_flops"),)

    def cannot_state(self, key: CostKey, seq_len: int | None = None,
                     own: CostKey | None = None, model: str | None = None,
                     shape: ModelShape | None = None) -> str | None:
        """FP16: training.mixed_precision_param takes bfloat16 or float32 (job_config.py);
        a sequence torchtitan refuses at this tp and cp (cp_fp8.seq_problem); context
        parallelism the model's attention refuses (attention.cp_refusal)."""
        if key.precision is Precision.FP16:  # nor does its reader read one (reader.py)
            return "torchtitan files state no precision fp16 (mixed_precision_param: bfloat16 " \
                "or float32)"
        if key.precision is Precision.NVFP4:  # its writer states float8 and mx converters only
            return "torchtitan files here state no precision nvfp4 (pptune writes its float8 " \
                "and mx converters, not its newer nvfp4 ones)"
        why = seq_problem(seq_len, key.tp, key.cp) if seq_len is not None else None
        if why:
            return f"sequence {why}"
        flavor = flavor_of(model, shape) if model is not None or shape is not None else None
        refused = cp_refusal(*flavor, key.cp) if flavor is not None else None
        if refused:
            return refused
        return super().cannot_state(key, own=own)

    restates = "shards a mixture's experts by tp where ep is 1 (its tensor-parallel plan)"

    def states_kernels(self, model: str | None, shape: ModelShape | None,
                       versions: Versions) -> dict[str, tuple[str, ...]]:
        """As closest.py prices its files: the model's attention (main_plan.attention_kind:
        SDPA, or flex and varlen priced as flash), the loss compiled (fused) or eager
        ([compile] components, cp_fp8.compiled), autograd's BF16 weight gradients and
        torchao's float8 linears."""
        return {"attention": (priced_kernel(attention_kind(model, shape, versions)),),
                "cross_entropy": ("fused", "eager"), "wgrad_accum": ("bf16",),
                "fp8_kernels": (self.runs_fp8,)}

    def as_stated(self, key: CostKey, shape: ModelShape | None = None) -> CostKey:
        """With ep 1 torchtitan's tensor-parallel plan shards a mixture's experts by tp
        (closest._experts: etp is 1 or tp, torchtitan/distributed/expert_parallel.py), so
        a plan of tp > 1 and ep 1 runs at etp = tp."""
        if shape is not None and shape.moe and key.ep == 1 and key.tp > 1:
            return replace(key, etp=key.tp)
        return key

    def key_shardings(self, key: CostKey, shardings: Sequence[Sharding]) -> tuple[Sharding, ...]:
        """experts.key_shardings: FSDP alone with context parallelism or where the expert
        mesh does not fit in cp x tp without it."""
        return key_shardings(key, shardings)

    def detect(self, data: Any) -> bool:
        return looks_like_torchtitan(data) or is_dump(data)

    def parse(self, text: str, path: Path,
              repeated: list[Repeated] | None = None) -> Any:
        if _json_object(text):
            return parse_json(text, str(path), repeated)
        return parse_toml(text, str(path))

    def read(self, data: Any, ctx: Ctx) -> TrainingConfig:
        """A main dump by its rules (dump.py); a JSON file is one or none (torchtitan's
        job files are TOML)."""
        if is_dump(data):
            tables, run = read_dump(data, ctx)
            return read_torchtitan(tables, ctx, run)
        if _json_object(ctx.text):
            raise ctx.bad("no model_spec section: not a torchtitan Trainer.Config dump "
                          "(main's to_dict(): --debug.save_config_file writes one); "
                          "torchtitan's job files are TOML")
        return read_torchtitan(data, ctx)

    def microbatch_rules(self, cfg: TrainingConfig, m: int, semantics: Semantics,
                         add: Add) -> None:
        """torch's schedule classes; zb-h1 runs as ScheduleInterleavedZeroBubble. A fix
        keeps a stated global_batch_size (a multiple of local_batch_size x dp, train.py),
        or a main dump's num_tokens_per_train_step: a count dividing the micro-batches of a
        step, else it names the global batch too."""
        micro, dp, total = cfg.micro_batch_size, cfg.dp, cfg.global_batch
        per_step = (m * cfg.pipeline_flushes if facts.facts(semantics).global_batch_stated
                    and dp is not None and total is not None else None)

        def how(count: int) -> str:  # torchtitan's micro-batches: local batch / micro-batch
            text = (f"{count} (local_batch_size {count * micro} with "
                    f"pipeline_parallel_microbatch_size {micro}")
            if per_step is None or dp is None or total is None:
                return text + ")"
            if per_step % count == 0:
                runs = per_step // count
                return text + (f"; global_batch_size {total} then runs the pipeline "
                               f"{runs} time{'s' * (runs > 1)} a step)")
            run = count * micro * dp  # samples a pipeline run takes over the dp ranks
            return text + (f", and global_batch_size {run * max(1, round(total / run))}: a "
                           f"multiple of local_batch_size x dp {dp} = {run})")

        def every_dp(*args: Any, **values: Any) -> None:  # m: local batch // micro-batch,
            add(*args, every_dp=True, **values)  # a rank's own, whatever the dp (check/rules.py)
        tokens = facts.facts(semantics).main_tokens

        def main_how(count: int) -> str:  # a main dump states the count (dump_batch.py)
            text = f"{count} (parallelism.num_pp_microbatches {count}"
            if per_step is None or dp is None or tokens is None:
                return text + ")"
            runs, left = divmod(per_step, count)
            return text + (f"; num_tokens_per_train_step then runs the pipeline {runs} "
                           f"time{'s' * (runs > 1)} a step)" if not left else
                           f", and num_tokens_per_train_step a multiple of {tokens * count * dp}"
                           " (tokens a micro-batch x count x dp))")
        torch_schedules.microbatch_rules(cfg, m, semantics, every_dp, zb_h1_rounds=True,
                                         how=how if tokens is None else main_how,
                                         per_step=per_step)

    def count_settings(self, cfg: TrainingConfig, m: int, count: int,
                       semantics: Semantics | None = None) -> str | None:
        """0.2.2's micro-batches are local_batch_size / pipeline_parallel_microbatch_size
        (train.py), a main dump's num_pp_microbatches (dump_batch.py): ``count`` said in
        those, with a stated global_batch_size or num_tokens_per_train_step that keeps
        the pipeline runs a step (batch_fix.count_words)."""
        stated = semantics is not None and facts.facts(semantics).global_batch_stated
        words = semantics.batch_words if semantics is not None else None
        if words is not None:  # main: tokens a micro-batch (a whole number of sequences)
            first = f"{words.count} {count}"
            return (batch_fix.count_words(cfg, m, count, lambda total, _: (
                f"{first}, and {words.step} {total // cfg.micro_batch_size * words.tokens}"))
                if stated else None) or first
        micro = cfg.micro_batch_size
        first = (f"local_batch_size {count * micro} with pipeline_parallel_microbatch_size "
                 f"{micro}")
        return (batch_fix.count_words(cfg, m, count, lambda total, _: (
            f"{first}, and global_batch_size {total}")) if stated else None) or first

    def config_rules(self, cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
        """float8 refusals the GPU decides (facts.py)."""
        facts.config_rules(cfg, semantics, add)

    def precision_refusal(self, precision: Precision, gpu: str, *,
                          experts: bool = False) -> str | None:
        return facts.precision_refusal(precision, gpu, experts)

    def stateable(self, req: PlanRequest, model: str | None,
                  shape: ModelShape | None = None) -> PlanRequest:
        return self.in_its_order(stateable_request(req, model, shape))

    def stateable_groups(self, req: PlanRequest, keys: Sequence[CostKey], model: str | None,
                         shape: ModelShape | None = None, versions: Versions | None = None
                         ) -> list[PlanRequest]:
        """As every adapter's; main after 0.2.2 (writer_main) states full or per-op
        checkpointing (FullAC, SelectiveAC), not 0.2.2's every-N-th-block selective one."""
        groups = super().stateable_groups(req, keys, model, shape, versions)
        if versions is None or not writes_main(versions):
            return groups
        kept = [replace(g, recomputes=tuple(r for r in g.recomputes
                                            if r is not Recompute.SELECTIVE)) for g in groups]
        return [g for g in kept if g.recomputes]

    def as_run(self, job: Job, plan: Plan, *, substitute: bool = True) -> tuple[Job, Plan]:
        return closest.as_run(job, plan, substitute)

    def run_settings(self, job: Job, plan: Plan) -> dict[str, str]:
        return closest.run_settings(job, plan)

    def express(self, job: Job, plan: Plan, rank: int) -> Stated:
        return closest.closest_plan(job, plan, rank)

    def write(self, stated: Stated) -> dict[str, str]:
        """0.2.2's TOML job file, or main's Python config (writer_main.py) for
        --framework-version torchtitan=0.3.0 and later."""
        if writes_main(stated.job.versions):
            return writer_main.write(stated)
        return writer.write(stated)

    def files_for(self, versions: Versions) -> tuple[str, ...]:
        return (writer_main.FILE,) if writes_main(versions) else self.files

    def log_lines(self, text: str) -> bool:
        return log.detect(text)

    def read_log(self, text: str) -> JobLog | None:
        return log.read(text)


def _json_object(text: str) -> bool:
    """A JSON object (a dump), not TOML: no TOML file starts with "{" (a table header
    starts with "[", as a JSON list does)."""
    return text.lstrip()[:1] == "{"


ADAPTER = TorchtitanAdapter()
