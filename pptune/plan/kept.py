"""--emit keeps the sizes the user forced, or writes nothing.

The files ``--emit`` writes name the sizes a flag held at one value (``held=`` on their
plan line, ``"held"`` in DeepSpeed's ``"pptune"`` section: plan/jobs.py ``held``), and
check-config's best-plan comparison then keeps the file's. A substitute plan at another
of those sizes (DeepSpeed's AutoTP runs at pp 1 only; torchtitan 0.2.2's qwen3 has no
pipelining) would be a file claiming a size the user never got, compared only with
plans of the wrong one: it is refused instead, in one line, exit 1 as a search that
finds no plan (recommend --framework X says the same by finding none)."""

from __future__ import annotations

from collections.abc import Sequence

from pptune.costmodel.search import Plan
from pptune.errors import NoFeasiblePlan


def changed(held: Sequence[str], asked: Plan, written: Plan) -> list[tuple[str, int, int]]:
    """(size, forced value, written value) of each held size ``written`` does not keep."""
    return [(n, getattr(asked, n), getattr(written, n)) for n in held
            if getattr(asked, n) != getattr(written, n)]


def refuse_changed(held: Sequence[str], asked: Plan, written: Plan, notes: Sequence[str], *,
                   name: str, title: str, ranked_by: str | None) -> None:
    """NoFeasiblePlan where ``written`` (the plan ``name``'s files state for ``asked``)
    changes a size the command held: the forced flags, why (the first substitution note
    that took the size to its new value: ``_why``), and the fixes (``ranked_by``: the
    run's --framework, which then already ranked only what the files state)."""
    moved = changed(held, asked, written)
    if not moved:
        return
    flags = ", ".join(f"--{n} {was}" for n, was, _ in moved)
    got = ", ".join(f"{n} {now}" for n, _, now in moved)
    first = moved[0][0]
    fixes = [f"drop --{first}" if len(moved) == 1 else "drop those flags",
             "emit another framework"]
    if ranked_by is None:
        fixes.append(f"rank only the plans {title} files state with --framework {name}")
    raise NoFeasiblePlan(
        f"forced {flags}, which {title} files cannot state for this job: "
        f"{_why(notes, moved[0][0], moved[0][2])}; the closest plan they state runs {got}, "
        f"which the file would record as held: nothing written; "
        + ", ".join(fixes[:-1]) + f" or {fixes[-1]}")


# where a substitution note's reason ends and its plan begins ("...: emitting the ...")
SAID = ": emitting "


def _why(notes: Sequence[str], size: str, now: int) -> str:
    """The reason of the first note that names the new size (``pp=1``, ``tp 2``,
    ``tp2 bf16``), up to its plan; else the first note that says what the files cannot
    express; else that the substitutions end there."""
    forms = (f"{size}={now} ", f"{size}={now},", f"{size} {now} ", f"{size} {now},",
             f"{size}{now} ", f"({size}{now} ")
    hit = next((n for n in notes if any(f in n for f in forms)), None)
    hit = hit or next((n for n in notes if "cannot express" in n), None)
    if hit is None:
        return f"its substitutions end at {size} {now}"
    return hit.split(SAID, 1)[0] if SAID in hit else hit
