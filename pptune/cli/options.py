"""The option groups on the command line: one declaration (``pptune.options``)
becomes the typer options of every command that takes the group.

``@uses(space=PlanSpace, costs=CostOptions, out=Use(OutputOptions, only=...))``
on a command whose parameters ``space``, ``costs`` and ``out`` are those
groups replaces each of them, in place, by one option per field (its flag,
default and help as declared), so typer sees, parses and documents them like
any other option. When the command runs, each group's values are parsed by
their kinds (``pptune.options.build``: every bad value at once, in one line,
exit 2) and the command receives the groups built. ``Use`` takes a subset of
a group (``only``) and adds a clause to a field's help for that command
(``more``); ``option_for`` gives one field's option to a command's own
parameter (simulate's ``--blocking-send``, check-config's ``--model``).

This is sqlite-utils' shared option decorators, with the options declared as
data (tyro's and torchtitan's job config idea) so the plan file and the tests
can read the same declaration.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import typer

from pptune.errors import BadInput
from pptune.options import Field, build, fields_of

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Use:
    """How one command takes a group: ``only`` these fields (None: all), with
    ``more`` (field name -> a clause) added to their help, or ``help`` (field name ->
    the text) in place of it."""

    group: type
    only: tuple[str, ...] | None = None
    more: Mapping[str, str] = field(default_factory=dict)
    help: Mapping[str, str] = field(default_factory=dict)

    def fields(self) -> list[Field]:
        out = [f for f in fields_of(self.group) if self.only is None or f.name in self.only]
        missing = set(self.only or ()) - {f.name for f in out}
        if missing:
            raise TypeError(f"{self.group.__name__} has no option {', '.join(sorted(missing))}")
        return out


def typer_option(f: Field, more: str = "", text: str | None = None) -> Any:
    """The typer option of a field: its flag names, its default as click parses it, its
    help (``text`` in place of the declared help)."""
    default = ... if f.flag.required else f.flag.kind.text(f.default)
    return typer.Option(default, *f.flag.names,
                        help=(text or f.flag.help) + (f"; {more}" if more else ""))


def cli_annotation(f: Field) -> Any:
    """The type click parses the field's flag as (``X | None`` when it may be absent)."""
    t = f.flag.kind.cli_type
    return t if f.flag.required or f.default is not None else t | None


def option_for(group: type, name: str, more: str = "") -> Any:
    """One field's typer option, for a command that takes it as its own parameter."""
    (f,) = Use(group, only=(name,)).fields()
    return typer_option(f, more)


def _own_hints(fn: Callable[..., Any], skip: set[str]) -> dict[str, Any]:
    """The resolved annotations of ``fn``'s own parameters (a group's may be local to a test)."""
    own = types.SimpleNamespace(__annotations__={
        k: v for k, v in fn.__annotations__.items() if k not in skip and k != "return"})
    return typing.get_type_hints(own, globalns=getattr(fn, "__globals__", {}),
                                 include_extras=True)


def uses(**groups: type | Use) -> Callable[[F], F]:
    """Expand the parameters named in ``groups`` into their groups' options (module docstring)."""

    def decorate(fn: F) -> F:
        taken = {name: (g if isinstance(g, Use) else Use(g)) for name, g in groups.items()}
        hints = _own_hints(fn, set(taken))
        params: list[inspect.Parameter] = []
        fields_by_param: dict[str, list[str]] = {}
        for p in inspect.signature(fn).parameters.values():
            if p.name not in taken:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY,
                                        annotation=hints.get(p.name, p.annotation)))
                continue
            use = taken[p.name]
            fields_by_param[p.name] = [f.name for f in use.fields()]
            params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                         default=typer_option(f, use.more.get(f.name, ""),
                                                              use.help.get(f.name)),
                                         annotation=cli_annotation(f))
                       for f in use.fields()]
        names = [p.name for p in params]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice or set(taken) - set(fields_by_param):
            raise TypeError(f"{fn.__name__}: options declared twice {twice} or groups not "
                            f"among its parameters {sorted(set(taken) - set(fields_by_param))}")

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            built: dict[str, Any] = {}
            problems: list[str] = []
            for param, names in fields_by_param.items():
                try:
                    built[param] = build(taken[param].group, {n: kwargs.pop(n) for n in names})
                except BadInput as exc:
                    problems.append(str(exc))
            if problems:
                raise BadInput("; ".join(problems))
            return fn(**kwargs, **built)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return command  # type: ignore[return-value]

    return decorate
