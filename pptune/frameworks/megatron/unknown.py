"""Flags Megatron-LM does not define: argparse's "unrecognized arguments".

Megatron-LM's parse_args (megatron/training/arguments.py) builds
``argparse.ArgumentParser(allow_abbrev=False)`` and calls ``parser.parse_args()``
(pretrain() never passes ignore_unknown_args), so a flag it does not define, or a
prefix of one, stops the run before it starts. The flags it defines are
``known_flags`` (generated from the release's source). Judged only where the parser
is known: a launch of one of Megatron-LM's own ``pretrain_*.py`` (an entry script of
another name may add flags through its own extra_args_provider; an argument file
names no entry script), and not for Megatron-DeepSpeed (``--deepspeed``), whose parser
adds DeepSpeed's flags.

At the release the flags were read from, every flag it does not define is refused. At
an earlier ``--framework-version megatron-core`` (pptune has no flag list per release),
only a flag that no release read defines is (neither known_flags' nor earlier_flags',
the ones removed or renamed since): a misspelling is still the error it is at every
release, and a flag the chosen release lacks but a later one defines goes unseen, as a
note says. Turning the check off there instead would let a misspelt flag through as
"ignored" (a user trial, u30 M3). A later release is not judged: its new flags are in
no list.
"""

from __future__ import annotations

import difflib

from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.common.versions import version_tuple
from pptune.frameworks.megatron import earlier_flags, known_flags
from pptune.frameworks.megatron.flags import Flagged
from pptune.frameworks.megatron.split import MEGATRON

DEEPSPEED_FLAGS = ("--deepspeed", "--deepspeed_config", "--deepspeed-config")


def judged(ctx: Ctx, entry: str | None, args: Flagged) -> str | None:
    """How the flags are judged: "release" (the chosen release is the one they were read
    from), "earlier" (an earlier one: against every release read), None (not judged)."""
    if entry not in known_flags.ENTRIES or any(args.has(name) for name in DEEPSPEED_FLAGS):
        return None
    release = version_tuple(known_flags.TAG.removeprefix("core_v"))[:2]
    chosen = version_tuple(ctx.semantics.versions.of(MEGATRON))[:2]
    return "release" if chosen == release else "earlier" if chosen < release else None


def refuse_unknown(ctx: Ctx, entry: str | None, args: Flagged, words: list[str]) -> None:
    """An error finding quoting argparse for the flags Megatron-LM does not define; they
    leave ``args.unknown`` (what is left there is defined, and only not read here)."""
    how = judged(ctx, entry, args) if entry is not None else None
    if how is None:
        return
    accepted = known_flags.FLAGS | known_flags.EXTRA_FLAGS.get(entry or "", frozenset())
    release = f"Megatron-LM {known_flags.TAG}"
    if how == "earlier":
        accepted = accepted.union(earlier_flags.FLAGS, *known_flags.EXTRA_FLAGS.values())
        release = f"any Megatron-LM release from {earlier_flags.FIRST} to {known_flags.TAG}"
        chosen = ctx.semantics.versions.of(MEGATRON)
        ctx.note(f"megatron-core {chosen}'s flags are judged against every Megatron-LM "
                 f"release pptune has read ({earlier_flags.FIRST} to {known_flags.TAG}): a "
                 "flag none of them defines is an error, one that a later release adds and "
                 f"{chosen} lacks is not caught")
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
