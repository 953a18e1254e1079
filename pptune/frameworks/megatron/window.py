"""Megatron-LM's sliding-window attention: ``--window-size LEFT,RIGHT`` and
``--window-attn-skip-freq``.

megatron-core's ``is_layer_window_attention`` (megatron/core/transformer/utils.py,
layer numbers from 1): no window without ``--window-size``; every layer windowed
without a skip frequency; an integer N windows the layers whose number is not a
multiple of N (one full-attention layer after N - 1 windowed ones); a list marks
each layer, 1 windowed and 0 full. A query attends to the LEFT keys before it
(Transformer Engine's window (left, right); a causal model's right is 0), as
GPT-OSS's ``--window-size 128,0`` does for Hugging Face's ``sliding_window`` 128.
"""

from __future__ import annotations

import re
from typing import Any

from pptune.frameworks.megatron.flags import FlagReader
from pptune.frameworks.megatron.moe import eval_pattern
from pptune.limits import MAX_SEQ_LEN

_PAIR = re.compile(r"^\(?\s*(\d+)\s*,\s*(-?\d+)\s*\)?$")


def read_window(r: FlagReader, fields: dict[str, Any]) -> None:
    """``sliding_window`` and ``full_attention_every`` from the two flags."""
    text = r.text("--window-size")
    if text is None:
        if r.flags.has("--window-attn-skip-freq"):
            r.ctx.note("--window-attn-skip-freq ignored without --window-size (no window, "
                       "as megatron-core does)")
        return
    match = _PAIR.match(text.strip())
    if match is None or not 1 <= int(match.group(1)) <= MAX_SEQ_LEN:
        raise r.ctx.bad(f"--window-size {text[:40]!r}; expected LEFT,RIGHT such as 128,0 "
                        f"(LEFT from 1 to {MAX_SEQ_LEN:,})")
    fields["sliding_window"] = int(match.group(1))
    freq = (r.text("--window-attn-skip-freq") or "").strip()
    if not freq:
        return  # every layer windowed
    if freq.isdigit():
        fields["full_attention_every"] = int(freq) if int(freq) > 1 else None
        if int(freq) <= 1:
            fields["sliding_window"] = None  # every layer's number is a multiple of 1
        return
    pattern = eval_pattern(r, freq, "--window-attn-skip-freq")
    full = [i for i, windowed in enumerate(pattern) if not windowed]
    every = full[0] + 1 if full else 0
    if full and all(bool(w) == ((i + 1) % every != 0) for i, w in enumerate(pattern)):
        fields["full_attention_every"] = every
        return
    if not full:
        return
    r.ctx.unmodelled("megatron-unmodelled-flag",
                     f"--window-attn-skip-freq {freq[:40]} places full-attention layers "
                     "irregularly; pptune prices every layer with full attention")
    fields["sliding_window"] = None
