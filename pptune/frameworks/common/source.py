"""Turn a config file into text and plain data, raising only ``BadInput``.

Every guard here answers a way a file handed to CI can be wrong: too big,
binary, not UTF-8, empty, nested past reason, or (YAML) built from aliases
that expand into far more data than the file holds ("billion laughs").
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import yaml

from pptune.errors import BadInput
from pptune.files import read_limited

# Training configs are kilobytes (DeepSpeed and torchtitan ~2-5 KB, Megatron-LM
# launch scripts ~10 KB). 1 MiB is a hundred times that, and the most
# key-dense 1 MiB YAML still parses in a few seconds; at 10 MB that takes
# tens of seconds, too long for a CI check that should fail fast.
MAX_BYTES = 1024 * 1024
# DeepSpeed's deepest sections (zero_optimization.offload_param) are three
# levels down; 32 leaves room and keeps pydantic and our walkers shallow.
MAX_DEPTH = 32


class Refused(BadInput):
    """A guard (alias, nesting, digits) fired: the file is refused whatever its format."""


def read_text(path: Path) -> str:
    """The file's text (UTF-8, BOM allowed); BadInput naming the file otherwise."""
    data = read_limited(path, "config file", MAX_BYTES)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise BadInput(
            f"{path} looks like a binary file (NUL byte at offset {nul}); expected a text "
            "config (JSON, YAML, TOML or a Megatron-LM launch script)"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8"
        ) from None
    if not text.strip():
        raise BadInput(f"{path} is empty; expected a training config")
    return text


def parse_json(text: str, name: str) -> Any:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{name} is not valid JSON: {exc.msg.removesuffix(' at')} at line {exc.lineno} "
            f"column {exc.colno}"
        ) from None
    except RecursionError:
        raise Refused(_too_deep(name)) from None
    except ValueError as exc:  # e.g. an integer literal with thousands of digits
        raise BadInput(f"{name} is not valid JSON: {_first_line(exc)}") from None
    check_depth(data, name)
    return data


def parse_toml(text: str, name: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{name} is not valid TOML: {_first_line(exc)}") from None
    except RecursionError:
        raise Refused(_too_deep(name)) from None
    except ValueError as exc:
        raise BadInput(f"{name} is not valid TOML: {_first_line(exc)}") from None
    check_depth(data, name)
    return data


class _AliasFound(Exception):
    def __init__(self, anchor: str, line: int) -> None:
        super().__init__(anchor)
        self.anchor = anchor
        self.line = line


class _NoAliasLoader(yaml.SafeLoader):
    """Pure-Python SafeLoader that refuses aliases (used without libyaml)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise _AliasFound(str(event.anchor), event.start_mark.line + 1)
        return super().compose_node(parent, index)


_FAST_LOADER = getattr(yaml, "CSafeLoader", None)


def _prescan(text: str, name: str) -> None:
    """Walk libyaml's events (iteratively) before anything recursive sees them.

    Aliases (``*name``, ``<<: *name``) share one object many times over: a
    few lines can stand for gigabytes once walked. Deep nesting would recurse
    in the composer. Configs need neither, so both are refused here.
    """
    depth = 0
    for event in yaml.parse(text, Loader=_FAST_LOADER or yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            mark = event.start_mark
            raise _AliasFound(str(event.anchor), mark.line + 1 if mark is not None else 0)
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise Refused(_too_deep(name))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def parse_yaml(text: str, name: str) -> Any:
    """YAML via libyaml when present (about five times faster), else pure Python."""
    try:
        if _FAST_LOADER is not None:
            _prescan(text, name)
            data = yaml.load(text, Loader=_FAST_LOADER)  # a SafeLoader: no tags, no objects
        else:
            data = yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except _AliasFound as exc:
        raise Refused(
            f"{name} line {exc.line}: YAML alias *{exc.anchor[:40]} is not supported; "
            "write the value out in full"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or _first_line(exc)
        context = getattr(exc, "context", None)
        problem = f"{context}, {problem}" if context else problem
        raise BadInput(f"{name} is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise Refused(_too_deep(name)) from None
    except ValueError as exc:  # an integer with thousands of digits, a bad date
        raise BadInput(f"{name} is not valid YAML: {_first_line(exc)}") from None
    check_depth(data, name)
    return data


def check_depth(data: Any, name: str) -> None:
    """BadInput when lists / mappings nest deeper than MAX_DEPTH (iterative walk)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise Refused(_too_deep(name))
        stack.extend((child, depth + 1) for child in children)


def _size(count: int) -> str:
    return f"{count:,} bytes"


def _too_deep(name: str) -> str:
    return (
        f"{name} nests lists or mappings more than {MAX_DEPTH} levels deep; "
        "a training config is a few levels: check the file is the right one"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    if text and "integer string conversion" in text[0]:  # Python's 4300-digit guard
        return "a number with thousands of digits; expected counts like 8 or 512"
    return text[0][:200] if text else type(exc).__name__


def json_like(text: str) -> bool:
    """Whether the text starts like JSON (an object or an array)."""
    return text.lstrip()[:1] in ("{", "[")
