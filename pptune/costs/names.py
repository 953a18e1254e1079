"""Model and GPU presets by name: one clear line, naming the preset meant, for a name
that is none of them."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TypeVar

from pptune.costmodel import presets
from pptune.errors import BadInput

T = TypeVar("T")


def _preset(kind: str, table: Mapping[str, T], name: str) -> T:
    try:
        return table[name]
    except KeyError:
        # a name the user shortened or extended (h100, b200-sxm) first, then a near spelling
        low = name.lower()
        close = [k for k in table if k == low or k.startswith(low + "-")
                 or low.startswith(k + "-")][:1] or \
            difflib.get_close_matches(low, list(table), n=1, cutoff=0.88)
        odd = ", ".join(dict.fromkeys(f"{c!r} is U+{ord(c):04X}" for c in name if ord(c) > 127))
        hint = (f" (did you mean {close[0]}?" + (f" {odd}, not ASCII" if odd else "") + ")"
                if close else f" ({odd}, not ASCII)" if odd else "")
        raise BadInput(f"unknown {kind} preset {name!r}{hint}; choose one of: "
                       f"{', '.join(table)}") from None


def model_preset(name: str) -> presets.ModelShape:
    return _preset("model", presets.MODELS, name)


def gpu_preset(name: str) -> presets.GpuSpec:
    return _preset("GPU", presets.GPUS, name)
