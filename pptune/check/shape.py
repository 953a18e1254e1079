"""The model a config describes, as check-config prices it: ``--model``, then
``--hf-config``, then the file's own model, hf_config or layer sizes; what the file
states over the model's (layers, MTP layers, expert settings), each said in a finding,
and a warning where the file's sizes are not the model's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pptune.check.experts import dropout_unpriced, stated_shape
from pptune.costmodel.presets import ModelShape
from pptune.costs.modelspec import from_sizes, read_hf_config, with_seq_len
from pptune.errors import BadInput
from pptune.schemas import TrainingConfig

SIZES = (("hidden_size", "hidden"), ("num_heads", "heads"), ("num_kv_heads", "kv_heads"),
         ("ffn_hidden_size", "ffn"))


def size_conflicts(cfg: TrainingConfig, shape: ModelShape) -> list[str]:
    """The sizes the file states that the model it is priced as does not have, each as
    ``hidden_size 8192 (the model: 4096)`` (the layer count is the file's either way)."""
    return [f"{key} {getattr(cfg, key)} (the model: {getattr(shape, attr)})"
            for key, attr in SIZES
            if getattr(cfg, key) is not None and getattr(cfg, key) != getattr(shape, attr)]


def _sizes_agree(cfg: TrainingConfig, shape: ModelShape, add: Any) -> None:
    """A warning when the file states sizes the model it is priced as does not have (a
    --model or --hf-config for another model, or a size Megatron-LM derives otherwise)."""
    differ = size_conflicts(cfg, shape)
    if differ:
        add("model-mismatch", "warning",
            f"the file states {', '.join(differ)}: priced as {shape.name}, whose sizes these "
            "are not; name the model the file trains (--model, --hf-config) or fix the file")


def config_shape(cfg: TrainingConfig, base_dir: Path, model: str | None,
                  add: Any, hf_config: Path | None = None) -> ModelShape | None:
    """The model the config describes (``--model``, then ``--hf-config`` first), or None."""
    shape = None
    name = model or (None if hf_config is not None else cfg.model)
    if name is not None:
        from pptune.costs.names import model_preset

        shape = with_seq_len(model_preset(name), cfg.seq_len)
        if cfg.seq_len is None:  # a DeepSpeed config states none, a torchtitan one may not
            add("seq-len-assumed", "info", f"sequence length {shape.seq_len:,} from the "
                f"{name} preset: the file states none; --seq-len sets the run's")
    elif hf_config is not None or cfg.hf_config:
        hf = hf_config or Path(str(cfg.hf_config))
        try:
            read = read_hf_config(hf if hf.is_absolute() else base_dir / hf, cfg.seq_len)
        except BadInput as exc:  # the file's key, not the flag, named the config.json
            if hf_config is not None:
                raise
            raise BadInput(str(exc).replace("--hf-config", "the config's hf_config", 1)) from None
        shape = read.shape
        for note in read.notes:  # what the reader assumed, as recommend states it
            add("hf-config-note", "info", f"hf_config {hf.name}: {note}")
    elif cfg.num_layers and cfg.hidden_size and cfg.num_heads and cfg.seq_len:
        shape = from_sizes(cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.seq_len,
                           kv_heads=cfg.num_kv_heads, ffn=cfg.ffn_hidden_size,
                           vocab=cfg.vocab_size, gated=cfg.gated_mlp)
        if cfg.vocab_size is None:  # a tokenizer's, which no file pptune reads states
            add("vocab-assumed", "info", f"vocabulary size not stated (the tokenizer's): "
                f"priced at GPT-2's {shape.vocab:,}; --vocab-size (Megatron-LM), vocab_size "
                "(pptune) or --hf-config sets it")
    mtp = None  # a named model's own MTP layers, before the file's count
    if shape is not None and (name is not None or hf_config is not None or cfg.hf_config):
        _sizes_agree(cfg, shape, add)
        mtp = shape.mtp_layers
    if shape is not None:
        shape = stated_shape(cfg, shape)
    if shape is not None:
        dropout_unpriced(cfg, shape, add)
    if shape is not None and cfg.num_layers is not None and cfg.num_layers != shape.num_blocks:
        add("layers-from-config", "info",
            f"using the config's {cfg.num_layers} layers instead of {shape.num_blocks}")
        shape = replace(shape, num_blocks=cfg.num_layers)
    if shape is not None and mtp is not None and cfg.mtp_layers not in (None, mtp):
        add("mtp-from-config", "info",
            f"using the config's {cfg.mtp_layers} MTP layers instead of {mtp}")
        shape = replace(shape, mtp_layers=cfg.mtp_layers)
    return shape
