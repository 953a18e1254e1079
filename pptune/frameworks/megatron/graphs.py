"""CUDA graphs: ``--cuda-graph-impl`` (none, local, transformer_engine), its older spellings
``--enable-cuda-graph`` (local) and ``--external-cuda-graph`` (transformer_engine), and
``--cuda-graph-scope``, as Megatron-LM core_v0.16.1 reads them (validate_args,
megatron/training/arguments.py: the scope is argparse ``nargs='+'`` of
``CudaGraphScope`` names, megatron/core/transformer/enums.py, or ``full``, its old
spelling of the whole layer) and megatron-core 0.16.1 checks them
(``TransformerConfig.__post_init__``, megatron/core/transformer/transformer_config.py).

pptune does not model graphs: a warning names the flag. What Megatron-LM refuses is an
error finding quoting it; a scope or implementation its parser refuses is bad input.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.megatron.flags import FlagReader
from pptune.frameworks.megatron.moe import capacity_factor, eval_pattern

IMPLS = ("none", "local", "transformer_engine")  # TransformerConfig.cuda_graph_impl
SCOPES = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
CITE_CONFIG = "(megatron-core megatron/core/transformer/transformer_config.py __post_init__)"
CITE_ARGS = "(Megatron-LM megatron/training/arguments.py validate_args)"


def read_graphs(r: FlagReader, fields: dict[str, Any]) -> None:
    """The graphs' implementation and scope, Megatron-LM's refusals of them, and the
    warning that pptune does not model them."""
    flags, refuse = r.flags, r.ctx.refuse
    impl = r.text("--cuda-graph-impl") or "none"
    if impl not in IMPLS:
        raise r.ctx.bad(f"--cuda-graph-impl is {impl[:40]!r}; Megatron-LM accepts "
                        f"{', '.join(IMPLS)}")
    old = [n for n in ("--enable-cuda-graph", "--external-cuda-graph") if flags.has(n)]
    if old and impl != "none":
        refuse("megatron-cuda-graph", f"{old[0]} with --cuda-graph-impl {impl}: Megatron-LM "
               "asserts 'Do not use --enable-cuda-graph or --external-cuda-graph with "
               f"--cuda-graph-impl.' {CITE_ARGS}; keep --cuda-graph-impl")
    elif len(old) == 2:
        refuse("megatron-cuda-graph", "--enable-cuda-graph with --external-cuda-graph: "
               "Megatron-LM asserts '--enable-cuda-graph and --external-cuda-graph cannot be "
               f"enabled at the same time.' {CITE_ARGS}")
    elif old:
        impl = "local" if old[0] == "--enable-cuda-graph" else "transformer_engine"
    scope = _scope(r)
    if impl == "none" or scope is None:
        return
    r.ctx.unmodelled("megatron-unmodelled-flag",
                     f"{old[0] if old else '--cuda-graph-impl ' + impl}: CUDA graphs are not "
                     "modelled; pptune prices the kernels as eager PyTorch launches them, one "
                     "launch gap each (the GPU preset's launch_s), not replayed from a captured "
                     "graph")
    for text in _refusals(r, fields, impl, scope):
        refuse("megatron-cuda-graph", f"--cuda-graph-impl {impl} with --cuda-graph-scope "
               f"{' '.join(scope) or 'full'}: {text}")


def _scope(r: FlagReader) -> list[str] | None:
    """The scopes named (empty: the whole layer); None where Megatron-LM refuses them."""
    words = (r.text("--cuda-graph-scope") or "").split()
    unknown = [w for w in words if w not in SCOPES and w != "full"]
    if unknown:
        raise r.ctx.bad(f"--cuda-graph-scope {unknown[0][:40]!r} is no scope; Megatron-LM "
                        f"accepts {', '.join(SCOPES)} (or full, the whole layer)")
    if "full" in words and words != ["full"]:
        r.ctx.refuse("megatron-cuda-graph",
                     f"--cuda-graph-scope {' '.join(words)}: Megatron-LM asserts 'full scope "
                     f"cannot be used with other scopes.' {CITE_ARGS}")
        return None
    return [] if words == ["full"] else list(dict.fromkeys(words))


def _refusals(r: FlagReader, fields: dict[str, Any], impl: str, scope: list[str]) -> list[str]:
    """TransformerConfig.__post_init__'s checks of the scope, in its order, and
    validate_args' of the local graphs with expert parallelism."""
    flags = r.flags
    said: list[str] = []
    if impl == "local" and {"moe_router", "moe_preprocess"} & set(scope):
        scope = [*scope, *(s for s in ("moe_router", "moe_preprocess") if s not in scope)]
    if impl == "transformer_engine" and "full_iteration" in scope:
        said.append("megatron-core asserts 'To use full iteration cuda graph, please use "
                    f"cuda_graph_impl=local instead of cuda_graph_impl=transformer_engine.' "
                    f"{CITE_CONFIG}")
    if "moe" in scope and "moe_router" in scope:
        said.append("megatron-core asserts 'cuda_graph_scope must not contain both moe and "
                    f"moe_router.' {CITE_CONFIG}")
    if "moe_preprocess" in scope and "moe_router" not in scope:
        said.append("megatron-core asserts 'moe_preprocess cuda graph is only supported with "
                    f"moe_router cuda graph.' {CITE_CONFIG}")
    experts = fields.get("num_experts") or 0
    padded = capacity_factor(r) is not None and flags.has("--moe-pad-expert-input-to-capacity")
    if experts <= 1 and {"moe", "moe_router"} & set(scope):
        said.append(f"megatron-core asserts 'moe cuda graph is only supported for MoE.' "
                    f"{CITE_CONFIG}")
    elif experts > 1:
        if "mlp" in scope and _every_layer_moe(r):
            said.append("megatron-core asserts 'mlp cuda graph is only supported for dense "
                        f"layers, but not found in the model.' {CITE_CONFIG}")
        if "moe" in scope and not padded:
            said.append("megatron-core asserts 'moe cuda graph is only supported with "
                        "drop-padding MoE.' (--moe-expert-capacity-factor with "
                        f"--moe-pad-expert-input-to-capacity) {CITE_CONFIG}")
    if fields.get("recompute") == "full" and scope != ["full_iteration"]:
        said.append("megatron-core asserts 'full recompute is only supported with full "
                    f"iteration CUDA graph.' {CITE_CONFIG}")
    if flags.has("--overlap-moe-expert-parallel-comm") and (
            impl != "transformer_engine" or {"moe", "mlp"} & set(scope)):
        said.append("with --overlap-moe-expert-parallel-comm megatron-core asserts 'CUDA graph "
                    "scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm' "
                    f"(transformer_engine graphs only) {CITE_CONFIG}")
    if impl == "local" and (fields.get("ep") or 1) > 1 and not flags.has(
            "--moe-pad-experts-for-cuda-graph-inference"):
        said.append("with expert parallelism Megatron-LM asserts "
                    "'--moe-pad-experts-for-cuda-graph-inference must be set when using CUDA "
                    f"graphs with expert parallelism' {CITE_ARGS}")
    return said


def _every_layer_moe(r: FlagReader) -> bool:
    """megatron-core's test: ``moe_layer_freq == 1`` or a list without a dense 0."""
    text = (r.text("--moe-layer-freq") or "1").strip().strip("'\"")
    if "[" not in text:
        return text == "1"
    return 0 not in eval_pattern(r, text)
