"""What every file model shares: strict parsing, bounded reads, one-line errors,
whole-or-nothing writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
)

from pptune.errors import BadInput

if TYPE_CHECKING:
    from pptune.files import Written


def _drop_zeros(doc: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A dense BF16 model's files stay as they were: its zero (or unset)
    mixture-of-experts and FP8 fields are left out (they default when read)."""
    for key in keys:
        if key in doc and doc[key] in (0.0, None):
            del doc[key]
    return doc


class Strict(BaseModel):
    # NaN and infinity are refused in every file pptune reads or writes: JSON has no such numbers
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False, defer_build=True)




# profile and plan files: a 4,096-layer profile with eight micro-batch sizes is
# about 8 MiB of JSON
MAX_JSON_FILE_BYTES = 64 << 20


# pptune's JSON files by the top-level keys that tell each apart (a file holding all of
# one kind's keys is that kind): what a file given in the wrong place is called
KINDS: tuple[tuple[str, frozenset[str], str], ...] = (
    ("plan", frozenset({"plans", "request"}), "a plan file (pptune recommend -o)"),
    ("profile", frozenset({"layers", "device", "links"}),
     "a profile (pptune probe / calibrate)"),
    ("report", frozenset({"findings", "exit_code"}),
     "a check-config report (pptune check-config --output json)"),
    ("trace", frozenset({"traceEvents"}), "a trace (pptune simulate --trace, or a profiler's)"),
)


def other_kind(data: Any, what: str) -> str | None:
    """``data``'s kind where it is one of pptune's files other than ``what`` (KINDS), said
    as "this is X, not Y"; None where it is not, or is a ``what`` (its field errors then
    say what is wrong with it)."""
    if not isinstance(data, dict):
        return None
    found = next((said for name, keys, said in KINDS if keys <= data.keys()), None)
    wanted = next((said for name, keys, said in KINDS if name == what), None)
    if found is None or wanted is None or found == wanted:
        return None
    return f"this is {found}, not {wanted}"


def load_json_model(path: Path, model: type[Strict], what: str) -> Any:
    """Read and validate a JSON file; BadInput with one line on any problem (a pptune
    file of another kind named as such: ``other_kind``)."""
    from pptune.files import loads_json, read_limited

    raw = read_limited(Path(path), f"{what} file", MAX_JSON_FILE_BYTES)
    try:
        data = loads_json(raw.decode("utf-8-sig"), f"{what} file {path}", f"a {what}")
    except UnicodeDecodeError:
        raise BadInput(f"{what} file {path} is not UTF-8 text; expected JSON") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} file {path} is not valid JSON: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        kind = other_kind(data, what)
        if kind is not None:
            raise BadInput(f"{what} file {path}: {kind}") from None
        raise BadInput(f"{what} file {path} is invalid: {one_line(exc)}") from None
    except RecursionError:
        raise BadInput(f"{what} file {path}: JSON nested too deeply to be a {what}") from None


def one_line(exc: ValidationError) -> str:
    """All pydantic errors of a ValidationError, joined on one line."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def write_atomic(path: Path, text: str) -> Written:
    """Write ``text`` to ``path`` whole or not at all (``pptune.files.write_text``:
    regular files only; a symlink's target is written, never the link; a file
    replaced keeps its permission bits and the answer says it was replaced)."""
    from pptune.files import write_text

    return write_text(Path(path), text)


