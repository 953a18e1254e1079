"""What every framework adapter offers, and the plain values it works on.

An adapter is one framework's knowledge in one folder
(``pptune/frameworks/<name>/``): how its files are recognised and read, the
rules it enforces (per release), the closest plan its files can state and
how they are written. ``pptune.frameworks.registry`` lists the adapters;
check-config and ``recommend --emit`` look them up there.

The adapters never see pptune's planner objects (RecommendRun): ``Job`` is
the job a plan was made for, as plain values, built once by
``pptune.plan.emit``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pptune.costmodel.calibration import Factors
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import CostTable, Plan, PlanRequest, PlanSpec, Sharding
from pptune.costs.dims import KvHeads
from pptune.frameworks.common.fields import Ctx, Semantics
from pptune.frameworks.common.joblog import JobLog, LogFlops
from pptune.frameworks.common.source import Repeated
from pptune.frameworks.common.versions import VersionKey, Versions
from pptune.options import CostOptions
from pptune.schemas import TrainingConfig

# add(id, severity, message, **values): one check-config finding
Add = Callable[..., None]


@dataclass(frozen=True)
class Job:
    """The job a plan was made for: its costs, its request and what the files state
    beside the plan (the model, the GPU, the attention kernel)."""

    table: CostTable  # per-layer costs the plans were priced with
    request: PlanRequest  # the search's request (GPUs per node, recompute_every, ...)
    layer_names: tuple[str, ...]  # embedding, blocks, head
    global_batch: int
    origin: str  # where the costs came from ("profile PATH", "analytic ...")
    shape: ModelShape | None  # the model's shape, when known
    model: str | None  # the model's name (a preset name, or a profile's)
    device: str | None  # the GPU's name (a preset name, or a profile's)
    attention: str | None  # the kernel priced: flash or eager; None for measured costs
    sequence_parallel: bool
    tp_comm_overlap: bool
    cost_options: CostOptions | None = None  # the flags the analytic costs were built with
    hf_config: str | None = None  # the Hugging Face config.json the model was read from
    # the profile file the costs were read from (--profile, ./pptune-profile.json), and the
    # device a probe measured it on; None for analytic costs
    profile_file: str | None = None
    profile_device: str | None = None
    # a calibrated profile's rate factors (pptune calibrate): the job's costs re-priced
    # for a framework's files scale the preset by them too; None: the preset's rates
    factors: Factors | None = None
    # Adam's moments' widths (--exp-avg-dtype, --exp-avg-sq-dtype): Megatron-LM's
    # precision-aware optimizer below fp32; only a framework whose files state them
    # (``Adapter.states_moment_dtypes``) writes such a plan
    moments: tuple[str, str] = ("fp32", "fp32")
    # the recomputed modules the table prices into every layer (check-config: a file's
    # selective modules, torchtitan's per-op policy); costs priced again keep them
    layer_modules: frozenset[str] = frozenset()
    # the parallel sizes the command held at one value (--tp 8, --pp 2): the files' plan
    # line states them, and check-config's best-plan comparison keeps them (Limits.held)
    held: tuple[str, ...] = ()
    # --grad-compression: a framework whose files state a 16-bit reduction
    # (Adapter.grad_compressions) writes it where its plan runs it (common/compression.py)
    grad_compression: str = "none"
    # the releases the files are written for (recommend --framework-version): a writer
    # whose framework changed its files' form writes that release's (torchtitan main)
    versions: Versions = field(default_factory=Versions)


@dataclass(frozen=True)
class Stated:
    """The plan a framework's files state for a requested plan, and why it differs."""

    job: Job  # the job as the framework runs it (costs re-priced where its files differ)
    plan: Plan
    exact: bool  # the requested plan itself
    notes: tuple[str, ...]
    detail: Any = None  # the adapter's own choice for its writer (a Megatron-LM split, ...)


class Adapter:
    """One framework: what check-config and ``recommend --emit`` need of it.

    Each framework's ``adapter.py`` subclasses this; the defaults here are
    "no such rule" and "no such knob".
    """

    name: str  # --format-in / --emit value, and TrainingConfig.source_format
    states_moment_dtypes: bool = False  # its files keep Adam's moments below fp32
    states_fp8_param_gather: bool = False  # its files gather FP8 weights in FP8
    # the --grad-compression values its files state (common/compression.py), and how they
    # state the 16-bit ones; None: not judged (pptune's own files)
    grad_compressions: frozenset[str] | None = None
    grad_reduce_setting = ""
    grad_reduce_held = False  # its 16-bit reduction keeps the gradients in BF16 too
    title: str  # the framework's name in messages ("Megatron-LM")
    bf16_setting = "precision: bf16"  # how its files state BF16 training (check.costs)
    # check-config's memory-overflow finding: what to change, in the files' own words
    # what frees memory, in the files' words: more stages, sharding (as far as
    # ``memory_sharding``: a config sharded that far is not told to shard), recomputation,
    # a smaller micro-batch (check.framework.memory_fixes keeps those the config lacks)
    # context parallelism over more ranks, offered when a doubled degree still splits the
    # sequence as the framework needs (tp x 2 x cp; None: its files state no cp)
    memory_fix_cp: str | None = None
    memory_fixes: tuple[str, str, str, str] = (
        "more pipeline stages", "a sharded optimizer", "activation recomputation",
        "a smaller micro-batch")
    memory_sharding: Sharding | None = Sharding.ZERO1  # None: the clause always applies
    # with a pipeline, where the framework shards less far (DeepSpeed's PipelineEngine
    # runs ZeRO-0/1 only); None: as without one
    memory_sharding_piped: Sharding | None = None
    files: tuple[str, ...]  # the files --emit writes
    syntaxes: tuple[str, ...]  # what its configs are written in: json, toml, yaml, text
    fallback = False  # recognised only when no other adapter recognises a file
    versions: tuple[VersionKey, ...] = ()  # its releases; a bare --framework-version names the first
    states_node_shape = False  # its files say how many GPUs each node runs
    # the layout dimensions beyond pp, dp and tp its files state ("cp", "ep", "etp",
    # "precision"); a plan that needs another one is emitted as the best plan without it
    states_dims: frozenset[str] = frozenset()
    # the flags its files set a finding's sizes with ((value key, flag): ("ep",
    # "--expert-model-parallel-size")), for --output github's line= where a finding names
    # its sizes and no flag
    size_flags: tuple[tuple[str, str], ...] = ()
    # precisions beyond bf16 its files state where "precision" is not in states_dims
    # (DeepSpeed's "fp16" section, not FP8)
    states_precisions: frozenset[str] = frozenset()
    # whether the model its files build has the multi-token-prediction layers a shape
    # states (Megatron-LM's --mtp-num-layers); torchtitan's deepseek_v3 and DeepSpeed's
    # PipelineModule of the model code build none: recommend plans such a model without
    builds_mtp = True
    # its interleaved schedule runs m not a multiple of pp in Megatron-LM's micro-batch
    # groups, the order pptune simulates (schedule_orders.microbatch_group); torch's
    # ScheduleInterleaved1F1B (torchtitan, pptune's runtime) orders them its own way
    runs_microbatch_groups = False
    # its tensor parallelism splits the sequence too: Megatron-LM's recipes set
    # --sequence-parallel (its MoE layers need it), torchtitan always does; how a file of
    # tp 1, which says nothing of it, is priced at another tp (check.costs)
    tp_splits_sequence = True
    # the kernels its files run where the user names none, which recommend --emit ranks the
    # plans with so that the table and the file written are priced alike (plan/written.py;
    # None: pptune's default): the attention kernel, the loss (a CrossEntropy value), where
    # weight gradients go (a WgradAccum value) and FP8 plans' linears (an Fp8Kernels value:
    # as its as_run re-prices them, so a plan its files fit is not searched as over memory)
    runs_attention: str | None = None
    runs_loss: str | None = None
    runs_wgrad: str | None = None
    runs_fp8: str | None = None
    # the tensor-parallel sizes its attention takes for the key/value heads (costs/dims.py
    # KvHeads): megatron-core's, which replicates them above the query groups, by default
    kv_heads = KvHeads.REPLICATE
    # rule id -> the framework's own source for a placement rule check/experts.py judges
    # for every framework (empty: megatron-core's, which derives the placement)
    expert_cites: tuple[tuple[str, str], ...] = ()
    # how the TFLOP/s its log lines print count a token's FLOPs, one entry per way its
    # releases counted (empty: its lines print none); calibrate holds a log against these
    log_flops: tuple[LogFlops, ...] = ()

    def cannot_state(self, key: CostKey, seq_len: int | None = None,
                     own: CostKey | None = None, model: str | None = None,
                     shape: ModelShape | None = None) -> str | None:
        """Why its files cannot state a plan of this cost key (None: they can) on a
        sequence of ``seq_len`` tokens (None: any the key's costs took). ``own``: the key
        of a file its reader read, whose sizes its files state whatever its writer
        writes (a DeepSpeed config's FP16 or DeepSpeed-Ulysses cp). ``model`` (a preset
        name) or ``shape``: the model, where the framework refuses a size for one model
        and not another (torchtitan: context parallelism with flex attention)."""
        mine = own or CostKey()
        missing = [f"{name} {value}" for name, value, plain, stated in (
            ("cp", key.cp, 1, mine.cp), ("ep", key.ep, 1, mine.ep),
            ("etp", key.etp, 1, mine.etp),
            ("precision", key.precision.value, "bf16", mine.precision.value))
            if value not in (plain, stated) and name not in self.states_dims
            and not (name == "precision" and value in self.states_precisions)]
        if missing:
            return f"{self.title} files here state no {', '.join(missing)}"
        return None

    def states_kernels(self, model: str | None, shape: ModelShape | None,
                       versions: Versions) -> dict[str, tuple[str, ...]]:
        """Per kernel flag (a CostOptions field), the kernels its files state for the model
        and releases, the first the one they run for any other asked, which recommend
        --framework sets aside (plan/written.py); a flag not named: any. Default: any."""
        return {}

    restates = ""  # why as_stated moves a key, for the note that says it did

    def as_stated(self, key: CostKey, shape: ModelShape | None = None) -> CostKey:
        """The cost key its files run a plan of ``key`` at, for the model of ``shape``
        (default: ``key``; torchtitan shards the experts by tp where ep is 1)."""
        return key

    def key_shardings(self, key: CostKey, shardings: Sequence[Sharding]) -> tuple[Sharding, ...]:
        """Of ``shardings``, those its files state for a plan of this cost key (default:
        all; torchtitan's experts borrow FSDP ranks where tp x cp cannot hold them)."""
        return tuple(shardings)

    def detect(self, data: Any) -> bool:
        """Whether parsed data (a mapping, or a script's text) is this framework's."""
        raise NotImplementedError

    def parse(self, text: str, path: Path, repeated: list[Repeated] | None = None) -> Any:
        """The file's data when ``--format-in`` names this framework (a mapping's repeated
        keys, which the parser resolves to the last, go to ``repeated``)."""
        raise NotImplementedError

    def repeated_keys(self, found: Repeated, ctx: Ctx) -> None:
        """A key written twice in one mapping (the first such mapping): bad input, since
        the file states two values and a parser keeps one silently. A framework that
        refuses such a file itself says so instead (an error finding)."""
        raise ctx.bad(f"{found.describe()}; a {found.syntax.upper()} reader keeps one of "
                      "them silently: keep one")

    def read(self, data: Any, ctx: Ctx) -> TrainingConfig:
        """The config as pptune's TrainingConfig; findings and notes go to ``ctx``."""
        raise NotImplementedError

    def microbatch_rules(self, cfg: TrainingConfig, m: int, semantics: Semantics,
                         add: Add) -> None:
        """Error findings for the micro-batch count ``m`` where the framework refuses it."""

    def count_settings(self, cfg: TrainingConfig, m: int, count: int,
                       semantics: Semantics | None = None) -> str | None:
        """The file's settings that give ``count`` micro-batches a pipeline run where it
        has ``m`` (common/batch_fix.py), which a fix naming a count says; None: nothing
        says it. ``semantics``: what its reader recorded (the keys a file states, a
        token-counted batch's words)."""
        return None

    def unsimulated_order(self, cfg: TrainingConfig, m: int, semantics: Semantics
                          ) -> str | None:
        """Why the framework runs ``m`` micro-batches in an order pptune does not simulate
        (None: the order pptune simulates). torch's ScheduleInterleaved1F1B (torchtitan,
        pptune's runtime) orders m not a multiple of pp its own way, where pptune builds
        Megatron-LM's micro-batch groups (schedule_orders.microbatch_group)."""
        if not self.runs_microbatch_groups and cfg.schedule is Schedule.INTERLEAVED \
                and m % cfg.pp:
            return (f"torch's ScheduleInterleaved1F1B runs {m} micro-batches on pp {cfg.pp} "
                    "in an order of its own; pptune simulates interleaving with m not a "
                    "multiple of pp in Megatron-LM's micro-batch groups")
        return None

    def config_rules(self, cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
        """Error findings for other settings the framework refuses."""

    def memory_fix_clauses(self, cfg: TrainingConfig
                           ) -> tuple[str, str, str | None, str]:
        """``memory_fixes`` worded for ``cfg``: what it has not done yet of each, and only
        what the framework allows beside its other settings (None: no recomputation
        clause applies); check.framework.memory_fixes drops what the config already has."""
        return self.memory_fixes

    def precision_refusal(self, precision: Precision, gpu: str, *,
                          experts: bool = False) -> str | None:
        """The framework's own words for a GPU that cannot run ``precision``'s GEMMs, the
        linears' or (``experts``) the routed experts' (None: pptune's generic message)."""
        return None

    def stage_split(self, cfg: TrainingConfig, param_counts: Sequence[float],
                    num_stages: int) -> list[int] | None:
        """Layers per stage (embedding, blocks, head) the framework builds when the config
        states no split; None: an even split of the blocks."""
        return None

    def stateable(self, req: PlanRequest, model: str | None,
                  shape: ModelShape | None = None) -> PlanRequest:
        """``req`` narrowed to the plans its files state (shardings, schedules, rank
        orders, pipelining of ``model``, a preset name, or ``shape``, a Hugging Face
        config's): the search check-config compares a config with, and the one a
        substitute plan comes from. Default: all but interleaving with m not a multiple
        of pp, which torch's runtime orders its own way (``unsimulated_order``)."""
        return self.in_its_order(req)

    def stateable_groups(self, req: PlanRequest, keys: Sequence[CostKey], model: str | None,
                         shape: ModelShape | None = None, versions: Versions | None = None
                         ) -> list[PlanRequest]:
        """``req`` over ``keys`` narrowed to the plans its files state (``stateable``),
        each key with the shardings its files state there (``key_shardings``): one
        request a tensor-parallel size and shardings whose narrowing differs (DeepSpeed
        runs AutoTP without a pipeline), else one; none for keys no sharding is left.
        ``versions``: the releases followed (--framework-version), for a framework whose
        releases state different plans (DeepSpeed's AutoTP with ZeRO-3); default each
        key's default release."""
        del versions  # every release here states the same plans
        parts = {k: (k.tp, self.key_shardings(k, req.shardings)) for k in keys}
        groups: list[PlanRequest] = []
        for tp, shardings in dict.fromkeys(parts.values()):
            mine = tuple(k for k in keys if parts[k] == (tp, shardings))
            if not shardings:
                continue
            within = self.stateable(replace(req, tp=tp, cost_keys=mine, shardings=shardings),
                                    model, shape)
            same = next((i for i, r in enumerate(groups)
                         if replace(r, tp=tp, cost_keys=mine) == within), None)
            if same is None:
                groups.append(within)
            else:
                groups[same] = replace(groups[same], cost_keys=(*groups[same].keys(), *mine))
        return groups

    def left_by_release(self, req: PlanRequest, keys: Sequence[CostKey],
                        versions: Versions | None = None) -> str | None:
        """The note saying what the release followed (``versions``, --framework-version)
        leaves out of ``req`` over ``keys`` that ``stateable_groups`` drops for it and a
        later release states, naming both releases (None: nothing; DeepSpeed's ZeRO-3
        beside AutoTP before 0.19.4). ``recommend --framework`` says it beside the note of
        the choices no release states (FrameworkSearch.narrowed)."""
        del req, keys, versions  # every release here states the same plans
        return None

    def in_its_order(self, req: PlanRequest) -> PlanRequest:
        """``req`` without interleaving in Megatron-LM's micro-batch groups where the
        framework's interleaved schedule orders such counts its own way (torch's)."""
        return req if self.runs_microbatch_groups else replace(req, interleaved_groups=False)

    def as_run(self, job: Job, plan: Plan, *, substitute: bool = True) -> tuple[Job, Plan]:
        """The job and plan priced as the framework runs the plan with the job's settings
        (the kernels it runs for the plan's schedule, ...): where ``express`` starts, and
        how check-config times the plans it compares a file with and ``recommend
        --framework`` ranks its plans (common/as_run.py). A plan that so priced outgrows
        the GPU gives way to the best plan that fits so, unless not to ``substitute``
        (then it is kept, and ``express.fits`` says it does not). Default: as priced."""
        return job, plan

    def as_run_saving_s(self, job: Job, spec: PlanSpec) -> float:
        """The most seconds each micro-batch of a plan of ``spec`` (its sharding, depth and
        micro-batch size; the job's cost key) runs faster as ``as_run`` prices it than the
        job prices it (Megatron-FSDP's BF16 weight gradients): the search's cut-offs allow
        m times this (repricing.table_saving_s). Default: 0, never faster (the framework's
        kernels as priced, or slower ones)."""
        return 0.0

    def as_run_step_saving_s(self, job: Job, spec: PlanSpec) -> float:
        """The most seconds a step of a plan of ``spec`` runs faster so, once a step beside
        m times ``as_run_saving_s`` (DeepSpeed's 16-bit gradients: the data-parallel
        traffic after the last backward, the optimizer step); it may depend on the
        spec's depth and rank order too. Default: 0."""
        return 0.0

    def own_splits(self, table: CostTable, key: CostKey, chunks: int
                   ) -> tuple[tuple[int, ...], ...]:
        """The only splits (layers per stage) its files build a pipeline of ``chunks``
        stages on, over the layers of ``table`` (``key``'s), where it builds its stages
        by a rule of its own (DeepSpeed's partition_method) and ``as_run`` refuses plans
        on others: ``recommend --framework`` searches its pipelines on those alone
        (PlanRequest.stage_splits, costmodel/own_splits.py). Default (``builds_any_split``):
        none, its files state any contiguous split."""
        return ()

    @property
    def builds_any_split(self) -> bool:
        """Whether its files state any contiguous split (``own_splits`` is the default's)."""
        return type(self).own_splits is Adapter.own_splits

    @property
    def runs_as_priced(self) -> bool:
        """Whether the framework runs every plan as the search priced it (``as_run`` is
        the default's): nothing to price again."""
        return type(self).as_run is Adapter.as_run

    def run_settings(self, job: Job, plan: Plan) -> dict[str, str]:
        """The framework's own settings a plan runs with, beyond its layout (``as_run``'s
        job and plan; torchtitan: what its [compile] table compiles), by the names
        check-config's findings give them. Default: none."""
        return {}

    def express(self, job: Job, plan: Plan, rank: int) -> Stated:
        """The plan its files state: ``plan`` itself, or the closest one they can."""
        raise NotImplementedError

    def write(self, stated: Stated) -> dict[str, str]:
        """File name -> content for the stated plan."""
        raise NotImplementedError

    def files_for(self, versions: Versions) -> tuple[str, ...]:
        """The files --emit writes for ``versions`` (recommend --framework-version)."""
        return self.files

    def log_lines(self, text: str) -> bool:
        """Whether a training log's text has this framework's iteration lines."""
        return False

    def read_log(self, text: str) -> JobLog | None:
        """The framework's training log (its ``log.py``); None: it has no log format."""
        return None


def keep(asked: Sequence[Any], stated: Sequence[Any]) -> tuple[Any, ...]:
    """The asked choices a framework's files state, or those it states when none is."""
    return tuple(x for x in asked if x in stated) or tuple(stated)
