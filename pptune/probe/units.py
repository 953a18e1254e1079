"""Byte sizes as people type and read them (binary units, as nccl-tests' -b/-e use)."""

from __future__ import annotations

import re

from pptune.errors import BadInput
from pptune.limits import MAX_PROBE_BYTES

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_bytes(text: str, knob: str = "--max-bytes") -> int:
    """'4096', '64K', '64M', '256MiB', '1G' -> bytes (K = 1024)."""
    match = _SIZE.match(str(text))
    if not match:
        raise BadInput(f"{knob}: cannot read {text!r} as a size; give bytes or e.g. 64M, 1G")
    value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value > MAX_PROBE_BYTES:
        raise BadInput(f"{knob} {text}: at most {MAX_PROBE_BYTES >> 30} GiB (nccl-tests' own "
                       "sweeps end at 8-16 GiB); give a smaller size")
    return value

