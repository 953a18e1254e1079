"""How a flag's value becomes an option's value: one parser per kind of option.

A ``Kind`` knows what the command-line parser (click, under typer) hands
over (``cli_type``: int, float, bool, str or Path), how that becomes the
option's value (``parse``: ``"1,2,4"`` -> ``(1, 2, 4)``, ``"zero1"`` ->
``Sharding.ZERO1``) and back (``text``: the default as ``--help`` shows it).
``parse`` also takes the value a caller passes in code (a list, an enum
member), so ``RecommendSpec.of(sharding="none")`` and the command line go
through the same checks. A bad value is ``BadInput`` with one line naming the
flag and the value: the lines ``pptune`` has always printed, e.g.
``--sharding takes a comma list of none, zero1, zero2, zero3, fsdp (got 'z')``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, Generic, TypeVar

from pptune.errors import BadInput
from pptune.limits import MAX_LAYERS

E = TypeVar("E", bound=Enum)
T = TypeVar("T")

# a --split may list one value per stage: at most one per layer
MAX_LIST_ITEMS = MAX_LAYERS + 2
# digits of one integer item: past every cap pptune has (MAX_GLOBAL_BATCH has 10), short of
# Python's 4,300-digit limit on int()
MAX_DIGITS = 18
EMPTY_ITEM = "{flag} has an empty item (got {text!r}): separate the values with single commas"
# pptune's typed number flags (click's int and float, through pydantic) read ASCII digits
# only: the comma lists and the layout strings follow the same rule
NOT_ASCII = "{flag} takes ASCII digits 0-9, as every number pptune reads (got {text!r})"


def comma_items(text: str, flag: str) -> list[str]:
    """The items of a comma list, each stripped; BadInput for an empty one among
    others (``1,,2``, ``zbv,``). Nothing at all (``""``, ``","``) is the caller's to name."""
    items = [x.strip() for x in text.split(",")]
    if any(items) and not all(items):
        raise BadInput(EMPTY_ITEM.format(flag=flag, text=text))
    return items


def foreign_digits(text: str) -> bool:
    """Whether ``text`` holds a digit other than ASCII 0-9 (fullwidth, superscript, ...)."""
    return any(ch.isdigit() and not ch.isascii() for ch in text)


def parse_ints(text: str | None, flag: str) -> list[int] | None:
    """``"1,2,4"`` -> [1, 2, 4]; BadInput naming the flag for anything else
    (an empty item such as ``1,,2`` included)."""
    if text is None:
        return None
    return _ints_of(text, flag, [(x.replace(" ", ""), "1") for x in comma_items(text, flag)],
                    "takes comma-separated integers, e.g. 1,2,4")


def parse_split(text: str | None, flag: str) -> list[int] | None:
    """``parse_ints``, where an item ``NxM`` is M stages of N layers, as recommend's
    layers/stage column writes a run (report.fmt.compact_split): ``5,4x3,2`` ->
    [5, 4, 4, 4, 2]."""
    if text is None:
        return None
    items = [x.replace(" ", "").partition("x") for x in comma_items(text, flag)]
    return _ints_of(text, flag, [(n, k if x else "1") if n else ("", "") for n, x, k in items],
                    "takes comma-separated integers, NxM for M stages of N layers, "
                    "e.g. 5,4x14,3")


def _ints_of(text: str, flag: str, items: list[tuple[str, str]], takes: str) -> list[int]:
    """Each ``(value, repeats)`` item's value, ``repeats`` times: positive integers in ASCII
    digits, at most MAX_LIST_ITEMS in all; BadInput naming the flag otherwise."""
    if foreign_digits(text):
        raise BadInput(NOT_ASCII.format(flag=flag, text=text))
    if any(not x.removeprefix("-").isdigit() or not k.isdigit() for x, k in items):
        raise BadInput(f"{flag} {takes} (got {text!r})")
    if any(len(x.removeprefix("-")) > MAX_DIGITS or len(k) > MAX_DIGITS for x, k in items):
        raise BadInput(f"{flag} takes integers of up to {MAX_DIGITS} digits (got {text!r})")
    values = [(int(x), int(k)) for x, k in items]
    if any(x < 1 or k < 1 for x, k in values):
        raise BadInput(f"{flag} needs positive integers (got {text!r})")
    count = sum(k for _, k in values)
    if count > MAX_LIST_ITEMS:
        raise BadInput(f"{flag} lists {count:,} values; pptune takes up to {MAX_LIST_ITEMS:,}")
    return [x for x, k in values for _ in range(k)]


class Kind(Generic[T]):
    """A plain value: what click parses is the option's value (int, float, bool, str, Path)."""

    def __init__(self, cli_type: type) -> None:
        self.cli_type = cli_type

    def parse(self, raw: Any, flag: str) -> T | None:
        if raw is None or self.cli_type is not Path:
            return raw  # type: ignore[no-any-return]
        return Path(raw)  # type: ignore[return-value]

    def text(self, value: T | None) -> Any:
        return str(value) if isinstance(value, Path) else value

    def json_type(self) -> Any:
        """The value's type in a plan file (``pptune.options.record``)."""
        return self.cli_type

    def to_json(self, value: T | None) -> Any:
        """The value as a plan file holds it (``parse`` reads it back)."""
        return self.text(value)


def preset_name(raw: str | None) -> str | None:
    """A preset's name as given (``--gpu H100-SXM``, `` llama3-8b``): presets are named in
    lower case, so a name differing only in case or spaces around it is that preset."""
    return None if raw is None else raw.strip().lower()


class PresetName(Kind[str]):
    """A model or GPU preset's name (``preset_name``)."""

    def __init__(self) -> None:
        super().__init__(str)

    def parse(self, raw: Any, flag: str) -> str | None:
        return preset_name(None if raw is None else str(raw))


class Ints(Kind[tuple[int, ...]]):
    """A comma list of positive integers to search: ``--pp 4,8`` -> ``(4, 8)``; a repeat
    is dropped, the first kept (``--tp 2,2`` searched every tp-2 plan twice)."""

    def __init__(self) -> None:
        super().__init__(str)

    def parse(self, raw: Any, flag: str) -> tuple[int, ...] | None:
        if raw is None:
            return None
        text = raw if isinstance(raw, str) else ",".join(str(x) for x in raw)
        return tuple(dict.fromkeys(parse_ints(text, flag) or ()))

    def text(self, value: tuple[int, ...] | None) -> Any:
        return None if value is None else ",".join(map(str, value))

    def json_type(self) -> Any:
        return list[int]

    def to_json(self, value: tuple[int, ...] | None) -> Any:
        return None if value is None else list(value)


class Sizes(Ints):
    """Sizes of a parallel dimension: one (``--tp 8``) or a comma list to search
    (``--tp 1,2,4``). A plan file holds one as a number (as it always has for
    ``tp``) and several as a list; either reads back."""

    def parse(self, raw: Any, flag: str) -> tuple[int, ...] | None:
        if isinstance(raw, int) and not isinstance(raw, bool):
            raw = str(raw)
        return super().parse(raw, flag)

    def json_type(self) -> Any:
        return int | list[int]

    def to_json(self, value: tuple[int, ...] | None) -> Any:
        if value is not None and len(value) == 1:
            return value[0]
        return super().to_json(value)


def _names(raw: str | Iterable[Any]) -> list[str]:
    """The items of a comma list (or of a list given in code), stripped, empty ones dropped."""
    items = raw.split(",") if isinstance(raw, str) else [getattr(x, "value", x) for x in raw]
    return [str(x).strip() for x in items if str(x).strip()]


class OneOf(Kind[E]):
    """One member of an enum by its value: ``--attention eager`` -> ``Attention.EAGER``.

    ``bad`` is the error line, formatted with ``flag``, ``value`` (as given)
    and ``choices`` (the members' values, comma-separated)."""

    def __init__(self, enum: type[E], bad: str, *, shown: Sequence[E] | None = None,
                 refuse: Callable[[E], str | None] | None = None) -> None:
        super().__init__(str)
        self.enum = enum
        self.bad = bad
        self.shown = shown  # the members the error lines list (default: all)
        self.refuse = refuse  # a member commands do not take yet: its one-line reason

    def choices(self) -> str:
        return ", ".join(str(m.value) for m in (self.shown or list(self.enum)))

    def parse(self, raw: Any, flag: str) -> E | None:
        if raw is None:
            return None
        if isinstance(raw, self.enum):
            value = raw
        else:
            try:
                value = self.enum(str(raw).strip().lower())
            except ValueError:
                raise BadInput(self.bad.format(flag=flag, value=raw,
                                               choices=self.choices())) from None
        why = self.refuse(value) if self.refuse else None
        if why:
            raise BadInput(why)
        return value

    def text(self, value: E | None) -> Any:
        return None if value is None else value.value

    def json_type(self) -> Any:
        return self.enum

    def to_json(self, value: E | None) -> Any:
        return self.text(value)


class ListOf(Kind[tuple[E, ...]]):
    """A comma list of an enum's values: ``--sharding none,zero1``.

    ``bad`` (an unknown name; formatted with ``flag``, ``value``, ``text``
    and ``choices``) and ``empty`` (nothing listed) are the error lines;
    ``unique`` drops repeats, keeping the first. ``as_text``: the plan file
    writes the list as the comma text (``"none,zero1"``), as it always has."""

    def __init__(self, enum: type[E], bad: str, empty: str, *, unique: bool = False,
                 as_text: bool = False, shown: Sequence[E] | None = None,
                 refuse: Callable[[E], str | None] | None = None) -> None:
        super().__init__(str)
        self.enum = enum
        self.bad = bad
        self.empty = empty
        self.unique = unique
        self.as_text = as_text
        self.shown = shown  # the members the error lines list (default: all)
        self.refuse = refuse  # a member commands do not take yet: its one-line reason

    def choices(self) -> str:
        return ", ".join(str(m.value) for m in (self.shown or list(self.enum)))

    def parse(self, raw: Any, flag: str) -> tuple[E, ...] | None:
        if raw is None:
            return None
        text = raw if isinstance(raw, str) else ",".join(_names(raw))
        if isinstance(raw, str):
            comma_items(raw, flag)  # an empty item among names: one line
        names = _names(raw)
        known = {str(m.value) for m in self.enum}
        for name in names:
            if name.lower() not in known:
                raise BadInput(self.bad.format(flag=flag, value=name, text=text,
                                               choices=self.choices()))
        if not names:
            raise BadInput(self.empty.format(flag=flag, text=text, choices=self.choices()))
        values = [self.enum(n.lower()) for n in names]
        for value in values:
            why = self.refuse(value) if self.refuse else None
            if why:
                raise BadInput(why)
        return tuple(dict.fromkeys(values)) if self.unique else tuple(values)

    def text(self, value: tuple[E, ...] | None) -> Any:
        return None if value is None else ",".join(str(m.value) for m in value)

    def json_type(self) -> Any:
        return str if self.as_text else list[self.enum]  # type: ignore[name-defined]

    def to_json(self, value: tuple[E, ...] | None) -> Any:
        if value is None or self.as_text:
            return self.text(value)
        return [m.value for m in value]
