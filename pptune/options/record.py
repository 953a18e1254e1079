"""A plan file's ``request``: the planning option groups as the run resolved them.

``pptune recommend -o plans.json`` records what it planned for: every field
of ``CostOptions`` and ``PlanSpace`` under its plan key (the field's name;
``gpu`` is ``device``), with the values the run resolved (``model`` and
``device`` name what was priced, ``global_batch`` is the batch planned,
``schedules``, ``sharding`` and ``recompute`` list what was searched), plus
``global_batch_requested`` (the batch asked for, before a nearby one was
taken). ``validate --plan`` and ``tune`` read it back as the same groups.

The keys pptune 0.1 wrote (``KEYS_0_1``) come first, in that order, and are
always written, so a plan file reads as it always has; a field's key outside
that list (one added since, or one 0.1 did not record, such as
``efficiency`` or ``pp``) is written when its value is not the default, so
``recommend --pp 4,8 -o plans.json`` records the restriction and a plain
``recommend`` writes the file it always wrote. ``framework`` (``recommend
--framework NAME``: only the plans NAME's files state were ranked) comes last,
written only when given. Reading, missing keys take the
group's default and unknown keys are ignored (a newer pptune's file loads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    create_model,
)

from pptune.errors import BadInput
from pptune.options.groups import CostOptions, PlanSpace, build, fields_of

PLAN_GROUPS = (CostOptions, PlanSpace)
REQUESTED = "global_batch_requested"
FRAMEWORK = "framework"
KEYS_0_1 = (
    "gpus", "tp", "gpus_per_node", "global_batch", REQUESTED, "micro_batch_sizes",
    "schedules", "model", "device", "sharded_optimizer", "grad_compression", "seq_len",
    "sequence_parallel", "recompute", "sharding", "recompute_every", "attention",
    "tp_comm_overlap", "overlap_grad_reduce",
)

# keys of 0.1 whose field now defaults to None (not given: a calibrated profile's jobs'
# choice, else pptune's default): written as priced, so a plan file reads as it always has
AS_PRICED = {"tp_comm_overlap": "overlaps_tp"}


@dataclass(frozen=True)
class PlanFileRequest:
    """The request of a plan file, typed: the groups as resolved (module docstring)."""

    costs: CostOptions = field(default_factory=CostOptions)
    space: PlanSpace | None = None  # None: the file names no GPU count (not recommend's)
    global_batch_requested: int | None = None
    framework: str | None = None  # recommend --framework: the framework whose plans were ranked

    def to_json(self) -> dict[str, Any]:
        """The JSON object, keys in the order described above."""
        values: dict[str, Any] = {REQUESTED: self.global_batch_requested}
        later: dict[str, Any] = {}
        for group, obj in ((CostOptions, self.costs), (PlanSpace, self.space)):
            if obj is None:
                continue
            for f in fields_of(group):
                value = getattr(obj, f.name)
                if value is None and f.name in AS_PRICED:
                    value = getattr(obj, AS_PRICED[f.name])
                if f.plan_key in KEYS_0_1:
                    values[f.plan_key] = f.flag.kind.to_json(value)
                elif value != f.default:
                    later[f.plan_key] = f.flag.kind.to_json(value)
        if self.framework is not None:
            later[FRAMEWORK] = self.framework
        return {k: values[k] for k in KEYS_0_1 if k in values} | later

    @classmethod
    def from_json(cls, data: Any) -> PlanFileRequest:
        if isinstance(data, PlanFileRequest):
            return data
        flat = _FLAT.model_validate(data)
        given = {k: v for k, v in flat.model_dump().items() if v is not None}
        try:
            costs = build(CostOptions, _by_name(CostOptions, given))
            space = (build(PlanSpace, _by_name(PlanSpace, given)) if "gpus" in given else None)
        except BadInput as exc:
            raise ValueError(str(exc)) from None
        return cls(costs, space, given.get(REQUESTED), given.get(FRAMEWORK))


def _by_name(group: type, given: dict[str, Any]) -> dict[str, Any]:
    return {f.name: given[f.plan_key] for f in fields_of(group) if f.plan_key in given}


def _flat_model() -> type[BaseModel]:
    """The request as JSON sees it: one optional key per field (validation and schema)."""
    spec: dict[str, Any] = {REQUESTED: (int | None, Field(None, description=(
        "the global batch asked for (--global-batch, else the model's); global_batch is "
        "the one planned")))}
    for group in PLAN_GROUPS:
        for f in fields_of(group):
            spec[f.plan_key] = (f.flag.kind.json_type() | None,
                                Field(None, description=f"{f.flag.name}: {f.flag.help}"))
    spec[FRAMEWORK] = (str | None, Field(None, description=(
        "--framework: only the plans this framework's files state were ranked (megatron, "
        "deepspeed, torchtitan or pptune); absent: every plan pptune prices")))
    order = [k for k in KEYS_0_1 if k in spec] + [k for k in spec if k not in KEYS_0_1]
    return create_model(
        "PlanFileRequest",
        __config__=ConfigDict(extra="ignore", allow_inf_nan=False, defer_build=True),
        __doc__="What the plan was made for: the planning options as the run resolved them.",
        **{k: spec[k] for k in order},
    )


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with its ``$defs`` (the enums) written in place, so it can sit inside another."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)  # type: ignore[no-any-return]


_FLAT = _flat_model()

class _RequestSchema:
    """The request's JSON schema, built when a schema is asked for (``pptune schema``),
    not when pptune starts: building it builds the deferred model (~25 ms)."""

    def __get_pydantic_json_schema__(self, _core: Any, _handler: Any) -> dict[str, Any]:
        return _inlined(_FLAT.model_json_schema())


# the type a pydantic model uses for a plan file's request
RequestField = Annotated[
    PlanFileRequest,
    PlainValidator(PlanFileRequest.from_json),
    PlainSerializer(PlanFileRequest.to_json),
    _RequestSchema(),
]
