"""Shared pieces of the readers: flag values, notes, number checks, validation.

Every reader collects TrainingConfig fields in a plain dict (``None`` where
the file is silent), lets the user's flags fill the gaps, and validates
once. Errors are one line: the file, what was found, what was expected and
the knob to change.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from pptune import limits
from pptune.errors import BadInput
from pptune.frameworks.common.batch_words import TokenBatch
from pptune.frameworks.common.versions import Versions
from pptune.schemas import Limits, TrainingConfig

# Same bounds as TrainingConfig (see its docstring): device counts above
# 2**20 and other counts above 2**31 - 1 are typos, not runs.
MAX_DEVICES = 1 << 20
MAX_COUNT = 2**31 - 1

FLAG_KEYS = ("pp", "gpus", "tp", "gpus_per_node", "micro_batch_size", "global_batch")
# what a flag stands for in a file that names no key for it (a reader's file_keys say more)
FLAG_MEANS = {"gpus_per_node": "a node size", "micro_batch_size": "a micro-batch size",
              "global_batch": "a global batch"}
# flags a reader takes only where it names the file's key for them (file_keys): the
# batch, which a DeepSpeed config may leave "auto" and a launch script to a variable
OPT_IN = frozenset({"micro_batch_size", "global_batch"})
MAX_BATCH = 2**31 - 1
MAX_ERRORS = 6  # problems listed in one message; the rest are counted


FILLED_PRECISIONS = ("bf16", "fp8", "mxfp8")  # check-config --precision


@dataclass(frozen=True)
class Flags:
    """Values the user passed on the command line (``--pp``, ``--gpus``, ``--tp``,
    ``--gpus-per-node``)."""

    pp: int | None = None
    gpus: int | None = None
    tp: int | None = None
    gpus_per_node: int | None = None
    micro_batch_size: int | None = None
    global_batch: int | None = None
    # --precision: the GEMM precision of a file that cannot state it (a torchtitan main
    # dump, dump_model.dump_precision); other files state their own
    precision: str | None = None


@dataclass(frozen=True)
class ReaderFinding:
    """A finding a reader makes from the file alone.

    ``error``: the framework's own validation refuses the file (the message
    cites the rule); ``warning``: a setting pptune cannot model (the message
    names the flag). check-config reports both beside its own findings.
    """

    id: str
    severity: str
    message: str


@dataclass
class Semantics:
    """What a reader learnt about the framework's behaviour beyond TrainingConfig.

    ``details`` is the framework's own record (e.g. Megatron-LM's schedule
    knobs), written by its reader and read by its rules only.
    """

    versions: Versions = field(default_factory=Versions)
    findings: list[ReaderFinding] = field(default_factory=list)
    details: Any = None
    # every flag, key or table the reader left unread (a note names the first few)
    ignored: list[str] = field(default_factory=list)
    # the reader applied the framework's own layer-split rules (Megatron-LM's: even,
    # uneven first/last, layouts), so check-config's generic even-split rule stands aside
    split_rules: bool = False
    # --gpus-per-node where the file states another node size: check-config takes it as
    # the NVLink domain where the file's node is one host of it, or says why not
    # (check/domain.py)
    gpus_per_node_flag: int | None = None
    # the reader's note for a model it cannot name (a torchtitan flavor without a pptune
    # preset), dropped once the model is known otherwise (read.py model_known)
    unknown_model: str | None = None
    # the reader's note that routing is priced balanced (Megatron-LM's script states no
    # imbalance), dropped where the plan line gives one (planned.py planned_for)
    balanced_routing: str | None = None
    # the reader refused the numbers the micro-batch count comes from (the framework's own
    # batch rule): check-config judges no micro-batch count of them (check/rules.py)
    batch_refused: bool = False
    # the line (1-based) where the file sets each flag or variable it was read from (the
    # last, which wins), where the reader knows it: where --output github points a
    # finding that names one (check/render.py)
    flag_lines: dict[str, int] = field(default_factory=dict)
    # where the GPU count came from when neither a key of the file nor --gpus gave it
    # (a torchtitan file's launch comment, launched.py): check-config's gpus-mismatch
    # names it
    gpus_from: str | None = None
    # the memory fixes in the file's own words where they are not the adapter's
    # (Adapter.memory_fixes; a torchtitan main dump names main's keys): (stages, sharding,
    # recomputation, micro-batch) clauses
    memory_fixes: tuple[str, str, str | None, str] | None = None
    # the reader took --precision (Flags.precision) for a file that cannot state it
    precision_filled: bool = False
    # the batch advice in the file's keys where it counts tokens, not sequences
    # (batch_words.py; a torchtitan main dump)
    batch_words: TokenBatch | None = None


@dataclass
class Ctx:
    """What a reader needs besides the data: the file's name, the flags, the notes."""

    name: str
    flags: Flags = Flags()
    notes: list[str] = field(default_factory=list)
    semantics: Semantics = field(default_factory=Semantics)
    # variables a launch script takes from its environment (check-config --env)
    env: Mapping[str, str] = field(default_factory=dict)
    # the file as written: what only its comments state (a launch, launched.py)
    text: str = ""

    def note(self, text: str) -> str:
        line = " ".join(text.split())
        if line not in self.notes:
            self.notes.append(line)
        return line

    def refuse(self, rule_id: str, text: str) -> None:
        """The framework's own validation refuses this (error finding, exit 1)."""
        self._find(ReaderFinding(rule_id, "error", " ".join(text.split())))

    def warn(self, rule_id: str, text: str) -> None:
        """The framework warns about this and runs it (warning finding)."""
        self._find(ReaderFinding(rule_id, "warning", " ".join(text.split())))

    def unmodelled(self, rule_id: str, text: str) -> None:
        """pptune cannot model this setting (warning naming the flag, never an error)."""
        self._find(ReaderFinding(rule_id, "warning", " ".join(text.split())))

    def priced(self, rule_id: str, text: str) -> None:
        """pptune prices this setting with a model of its own, which the text names with
        what it leaves out (info: nothing to change in the file)."""
        self._find(ReaderFinding(rule_id, "info", " ".join(text.split())))

    def _find(self, finding: ReaderFinding) -> None:
        if finding not in self.semantics.findings:
            self.semantics.findings.append(finding)

    def bad(self, text: str) -> BadInput:
        return BadInput(" ".join(f"{self.name}: {text}".split()))


def show(value: Any) -> str:
    """A short, one-line rendering of a value for messages."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {len(str(abs(value))) if value.bit_length() < 10000 else 'huge'}-digit number"
    if isinstance(value, bool) or value is None:  # as the file spells it, not Python
        return {True: "true", False: "false", None: "null"}[value]
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_flags(pp: Any, gpus: Any, tp: Any, gpus_per_node: Any = None,
                micro_batch_size: Any = None, global_batch: Any = None,
                precision: str | None = None) -> Flags:
    """Validate the flag values themselves (they come from the CLI, not a file)."""
    if precision is not None and precision not in FILLED_PRECISIONS:
        raise BadInput(f"--precision {show(precision)}: expected one of "
                       f"{', '.join(FILLED_PRECISIONS)}")
    for key, value, most in (("pp", pp, MAX_DEVICES), ("gpus", gpus, MAX_DEVICES),
                             ("tp", tp, MAX_DEVICES), ("gpus-per-node", gpus_per_node, MAX_DEVICES),
                             ("micro-batch-size", micro_batch_size, MAX_BATCH),
                             ("global-batch", global_batch, MAX_BATCH)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise BadInput(f"--{key} {show(value)}: expected a whole number from 1 to {most}")
    return Flags(pp=pp, gpus=gpus, tp=tp, gpus_per_node=gpus_per_node,
                 micro_batch_size=micro_batch_size, global_batch=global_batch,
                 precision=precision)


def whole(
    ctx: Ctx,
    key: str,
    value: Any,
    *,
    minimum: int = 1,
    maximum: int = MAX_COUNT,
    fix: str = "",
    cap: int | None = None,
) -> int:
    """``value`` as an int in [minimum, maximum]; BadInput naming ``key`` otherwise.

    Only real integers pass: a bool, a float (even 8.0) or a string is the
    wrong type, so a quoted "8" in a JSON file is reported, not guessed at.
    ``cap``: one of pptune's caps (docs/limits.md) on this size, said as such for any
    value above it (the parallel sizes: ``maximum`` then bounds nothing it lets through).
    """
    hint = f"; {fix}" if fix else f"; change {key}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.bad(
            f"{key} is {show(value)} ({_kind(value)}); expected a whole number "
            f">= {minimum}{hint}"
        )
    if cap is not None and value > cap:
        raise ctx.bad(limits.over_cap(key, show(value), cap))
    if not minimum <= value <= maximum:
        raise ctx.bad(
            f"{key} is {show(value)}; expected a whole number from {minimum} to {maximum}{hint}"
        )
    return value


_INT_TEXT = re.compile(r"[+-]?[0-9]+")


def whole_text(
    ctx: Ctx, key: str, text: str, *, minimum: int = 1, maximum: int = MAX_COUNT, fix: str = "",
    cap: int | None = None,
) -> int:
    """Parse a command-line style number (``"32"``) and check it like ``whole``."""
    stripped = text.strip()
    hint = f"; {fix}" if fix else f"; change {key}"
    if not _INT_TEXT.fullmatch(stripped):
        raise ctx.bad(f"{key} is {show(text)}; expected a whole number >= {minimum}{hint}")
    digits = len(stripped.lstrip("+-"))
    if digits > 30:  # int() of thousands of digits is slow and pointless
        if cap is not None and not stripped.startswith("-"):
            raise ctx.bad(limits.over_cap(key, f"a {digits}-digit number", cap))
        raise ctx.bad(f"{key} is a {digits}-digit number; expected a whole "
                      f"number from {minimum} to {maximum}{hint}")
    return whole(ctx, key, int(stripped), minimum=minimum, maximum=maximum, fix=fix, cap=cap)


def _kind(value: Any) -> str:
    names = {bool: "a boolean", float: "a decimal number", str: "a string", list: "a list",
             dict: "a mapping", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def apply_flags(ctx: Ctx, fields: dict[str, Any], file_keys: dict[str, str]) -> None:
    """Fill pp / gpus / tp from the flags where the file is silent.

    The file wins: a flag only fills a value the file does not state (or
    states through a shell variable pptune cannot resolve). A flag that
    disagrees with the file is ignored with a note, so the check reports
    the config that will actually run; but a ``--gpus-per-node`` against the
    file's node size is left to check-config, which may take it as the NVLink
    domain of the file's hosts (``Semantics.gpus_per_node_flag``).
    """
    for key in FLAG_KEYS:
        flag = getattr(ctx.flags, key)
        if flag is None:
            continue
        stated = fields.get(key)
        where = file_keys.get(key, FLAG_MEANS.get(key, key))
        name = "--" + key.replace("_", "-")
        if key in OPT_IN and key not in file_keys:
            ctx.note(f"{name} {flag} ignored: this format states {where} itself")
        elif stated is None:
            fields[key] = flag
            ctx.note(f"{key} {flag} from {name}: the file does not state {where}")
        elif stated != flag and key == "gpus_per_node":  # the file's node may be a host
            ctx.semantics.gpus_per_node_flag = flag  # of the domain the flag sets
        elif stated != flag:
            ctx.note(f"{name} {flag} ignored: the file states {where} = {stated}")


def build(ctx: Ctx, fields: dict[str, Any]) -> TrainingConfig:
    """Validate the collected fields; ``None`` means "not stated" (the default applies)."""
    data = {k: v for k, v in fields.items() if v is not None}
    if "model" in data and "hf_config" in data:  # as recommend refuses --model --hf-config
        raise ctx.bad(f"model {show(data['model'])} and hf_config {show(data['hf_config'])} "
                      "both name the model; give one of them")
    try:
        config = TrainingConfig.model_validate(data)
    except ValidationError as exc:
        raise ctx.bad(describe(exc)) from None
    over = over_caps(config)
    if over:  # valid for the schema, beyond what pptune plans (docs/limits.md): bad input
        raise ctx.bad("; ".join(over))
    return config


# a config's sizes that drive work or memory, with pptune's caps (docs/limits.md)
CAPS = {"gpus": limits.MAX_GPUS, "pp": limits.MAX_GPUS, "gpus_per_node": limits.MAX_GPUS,
        "tp": limits.MAX_TP, "cp": limits.MAX_TP, "ep": limits.MAX_TP, "etp": limits.MAX_TP,
        "num_layers": limits.MAX_LAYERS, "seq_len": limits.MAX_SEQ_LEN,
        "micro_batch_size": limits.MAX_MICRO_BATCH, "global_batch": limits.MAX_GLOBAL_BATCH,
        "grad_accum_steps": limits.MAX_GLOBAL_BATCH}


def over_caps(config: TrainingConfig) -> list[str]:
    """One clause per size of ``config`` over pptune's cap, naming the key."""
    out = limits.problems(*(limits.problem(key, value, 1, cap) for key, cap in CAPS.items()
                            if isinstance(value := getattr(config, key), int)))
    if config.stage_layers and sum(config.stage_layers) > limits.MAX_LAYERS:
        out.append(f"stage_layers sum to {sum(config.stage_layers):,} layers: pptune plans up "
                   f"to {limits.MAX_LAYERS:,}, see docs/limits.md")
    return out


def describe(exc: ValidationError) -> str:
    """All of a ValidationError on one line, with the values found and close key names."""
    parts = []
    errors = exc.errors()
    for err in errors[:MAX_ERRORS]:
        loc = ".".join(str(x) for x in err["loc"])
        if err["type"] == "extra_forbidden":
            nested = len(err["loc"]) == 2 and err["loc"][0] == "limits"
            known = list((Limits if nested else TrainingConfig).model_fields)
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            parts.append(f"unknown key {loc!r}{hint}")
        elif err["type"] == "invalid_key":
            parts.append(f"key {show(err['loc'][-1])} is not a name; expected keys such as "
                         "micro_batch_size")
        elif not loc:
            parts.append(str(err["msg"]).removeprefix("Value error, "))
        elif err["type"] == "less_than_equal" and loc in CAPS:  # over the typo bound: the cap
            parts.append(limits.over_cap(loc, show(err.get("input")), CAPS[loc]))
        else:
            parts.append(f"{loc} is {show(err.get('input'))}: {err['msg']}")
    if len(errors) > MAX_ERRORS:
        parts.append(f"and {len(errors) - MAX_ERRORS} more")
    return "; ".join(parts)
