"""``read_config``: any supported training config -> TrainingConfig, with notes.

Formats and how each is recognised from its content (``format_in``
overrides the guess):

- deepspeed: JSON (or YAML) with a DeepSpeed batch or ZeRO key;
- torchtitan: TOML with a [parallelism] table, or [training] and [model];
- megatron: text with a ``pretrain_*.py`` launch or lines of Megatron-LM flags;
- pptune: a YAML, TOML or JSON mapping with TrainingConfig's keys.

Flags (``pp``, ``gpus``, ``tp``) fill only what the file does not state; a
flag that disagrees with the file is ignored with a note, so check-config
judges the config that will actually run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from pptune.configs.deepspeed import DEEPSPEED_KEYS, read_deepspeed
from pptune.configs.fields import Ctx, Semantics, check_flags, show
from pptune.configs.frameworks import Versions, version_tuple
from pptune.configs.megatron import looks_like_megatron, read_megatron
from pptune.configs.own import read_own
from pptune.configs.source import Refused, parse_json, parse_toml, parse_yaml, read_text
from pptune.configs.torchtitan import looks_like_torchtitan, read_torchtitan
from pptune.errors import BadInput
from pptune.schemas import TrainingConfig


class ConfigFormat(str, Enum):
    PPTUNE = "pptune"
    DEEPSPEED = "deepspeed"
    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"


FORMAT_NAMES = "|".join(f.value for f in ConfigFormat)


@dataclass
class ReadResult:
    config: TrainingConfig
    format: ConfigFormat
    notes: list[str] = field(default_factory=list)  # inferred or ignored, one line each
    semantics: Semantics = field(default_factory=Semantics)


def read_config(
    path: Path | str,
    format_in: ConfigFormat | str | None = None,
    *,
    pp: int | None = None,
    gpus: int | None = None,
    tp: int | None = None,
    framework_versions: list[str] | None = None,
) -> ReadResult:
    """Read a training config; BadInput (one line, naming the file) on any problem.

    ``pp``, ``gpus`` and ``tp`` are the user's flag values. Each fills the
    field only when the file does not state it (DeepSpeed JSON never states
    the GPU count and rarely the pipeline size; a Megatron-LM script may
    leave ``$PP`` to the environment, which counts as not stated); when the
    file does state it, the file wins and a note says the flag was ignored,
    so check-config judges the run the file describes.

    Values that are valid one by one but disagree (gpus != tp * pp * dp, a
    batch that GA steps do not make) are carried as stated for the checks to
    report; only what cannot be represented (zero or negative counts, text
    or decimals where whole numbers belong, splits the framework itself
    refuses) raises BadInput.
    """
    path = Path(path)
    wanted = _format(format_in)
    ctx = Ctx(name=str(path), flags=check_flags(pp, gpus, tp))
    text = read_text(path)
    fmt, data = (wanted, _parse_as(wanted, text, path)) if wanted else _detect(text, path)
    ctx.semantics.versions = parse_versions(framework_versions or [], fmt)
    if fmt is ConfigFormat.MEGATRON:
        config = read_megatron(text, ctx)
    else:
        if not isinstance(data, dict):
            raise ctx.bad(
                f"the top level is {_kind(data)}; expected a mapping of keys "
                f"(e.g. micro_batch_size: 1) for the {fmt.value} format"
            )
        readers = {ConfigFormat.PPTUNE: read_own, ConfigFormat.DEEPSPEED: read_deepspeed,
                   ConfigFormat.TORCHTITAN: read_torchtitan}
        config = readers[fmt](data, ctx)
    return ReadResult(config=config, format=fmt, notes=ctx.notes, semantics=ctx.semantics)


_VERSION_KEYS = {"deepspeed": "deepspeed", "megatron": "megatron", "megatron-core": "megatron",
                 "torchtitan": "torchtitan", "torch": "torch"}


def parse_versions(values: list[str], fmt: ConfigFormat) -> Versions:
    """``--framework-version`` values: ``NAME=VERSION`` (deepspeed, megatron-core,
    torchtitan, torch) or a bare version for the config's own framework."""
    chosen: dict[str, str] = {}
    for value in values:
        name, eq, version = value.partition("=")
        if not eq:
            name, version = fmt.value, value
        key = _VERSION_KEYS.get(name.strip().lower())
        if key is None:
            raise BadInput(f"--framework-version {show(value)}: expected NAME=VERSION with NAME "
                           f"one of {', '.join(_VERSION_KEYS)}, or a bare version for the "
                           "config's framework")
        try:
            version_tuple(version)
        except ValueError:
            raise BadInput(f"--framework-version {show(value)}: the version must be dotted "
                           "numbers such as 0.2.2") from None
        chosen[key] = version.strip().lstrip("v")
    return Versions(**chosen)


def _format(value: ConfigFormat | str | None) -> ConfigFormat | None:
    if value is None or isinstance(value, ConfigFormat):
        return value
    try:
        return ConfigFormat(str(value).strip().lower())
    except ValueError:
        raise BadInput(f"--format-in {show(value)} is unknown; expected one of "
                       f"{FORMAT_NAMES}") from None


def _kind(data: Any) -> str:
    if isinstance(data, list):
        return "a list"
    if isinstance(data, str):
        return "a single string"
    return f"a single value ({show(data)})"


def _parse_as(fmt: ConfigFormat, text: str, path: Path) -> Any:
    name = str(path)
    if fmt is ConfigFormat.MEGATRON:
        return None
    if fmt is ConfigFormat.TORCHTITAN:
        return parse_toml(text, name)
    if fmt is ConfigFormat.DEEPSPEED:
        return parse_json(text, name) if _json_like(text) else parse_yaml(text, name)
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return parse_toml(text, name)
    if suffix == ".json" or _json_like(text):
        return parse_json(text, name)
    return parse_yaml(text, name)


def _json_like(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def _detect(text: str, path: Path) -> tuple[ConfigFormat, Any]:
    """Guess the format from the content; parse errors are kept for the final message."""
    name = str(path)
    if _json_like(text):
        try:
            data = parse_json(text, name)
        except Refused:
            raise
        except BadInput as exc:
            json_error: BadInput | None = exc
        else:
            return _classify_mapping(data, name, "JSON")
    else:
        json_error = None
    try:
        table = parse_toml(text, name)
    except Refused:
        raise
    except BadInput:
        pass
    else:
        if looks_like_torchtitan(table):
            return ConfigFormat.TORCHTITAN, table
        if _own_keys(table):
            return ConfigFormat.PPTUNE, table
    if looks_like_megatron(text):
        return ConfigFormat.MEGATRON, None
    yaml_error: BadInput | None = None
    data = None
    try:
        data = parse_yaml(text, name)
    except BadInput as exc:
        yaml_error = exc
    else:
        if isinstance(data, dict) and (_deepspeed_keys(data) or _own_keys(data)):
            return _classify_mapping(data, name, "YAML")
    if isinstance(yaml_error, Refused):
        raise yaml_error
    if json_error is not None:
        raise json_error  # it starts like JSON: the JSON error is the useful one
    if yaml_error is not None and _YAML_KEY.search(text):
        raise yaml_error  # it has "key: value" lines: the YAML error is the useful one
    if isinstance(data, list):
        raise BadInput(f"{name}: the top level is a list; expected a mapping of config keys "
                       "(e.g. micro_batch_size: 1)")
    raise BadInput(
        f"cannot tell the format of {name}: no DeepSpeed, torchtitan, Megatron-LM or pptune "
        f"keys found; pass --format-in {FORMAT_NAMES}"
    )


_YAML_KEY = re.compile(r"^[A-Za-z_][\w.-]*\s*:(?:\s|$)", re.MULTILINE)


def _classify_mapping(data: Any, name: str, syntax: str) -> tuple[ConfigFormat, Any]:
    if not isinstance(data, dict):
        raise BadInput(f"{name}: the top level is {_kind(data)}; expected a {syntax} mapping "
                       "of config keys")
    if _deepspeed_keys(data):
        return ConfigFormat.DEEPSPEED, data
    if _own_keys(data):
        return ConfigFormat.PPTUNE, data
    keys = ", ".join(show(key) for key in list(data)[:5]) or "none"
    raise BadInput(
        f"cannot tell the format of {name}: its {syntax} keys ({keys}) are neither DeepSpeed's "
        f"nor pptune's; pass --format-in {FORMAT_NAMES}"
    )


def _deepspeed_keys(data: dict[Any, Any]) -> bool:
    return any(key in DEEPSPEED_KEYS for key in data if isinstance(key, str))


def _own_keys(data: dict[Any, Any]) -> bool:
    return any(key in TrainingConfig.model_fields for key in data if isinstance(key, str))
