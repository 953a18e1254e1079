"""The per-layer costs check-config predicts with: the config's profile, else
analytic costs of its model on its GPU (findings say what was assumed)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pptune.costmodel import presets
from pptune.costmodel.search import CostTable
from pptune.costs.modelspec import from_hf_config, from_sizes, with_seq_len
from pptune.costs.resolve import analytic_costs, measured_costs
from pptune.errors import PptuneError
from pptune.schemas import TrainingConfig

if TYPE_CHECKING:
    from pptune.check.rules import CheckOptions


def costs(cfg: TrainingConfig, base_dir: Path, opts: CheckOptions, add: Any) -> tuple[CostTable | None, str]:
    """The config's per-layer costs: its profile, else analytic costs of its model.

    A profile named in the config is relative to the config's folder; one
    given on the command line (``opts.profile``) comes resolved by the CLI.
    """
    profile_path = opts.profile or (Path(cfg.profile) if cfg.profile else None)
    try:
        if profile_path is not None:
            path = profile_path if profile_path.is_absolute() else base_dir / profile_path
            return measured_costs(path, cfg.tp * cfg.cp), f"profile {path}"
        found = _analytic(cfg, base_dir, opts, add)
        if found is None:
            return None, "none"
        table, origin = found
    except PptuneError as exc:
        add("costs-unavailable", "error", f"cannot build costs: {exc}")
        return None, "none"
    return table, origin


def _analytic(
    cfg: TrainingConfig, base_dir: Path, opts: CheckOptions, add: Any
) -> tuple[CostTable, str] | None:
    shape = None
    name = opts.model or cfg.model
    if name is not None:
        from pptune.costs.profiles import model_preset

        shape = with_seq_len(model_preset(name), cfg.seq_len)
    elif cfg.hf_config:
        hf = Path(cfg.hf_config)
        shape = from_hf_config(hf if hf.is_absolute() else base_dir / hf, cfg.seq_len)
    elif cfg.num_layers and cfg.hidden_size and cfg.num_heads and cfg.seq_len:
        shape = from_sizes(cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.seq_len,
                           kv_heads=cfg.num_kv_heads, ffn=cfg.ffn_hidden_size,
                           vocab=cfg.vocab_size, gated=cfg.gated_mlp)
    if shape is None:
        add("model-unknown", "warning",
            "no model (preset, hf_config, profile, or layer/hidden/head/seq sizes) in the "
            "config: memory, bubble and step time are not checked; pass --model or --profile")
        return None
    if cfg.num_layers is not None and cfg.num_layers != shape.num_blocks:
        add("layers-from-config", "info",
            f"using the config's {cfg.num_layers} layers instead of {shape.num_blocks}")
        shape = replace(shape, num_blocks=cfg.num_layers)
    gpu = opts.gpu or cfg.gpu
    if gpu is None:
        gpu = presets.DEFAULT_GPU
        add("gpu-assumed", "warning",
            f"no GPU named; predictions assume {gpu} (set gpu: or pass --gpu)", gpu=gpu)
    if shape.heads % cfg.tp:
        add("tp-heads", "error",
            f"tp {cfg.tp} does not divide the {shape.heads} attention heads", tp=cfg.tp)
        return None
    sizes = sorted({1, 2, 4, 8, cfg.micro_batch_size})
    attention = cfg.attention or "flash"  # not stated: the per-op model's default
    table, _ = analytic_costs(shape, gpu, sizes, tp=cfg.tp, sequence_parallel=cfg.sequence_parallel,
                              table_tp=cfg.tp * cfg.cp, attention=attention)
    return table, f"analytic {shape.name} on {gpu}, {attention} attention"
