"""``read_config``: any supported training config -> TrainingConfig, with notes.

The format is recognised from the content (``format_in`` overrides the
guess): the file is tried as JSON (when it starts like JSON), TOML, a
script, then YAML, and each parse is offered to the adapters written in
that syntax (``Adapter.syntaxes``, ``Adapter.detect``: DeepSpeed's batch or
ZeRO keys, torchtitan's JobConfig tables ([model], [training], [parallelism], ...),
Megatron-LM's ``pretrain_*.py`` launch or lines of its flags), pptune's own
keys (TrainingConfig's) last.

Flags (``pp``, ``gpus``, ``tp``) fill only what the file does not state; a
flag that disagrees with the file is ignored with a note, so check-config
judges the config that will actually run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pptune.errors import BadInput
from pptune.frameworks.common.adapter import Adapter
from pptune.frameworks.common.fields import Ctx, Semantics, check_flags, show
from pptune.frameworks.common.planned import planned_for
from pptune.frameworks.common.source import (
    Refused,
    Repeated,
    Undecoded,
    json_like,
    parse_json,
    parse_toml,
    parse_yaml,
    read_text,
)
from pptune.frameworks.common.versions import SHARED_KEYS, Versions, version_tuple
from pptune.frameworks.registry import ADAPTERS, NAMES, VERSION_KEYS, Framework, find
from pptune.schemas import TrainingConfig

ConfigFormat = Framework  # the formats read are the frameworks' (one list: the registry)

FORMAT_NAMES = "|".join(NAMES)
SYNTAX_ORDER = ("json", "toml", "text", "yaml")  # as _detect tries them


@dataclass
class ReadResult:
    config: TrainingConfig
    format: Framework
    notes: list[str] = field(default_factory=list)  # inferred or ignored, one line each
    semantics: Semantics = field(default_factory=Semantics)


def read_config(
    path: Path | str,
    format_in: Framework | str | None = None,
    *,
    pp: int | None = None,
    gpus: int | None = None,
    tp: int | None = None,
    framework_versions: list[str] | None = None,
    gpus_per_node: int | None = None,
    env: list[str] | None = None,
    micro_batch_size: int | None = None,
    global_batch: int | None = None,
    gpu: str | None = None,
    precision: str | None = None,
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

    ``gpu`` (--gpu) is priced over a ``# pptune-plan:`` line's GPU: the config says so.
    ``precision`` (--precision) fills the GEMM precision of a file that cannot state it
    (a torchtitan main dump); another file's own stands, with a note.
    """
    path = Path(path)
    wanted = _format(format_in)
    ctx = Ctx(name=str(path), flags=check_flags(pp, gpus, tp, gpus_per_node, micro_batch_size,
                                                global_batch, precision),
              env=parse_env(env or []))
    undecoded: list[Undecoded] = []
    text = read_text(path, undecoded)
    ctx.text = text
    for first in undecoded:  # bytes that are not UTF-8 in comment lines (source.read_text)
        ctx.warn("not-utf8-comment", first.describe())
    repeated: list[Repeated] = []
    fmt, data = ((wanted, ADAPTERS[wanted].parse(text, path, repeated)) if wanted
                 else _detect(text, path, repeated))
    adapter = ADAPTERS[fmt]
    ctx.semantics.versions = parse_versions(framework_versions or [], fmt, ctx)
    if "text" not in adapter.syntaxes and not isinstance(data, dict):
        raise ctx.bad(
            f"the top level is {_kind(data)}; expected a mapping of keys "
            f"(e.g. micro_batch_size: 1) for the {fmt.value} format"
        )
    if repeated:
        adapter.repeated_keys(repeated[0], ctx)
    if ctx.env and "text" not in adapter.syntaxes:
        ctx.note(f"--env ignored: a {fmt.value} file reads no environment (launch scripts do)")
    config = planned_for(text, adapter.read(data, ctx), ctx, gpu)
    if precision is not None and not ctx.semantics.precision_filled:
        ctx.note(f"--precision {precision} ignored: the file states its GEMM precision "
                 f"({config.precision or 'bf16'})")
    read = ReadResult(config=config, format=fmt, notes=ctx.notes, semantics=ctx.semantics)
    if config.hf_config is not None or config.profile is not None:
        model_known(read)  # the plan line's hf_config (or the file's profile) names it
    return read


def model_known(read: ReadResult) -> None:
    """Drop the reader's note that it cannot name the model (Semantics.unknown_model): a
    flag, the plan line or a profile names it."""
    hint = read.semantics.unknown_model
    if hint is not None and hint in read.notes:
        read.notes.remove(hint)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
MAX_ENV = 100  # --env values


def parse_env(values: list[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` values, each a variable a launch script reads from its
    environment (``${NNODES:-1}``); one clear line for a malformed one."""
    if len(values) > MAX_ENV:
        raise BadInput(f"--env is given {len(values)} times; at most {MAX_ENV}")
    out: dict[str, str] = {}
    for value in values:
        name, eq, text = value.partition("=")
        if not eq or not _ENV_NAME.fullmatch(name) or len(text) > 1000:
            raise BadInput(f"--env {show(value)}: expected NAME=VALUE, NAME a shell variable "
                           "name (e.g. --env NNODES=16), VALUE at most 1,000 characters")
        out[name] = text
    return out


def parse_versions(values: list[str], fmt: Framework, ctx: Ctx) -> Versions:
    """``--framework-version`` values (``versions_of``), its notes said through ``ctx``."""
    versions, notes = versions_of(values, fmt)
    for note in notes:
        ctx.note(note)
    # said, not refused as recommend does: one CI line may check configs of several
    # frameworks with each one's release given
    for value in foreign_versions(values, fmt):
        ctx.note(f"--framework-version {value.strip()} names a release of another "
                 f"framework than this {ADAPTERS[fmt].title} file's: it changes nothing here")
    return versions


def foreign_versions(values: list[str], fmt: Framework) -> list[str]:
    """The ``--framework-version`` values that name a release of another framework's
    library than ``fmt``'s (its own keys and the shared ones, torch, are not)."""
    spellings = {s: key.name for key in VERSION_KEYS for s in key.spellings}
    own = {k.name for k in (*ADAPTERS[fmt].versions, *SHARED_KEYS)}
    named = [spellings.get(v.partition("=")[0].strip().lower()) if "=" in v else None
             for v in values]
    return [v for v, name in zip(values, named, strict=True) if name is not None and name not in own]


def versions_of(values: list[str], fmt: Framework) -> tuple[Versions, list[str]]:
    """``--framework-version`` values: ``NAME=VERSION`` (a key of VERSION_KEYS) or a bare
    version for ``fmt``, the config's (or --emit's) own framework; BadInput (one line) for
    a bad one. One later than the newest release pptune has read is judged by the newest
    rules, and a note says so: a release out since is the likeliest reason, not a mistake
    to refuse; so is one earlier than a key's default where pptune holds no earlier
    release's rules (``VersionKey.earlier_rules``: megatron-core), which would otherwise
    pass with no word that its rules are the default's."""
    spellings = {s: key for key in VERSION_KEYS for s in key.spellings}
    own = ADAPTERS[fmt].versions
    chosen: dict[str, str] = {}
    notes: list[str] = []
    for value in values:
        name, eq, version = value.partition("=")
        if eq:
            key = spellings.get(name.strip().lower())
        else:
            key, version = (own[0] if own else None), value
        if key is None:
            raise BadInput(f"--framework-version {show(value)}: expected NAME=VERSION with NAME "
                           f"one of {', '.join(spellings)}, or a bare version for the "
                           "config's framework")
        try:
            version_tuple(version)
        except ValueError:
            raise BadInput(f"--framework-version {show(value)}: the version must be dotted "
                           "numbers such as 0.2.2") from None
        chosen[key.name] = version.strip().lstrip("v")
        newest = key.later_than_read(version)
        if newest is not None:
            notes.append(f"--framework-version {value.strip()} is later than {newest}, the "
                         f"newest release pptune has read: judged by the rules pptune has for "
                         f"{newest} and later; what changed after {newest} is not checked")
        default = key.earlier_than_read(version)
        if default is not None:
            notes.append(f"--framework-version {value.strip()} is earlier than {default}, "
                         f"whose rules pptune follows: pptune has no rules of its own for "
                         f"earlier releases, so {default}'s apply; a rule or flag that "
                         f"{version.strip()} does not have yet is not caught")
    return Versions(chosen), notes


def _format(value: Framework | str | None) -> Framework | None:
    if value is None or isinstance(value, Framework):
        return value
    found = find(str(value).strip().lower())
    if found is None:
        raise BadInput(f"--format-in {show(value)} is unknown; expected one of {FORMAT_NAMES}")
    return Framework(found.name)


def _kind(data: Any) -> str:
    if isinstance(data, list):
        return "a list"
    if isinstance(data, str):
        return "a single string"
    return f"a single value ({show(data)})"


def _written_in(syntax: str) -> list[Framework]:
    """The formats written in ``syntax``, in detection order: frameworks, then pptune's own."""
    fmts = [f for f, a in ADAPTERS.items() if syntax in a.syntaxes]
    return sorted(fmts, key=lambda f: ADAPTERS[f].fallback)


def _match(data: Any, syntax: str) -> Framework | None:
    return next((f for f in _written_in(syntax) if ADAPTERS[f].detect(data)), None)


def _detect(text: str, path: Path, repeated: list[Repeated]) -> tuple[Framework, Any]:
    """Guess the format from the content; parse errors are kept for the final message.
    The repeated keys of the parse that is kept go to ``repeated``."""
    name = str(path)
    if json_like(text):
        try:
            data = parse_json(text, name, repeated)
        except Refused:
            raise
        except BadInput as exc:
            json_error: BadInput | None = exc
            repeated.clear()  # objects the parser closed before it failed
        else:
            return _classify_mapping(data, name, "json")
    else:
        json_error = None
    toml_error: BadInput | None = None
    try:
        table = parse_toml(text, name)
    except Refused:
        raise
    except BadInput as exc:
        toml_error = exc
    else:
        found = _match(table, "toml")
        if found is not None:
            return found, table
    found = _match(text, "text")
    if found is not None:
        return found, text
    yaml_error: BadInput | None = None
    data = None
    try:
        data = parse_yaml(text, name, repeated)
    except BadInput as exc:
        yaml_error = exc
    else:
        if isinstance(data, dict) and _match(data, "yaml") is not None:
            return _classify_mapping(data, name, "yaml")
    if isinstance(yaml_error, Refused):
        raise yaml_error
    if toml_error is not None and path.suffix.lower() == ".toml":
        raise toml_error  # named TOML (a table header starts like a JSON list)
    if json_error is not None:
        raise json_error  # it starts like JSON: the JSON error is the useful one
    if yaml_error is not None and _YAML_KEY.search(text):
        raise yaml_error  # it has "key: value" lines: the YAML error is the useful one
    if isinstance(data, list):
        raise BadInput(f"{name}: the top level is a list; expected a mapping of config keys "
                       "(e.g. micro_batch_size: 1)")
    raise BadInput(f"cannot tell the format of {name}: no {_titles(_tried(), 'or')} keys found; "
                   f"pass --format-in {FORMAT_NAMES}")


_YAML_KEY = re.compile(r"^[A-Za-z_][\w.-]*\s*:(?:\s|$)", re.MULTILINE)


def _tried() -> list[Adapter]:
    """Every adapter in the order detection tries it (pptune's own last)."""
    order = [ADAPTERS[f] for syntax in SYNTAX_ORDER for f in _written_in(syntax)]
    unique = list(dict.fromkeys(order))
    return sorted(unique, key=lambda a: a.fallback)


def _titles(adapters: list[Adapter], joiner: str, possessive: bool = False) -> str:
    """"A, B or C" of the adapters' titles (A's, B's nor C's with ``possessive``)."""
    names = [a.title + ("'s" if possessive else "") for a in adapters]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {joiner} {names[-1]}"


def _classify_mapping(data: Any, name: str, syntax: str) -> tuple[Framework, Any]:
    label = syntax.upper()
    if not isinstance(data, dict):
        raise BadInput(f"{name}: the top level is {_kind(data)}; expected a {label} mapping "
                       "of config keys")
    if "model_type" in data and ("architectures" in data or "num_hidden_layers" in data):
        raise BadInput(f"{name} is a Hugging Face model config (model_type "
                       f"{show(data['model_type'])}), not a training config: pass it as "
                       "--hf-config beside the training config (check-config) or to recommend")
    found = _match(data, syntax)
    if found is not None:
        return found, data
    keys = ", ".join(show(key) for key in list(data)[:5]) or "none"
    owners = [ADAPTERS[f] for f in _written_in(syntax)]
    raise BadInput(
        f"cannot tell the format of {name}: its {label} keys ({keys}) are "
        f"neither {_titles(owners, 'nor', possessive=True)}; pass --format-in {FORMAT_NAMES}"
    )
