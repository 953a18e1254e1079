"""``recommend --framework NAME``: rank only the plans NAME's files state.

Without it, recommend ranks every plan pptune can price, and ``--emit NAME``
then writes the plan asked for or, where NAME's files cannot state it, another
(plan/emit.py). With it, the search runs over the cost keys NAME's files state
(``Adapter.cannot_state``: tp, cp, ep, etp and precision; the others are
dropped with one note) and, for those keys, over the shardings, schedules,
recomputations and rank orders they state, priced as its files run them
(``Adapter.stateable_groups``: the request narrowed by the adapter, one
request for each tensor-parallel size and shardings whose narrowing differs,
e.g. DeepSpeed's AutoTP without a pipeline), their pipelines on the splits its files
build where those are some alone (``Adapter.own_splits``: DeepSpeed's partition_method,
searched as costmodel/own_splits.py says); ``search_all`` lists the groups' plans as
one search would. The kernels are those NAME's files run
(plan/written.py), as with ``--emit``. Each plan is ranked as NAME's files run it
(``Adapter.as_run``: torchtitan runs the zero-bubble and DualPipeV schedules with its
model uncompiled), as ``--emit`` and check-config price it (frameworks/common/as_run.py);
those its files cannot run as such, or that so priced outgrow the GPU, are left out,
and one note says what that changed (search_all's ``as_run``: costmodel/listing.py
``AsRunLog``). Plan 1 is then a plan NAME's files state, which ``--emit NAME`` writes
without another layout in its place, at the step the table gives it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from pptune.costmodel.candidates import table_source
from pptune.costmodel.comm import compression_factor
from pptune.costmodel.keys import CostKey, TableSource
from pptune.costmodel.listing import Ran
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.search import CostTable, Plan, PlanRequest, SearchResult, search_all
from pptune.costmodel.sharding import BF16_BYTES
from pptune.costs.resolve import Costs
from pptune.errors import BadInput
from pptune.frameworks.common.adapter import Adapter, Job
from pptune.frameworks.common.as_run import as_itself, as_run_faster
from pptune.frameworks.common.compression import check_compression, reduction_widths, sixteen_bit
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.registry import ADAPTERS, NAMES, Framework, find
from pptune.options import CostOptions
from pptune.report.fmt import fmt_microbatches, fmt_seconds

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


def grad_reduction(compression: str, framework: str | None, flag: str, costs: CostOptions
                   ) -> tuple[dict[str, Any], CostOptions]:
    """The request's gradient widths for ``--grad-compression`` and the cost options that
    price them: pptune's bytes on the wire (comm.compression_factor), or, for the files of
    ``framework`` (named by ``flag``), as they state it (common/compression.py; BadInput
    where they cannot): a BF16 gradient buffer or FSDP reduce dtype holds the gradients
    in BF16 too, and the weight GEMMs accumulate into it (check-config reads it so)."""
    try:
        factor = compression_factor(compression)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if framework is None:
        return {"grad_bytes_factor": factor}, costs
    adapter = ADAPTERS[parse_framework(framework, flag)]
    check_compression(adapter, compression, flag)
    if sixteen_bit(compression) and adapter.grad_reduce_held:
        return reduction_widths(True), replace(costs, main_grad_bytes=float(BF16_BYTES))
    return {"grad_bytes_factor": factor}, costs


@dataclass(frozen=True)
class FrameworkSearch:
    """The search over the plans one framework's files state, called as ``search``:
    ``(tables, req) -> SearchResult`` (the what-ifs that search again search so too)."""

    adapter: Adapter
    seq_len: int | None  # the sequence the costs were priced at (torchtitan's divisor)
    model: str | None  # the model's name: a preset's, a profile's
    shape: ModelShape | None  # its shape, where known (torchtitan's models)
    # a plan's job from its table and request (plan/jobs.py), to price it as the files
    # run it; None: listed as searched
    jobs: Callable[[CostTable, PlanRequest], Job] | None = None
    # the releases its files are for (--framework-version): DeepSpeed before 0.19.4
    # states no AutoTP with ZeRO-3 (Adapter.stateable_groups)
    versions: Versions = dataclasses.field(default_factory=Versions)

    def keys(self, keys: Sequence[CostKey]) -> tuple[CostKey, ...]:
        """Of ``keys``, those its files state, each as they run it (``Adapter.as_stated``:
        torchtitan's experts at etp = tp where ep is 1)."""
        ran = dict.fromkeys(self.adapter.as_stated(k, self.shape) for k in keys)
        return tuple(k for k in ran if self.why(k) is None)

    def why(self, key: CostKey) -> str | None:
        """Why its files cannot state ``key`` for this model and sequence (None: they can)."""
        return self.adapter.cannot_state(key, self.seq_len, model=self.model, shape=self.shape)

    def groups(self, req: PlanRequest) -> list[PlanRequest]:
        """``req`` over the keys its files state, narrowed to what they state there;
        none where no key is left."""
        keys = self.keys(req.keys())
        if not keys:
            return []
        groups = self.adapter.stateable_groups(req, keys, self.model, self.shape,
                                               self.versions)
        # depths asked by hand (--pp): a group its files run at none of them (DeepSpeed's
        # AutoTP, at pp 1 alone) left out where another runs one (else ``narrowed`` says)
        groups = [g for g in groups if req.pp is None or g.pp is None
                  or set(g.pp) & set(req.pp)] or groups
        if self.adapter.builds_any_split:
            return groups
        # its pipelines on the splits its files build alone (Adapter.own_splits)
        return [replace(g, stage_splits=self.adapter.own_splits) for g in groups]

    def __call__(self, tables: CostTable | TableSource, req: PlanRequest) -> SearchResult:
        groups = self.groups(req)
        if self.jobs is None or not groups or self.adapter.runs_as_priced:
            return search_all(tables, groups)
        jobs = self.jobs
        by_key = {k: g for g in groups for k in g.keys()}

        def job_of(key: CostKey) -> Job:
            table = table_source(tables, by_key[key])(key)
            return jobs(table, replace(by_key[key], cost_keys=(key,), tp=key.tp))

        def as_run(plan: Plan) -> Ran | None:
            ran = as_itself(self.adapter, job_of(plan.key), plan)
            return None if ran is None else Ran(ran[1], ran[0].table, ran[0].request)

        result = search_all(tables, groups, as_run, as_run_faster(self.adapter, job_of))
        said = self.as_run_note(result)
        return replace(result, notes=[*result.notes, said]) if said else result

    def as_run_note(self, result: SearchResult) -> str | None:
        """What pricing the plans as its files run them changed (None: nothing): how
        many of the plans listed it priced otherwise, how many faster as searched than
        the last listed it priced past them, and those it left out, the fastest named."""
        title, shown = self.adapter.title, result.plans
        again = {p.spec for p in result.repriced}
        changed = [p for p in shown if p.spec in again]
        last_s = max((p.step_time_s for p in shown), default=math.inf)
        # those the list shows in words (another split or rank order of a listed plan)
        # left aside: the note names one by the words it shows
        words = {_described(p) for p in shown}
        left = [p for p in result.dropped
                if p.step_time_s < last_s and _described(p) not in words]
        listed = {p.spec for p in shown}
        past = [p for p in result.repriced if p.spec not in listed and p.step_time_s < last_s]
        parts = [f"{len(changed)} listed plan{'s' * (len(changed) > 1)} priced again as "
                 f"{title} runs {'them' if len(changed) > 1 else 'it'}"] * bool(changed) + [
            f"{len(past)} plan{'s' * (len(past) > 1)} faster as searched but slower than "
            f"the list as {title} runs {'them' if len(past) > 1 else 'it'}"] * bool(past)
        if left:
            p = left[0]
            v = f" v={p.virtual_stages}" if p.virtual_stages > 1 else ""
            parts.append(f"{len(left)} faster plan{'s' * (len(left) > 1)} left out, which "
                         f"{title}'s files cannot run as such or which outgrow the GPU as they run "
                         f"(the fastest: pp={p.pp} dp={p.dp} tp={p.tp} "
                         f"{p.schedule.value}{v}, "
                         f"{fmt_microbatches(p.num_microbatches, p.micro_batch_size)}, "
                         f"{p.sharding.value}/{p.recompute.value} at "
                         f"{fmt_seconds(p.step_time_s)} as searched)")
        if not parts:
            return None
        return f"ranked as {title}'s files run the plans: {'; '.join(parts)}"

    def dropped(self, keys: Sequence[CostKey]) -> str | None:
        """The note naming the keys its files cannot state, None when they state all;
        BadInput when they state none of them."""
        kept = self.keys(keys)
        lost = [k for k in keys if self.adapter.as_stated(k, self.shape) not in kept]
        if not lost:
            return None
        what = _unstated(lost, self.why)
        if not kept:
            raise BadInput(f"--framework {self.adapter.name}: {self.adapter.title}'s files "
                           f"state none of the layouts searched (they cannot state "
                           f"{what.text}): search one they state "
                           f"({', '.join(_PLAIN[d] for d in what.dims)})")
        return (f"{self.adapter.title}'s files cannot state {what.text}: searched without "
                f"{'it' if what.count == 1 else 'them'}")

    def restated(self, keys: Sequence[CostKey]) -> str | None:
        """The note naming the keys its files run at other sizes (``Adapter.as_stated``),
        None when they run every one as searched."""
        moved = {k: self.adapter.as_stated(k, self.shape) for k in keys}
        said = [f"tp {k.tp} ep {k.ep} at " + ", ".join(
                    f"{name} {getattr(r, name)}" for name in _PLAIN
                    if getattr(r, name) != getattr(k, name))
                for k, r in moved.items() if r != k]
        if not said:
            return None
        return (f"{self.adapter.title} {self.adapter.restates}: priced "
                f"{', '.join(dict.fromkeys(said))}")

    def released(self, req: PlanRequest) -> str | None:
        """The note naming what the release followed (``versions``) leaves out of ``req``
        that a later one states (``Adapter.left_by_release``: DeepSpeed before 0.19.4, no
        ZeRO-3 beside AutoTP), which ``narrowed`` does not name where another key keeps
        the choice; None when the release leaves nothing out."""
        return self.adapter.left_by_release(req, self.keys(req.keys()), self.versions)

    def narrowed(self, req: PlanRequest, groups: Sequence[PlanRequest]) -> str | None:
        """The note naming the schedules, shardings, recomputations and pipeline depths
        searched for that its files do not state (and those searched instead, where none
        asked is stated); None when they state every one."""
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
        # pipeline depths asked by hand (--pp) that its files do not run for the model
        # (torchtitan's models without a pipelining_fn); None: every depth, asked or run
        depths = [g.pp for g in groups]
        if req.pp is not None and None not in depths:
            ran = dict.fromkeys(p for d in depths for p in d or ())
            left = [str(p) for p in req.pp if p not in ran]
            if left:
                parts.append(f"pp {', '.join(left)}")
                if added_pp := [str(p) for p in ran if p not in req.pp]:
                    instead.append(f"pp {', '.join(added_pp)}")
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


def as_built(framework: str | None, costs: Costs,
             again: Callable[[ModelShape], Costs | None]) -> tuple[Costs, str | None]:
    """The analytic costs of the model ``framework``'s files build, and the note saying
    what changed: without the multi-token-prediction layers of a framework that builds
    none (``Adapter.builds_mtp``; ``again`` prices a shape), so that its plans split and
    price the layers its files run; else as they are (measured or calibrated costs too:
    their layers are the profile's)."""
    shape = costs.shape
    if framework is None or costs.measured or costs.profile_file is not None \
            or shape is None or not shape.mtp_layers:
        return costs, None
    adapter = ADAPTERS[parse_framework(framework, "--framework")]
    if adapter.builds_mtp:
        return costs, None
    n, found = shape.mtp_layers, again(replace(shape, mtp_layers=0))
    if found is None:
        return costs, None
    return found, (
        f"{adapter.title}'s files build no multi-token-prediction module: planned without "
        f"{shape.name}'s {n} MTP layer{'s' * (n > 1)}")


def _described(plan: Plan) -> tuple[object, ...]:
    """What ``as_run_note`` says of a plan left out: its sizes, schedule, batch, sharding
    and recomputation (not its split or rank order)."""
    return (plan.pp, plan.dp, plan.tp, plan.schedule, plan.virtual_stages,
            plan.num_microbatches, plan.micro_batch_size, plan.sharding, plan.recompute)
