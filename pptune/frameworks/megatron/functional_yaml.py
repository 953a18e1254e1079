"""Megatron-LM's functional-test configs (``tests/functional_tests/test_cases/**/
model_config.yaml``) as the launch they stand for, for the launch-script reader.

Megatron-LM's launcher of those tests, ``tests/functional_tests/shell_test_utils/
_run_training.sh`` (Megatron-LM d98e8a64, its branch for Megatron-LM's own tests; NeMo's,
whose keys are ``trainer.*``, takes another), turns the file into the job:

- ``ENV_VARS``: each entry exported as ``KEY=VALUE``, the job's environment.
- ``MODEL_ARGS``: yq's ``to_entries | with(select(.value == true); .value = "true") |
  .key + ": " + (select(.value != "") | .value | tostring)``, one line per entry, then a
  bash loop: the value is trimmed by ``xargs`` (which also removes its quotes); ``true``
  becomes the bare flag; one wrapped in ``( )``, or holding a space, ``|``, ``(`` or
  ``)``, is double-quoted; one wrapped in ``[ ]`` loses its brackets; any other follows
  its flag as written; the whole is ``eval``'d into the argument array. So an empty
  string (``""``) drops the entry, and an empty value (``--flag:``) passes the bare flag,
  but ``false`` and ``null`` are not dropped: they follow their flag as the words
  "false" and "null", which argparse refuses after a flag that takes no value. A value
  is yq's text of the scalar (``1e-6`` stays ``1e-6``), never a YAML 1.1 type; a flow
  list is the ``[a, b]`` yq writes back.
- ``envsubst`` first replaces each ``${VAR}`` its environment sets (the CI job's paths),
  and the ``eval`` expands what is left; here both are the shell reader's, which keeps
  an unset reference as written (``--env NAME=VALUE`` sets one).

``launch`` writes that job as shell text (``export`` lines, then one line of flags) for
``reader.read_megatron``: one reader for every Megatron-LM file. The GPU count is not
in the file (the CI recipe sets the launcher's ``--nproc_per_node $GPUS_PER_NODE
--nnodes $NUM_NODES``), nor the entry script (``$TRAINING_SCRIPT_PATH``), so flags are
not judged against one script's parser (unknown.py). ``MODEL_ARGS_<N>``, the arguments
of a resumed run N, are not read. ``MODE: inference`` (run_ci_test.sh's ``.MODE //
"pretraining"``; its recipes run an inference script) is no training job: refused.
"""

from __future__ import annotations

import re
import shlex

import yaml

from pptune.errors import BadInput
from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.common.source import Refused, yaml_node
from pptune.frameworks.megatron.flags import BOOL_FLAGS

LAUNCHER = "tests/functional_tests/shell_test_utils/_run_training.sh"
_TOP = re.compile(r"^MODEL_ARGS[ \t]*:(?:[ \t]|$)", re.MULTILINE)
_FIRST = re.compile(r"---|[A-Za-z_][\w.-]*[ \t]*:(?:[ \t]|$)")
_NULL = "tag:yaml.org,2002:null"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED = re.compile(r"\([^)]+\)")  # the launcher's grep -Eq '^\([^)]+\)$'
_LISTED = re.compile(r"\[[^]]+\]")  # and '^\[[^]]+\]$'


def looks_like(text: str) -> bool:
    """A top-level ``MODEL_ARGS:`` key in a file that starts as YAML (its first line
    that is not blank or a comment is a key or ``---``; a launch script that writes such
    a file in a here-document starts with commands): a functional-test config, which
    ``launch`` reads (or refuses in one line)."""
    if _TOP.search(text) is None:
        return False
    first = next((line for line in text.splitlines()
                  if line.strip() and not line.lstrip().startswith("#")), "")
    return _FIRST.match(first) is not None


def launch(text: str, ctx: Ctx) -> str | None:
    """The job a functional-test config stands for, as shell text; None for any other
    Megatron-LM file. BadInput (one line) for one the launcher could not run."""
    if not looks_like(text):
        return None
    try:
        root = yaml_node(text, ctx.name)
    except Refused:
        raise
    except BadInput as exc:
        raise BadInput(f"{exc} (read as a Megatron-LM functional-test config: it has a "
                       "top-level MODEL_ARGS key)") from None
    top = _mapping(root, "the top level", ctx)
    if "MODEL_ARGS" not in top:
        raise ctx.bad("MODEL_ARGS is not a top-level key of the YAML mapping; expected a "
                      "Megatron-LM functional-test config (MODEL_ARGS: {--flag: value})")
    mode = top.get("MODE")
    if isinstance(mode, yaml.ScalarNode) and mode.value == "inference":
        raise ctx.bad("MODE: inference: a Megatron-LM inference test (its CI recipe runs an "
                      "inference script, not pretrain_*.py), not a training launch; "
                      "check-config judges training configs")
    lines = [f"export {name}={shlex.quote(value)}"
             for name, value in _environment(top.get("ENV_VARS"), ctx)]
    words = _arguments(top["MODEL_ARGS"], ctx)
    later = [key for key in top if re.fullmatch(r"MODEL_ARGS_[0-9]+", key)]
    ctx.note(f"read as Megatron-LM's functional-test launcher runs it ({LAUNCHER}): "
             "MODEL_ARGS as the flags, ENV_VARS exported"
             + (f"; {', '.join(later[:4])} (a resumed run's arguments) not read"
                if later else ""))
    return "\n".join([*lines, " \\\n".join(words), ""])


def _mapping(node: yaml.Node | None, what: str, ctx: Ctx) -> dict[str, yaml.Node]:
    """A mapping node's entries by their keys' text (the last of a repeated key)."""
    if not isinstance(node, yaml.MappingNode):
        raise ctx.bad(f"{what} is not a mapping; expected a Megatron-LM functional-test "
                      "config (MODEL_ARGS: {--flag: value})")
    return {str(k.value): v for k, v in node.value if isinstance(k, yaml.ScalarNode)}


def _environment(node: yaml.Node | None, ctx: Ctx) -> list[tuple[str, str]]:
    """ENV_VARS' entries as the launcher exports them: ``yq '.ENV_VARS | to_entries | .[]
    | .key + "=" + .value'``, the text of each value."""
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _NULL):
        return []
    out = []
    for name, value in _mapping(node, "ENV_VARS", ctx).items():
        if not _NAME.fullmatch(name) or not isinstance(value, yaml.ScalarNode):
            raise ctx.bad(f"ENV_VARS {name[:40]!r}: expected NAME: VALUE, NAME a shell "
                          "variable name and VALUE one value (the launcher exports each)")
        out.append((name, value.value))
    return out


def _arguments(node: yaml.Node, ctx: Ctx) -> list[str]:
    """MODEL_ARGS as the launcher writes them for its ``eval``: one piece of shell text
    per entry, in the file's order (a repeated flag twice, argparse keeps the last)."""
    if not isinstance(node, yaml.MappingNode) or not node.value:
        empty = (isinstance(node, yaml.ScalarNode) and node.tag == _NULL) or not node.value
        said = "empty (no training launch to read)" if empty else "not a mapping of flags"
        raise ctx.bad(f"MODEL_ARGS is {said}; expected MODEL_ARGS: {{--num-layers: 32, "
                      "--micro-batch-size: 1, ...}")
    out = []
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if not isinstance(key_node, yaml.ScalarNode) or not key.startswith("--"):
            raise ctx.bad(f"MODEL_ARGS key {key[:40]!r} is not a --flag; Megatron-LM's "
                          "functional-test configs map each --flag to its value (NeMo's "
                          "trainer.* keys are not read)")
        text = _text(key, value_node, ctx)
        if text == "" and value_node.tag != _NULL:
            continue  # select(.value != ""): a null is not "", so --flag: passes the flag
        piece = _piece(key, _trimmed(key, text, ctx))
        if piece != key and key in BOOL_FLAGS:
            ctx.refuse("megatron-flag-value",
                       f"MODEL_ARGS {key}: {text[:40]}: {key} takes no value, and "
                       f"Megatron-LM's functional-test launcher passes every value but true "
                       f"after its flag ({LAUNCHER}), so parse_args exits with argparse's "
                       f"'unrecognized arguments: {text[:40]}' "
                       "(megatron/training/arguments.py); write true, or leave the flag out")
        out.append(piece)
    return out


def _text(key: str, node: yaml.Node, ctx: Ctx) -> str:
    """yq's ``tostring``: a scalar's text; a flow list of scalars as yq writes it back
    (``[a, b]``, which the launcher then unwraps); nothing else fits on the one line the
    launcher reads per entry."""
    if isinstance(node, yaml.ScalarNode):
        return str(node.value)
    items = node.value if isinstance(node, yaml.SequenceNode) and node.flow_style else None
    if items is None or not all(isinstance(item, yaml.ScalarNode) for item in items):
        raise ctx.bad(f"MODEL_ARGS {key[:60]}: the value is a block list or a mapping; "
                      "expected one value on the flag's line (the launcher reads one line "
                      "per flag)")
    return "[" + ", ".join(str(item.value) for item in items) + "]"


def _trimmed(key: str, text: str, ctx: Ctx) -> str:
    """``echo "$value" | xargs``: quotes removed, blanks collapsed; an unmatched quote
    stops the launcher (xargs fails under its ``set -e``)."""
    if "\n" in text:
        raise ctx.bad(f"MODEL_ARGS {key[:60]}: the value spans lines; the launcher reads "
                      "yq's output a line at a time (write it on one line)")
    try:
        return " ".join(shlex.split(text))
    except ValueError:
        raise ctx.bad(f"MODEL_ARGS {key[:60]}: the value {text[:40]!r} has an unmatched "
                      "quote, which the launcher's xargs refuses") from None


def _piece(key: str, value: str) -> str:
    """The launcher's cases for one entry's text in the array it evals."""
    if value == "true" or value == "":
        return key
    if _QUOTED.fullmatch(value):
        return f'{key} "{value}"'
    if _LISTED.fullmatch(value):
        return f"{key} {value[1:-1]}"
    if any(c in value for c in " |()"):
        return f'{key} "{value}"'
    return f"{key} {value}"
