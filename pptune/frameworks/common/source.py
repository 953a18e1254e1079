"""Turn a config file into text and plain data, raising only ``BadInput``.

Every guard here answers a way a file handed to CI can be wrong: too big,
binary, not UTF-8, empty, nested past reason, or (YAML) built from aliases
that expand into far more data than the file holds ("billion laughs").
"""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pptune.errors import BadInput
from pptune.files import first_line, read_limited

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


@dataclass(frozen=True)
class Repeated:
    """Keys written more than once in one mapping of a JSON or YAML file (the parser
    keeps the last; whether that is an error is the format's to say)."""

    syntax: str  # "json" or "yaml"
    keys: tuple[Any, ...]  # the mapping's repeated keys, in the order first written
    count: int  # how often the first of them is written
    lines: tuple[int, ...]  # where the first of them is written; () when not known

    def describe(self) -> str:
        """"key 'gpus' is written twice (lines 2 and 4)"."""
        return f"key {_show(self.keys[0])} {self.written()}"

    def written(self, within: str = "") -> str:
        """"is written twice{within} (lines 2 and 4)"."""
        times = "twice" if self.count == 2 else f"{self.count} times"
        where = ""
        if len(set(self.lines)) == 1:
            where = f" (on line {self.lines[0]})"
        elif self.lines:
            head = ", ".join(str(n) for n in self.lines[:-1])
            where = f" (lines {head} and {self.lines[-1]})"
        return f"is written {times}{within}{where}"


def _show(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Undecoded:
    """Bytes that are not UTF-8, all in comment lines, read as U+FFFD: the first one."""

    byte: int
    offset: int
    line: int
    count: int  # how many such bytes the file holds

    def describe(self) -> str:
        more = f" and {self.count - 1} more" if self.count > 1 else ""
        return (f"byte 0x{self.byte:02x} at offset {self.offset} (line {self.line}){more} "
                "is not UTF-8, in comment lines only: read as U+FFFD, which changes nothing "
                "pptune reads; save the file as UTF-8")


def read_text(path: Path, undecoded: list[Undecoded] | None = None) -> str:
    """The file's text (UTF-8, BOM allowed); BadInput naming the file otherwise.

    With ``undecoded``, bytes that are not UTF-8 are allowed in whole-line comments (a
    line whose first non-blank character is ``#``: a comment in a launch script, YAML and
    TOML alike): they are read as U+FFFD and the first is appended there, for a warning.
    A Latin-1 ``# café`` is common in scripts written on other systems, and bash runs
    them; refusing the whole file over text nothing reads surprises more than a warning.
    A byte anywhere else is still refused: pptune cannot tell whether it sits in a flag or
    value it reads (a trailing comment's ``#`` may as well be inside quotes), and reading
    a value other than the one the job gets would be worse than saying so."""
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
        found = _in_comments(data) if undecoded is not None else None
        if found is None:
            raise BadInput(
                f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                f"{exc.start}); save it as UTF-8"
            ) from None
        undecoded.append(found)  # type: ignore[union-attr]
        text = data.decode("utf-8-sig", errors="replace")
    if not text.strip():
        raise BadInput(f"{path} is empty; expected a training config")
    return text


def _in_comments(data: bytes) -> Undecoded | None:
    """The first byte that is not UTF-8, when every such byte is in a whole-line comment
    (``read_text``); None when one is outside a comment."""
    first: Undecoded | None = None
    count = start = 0
    for number, line in enumerate(data.split(b"\n"), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            body = line.lstrip(b" \t")
            if not body.startswith(b"#") and not (number == 1 and body.startswith(
                    b"\xef\xbb\xbf#")):
                return None
            bad = line.decode("utf-8", errors="replace").count("\ufffd")
            if first is None:
                first = Undecoded(line[exc.start], start + exc.start, number, 0)
            count += bad
        start += len(line) + 1
    return None if first is None else Undecoded(first.byte, first.offset, first.line, count)


def parse_json(text: str, name: str, repeated: list[Repeated] | None = None) -> Any:
    """JSON data; each object's repeated keys go to ``repeated`` (the last value is kept)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        data = dict(items)
        if len(data) != len(items) and repeated is not None:
            counts = Counter(key for key, _ in items)
            keys = tuple(key for key, n in counts.items() if n > 1)
            repeated.append(Repeated("json", keys, counts[keys[0]],
                                     _json_lines(text, keys[0], counts[keys[0]])))
        return data

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{name} is not valid JSON: {exc.msg.removesuffix(' at')} at line {exc.lineno} "
            f"column {exc.colno}"
        ) from None
    except RecursionError:
        raise Refused(_too_deep(name)) from None
    except ValueError as exc:  # e.g. an integer literal with thousands of digits
        raise BadInput(f"{name} is not valid JSON: {first_line(exc)}") from None
    check_depth(data, name)
    return data


def _json_lines(text: str, key: str, count: int) -> tuple[int, ...]:
    """The lines ``"key":`` is written on, when it is written exactly ``count`` times in
    the file (else the same key in other objects makes them ambiguous: none)."""
    pattern = re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:"
    found = [text.count("\n", 0, m.start()) + 1 for m in re.finditer(pattern, text)]
    return tuple(found) if len(found) == count else ()


def parse_toml(text: str, name: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{name} is not valid TOML: {first_line(exc)}") from None
    except RecursionError:
        raise Refused(_too_deep(name)) from None
    except ValueError as exc:
        raise BadInput(f"{name} is not valid TOML: {first_line(exc)}") from None
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


def parse_yaml(text: str, name: str, repeated: list[Repeated] | None = None) -> Any:
    """YAML via libyaml when present (about five times faster), else pure Python; each
    mapping's repeated keys go to ``repeated`` (the last value is kept)."""
    data = _guarded(text, name, lambda loader: _load(loader, repeated))
    check_depth(data, name)
    return data


def yaml_node(text: str, name: str) -> yaml.Node | None:
    """The YAML node tree, under parse_yaml's guards: each scalar as written (its text
    and resolved tag), for a reader that must see a value's text as another tool does
    (a launcher that hands yq's text of each value to bash), not as the Python value
    PyYAML's YAML 1.1 rules would type it."""

    def compose(loader: Any) -> Any:
        try:
            return loader.get_single_node()
        finally:
            loader.dispose()

    return _guarded(text, name, compose)  # type: ignore[no-any-return]


def _guarded(text: str, name: str, load: Any) -> Any:
    """``load(loader)`` on a SafeLoader of ``text``: aliases and deep nesting refused
    (``_prescan``), every YAML error one line naming the file."""
    try:
        if _FAST_LOADER is not None:
            _prescan(text, name)
            return load(_FAST_LOADER(text))  # a SafeLoader: no tags, no objects
        return load(_NoAliasLoader(text))  # a SafeLoader subclass
    except _AliasFound as exc:
        raise Refused(
            f"{name} line {exc.line}: YAML alias *{exc.anchor[:40]} is not supported; "
            "write the value out in full"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or first_line(exc)
        context = getattr(exc, "context", None)
        problem = f"{context}, {problem}" if context else problem
        raise BadInput(f"{name} is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise Refused(_too_deep(name)) from None
    except ValueError as exc:  # an integer with thousands of digits, a bad date
        raise BadInput(f"{name} is not valid YAML: {first_line(exc)}") from None


def _load(loader: Any, repeated: list[Repeated] | None) -> Any:
    """``yaml.load`` in two steps: the node tree, its repeated keys, then the data."""
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if repeated is not None:
            _find_repeats(loader, node, repeated)
        return loader.construct_document(node)
    finally:
        loader.dispose()


_MERGE = "tag:yaml.org,2002:merge"


def _find_repeats(loader: Any, root: yaml.Node, repeated: list[Repeated]) -> None:
    """Each mapping's scalar keys written more than once (a ``<<`` merge is not one)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        if not isinstance(node, yaml.MappingNode):
            continue
        lines: dict[Any, list[int]] = {}
        for key_node, value_node in node.value:
            stack.append(value_node)
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE:
                key = loader.construct_object(key_node)
                if isinstance(key, (str, int, float, bool)) or key is None:
                    lines.setdefault(key, []).append(key_node.start_mark.line + 1)
        keys = tuple(key for key, found in lines.items() if len(found) > 1)
        if keys:
            first = lines[keys[0]]
            repeated.append(Repeated("yaml", keys, len(first), tuple(first)))


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


def json_like(text: str) -> bool:
    """Whether the text starts like JSON (an object or an array)."""
    return text.lstrip()[:1] in ("{", "[")
