"""Megatron-LM launch script or argument list -> TrainingConfig.

Reads the ``pretrain_*.py`` command of a launch script (through
``torchrun`` / ``python -m torch.distributed.launch`` / ``deepspeed``), or,
in a plain argument file, every line of flags (``flags.py``: names and
parsing as megatron/training/arguments.py has them).

Megatron-LM's batch identity (megatron/core/num_microbatches_calculator.py):
``global_batch_size = micro_batch_size * num_microbatches * dp``; the script
states the global and micro batch, never the micro-batch count, so
grad_accum_steps stays unset for check-config to derive. Without
``--global-batch-size`` Megatron-LM uses micro-batch-size x dp (validate_args),
one micro-batch per step.

Rules follow Megatron-LM core_r0.16 / megatron-core 0.16.1
(``split.py``): the layer split (even, uneven first/last,
account-for-embedding/loss, virtual stages) is computed as megatron-core
builds it, and what validate_args or TransformerConfig refuses becomes an
error finding citing the rule. Defaults when a flag is absent: no
recomputation, no distributed optimizer, Transformer Engine attention
(fused, flash-class; --transformer-impl transformer_engine is the default),
micro-batch group per virtual stage = pp.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pptune.costmodel.presets import MODELS
from pptune.frameworks.common.fields import (
    CAPS,
    MAX_DEVICES,
    Ctx,
    apply_flags,
    build,
    whole_text,
)
from pptune.frameworks.common.shell import Script, ShellLimit, ShellSyntax, interpret
from pptune.frameworks.common.shell_state import holds_unresolved, unresolved
from pptune.frameworks.megatron import functional_yaml
from pptune.frameworks.megatron.a2a import read_a2a_overlap
from pptune.frameworks.megatron.cp_fp8 import read_cp_fp8
from pptune.frameworks.megatron.flags import (
    NODES_FLAGS,
    NOTED_FLAGS,
    PER_NODE_FLAGS,
    UNMODELLED_FLAGS,
    Flagged,
    FlagReader,
    forwards,
    parse_flags,
    supplied_elsewhere,
)
from pptune.frameworks.megatron.fsdp import fsdp_rules, read_sharding
from pptune.frameworks.megatron.graphs import read_graphs
from pptune.frameworks.megatron.launch import (
    comment_cut,
    entry_script,
    flag_lines,
    launch_line,
    launch_words,
    sourced_settings,
)
from pptune.frameworks.megatron.moe import read_moe
from pptune.frameworks.megatron.pipeline import environment, pipeline
from pptune.frameworks.megatron.recompute import read_modules, read_recompute
from pptune.frameworks.megatron.required import positions, required
from pptune.frameworks.megatron.slurm import srun_launch
from pptune.frameworks.megatron.style import read_style
from pptune.frameworks.megatron.unknown import refuse_unknown
from pptune.frameworks.megatron.widths import read_widths
from pptune.frameworks.megatron.window import read_window
from pptune.schemas import TrainingConfig

_SIGNAL = re.compile(
    r"^[^#\n]*pretrain_\w*\.py|^\s*--(?:pipeline-model-parallel-size|"
    r"tensor-model-parallel-size|num-layers|micro-batch-size|global-batch-size)\b",
    re.MULTILINE,
)


def looks_like_megatron(text: str) -> bool:
    """Content test for format detection: a ``pretrain_*.py`` launch (outside a
    comment line), lines that start with Megatron-LM flags, or a functional-test config's
    top-level ``MODEL_ARGS:`` (functional_yaml.py)."""
    return _SIGNAL.search(text) is not None or functional_yaml.looks_like(text)


def read_megatron(text: str, ctx: Ctx) -> TrainingConfig:
    """A launch script or argument file; a functional-test config is read as the launch
    its launcher runs (functional_yaml.py: its ENV_VARS are the job's environment)."""
    job = functional_yaml.launch(text, ctx)
    source = text if job is None else job
    try:
        script = interpret(source, ctx.env)
        for name, value in ctx.env.items():
            final = script.scalars.get(name, value)
            ctx.note(f"{name}={value[:40]} from --env" if final == value else
                     f"{name}={value[:40]} from --env, replaced by the script's own assignment "
                     f"{name}={final[:40]} (a script's assignments win over its environment)")
    except ShellLimit as exc:
        raise ctx.bad(f"{exc}; write the Megatron-LM arguments out plainly") from None
    except ShellSyntax as exc:
        raise ctx.bad(str(exc)) from None
    for line in script.notes:
        ctx.note(line)
    launcher_words, arg_words = launch_words(script, ctx)
    cut = comment_cut(source, launch_line(script))  # a hint for a flag found missing
    args = parse_flags(arg_words)
    refuse_unknown(ctx, entry_script(script), args, arg_words)
    launcher = parse_flags(launcher_words, bools=())
    reader = FlagReader(ctx, args)
    shape = srun_launch(source, launcher_words, ctx)
    fields = _fields(reader, launcher, script.scalars, shape, cut)
    # a model's settings for a launcher to source are not the whole command line, as a
    # script's that forwards words is not
    supplied = supplied_elsewhere(args, sourced_settings(script) or forwards(arg_words))
    required(reader, supplied, cut)  # validate_args' required arguments (required.py)
    positions(reader, fields["seq_len"], supplied, cut)
    fsdp_rules(reader, script.scalars, supplied)
    environment(ctx, script, launched=job is not None or launcher_words is not arg_words,
                fsdp=args.has("--use-megatron-fsdp") or args.has("--use-torch-fsdp2"))
    _note_shell(ctx, script, launcher_words + arg_words, args)
    ctx.semantics.flag_lines = flag_lines(text, {*args.values, *launcher.values,
                                                 *script.scalars})
    return build(ctx, fields)


def _fields(r: FlagReader, launcher: Flagged, env: Mapping[str, str],
            srun: dict[str, Any] | None, cut: str = "") -> dict[str, Any]:
    """The TrainingConfig fields; the GPU count and node size from the launcher's flags
    (torchrun's), or from ``srun``'s tasks where it starts the ranks (slurm.py); ``cut``:
    where a comment line ended the launch early (launch.comment_cut)."""
    ctx, flags = r.ctx, r.flags
    fields: dict[str, Any] = {  # the parallel sizes: over pptune's caps said as such
        "pp": r.number("--pipeline-model-parallel-size", cap=CAPS["pp"]),
        "tp": r.number("--tensor-model-parallel-size", cap=CAPS["tp"]),
        "cp": r.number("--context-parallel-size", cap=CAPS["cp"]),
        # validate_args: args.num_layers = args.encoder_num_layers without --num-layers
        "num_layers": r.number("--num-layers" if flags.has("--num-layers")
                               or not flags.has("--encoder-num-layers")
                               else "--encoder-num-layers"),
        "mtp_layers": r.number("--mtp-num-layers", minimum=0),
        "global_batch": r.number("--global-batch-size"),
        "hidden_size": r.number("--hidden-size"),
        "seq_len": r.number("--seq-length"),
        "num_heads": r.number("--num-attention-heads"),
        "ffn_hidden_size": r.number("--ffn-hidden-size"),
        "vocab_size": r.number("--vocab-size"),
        "sharded_optimizer": flags.has("--use-distributed-optimizer"),
        "attention": _attention(r, env),
        "sequence_parallel": flags.has("--sequence-parallel"),
        "rank_order": "tp-pp-dp" if flags.has("--use-tp-pp-dp-mapping") else None,
        "a2a_overlap": flags.has("--overlap-moe-expert-parallel-comm") or None,
        # megatron-core's DistributedDataParallelConfig: both off unless the flags say
        "overlap_grad_reduce": flags.has("--overlap-grad-reduce"),
        "overlap_param_gather": flags.has("--overlap-param-gather"),
        "gated_mlp": flags.has("--swiglu"),  # Megatron-LM's default MLP is GeLU
        # megatron-core's loss: unfused unless --cross-entropy-loss-fusion (costmodel/loss.py)
        "cross_entropy": ("unfused" if not flags.has("--cross-entropy-loss-fusion") else
                          "fused" if r.text("--cross-entropy-fusion-impl") in ("te", "linear")
                          else "native"),
        # megatron-core fuses SwiGLU (bias_swiglu_impl) unless --no-bias-swiglu-fusion
        "swiglu": "eager" if flags.has("--no-bias-swiglu-fusion") else "fused",
        # megatron-core accumulates weight gradients into the FP32 main_grad in the GEMM
        # unless --no-gradient-accumulation-fusion (costmodel/rates.py WgradAccum); torch
        # FSDP2, which validate_args allows only without it, keeps autograd's BF16 ones
        "wgrad_accum": ("bf16" if flags.has("--use-torch-fsdp2") else "unfused"
                        if flags.has("--no-gradient-accumulation-fusion") else "fused"),
        "precision": _precision(ctx, flags),
        "source_format": "megatron",
    }
    if fields["ffn_hidden_size"] is None and fields["gated_mlp"] and fields["hidden_size"]:
        # megatron/training/arguments.py validate_args: a SwiGLU MLP keeps 4h's parameters
        # over its two up projections, rounded down to a multiple of 64
        fields["ffn_hidden_size"] = int(4 * fields["hidden_size"] * 2 / 3 / 64) * 64
        ctx.note(f"--swiglu without --ffn-hidden-size: Megatron-LM builds an MLP of "
                 f"int(4 x hidden x 2/3 / 64) x 64 = --ffn-hidden-size "
                 f"{fields['ffn_hidden_size']} (validate_args)")
    fields["dropout"] = any(_rate(r, name) > 0 for name in ("--hidden-dropout",
                                                             "--attention-dropout"))
    (fields["recompute"], fields["recompute_block_layers"],
     fields["recompute_uniform_layers"]) = read_recompute(r)
    fields["recompute_modules"] = read_modules(r, fields["recompute"])
    read_widths(r, fields)
    read_sharding(r, fields)  # the distributed optimizer, Megatron-FSDP, FSDP2 (fsdp.py)
    read_window(r, fields)
    read_style(r, fields)
    micro = r.number("--micro-batch-size")
    if micro is None and ctx.flags.micro_batch_size is None:
        raise ctx.bad("--micro-batch-size is missing or unresolved; expected "
                      "--micro-batch-size N with a number (Megatron-LM requires it), or pass "
                      "check-config --micro-batch-size N (or --env NAME=N for its variable)"
                      + cut)
    fields["micro_batch_size"] = micro
    if fields["global_batch"] is None and not flags.has("--global-batch-size"):
        fields["grad_accum_steps"] = 1
        ctx.note("--global-batch-size not given: Megatron-LM then uses micro-batch-size x dp "
                 "(one micro-batch per step; validate_args)")
    queries = r.number("--num-query-groups")
    if queries is not None and not flags.has("--group-query-attention"):
        ctx.note("--num-query-groups ignored without --group-query-attention (as Megatron-LM does)")
        queries = None
    fields["num_kv_heads"] = queries
    read_cp_fp8(r, fields)
    fields.update(_launcher(ctx, launcher) if srun is None else srun)
    world = env.get("WORLD_SIZE", "").strip()
    if fields.get("gpus") is None and re.fullmatch(r"[0-9]+", world) and 0 < int(world):
        # a script launched by mpirun or a scheduler hands torch.distributed its world size
        # in WORLD_SIZE (megatron/training/initialize.py reads it through the environment)
        fields["gpus"] = whole_text(ctx, "WORLD_SIZE", world, maximum=MAX_DEVICES)
        ctx.note(f"gpus {world} from the script's WORLD_SIZE (no launcher states a count)")
    apply_flags(ctx, fields, {"pp": "--pipeline-model-parallel-size",
                              "tp": "--tensor-model-parallel-size",
                              "gpus": "a GPU count (--nnodes x --nproc_per_node)",
                              "micro_batch_size": "--micro-batch-size",
                              "global_batch": "--global-batch-size"})
    if fields["pp"] is None and flags.has("--pipeline-model-parallel-size"):
        ctx.note("pp assumed 1: pass --pp")
    fields["tp_comm_overlap"] = _tp_comm_overlap(r, fields["tp"] or 1)
    pipeline(r, fields)
    read_moe(r, fields)
    read_a2a_overlap(r, fields)
    preset = _preset_by_shape(fields)
    if preset:
        fields["model"] = preset
        ctx.note(f"model preset {preset} inferred from the shape ({fields['num_layers']} layers, "
                 f"hidden {fields['hidden_size']}, {fields['num_heads']} heads)")
    for name, text in NOTED_FLAGS.items():
        if flags.has(name):
            ctx.note(text)
    for name, text in UNMODELLED_FLAGS.items():
        if flags.has(name):
            ctx.unmodelled("megatron-unmodelled-flag", text)
    read_graphs(r, fields)
    return fields


def _launcher(ctx: Ctx, launcher: Flagged) -> dict[str, Any]:
    """gpus = nodes x processes per node, from torchrun's (or deepspeed's) flags."""

    def last(names: tuple[str, ...]) -> tuple[str, str] | None:
        found = [(n, launcher.values[n][-1]) for n in names if launcher.has(n)]
        if not found or found[-1][1] is None:
            return None
        return found[-1]  # type: ignore[return-value]

    per_node, nodes = last(PER_NODE_FLAGS), last(NODES_FLAGS)
    if per_node is None:
        return {}
    name, value = per_node
    if holds_unresolved(value) or not re.fullmatch(r"[+-]?[0-9]+", value.strip()):
        ctx.note(f"{name} {value} is not a number pptune can resolve; GPU count left unset")
        return {}
    procs = whole_text(ctx, name, value, maximum=MAX_DEVICES)
    count = 1
    if nodes is None:
        ctx.note(f"{NODES_FLAGS[0]} not given: one node (torchrun's default)")
    elif holds_unresolved(nodes[1]) or not re.fullmatch(r"[+-]?[0-9]+", nodes[1].strip()):
        ctx.note(f"{nodes[0]} {nodes[1]} is not a number pptune can resolve; GPU count left unset")
        return {"gpus_per_node": procs}
    else:
        count = whole_text(ctx, nodes[0], nodes[1], maximum=MAX_DEVICES)
    return {"gpus_per_node": procs, "gpus": count * procs}


def _tp_comm_overlap(r: FlagReader, tp: int) -> bool | None:
    """--tp-comm-overlap: validate_args turns sequence parallelism off at tp 1, then asserts
    it (megatron/training/arguments.py); only Transformer Engine's linear layers overlap
    (megatron/core/extensions/transformer_engine.py reads tp_comm_overlap), so under
    --transformer-impl local the collectives stay exposed. None: not given."""
    if not r.flags.has("--tp-comm-overlap"):
        return None
    if tp == 1 or not r.flags.has("--sequence-parallel"):
        r.ctx.refuse("megatron-tp-comm-overlap",
                     "--tp-comm-overlap " + ("with tensor parallel size 1 (validate_args then "
                                             "turns sequence parallelism off)" if tp == 1 else
                                             "without --sequence-parallel")
                     + ": Megatron-LM validate_args asserts 'Tensor parallel communication/GEMM "
                     "overlap can happen only when sequence parallelism is enabled' "
                     "(megatron/training/arguments.py); add --sequence-parallel with tp > 1, "
                     "or drop --tp-comm-overlap")
        return None
    if (r.text("--transformer-impl") or "transformer_engine") != "transformer_engine":
        r.ctx.unmodelled("megatron-tp-comm-overlap-local",
                         "--tp-comm-overlap with --transformer-impl local: only Transformer "
                         "Engine's linear layers overlap their collectives (megatron-core "
                         "extensions/transformer_engine.py; Megatron-LM still needs the "
                         "transformer_engine package to start, initialize.py "
                         "_initialize_tp_communicators); priced with them exposed")
        return False
    return True


def _precision(ctx: Ctx, flags: Flagged) -> str | None:
    bf16, fp16 = flags.has("--bf16"), flags.has("--fp16")
    if bf16 and fp16:
        ctx.refuse("megatron-bf16-fp16",
                   "--bf16 and --fp16 are both given: Megatron-LM validate_args asserts "
                   "'not args.bf16' when --fp16 is set (megatron/training/arguments.py); "
                   "keep one")
        return None
    return "bf16" if bf16 else "fp16" if fp16 else "fp32"


def _attention(r: FlagReader, env: Mapping[str, str]) -> str:
    """The attention kernel the script runs. --transformer-impl defaults to
    transformer_engine, whose --attention-backend auto (the default) and fused run cuDNN's
    fused attention (Transformer Engine prefers it to FlashAttention on Hopper and later;
    costmodel/presets.py prices it as flash attention where cuDNN's rates are not measured,
    as Transformer Engine falls back there), except that at auto Transformer Engine's own
    switches in the script's environment decide (megatron-core's language_module sets them
    for the other backends only): NVTE_FUSED_ATTN=0 leaves FlashAttention, and
    NVTE_FLASH_ATTN=0 as well the unfused path; flash runs FlashAttention; unfused, and the
    local implementation without --use-flash-attn, the unfused path."""
    impl = r.text("--transformer-impl") or "transformer_engine"
    backend = r.text("--attention-backend") or "auto"
    if impl == "transformer_engine" and backend == "auto" and env.get("NVTE_FUSED_ATTN") == "0":
        return "eager" if env.get("NVTE_FLASH_ATTN") == "0" else "flash"
    if impl == "transformer_engine" and backend in ("auto", "fused"):
        return "cudnn"
    if backend == "flash" or r.flags.has("--use-flash-attn") or (
            impl == "transformer_engine" and backend != "unfused"):
        return "flash"
    return "eager"


def _rate(r: FlagReader, name: str) -> float:
    """A dropout probability (megatron/training/arguments.py: 0.1 unless set)."""
    text = r.text(name)
    if text is None:
        return 0.1
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise r.ctx.bad(f"{name} is {text[:40]!r}; expected a probability from 0 to 1")
    return value


def _preset_by_shape(fields: dict[str, Any]) -> str | None:
    shape = (fields["num_layers"], fields["hidden_size"], fields["num_heads"])
    if None in shape:
        return None
    for model in MODELS.values():
        if shape != (model.num_blocks, model.hidden, model.heads):
            continue
        ffn = fields["ffn_hidden_size"]
        if (ffn if ffn is not None else 4 * model.hidden) != model.ffn:
            continue
        kv = fields["num_kv_heads"] or model.heads
        experts = (fields.get("num_experts") or 0, fields.get("moe_top_k") or 0)
        if (kv == model.kv_heads and fields["gated_mlp"] == model.gated_mlp
                and experts == (model.experts, model.top_k)):
            return model.name
    return None


def _note_shell(ctx: Ctx, script: Script, words: list[str], args: Flagged) -> None:
    for name, value in list(script.defaults_used.items())[:5]:
        ctx.note(f"shell variable {name} is not set in the script; used its default {value!r} "
                 f"(check-config --env {name}=VALUE sets it)")
    kept = list(dict.fromkeys(w for w in words if unresolved(w)))
    if kept:
        shown = ", ".join(w[:30] for w in kept[:6])
        ctx.note(f"shell references left as written (not resolvable without running): {shown}")
    if args.unknown:
        ctx.semantics.ignored = list(args.unknown)
        extra = len(args.unknown) - 8
        names = ", ".join(args.unknown[:8]) + (f" and {extra} more" if extra > 0 else "")
        ctx.note(f"ignored {len(args.unknown)} other flag"
                 f"{'s' if len(args.unknown) > 1 else ''}: {names}")
