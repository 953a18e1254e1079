"""Flags Megatron-LM does not define: argparse's "unrecognized arguments".

Megatron-LM's parse_args (megatron/training/arguments.py) builds
``argparse.ArgumentParser(allow_abbrev=False)`` and calls ``parser.parse_args()``
(pretrain() never passes ignore_unknown_args), so a flag it does not define, or a
prefix of one, stops the run before it starts. The flags it defines are
``known_flags`` (generated from the release's source). Judged only where the parser
is known: a launch of one of Megatron-LM's own ``pretrain_*.py`` (an entry script of
another name may add flags through its own extra_args_provider; an argument file
names no entry script) at the release the flags were read from, and not for
Megatron-DeepSpeed (``--deepspeed``), whose parser adds DeepSpeed's flags.
"""

from __future__ import annotations

import difflib

from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.common.versions import version_tuple
from pptune.frameworks.megatron import known_flags
from pptune.frameworks.megatron.flags import Flagged
from pptune.frameworks.megatron.split import MEGATRON

DEEPSPEED_FLAGS = ("--deepspeed", "--deepspeed_config", "--deepspeed-config")


def judged(ctx: Ctx, entry: str | None, args: Flagged) -> bool:
    """Whether the flags Megatron-LM defines are the whole of what this command accepts."""
    release = version_tuple(known_flags.TAG.removeprefix("core_v"))[:2]
    return (entry in known_flags.ENTRIES
            and version_tuple(ctx.semantics.versions.of(MEGATRON))[:2] == release
            and not any(args.has(name) for name in DEEPSPEED_FLAGS))


def refuse_unknown(ctx: Ctx, entry: str | None, args: Flagged, words: list[str]) -> None:
    """An error finding quoting argparse for the flags Megatron-LM does not define; they
    leave ``args.unknown`` (what is left there is defined, and only not read here)."""
    if entry is None or not judged(ctx, entry, args):
        return
    accepted = known_flags.FLAGS | known_flags.EXTRA_FLAGS.get(entry, frozenset())
    bad = [name for name in args.values if name not in accepted and "$" not in name]
    if not bad:
        return
    gone = set(bad)
    args.unknown = [name for name in args.unknown if name not in gone]
    named = []
    choices = sorted(accepted)
    for name in bad[:6]:  # the ones the finding names (each match scans every flag)
        close = difflib.get_close_matches(name, choices, n=1)
        named.append(name + (f" (did you mean {close[0]}?)" if close else ""))
    release = f"Megatron-LM {known_flags.TAG}"
    verb = f"is not a flag of {release}" if len(bad) == 1 else f"are not flags of {release}"
    ctx.refuse("megatron-unknown-flag",
               f"{', '.join(named[:6])} {verb}: parse_args exits with argparse's '{entry}: "
               f"error: unrecognized arguments: {_quoted(words, set(bad))[:300]}' "
               "(megatron/training/arguments.py: parser.parse_args() with allow_abbrev=False); "
               "for a later release's flags, --framework-version megatron-core=VERSION checks "
               "the file without this rule")


def _quoted(words: list[str], bad: set[str]) -> str:
    """The words argparse leaves unrecognized: each such flag, with the value after it."""
    out = []
    for i, word in enumerate(words):
        name = word.partition("=")[0]
        if word.startswith("--") and name in bad:
            out.append(word)
            after = words[i + 1] if i + 1 < len(words) else None
            if "=" not in word and after is not None and not after.startswith("--"):
                out.append(after)
    return " ".join(out)
