"""The option groups, declared once: every field carries its flag, kind, default and help.

A group is a frozen dataclass; each field is declared with ``option(default,
"--flag", kind=..., help=...)``, which stores a ``Flag`` in the field's
metadata. From that one declaration come the command-line options of every
command that takes the group (``pptune.cli.options.uses``), the parsing and
its error lines (``build``), and, for the planning groups, the keys of a plan
file's ``request`` (``pptune.options.record``). So adding a field to a group
adds the flag to each command taking the group and the key to the plan file,
with no other edit.

- ``CostOptions``: where the per-layer costs come from (simulate, recommend,
  tune; check-config and validate take the flags they honour).
- ``PlanSpace``: the job (GPUs, batch, gradient reduction, memory kept back)
  and what the search may choose (recommend, tune).
- ``OutputOptions``: how results are shown (simulate, recommend, validate, tune).
- ``RunOptions``: how a plan is run here (validate, tune).

None as a default means "not given": the resolver or the search fills it in
(``--sharding`` None: every sharding; ``--attention`` None: sdpa, and with a
measured profile, what it measured).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pptune.costmodel.context import CpComm
from pptune.costmodel.dispatch import Dispatcher, ExpertParallel
from pptune.costmodel.keys import Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.memory import Recompute
from pptune.costmodel.ops import Attention
from pptune.costmodel.precision import Fp8Casts, Fp8Kernels, Fp8Recipe, TorchaoRecipe
from pptune.costmodel.rates import Swiglu, WgradAccum
from pptune.costmodel.schedules import DEFAULT_SCHEDULES, Schedule
from pptune.costmodel.sharding import MEGATRON_GRAD_BYTES, Sharding, StateDtype
from pptune.errors import BadInput
from pptune.options.kinds import Ints, Kind, ListOf, OneOf, PresetName, Sizes

FLAG = "pptune.flag"  # the metadata key of a field's Flag
G = TypeVar("G")

INT: Kind[int] = Kind(int)
FLOAT: Kind[float] = Kind(float)
BOOL: Kind[bool] = Kind(bool)
STR: Kind[str] = Kind(str)
PATH: Kind[Path] = Kind(Path)
PRESET = PresetName()
INTS = Ints()
SIZES = Sizes()
_COMMA_LIST = "{flag} takes a comma list of {choices} (got {text!r})"


SCHEDULE = OneOf(Schedule, "unknown schedule {value!r}; choose from {choices}")
SCHEDULES = ListOf(Schedule, "unknown schedule {value!r}; choose from {choices}",
                   "{flag} is empty", unique=True)
SHARDINGS = ListOf(Sharding, _COMMA_LIST, _COMMA_LIST, unique=True, as_text=True)
RECOMPUTES = ListOf(Recompute, _COMMA_LIST, _COMMA_LIST, unique=True, as_text=True)
ATTENTION = OneOf(Attention, "{flag} must be one of {choices} (got {value!r})")
CROSS_ENTROPY = OneOf(CrossEntropy, "{flag} must be one of {choices} (got {value!r})")
SWIGLU = OneOf(Swiglu, "{flag} must be one of {choices} (got {value!r})")
WGRAD_ACCUM = OneOf(WgradAccum, "{flag} must be one of {choices} (got {value!r})")
PRECISIONS = ListOf(Precision, _COMMA_LIST, _COMMA_LIST, unique=True)
CP_COMM = OneOf(CpComm, "{flag} must be one of {choices} (got {value!r})")
FP8_RECIPE = OneOf(Fp8Recipe, "{flag} must be one of {choices} (got {value!r})")
FP8_KERNELS = OneOf(Fp8Kernels, "{flag} must be one of {choices} (got {value!r})")
DISPATCHER = OneOf(Dispatcher, "{flag} must be one of {choices} (got {value!r})")
STATE_DTYPE = OneOf(StateDtype, "{flag} must be one of {choices} (got {value!r})")


@dataclass(frozen=True)
class Flag:
    """A field's command-line flag: its names, help and kind."""

    names: tuple[str, ...]  # ("--gpus", "-n"); an on/off pair as one: "--x/--no-x"
    help: str
    kind: Kind[Any]
    required: bool = False
    plan_key: str | None = None  # its key in a plan file's request, when not the field's name

    @property
    def name(self) -> str:
        """The long flag, as error lines name it."""
        return self.names[0].split("/")[0]


def option(default: Any, *names: str, kind: Kind[Any], help: str,
           plan_key: str | None = None) -> Any:
    """A group field with its flag; ``default`` ``...``: the flag is required."""
    flag = Flag(tuple(names), help, kind, required=default is ..., plan_key=plan_key)
    if default is ...:
        return field(metadata={FLAG: flag})
    return field(default=default, metadata={FLAG: flag})


@dataclass(frozen=True)
class Field:
    """One field of a group, as the CLI and the plan file see it."""

    name: str
    flag: Flag
    default: Any  # ``...`` when required

    @property
    def plan_key(self) -> str:
        return self.flag.plan_key or self.name


def fields_of(group: type) -> tuple[Field, ...]:
    """The group's fields, in declaration order."""
    return tuple(
        Field(f.name, f.metadata[FLAG], ... if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(group) if FLAG in f.metadata
    )


def build(group: type[G], values: Mapping[str, Any]) -> G:
    """The group from values by field name (the flags' text, or values given in code);
    BadInput lists every bad value, one clause each. Fields not given keep their defaults."""
    fields = fields_of(group)
    unknown = set(values) - {f.name for f in fields}
    if unknown:  # a caller's mistake, not the user's
        raise TypeError(f"{group.__name__} has no option {', '.join(sorted(unknown))}")
    parsed, problems = {}, []
    for f in fields:
        if f.name not in values:
            continue
        try:
            parsed[f.name] = f.flag.kind.parse(values[f.name], f.flag.name)
        except BadInput as exc:
            problems.append(str(exc))
    if problems:
        raise BadInput("; ".join(problems))
    return group(**parsed)


@dataclass(frozen=True, kw_only=True)
class CostOptions:
    """Where the per-layer costs come from (the resolver: ``pptune.costs.resolve``)."""

    model: str | None = option(None, "--model", kind=PRESET,
                               help="model preset (see pptune presets)")
    hf_config: Path | None = option(None, "--hf-config", kind=PATH,
                                    help="Hugging Face config.json: a model of that shape")
    seq_len: int | None = option(None, "--seq-len", kind=INT,
                                 help="sequence length (default: the model's)")
    gpu: str | None = option(None, "--gpu", kind=PRESET, help="GPU preset", plan_key="device")
    profile: Path | None = option(None, "--profile", kind=PATH,
                                  help="profile JSON (pptune probe)")
    tp: tuple[int, ...] | None = option(
        None, "--tp", kind=SIZES,
        help="tensor-parallel size inside each stage, or a comma list to search (default: "
        "recommend searches 1, 2, 4, 8 within a node for analytic costs; 1 otherwise)")
    cp: tuple[int, ...] | None = option(
        None, "--cp", kind=SIZES,
        help="context-parallel size (the sequence split over cp ranks), or a comma list to "
        "search (default: recommend searches sizes that leave >= 2,048 tokens a rank for "
        "analytic costs; 1 otherwise)")
    ep: tuple[int, ...] | None = option(
        None, "--ep", kind=SIZES,
        help="expert-parallel size of a mixture-of-experts model, or a comma list to search "
        "(default: recommend searches the powers of two dividing the experts; 1 otherwise)")
    etp: tuple[int, ...] | None = option(
        None, "--etp", kind=SIZES,
        help="expert tensor-parallel size (Megatron-LM --expert-tensor-parallel-size) "
        "[default: 1]")
    precision: tuple[Precision, ...] | None = option(
        None, "--precision", kind=PRECISIONS,
        help="GEMM precision, or a comma list to search: bf16, fp16, fp8, mxfp8, nvfp4 "
        "[default: bf16]")
    cp_comm: CpComm = option(
        CpComm.P2P, "--cp-comm", kind=CP_COMM,
        help="how context-parallel ranks exchange K/V: p2p (Megatron-LM's ring), all-gather "
        "(Llama 3), a2a (Ulysses), a2a+p2p (Megatron-LM --cp-comm-type)")
    fp8_param_gather: bool | None = option(
        None, "--fp8-param-gather/--no-fp8-param-gather", kind=BOOL,
        help="FP8 plans keep and all-gather their weights in FP8 (Megatron-LM "
        "--fp8-param-gather): no cached FP8 copies, half the gather bytes [default: off, "
        "or as a calibrated profile's jobs ran]")
    fp8_recipe: Fp8Recipe | None = option(
        None, "--fp8-recipe", kind=FP8_RECIPE,
        help="how FP8 plans scale: delayed (Megatron-LM's default; its amaxes all-reduced "
        "over the stage's ranks after every chunk pass), tensorwise, blockwise (its scales' "
        "bytes on tensorwise's GEMM rate) (Megatron-LM --fp8-recipe) [default: delayed, or "
        "the recipe a calibrated profile's jobs ran]")
    fp8_kernels: Fp8Kernels | None = option(
        None, "--fp8-kernels", kind=FP8_KERNELS,
        help="whose FP8 linear layers FP8 plans run: te (Transformer Engine: Megatron-LM, "
        "NeMo; each weight's FP8 copy and transpose cached all step, the FP8 GEMM inputs "
        "saved) or torchao (torchtitan's float8: weights cast on every use, the BF16 inputs "
        "saved: a BF16 run's memory) [default: te, or the kernels a calibrated profile's jobs "
        "ran]")
    cross_entropy: CrossEntropy | None = option(
        None, "--cross-entropy", kind=CROSS_ENTROPY,
        help="the loss's kernels: fused (one pass each way: Transformer Engine, Liger, "
        "torch.compile), native (Megatron-LM --cross-entropy-loss-fusion), unfused "
        "(Megatron-LM without it), eager (PyTorch's cross_entropy uncompiled: torchtitan "
        "without [compile]) [default: fused, or as a calibrated profile's jobs ran]")
    swiglu: Swiglu | None = option(
        None, "--swiglu", kind=SWIGLU,
        help="a gated MLP's activation kernels: fused (one kernel each way that keeps its "
        "input: Megatron-LM's default --bias-swiglu-fusion, torch.compile), eager (PyTorch's "
        "silu then mul uncompiled, which keep the SiLU's output too: torchtitan without "
        "[compile], --no-bias-swiglu-fusion) [default: fused, or as a calibrated profile's "
        "jobs ran]")
    wgrad_accum: WgradAccum | None = option(
        None, "--wgrad-accum", kind=WGRAD_ACCUM,
        help="where weight gradients go: bf16 (autograd's BF16 gradient: torchtitan, DeepSpeed), "
        "fused (accumulated into an FP32 main_grad by the GEMM, 8 bytes an element: "
        "Megatron-LM's default gradient_accumulation_fusion), unfused (a BF16 gradient, then "
        "an add into main_grad, 10 bytes a weight element: --no-gradient-accumulation-fusion) "
        "[default: bf16, or as a calibrated profile's jobs ran]")
    moe_imbalance: float = option(
        1.0, "--moe-imbalance", kind=FLOAT,
        help="tokens of the busiest expert over the mean (1.0: balanced routing, as "
        "force-balanced benchmarks run; a measured value for real routing)")
    moe_dispatcher: Dispatcher | None = option(
        None, "--moe-dispatcher", kind=DISPATCHER, help="how a mixture of experts' tokens "
        "reach their experts: alltoall (an NCCL all-to-all, one copy a token and expert), "
        "deepep (DeepEP: one copy a node across the network, one a rank over NVLink), "
        "allgather (Megatron-LM's default: every token gathered over the ep x etp ranks) "
        "[default: alltoall, or as a calibrated profile's jobs ran]")

    def __post_init__(self) -> None:
        """One size or precision given in code (``CostOptions(tp=2)``) is a list of one."""
        for name in ("tp", "cp", "ep", "etp"):
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, (value,))
        if isinstance(self.precision, Precision):
            object.__setattr__(self, "precision", (self.precision,))

    def fp8_linears(self) -> Fp8Kernels:
        """Whose FP8 linear layers an FP8 plan runs: --fp8-kernels, else Transformer
        Engine's."""
        return self.fp8_kernels or Fp8Kernels.TE

    def kernel_options(self) -> dict[str, object]:
        """These options as the analytic costs take them (profiles.analytic_profile): the
        context-parallel exchange, FP8 weights, recipes and kernels, weight-gradient sums
        and the main_grad's width."""
        return dict(cp_comm=self.cp_comm, fp8_params=self.fp8_params,
                    cross_entropy=self.loss_kernels, swiglu=self.swiglu_kernels,
                    fp8_kernels=self.fp8_linears(), wgrad_accum=self.wgrad,
                    torchao_recipe=self.torchao_recipe, fp8_recipe=self.recipe,
                    main_grad_bytes=self.main_grad_bytes, fp8_casts=self.fp8_casts)

    def experts(self) -> ExpertParallel:
        """How a mixture of experts is fed under these options (ep and etp come with each
        cost key): the routing imbalance, the dispatcher and the experts' precision."""
        return ExpertParallel(imbalance=self.moe_imbalance, dispatcher=self.dispatcher,
                              precision=self.expert_precision)

    efficiency: float | None = option(
        None, "--efficiency", kind=FLOAT,
        help="one fraction of peak FLOP/s for every GEMM (analytic costs; default: per GEMM "
        "shape)")
    gpu_spread: float | None = option(
        None, "--gpu-spread", kind=FLOAT,
        help="range of sustained matmul throughput over a node's 8 GPUs, as a fraction of "
        "the median (analytic costs): a job of N GPUs runs at its slowest one's pace "
        "[default: the GPU preset's, 0.05]; 0 prices every GPU at the preset's rate")
    attention: Attention | None = option(
        None, "--attention", kind=ATTENTION,
        help="flash (FlashAttention-2), cudnn (cuDNN's fused attention, Transformer "
        "Engine's on Hopper and later), eager (unfused) or sdpa (torch 2.13's "
        "scaled_dot_product_attention: cuDNN's on Hopper and Blackwell, FlashAttention-2 "
        "elsewhere) attention (analytic costs) [default: sdpa]")
    tp_comm_overlap: bool | None = option(
        None, "--tp-comm-overlap/--no-tp-comm-overlap", kind=BOOL,
        help="tensor-parallel collectives hidden behind their GEMMs (analytic costs; Megatron-LM "
        "--tp-comm-overlap) [default: off, or as a calibrated profile's jobs ran]")
    sequence_parallel: bool | None = option(
        None, "--sequence-parallel/--no-sequence-parallel", kind=BOOL,
        help="with tensor parallelism, split the norms' and dropouts' activations along the "
        "sequence too (Megatron-LM --sequence-parallel; torchtitan's tensor parallelism "
        "always does) [default: on, analytic costs]")
    # no flag, no plan key: set where a framework's file or writer decides them (check-config
    # from a torchtitan file, emit for what torchtitan runs: frameworks/torchtitan/converters.py)
    expert_precision: Precision | None = None  # the routed experts' GEMMs (None: --precision)
    torchao_recipe: TorchaoRecipe = TorchaoRecipe.TENSORWISE  # torchao's float8 scaling
    fp8_casts: Fp8Casts = Fp8Casts.FUSED  # torchao's casts: compiled, or eager (precision.py)
    # the width of the main_grad weight gradients go into (costmodel/rates.py Accumulation):
    # FP32, or 2 where check-config reads a BF16 gradient buffer (--grad-reduce-in-bf16)
    main_grad_bytes: float = MEGATRON_GRAD_BYTES

    @property
    def splits_sequence(self) -> bool:
        """Sequence parallelism as priced: as given, else on (Megatron-LM's recipes set it
        with tensor parallelism, torchtitan always runs it)."""
        return self.sequence_parallel is not False

    @property
    def recipe(self) -> Fp8Recipe:  # the FP8 recipe priced: else Megatron-LM's, delayed
        return self.fp8_recipe or Fp8Recipe.DELAYED

    @property
    def fp8_params(self) -> bool:  # FP8 weights (--fp8-param-gather): else off
        return bool(self.fp8_param_gather)

    # the kernels as priced: as given, else pptune's defaults (calibrated.as_ran fills a job's)
    @property
    def overlaps_tp(self) -> bool:  # --tp-comm-overlap: else off
        return bool(self.tp_comm_overlap)

    @property
    def loss_kernels(self) -> CrossEntropy:  # --cross-entropy: else fused
        return self.cross_entropy or CrossEntropy.FUSED

    @property
    def dispatcher(self) -> Dispatcher:  # --moe-dispatcher: else alltoall
        return self.moe_dispatcher or Dispatcher.ALLTOALL

    @property
    def swiglu_kernels(self) -> Swiglu:  # --swiglu: else fused
        return self.swiglu or Swiglu.FUSED

    @property
    def wgrad(self) -> WgradAccum:  # --wgrad-accum: else bf16
        return self.wgrad_accum or WgradAccum.BF16

    def input_files(self) -> list[tuple[str, Path | None]]:
        """The files these options read, by flag: an output must not replace them."""
        return [("--profile", self.profile), ("--hf-config", self.hf_config)]


@dataclass(frozen=True, kw_only=True)
class PlanSpace:
    """The job and what the search may choose (``pptune.plan.recommend``)."""

    gpus: int = option(..., "--gpus", "-n", kind=INT, help="total GPUs")
    gpus_per_node: int | None = option(
        None, "--gpus-per-node", kind=INT,
        help="GPUs per node (NVLink domain) [default: the GPU preset's: 8, 72 for gb200 and gb300]")
    global_batch: int | None = option(
        None, "--global-batch", kind=INT,
        help="samples per optimizer step (default: the model's)")
    micro_batch_sizes: tuple[int, ...] | None = option(
        None, "--micro-batch-sizes", kind=INTS,
        help="candidates, e.g. 1,2,4 (default: the profile's)")
    schedules: tuple[Schedule, ...] | None = option(
        None, "--schedules", "--schedule", kind=SCHEDULES,
        help="comma list (default all: " + ",".join(s.value for s in DEFAULT_SCHEDULES) + ")")
    virtual_stages: tuple[int, ...] = option(
        (2, 3, 4), "--virtual-stages", kind=INTS, help="v candidates for interleaved-1f1b")
    pp: tuple[int, ...] | None = option(None, "--pp", kind=INTS,
                                        help="restrict pipeline depths, e.g. 4,8")
    sharding: tuple[Sharding, ...] | None = option(
        None, "--sharding", kind=SHARDINGS,
        help="training-state sharding to search, comma list of none, zero1, zero2, zero3, "
        "fsdp (default all)")
    sharded_optimizer: bool = option(
        False, "--sharded-optimizer", kind=BOOL,
        help="alias of --sharding zero1 (optimizer state sharded over dp, 6 + 12/dp "
        "bytes/param)")
    recompute: tuple[Recompute, ...] | None = option(
        None, "--recompute", kind=RECOMPUTES,
        help="activation recomputation to search, comma list of none, selective, full, "
        "modules (Megatron-LM --recompute-modules; MoE and MLA models) (default all)")
    recompute_every: int = option(
        2, "--recompute-every", kind=INT,
        help="selective: checkpoint every N-th block (torchtitan's selective_ac_option)")
    grad_compression: str = option("none", "--grad-compression", kind=STR,
                                   help="none, fp16, bf16 or topk:FRACTION [default: none; recommend "
                                   "on a calibrated profile: its jobs' 16-bit gradient buffer]")
    overlap_grad_reduce: bool = option(
        True, "--overlap-grad-reduce/--no-overlap-grad-reduce", kind=BOOL,
        help="reduce gradients in buckets during the last backward (DDP, Megatron-LM "
        "--overlap-grad-reduce) or after it")
    overlap_param_gather: bool = option(
        True, "--overlap-param-gather/--no-overlap-param-gather", kind=BOOL,
        help="the distributed optimizer's parameter all-gather behind the next forward "
        "(Megatron-LM --overlap-param-gather) or before it")
    exp_avg_dtype: StateDtype = option(
        StateDtype.FP32, "--exp-avg-dtype", kind=STATE_DTYPE,
        help="Adam's first moment's width: fp32, fp16, bf16 or fp8 (Megatron-LM "
        "--use-precision-aware-optimizer, which needs the distributed optimizer: "
        "other than fp32, the search leaves --sharding none out)")
    exp_avg_sq_dtype: StateDtype = option(
        StateDtype.FP32, "--exp-avg-sq-dtype", kind=STATE_DTYPE,
        help="Adam's second moment's width, as --exp-avg-dtype")
    reserve_gib: float | None = option(
        None, "--reserve-gib", kind=FLOAT,
        help="memory kept back per GPU (context, NCCL, fragmentation) [default: 2, or what a "
        "calibrated --profile measured in the jobs' logs]")
    max_memory: float | None = option(
        None, "--max-memory", kind=FLOAT,
        help="share of GPU memory a rank may use, its reserve included, e.g. 0.9 keeps a "
        "tenth free [default: 1.0, the whole GPU]")
    blocking_send: bool = option(False, "--blocking-send", kind=BOOL,
                                 help="sends block the sender")
    pipeline_margin: float = option(
        0.01, "--pipeline-margin", kind=FLOAT,
        help="rank the best plan without a pipeline first unless a pipelined plan is "
        "faster by more than this share of its step time; 0 ranks by step time alone")
