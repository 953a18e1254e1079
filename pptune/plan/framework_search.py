"""``recommend --framework NAME``: rank only the plans NAME's files state.

Without it, recommend ranks every plan pptune can price, and ``--emit NAME``
then writes the plan asked for or, where NAME's files cannot state it, another
(plan/emit.py). With it, the search runs over the cost keys NAME's files state
(``Adapter.cannot_state``: tp, cp, ep, etp and precision; the others are
dropped with one note) and, for those keys, over the shardings, schedules,
recomputations and rank orders they state, priced as its files run them
(``Adapter.stateable_groups``: the request narrowed by the adapter, one
request for each tensor-parallel size and shardings whose narrowing differs,
e.g. DeepSpeed's AutoTP without a pipeline); ``search_all`` lists the groups'
plans as one search would. The kernels are those NAME's files run
(plan/written.py), as with ``--emit``. Plan 1 is then a plan NAME's files
state, which ``--emit NAME`` writes without another layout in its place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from pptune.costmodel.keys import CostKey, TableSource
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.search import CostTable, PlanRequest, SearchResult, search_all
from pptune.errors import BadInput
from pptune.frameworks.common.adapter import Adapter
from pptune.frameworks.registry import ADAPTERS, NAMES, Framework, find

# the flag and value that search a layout without each dimension a framework may not state
_PLAIN = {"tp": "--tp", "cp": "--cp 1", "ep": "--ep 1", "etp": "--etp 1",
          "precision": "--precision bf16"}
_PLAIN_KEY = CostKey()


def parse_framework(framework: Framework | str, flag: str = "--emit") -> Framework:
    """The framework called ``framework`` (``flag``: the option that named it, for the
    message); BadInput for any other name."""
    adapter = find(framework)
    if adapter is None:
        raise BadInput(f"unknown {flag} {framework!r}; choose {', '.join(NAMES)}")
    return Framework(adapter.name)


def check_moments(framework: Framework | str, moments: tuple[str, str],
                  flag: str = "--emit") -> None:
    """BadInput when ``framework``'s files cannot keep Adam's moments at these widths
    (checked before the search too, by the CLI)."""
    adapter = ADAPTERS[parse_framework(framework, flag)]
    if tuple(moments) != ("fp32", "fp32") and not adapter.states_moment_dtypes:
        raise BadInput(f"{adapter.name} keeps Adam's moments in fp32: plan without "
                       f"--exp-avg-dtype/--exp-avg-sq-dtype, or {flag} megatron "
                       "(its precision-aware optimizer)")


@dataclass(frozen=True)
class FrameworkSearch:
    """The search over the plans one framework's files state, called as ``search``:
    ``(tables, req) -> SearchResult`` (the what-ifs that search again search so too)."""

    adapter: Adapter
    seq_len: int | None  # the sequence the costs were priced at (torchtitan's divisor)
    model: str | None  # the model's name: a preset's, a profile's
    shape: ModelShape | None  # its shape, where known (torchtitan's models)

    def keys(self, keys: Sequence[CostKey]) -> tuple[CostKey, ...]:
        """Of ``keys``, those its files state."""
        return tuple(k for k in keys if self.why(k) is None)

    def why(self, key: CostKey) -> str | None:
        """Why its files cannot state ``key`` for this model and sequence (None: they can)."""
        return self.adapter.cannot_state(key, self.seq_len, model=self.model, shape=self.shape)

    def groups(self, req: PlanRequest) -> list[PlanRequest]:
        """``req`` over the keys its files state, narrowed to what they state there;
        none where no key is left."""
        keys = self.keys(req.keys())
        return self.adapter.stateable_groups(req, keys, self.model, self.shape) if keys else []

    def __call__(self, tables: CostTable | TableSource, req: PlanRequest) -> SearchResult:
        return search_all(tables, self.groups(req))

    def dropped(self, keys: Sequence[CostKey]) -> str | None:
        """The note naming the keys its files cannot state, None when they state all;
        BadInput when they state none of them."""
        kept = self.keys(keys)
        lost = [k for k in keys if k not in kept]
        if not lost:
            return None
        what = _unstated(lost, self.why)
        if not kept:
            raise BadInput(f"--framework {self.adapter.name}: {self.adapter.title}'s files "
                           f"cannot state {what.text}, and nothing else was searched: search "
                           f"a layout they state ({', '.join(_PLAIN[d] for d in what.dims)})")
        return (f"{self.adapter.title}'s files cannot state {what.text}: searched without "
                f"{'it' if what.count == 1 else 'them'}")

    def narrowed(self, req: PlanRequest, groups: Sequence[PlanRequest]) -> str | None:
        """The note naming the schedules, shardings and recomputations searched for that
        its files do not state (and those searched instead, where none asked is stated);
        None when they state every one."""
        parts, instead = [], []
        for name, field in (("schedule", "schedules"), ("sharding", "shardings"),
                            ("recomputation", "recomputes")):
            asked: Sequence[Enum] = getattr(req, field)
            stated = dict.fromkeys(x for g in groups for x in getattr(g, field))
            left = [a.value for a in asked if a not in stated]
            if left:
                parts.append(f"{name} {', '.join(left)}")
            added = [x.value for x in stated if x not in asked]
            if added:
                instead.append(f"{name} {', '.join(added)}")
        if not parts:
            return None
        return (f"{self.adapter.title}'s files state no {'; no '.join(parts)}: ranked without "
                + ("it" if len(parts) == 1 and "," not in parts[0] else "them")
                + (f" (searched {'; '.join(instead)} instead)" if instead else ""))


def _sized(key: CostKey) -> tuple[str, ...]:
    """The dimensions of ``key`` beyond a plain plan's (tp 1, cp 1, ep 1, etp 1, BF16)."""
    return tuple(name for name in _PLAIN if getattr(key, name) != getattr(_PLAIN_KEY, name))


@dataclass(frozen=True)
class _Unstated:
    """What a framework's files cannot state of some keys, in words."""

    text: str  # "cp 2, 4; precision fp8", then each key none of those explains, with why
    count: int  # how many sizes and keys ``text`` names
    dims: tuple[str, ...]  # the dimensions they are sizes of ("cp", "precision")


def _unstated(lost: Sequence[CostKey], why: Callable[[CostKey], str | None]) -> _Unstated:
    """The sizes of the ``lost`` keys the files state in no plan, each named once, then
    each lost key that has none of them, with its reason."""
    alone: dict[str, list[str]] = {}
    rest: list[CostKey] = []
    for key in lost:
        sizes = [name for name in _sized(key)
                 if why(replace(_PLAIN_KEY, **{name: getattr(key, name)})) is not None]
        for name in sizes:
            value = getattr(key, name)
            shown = str(getattr(value, "value", value))
            if shown not in alone.setdefault(name, []):
                alone[name].append(shown)
        if not sizes:
            rest.append(key)
    named = [f"{name} {', '.join(values)}" for name, values in alone.items()]
    because = [f"{key} ({why(key)})" for key in rest]
    dims = (*alone, *(name for key in rest for name in _sized(key)))
    return _Unstated("; ".join([*named, *because]), sum(map(len, alone.values())) + len(rest),
                     tuple(dict.fromkeys(dims)))
