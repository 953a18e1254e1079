"""Reading one key of a Hugging Face config.json: integers in range, per-layer lists and
the period of a per-layer pattern, each refused in one line naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pptune.errors import BadInput
from pptune.limits import MAX_LAYERS

# any one size (hidden, FFN, vocabulary, heads, positions): 2^24 is far above
# every published decoder (vocabularies reach 2^18, FFN widths 2^16)
MAX_HF_SIZE = 1 << 24

Config = dict[str, Any]


def read_int(cfg: Config, keys: tuple[str, ...], path: Path, default: int | None = None,
             cap: int = MAX_HF_SIZE, minimum: int = 1) -> int:
    """The first of ``keys`` the config states (null counts as unstated), else
    ``default``; BadInput when none is stated and there is no default."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise BadInput(f"--hf-config {path}: {key} must be {kind}, got {value!r}")
        if value > cap:
            raise BadInput(f"--hf-config {path}: {key} is {value:,}; pptune takes up to {cap:,}")
        return value
    if default is not None:
        return default
    raise BadInput(f"--hf-config {path}: missing {keys[0]} (a positive integer)")


def read_rank(cfg: Config, key: str, path: Path, default: int) -> int:
    """A rank that may be switched off: an explicit null is 0 (DeepSeek-V2-Lite's
    ``q_lora_rank``: the query projected directly), a missing key ``default``."""
    if key in cfg and cfg[key] is None:
        return 0
    return read_int(cfg, (key,), path, default=default, minimum=0)


def layer_list(cfg: Config, key: str, path: Path) -> list[Any] | None:
    """A per-layer list (``layer_types``, ``moe_layers``), or None when unstated."""
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > 4 * MAX_LAYERS:
        raise BadInput(f"--hf-config {path}: {key} must be a list (one entry per layer), "
                       f"got {type(value).__name__}")
    return value


def regular_period(flags: list[bool]) -> tuple[int, int] | None:
    """(every, offset) with flags[i] == (i % every == offset), (0, 0) when none is set,
    None when they are set irregularly."""
    hits = [i for i, f in enumerate(flags) if f]
    if not hits:
        return 0, 0
    every = hits[1] - hits[0] if len(hits) > 1 else len(flags)
    offset = hits[0] % every
    if any(f != (i % every == offset) for i, f in enumerate(flags)):
        return None
    return every, offset


def period(flags: list[bool], key: str, path: Path, what: str) -> tuple[int, int]:
    """(every, offset) with flags[i] == (i % every == offset), or BadInput."""
    found = regular_period(flags)
    if found is None:
        raise BadInput(f"--hf-config {path}: {key} places {what} irregularly; pptune models "
                       f"one every N layers (e.g. every other layer)")
    return found


def leading_run(flags: list[bool], key: str, path: Path, what: str) -> int:
    """How many leading entries are set, when no later one is (dense layers first)."""
    count = next((i for i, f in enumerate(flags) if not f), len(flags))
    if any(flags[count:]):
        raise BadInput(f"--hf-config {path}: {key} places {what} after other layers; "
                       "pptune models them at the start only")
    return count
