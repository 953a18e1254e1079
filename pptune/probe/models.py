"""The layers to measure: from a preset, a Hugging Face config.json, or user code.

Every source becomes a ``ModelPlan``: the layer names, a function that builds
layer ``i`` on the probe's device, and a function that makes the first
layer's input for a micro-batch of ``b`` samples. Layers are built one at a
time (the probe measures layer ``i``, runs it to make layer ``i+1``'s input,
then drops it), so a model larger than memory can still be probed layer by
layer.

User code (``--module pkg.mod:factory``), the contract:

    factory() -> (layers, sample)

    layers  a non-empty list (or tuple) of ``torch.nn.Module``: the model in
            pipeline order. Each layer is called with ONE tensor and returns
            ONE tensor; layer i's output is layer i+1's input.
    sample  a ``torch.Tensor``, the first layer's input for a micro-batch of
            ONE sample: dim 0 is the batch dimension (normally of size 1).
            For micro-batch size b the probe feeds ``sample.repeat(b, 1, ...)``
            (b copies along dim 0). Integer samples (token ids) have no input
            gradient: that layer's B time is 0.

The layers are moved to the probe's device but keep their dtype; ``factory``
is called once, with the current directory on ``sys.path``, and must take no
arguments. Example (``mymodel.py``)::

    import torch
    from torch import nn

    def layers():
        blocks = [nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512))
                  for _ in range(4)]
        return blocks, torch.randn(1, 64, 512)

    # pptune probe --module mymodel:layers
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pptune.costmodel.presets import MODELS, ModelShape
from pptune.costs.modelspec import with_seq_len
from pptune.errors import BadInput
from pptune.launch import ranks
from pptune.launch.deps import import_torch
from pptune.probe import host_memory

CPU_DEMO_MODEL = "gpt-small"
CPU_DEMO_MODELS = (CPU_DEMO_MODEL, "moe-small")  # sized for a CPU: no size warning
# another model warns of a long CPU probe past this many times the demo's work (its
# parameters x tokens): a Hugging Face config of the demo's size does not
DEMO_WORK = 2
# A config's max_position_embeddings can be 128k (Llama 3.1); a probe at that
# length is rarely what anyone means. Above this cap we measure at the cap
# and say so; --seq-len sets any length.
HF_SEQ_LEN_CAP = 8192


@dataclass
class ModelPlan:
    name: str
    seq_len: int
    layer_names: list[str]
    build_layer: Callable[[int], Any]  # i -> torch.nn.Module on the device
    make_input: Callable[[int], Any]  # micro-batch size -> first layer's input
    param_dtype_bytes: int
    global_batch: int | None = None
    hidden_size: int | None = None
    num_blocks: int | None = None
    experts: int | None = None  # mixture of experts: routed experts and top-k
    top_k: int | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # (bytes, which layer) a probe at these micro-batch sizes needs at least
    # (host_memory.probe_need); None: unknown (user modules)
    memory_need: Callable[[list[int]], tuple[float, str]] | None = None
    shape: ModelShape | None = None  # the transformer built (None: user modules)


def _transformer_plan(
    shape: ModelShape, dropout_p: float, device: str, dtype: Any, global_batch: int | None
) -> ModelPlan:
    """[embedding, blocks, head] of ``shape``, built layer by layer on ``device``."""
    torch = import_torch("probe")
    from pptune.probe import _torch_layers as tl

    name, num_blocks = shape.name, shape.num_blocks

    def build(i: int) -> Any:
        torch.manual_seed(1234 + i)  # the same weights on every run
        layer: Any
        with torch.device(device):
            if i == 0:
                layer = tl.Embedding(shape, dropout_p)
            elif i <= num_blocks:
                layer = tl.Block(shape, dropout_p, i - 1)
            else:
                layer = tl.Head(shape)
        return layer.to(dtype)

    def make_input(b: int) -> Any:
        gen = torch.Generator().manual_seed(b)
        ids = torch.randint(0, shape.vocab, (b, shape.seq_len), generator=gen)
        return ids.to(device)

    names = ["embed"] + [f"block.{i}" for i in range(num_blocks)] + ["head"]
    notes = [
        f"model {name}: [embedding, {num_blocks} x decoder block, final norm + LM head] "
        f"(d={shape.hidden}, {shape.heads} heads, {shape.kv_heads} kv heads, ffn {shape.ffn}, "
        f"vocab {shape.vocab}, seq {shape.seq_len}, "
        f"{'Llama-style: RMSNorm, SwiGLU, no rotary' if shape.gated_mlp else 'GPT-style'}"
        f"{f', dropout {dropout_p}' if dropout_p else ''}); the head's cost "
        "excludes the loss",
    ]
    if shape.moe:
        moe_blocks = sum(shape.moe_block(i) for i in range(num_blocks))
        notes.append(
            f"{moe_blocks} of the blocks are mixtures of experts: a router, top-{shape.top_k} "
            f"of {shape.experts} experts of width {shape.expert_ffn}"
            + (f" and shared experts of width {shape.shared_ffn}" if shape.shared_ffn else "")
            + ", every expert on this device (no expert parallelism)")
    if shape.mla or shape.sliding_window or shape.mtp_layers:
        notes.append("multi-head latent attention, sliding windows and MTP modules are "
                     "measured as the standard attention of the same heads and no MTP")
    itemsize = torch.empty((), dtype=dtype).element_size()
    return ModelPlan(
        name=name,
        seq_len=shape.seq_len,
        layer_names=names,
        build_layer=build,
        make_input=make_input,
        param_dtype_bytes=itemsize,
        global_batch=global_batch,
        hidden_size=shape.hidden,
        num_blocks=num_blocks,
        memory_need=lambda sizes: host_memory.probe_need(shape, sizes, itemsize),
        shape=shape,
        experts=shape.experts if shape.moe else None,
        top_k=shape.top_k if shape.moe else None,
        notes=notes,
    )


def layer_param_counts(shape: ModelShape) -> list[int]:
    """Parameters of each layer [embedding, blocks..., head] as _torch_layers builds them
    (matrices and tables; norms and biases left out, so a floor)."""
    d, hd = shape.hidden, shape.head_dim
    attn = d * (shape.heads + 2 * shape.kv_heads) * hd + shape.heads * hd * d
    mats = 3 if shape.gated_mlp else 2
    moe = d * shape.experts + mats * d * (shape.experts * shape.expert_ffn + shape.shared_ffn)
    pos = 0 if shape.gated_mlp else shape.seq_len * d
    blocks = [attn + (moe if shape.moe_block(i) else mats * d * shape.ffn)
              for i in range(shape.num_blocks)]
    return [shape.vocab * d + pos, *blocks, shape.vocab * d]


def param_count(shape: ModelShape) -> int:
    """Parameters of [embedding, blocks, head] as _torch_layers builds them (biases ignored)."""
    return sum(layer_param_counts(shape))


def _warn_if_large(plan: ModelPlan, shape: ModelShape, device: str) -> None:
    if device != "cpu" or plan.name in CPU_DEMO_MODELS:
        return
    params = param_count(shape)
    # a model (a Hugging Face config, say) no larger than the demo's runs as fast as it
    if params * (plan.seq_len or 1) <= DEMO_WORK * param_count(MODELS[CPU_DEMO_MODEL]) * (
            MODELS[CPU_DEMO_MODEL].seq_len):
        return
    plan.warnings.append(
        f"model {plan.name} has ~{params / 1e9:.2g}B parameters and sequence length "
        f"{plan.seq_len}: a CPU probe of its {len(plan.layer_names)} layers can take a long "
        f"time and a lot of memory; {CPU_DEMO_MODEL} is the CPU demo size, --seq-len shortens "
        "the sequence"
    )


def plan_preset(name: str, device: str, dtype: Any, seq_len: int | None = None) -> ModelPlan:
    import_torch("probe")
    from pptune.probe import _torch_layers as tl

    if name not in MODELS:
        raise BadInput(
            f"--model {name!r} is not a preset; choose one of {', '.join(MODELS)} "
            "(or give --hf-config PATH / --module pkg.mod:factory)"
        )
    shape = with_seq_len(MODELS[name], seq_len)
    dropout_p = tl.GPT_DROPOUT if shape.dropout else 0.0
    plan = _transformer_plan(shape, dropout_p, device, dtype, shape.global_batch)
    _warn_if_large(plan, shape, device)
    return plan


def plan_hf_config(path: Path, device: str, dtype: Any, seq_len: int | None = None) -> ModelPlan:
    """A stack of standard decoder blocks shaped like a Hugging Face config.json."""
    import_torch("probe")
    from pptune.costs.modelspec import read_hf_config

    hf = read_hf_config(path, seq_len, seq_cap=HF_SEQ_LEN_CAP)
    shape = hf.shape
    plan = _transformer_plan(shape, hf.dropout_p, device, dtype, None)
    plan.notes.extend(hf.notes)
    plan.notes.append(f"shape from --hf-config {path}")
    _warn_if_large(plan, shape, device)
    return plan


def plan_module(spec: str, device: str, seq_len: int | None = None) -> ModelPlan:
    """User layers from ``pkg.mod:factory`` (contract in this module's docstring)."""
    torch = import_torch("probe")
    modname, sep, attr = spec.partition(":")
    if not sep or not modname or not attr:
        raise BadInput(f"--module expects 'package.module:factory', got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(modname)
    except ImportError as exc:
        raise BadInput(f"--module {spec}: cannot import {modname}: {exc}") from None
    except Exception as exc:  # the user's module raised while importing
        raise BadInput(f"--module {spec}: importing {modname} raised {ranks.one_line(exc)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BadInput(f"--module {spec}: {modname} has no callable {attr!r}")
    try:
        result = factory()
    except Exception as exc:
        raise BadInput(f"--module {spec}: {attr}() raised {ranks.one_line(exc)}") from None
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise BadInput(
            f"--module {spec}: {attr}() must return (list_of_layers, sample_input), "
            f"got {type(result).__name__}"
        )
    layers, sample = result
    if not isinstance(layers, list | tuple) or not layers:
        raise BadInput(f"--module {spec}: the layer list is empty or not a list")
    for i, layer in enumerate(layers):
        if not isinstance(layer, torch.nn.Module):
            raise BadInput(
                f"--module {spec}: layer {i} is a {type(layer).__name__}, not a torch.nn.Module"
            )
    if not isinstance(sample, torch.Tensor) or sample.dim() < 1:
        raise BadInput(
            f"--module {spec}: the sample input must be a tensor with a batch dimension (dim 0)"
        )
    floats = [p for layer in layers for p in layer.parameters() if p.is_floating_point()]
    itemsize = floats[0].element_size() if floats else sample.element_size()
    sample = sample.detach().to(device)
    layer_list = list(layers)

    def build(i: int) -> Any:
        return layer_list[i].to(device)

    def make_input(b: int) -> Any:
        return sample.repeat(b, *([1] * (sample.dim() - 1)))

    names = [f"{i}.{type(layer).__name__}" for i, layer in enumerate(layer_list)]
    return ModelPlan(
        name=spec,
        seq_len=seq_len or (int(sample.shape[1]) if sample.dim() >= 2 else 1),
        layer_names=names,
        build_layer=build,
        make_input=make_input,
        param_dtype_bytes=itemsize,
        notes=[f"layers from --module {spec}: {len(names)} layers, sample {list(sample.shape)}"],
    )


