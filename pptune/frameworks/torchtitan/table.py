"""One table of a torchtitan TOML job file, read with checked types."""

from __future__ import annotations

from typing import Any, overload

from pptune.frameworks.common.fields import MAX_COUNT, Ctx, show, whole


class Table:
    """``[name]`` of the job file (empty when absent); BadInput naming the key on a bad value."""

    def __init__(self, ctx: Ctx, name: str, data: dict[str, Any]) -> None:
        value = data.get(name, {})
        if not isinstance(value, dict):
            raise ctx.bad(f"{name} is {show(value)}; expected a [{name}] table")
        self.ctx, self.name, self.data = ctx, name, value

    def has(self, key: str) -> bool:
        return key in self.data

    def count(self, key: str, default: int | None, minimum: int = 1,
              maximum: int = MAX_COUNT, cap: int | None = None) -> int | None:
        if key not in self.data:
            return default
        return whole(self.ctx, f"{self.name}.{key}", self.data[key], minimum=minimum,
                     maximum=maximum, cap=cap)

    @overload
    def text(self, key: str, default: str) -> str: ...
    @overload
    def text(self, key: str, default: None) -> str | None: ...

    def text(self, key: str, default: str | None) -> str | None:
        """The key's string (TOML has no null: a stated key is never None)."""
        value = self.data.get(key, default)
        if value is not None and not isinstance(value, str):
            raise self.ctx.bad(f"{self.name}.{key} is {show(value)}; expected a string")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.ctx.bad(f"{self.name}.{key} is {show(value)}; expected true or false")
        return value


def compiles(ctx: Ctx, data: dict[str, Any], component: str) -> bool:
    """Whether torchtitan compiles ``component`` ("model" or "loss"): with ``[compile]
    enable`` and the component in ``components`` (both by default, 0.2), or with
    ``training.compile`` (0.1, which compiled both)."""
    table = Table(ctx, "compile", data)
    components = table.data.get("components", ["model", "loss"])
    if not isinstance(components, list):
        raise ctx.bad(f"compile.components is {components!r}; expected a list of names")
    return (table.flag("enable", False) and component in components) or Table(
        ctx, "training", data).flag("compile", False)
