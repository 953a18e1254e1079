"""Whether a profile can price a config: the model and GPU it holds against the config's.

A calibrated profile (``pptune calibrate --run``) holds factors fitted to jobs
of one model on one GPU type; a measured one (``pptune probe``) holds the
costs of the model it measured. Either prices a config only when the config
trains that model: where the config states a model (a preset, an
``hf_config``, or its layer, hidden and head sizes) whose shape is not the
profile's, pricing the profile's model instead would answer for a job the
config does not describe. recommend refuses ``--model``, ``--hf-config`` and
``--gpu`` beside a calibrated profile for the same reason; check-config
refuses them too, and a config of another model or (calibrated) another GPU.
A config that names no model (a DeepSpeed JSON) is priced as the profile's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pptune.costmodel.presets import ModelShape
from pptune.costs import calibrated
from pptune.costs.profiles import DEFAULT_PROFILE_FILE
from pptune.errors import PptuneError
from pptune.options import CostOptions
from pptune.schemas import Profile, TrainingConfig, load_profile


def describe(shape: ModelShape, seq_len: int | None = None) -> str:
    """A model by name and the sizes that tell models apart (and a sequence length)."""
    moe = f", {shape.experts} experts" if shape.moe else ""
    seq = f", sequence {seq_len}" if seq_len is not None else ""
    return (f"{shape.name} ({shape.num_blocks} layers, hidden {shape.hidden}, "
            f"{shape.heads} heads{moe}{seq})")


def same_model(a: ModelShape, b: ModelShape) -> bool:
    """One model at any sequence length: every size that changes its costs alike."""
    return _sizes(a) == _sizes(b)


def _sizes(s: ModelShape) -> tuple[object, ...]:
    return (s.num_blocks, s.hidden, s.heads, s.kv_heads, s.ffn, s.vocab, s.experts, s.top_k,
            s.expert_ffn)


def problem(cfg: TrainingConfig, stated: ModelShape | None, flags: CostOptions, prof: Profile,
            where: str) -> str | None:
    """Why ``prof`` (named ``where``, e.g. ``--profile cal.json``) cannot price ``cfg``,
    whose model is ``stated`` (``check.costs.stated_model``; None: it names none); None
    when it can (module docstring)."""
    cal = prof.calibration
    if cal is not None:
        named = [f for f, v in (("--model", flags.model), ("--hf-config", flags.hf_config),
                                ("--gpu", flags.gpu)) if v is not None]
        if named:
            return (f"{' and '.join(named)}: the costs come from {where}, calibrated for "
                    f"{cal.model.get('name')} on {cal.gpu}; drop {'/'.join(named)} or the "
                    "profile (a calibration holds for its model and GPU)")
        if cfg.gpu is not None and cfg.gpu != cal.gpu:
            return (f"{where} is calibrated on {cal.gpu}, but the config runs on {cfg.gpu}: a "
                    "calibration holds for its model and GPU; calibrate on a job on "
                    f"{cfg.gpu}, or drop the profile to price it analytically")
    if stated is None:
        return None
    if cal is not None:
        ours = calibrated.shape(cal, cfg.seq_len)
        if same_model(ours, stated):
            return None
        return (f"{where} is calibrated for {describe(ours)}, but the config trains "
                f"{describe(stated)}: a calibration holds for its model and GPU; calibrate on "
                "a job of this model, or drop the profile to price it analytically (--gpu)")
    m = prof.model
    pairs = (("layers", m.num_blocks, stated.num_blocks),
             ("hidden", m.hidden_size, stated.hidden), ("experts", m.experts or 0, stated.experts),
             ("sequence", m.seq_len, cfg.seq_len))
    if all(ours_v is None or theirs is None or ours_v == theirs for _, ours_v, theirs in pairs):
        return None
    sizes = ", ".join(f"{w} {v}" for w, v, _ in pairs if v)
    return (f"{where} holds the costs of {m.name} ({sizes}), but the config trains "
            f"{describe(stated, cfg.seq_len)}: a profile prices the model it measured, at its "
            "sequence length; probe this model (pptune probe), or drop the profile to price "
            "it analytically (--gpu)")


def found_here(add: Any) -> None:
    """A warning that the costs are the working folder's ./pptune-profile.json, which
    neither the config nor a flag names: a probe's file left there prices any config
    that states no model, whatever model and device it measured."""
    try:
        prof = load_profile(Path.cwd() / DEFAULT_PROFILE_FILE)
    except PptuneError:
        return
    add("profile-from-folder", "warning",
        f"costs from ./{DEFAULT_PROFILE_FILE} in the working folder ({prof.source} of "
        f"{prof.model.name} on {prof.device.name}), which neither the config nor a flag "
        "names: check it measured this job, or pass --profile, --model or --hf-config",
        model=prof.model.name, device=prof.device.name)


def named_profile(cfg: TrainingConfig, base_dir: Path, flags: CostOptions,
                  given: Profile | None = None) -> Profile | None:
    """The profile that prices ``cfg``: ``given`` (calibrate's own), else the file
    ``--profile`` or the config names (a relative one from ``base_dir``), else None;
    PptuneError when that file cannot be read."""
    path = flags.profile or (Path(cfg.profile) if cfg.profile else None)
    if given is not None or path is None:
        return given
    return load_profile(path if path.is_absolute() else base_dir / path)
