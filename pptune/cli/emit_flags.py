"""recommend's flags that act only with ``--emit``: checked before the search.

``--plan N`` picks the plan ``--emit`` writes, ``--force`` lets it replace the
files already in ``-o DIR`` and ``--framework-version`` names the release the files
are written for (torchtitan=0.3.0: main's Python config); without them each flag
changes nothing, so it can only be a mistake and is refused, every such problem in one line (exit 2, nothing
written). A framework that writes several files (DeepSpeed's ds_config.json and
ds_partition.txt) needs the folder: on stdout they would run together into one
stream that neither DeepSpeed nor check-config could take apart.
"""

from __future__ import annotations

from pathlib import Path

import typer

from pptune import limits
from pptune.errors import BadInput
from pptune.frameworks.common.versions import Versions


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the command's parameter ``name`` was set on the command line (a default,
    such as ``--plan``'s 1, was not)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def check_emit_flags(emit: str | None, output: Path | None, plan: int, plan_given: bool,
                     force: bool, top: int) -> None:
    """BadInput naming every flag of ``--emit`` that cannot act as given (module
    docstring); ``plan_given``: --plan was on the command line."""
    problems = []
    if emit is None and plan_given:
        problems.append(f"--plan {plan} picks the plan --emit writes; without --emit it does "
                        "nothing (the table lists every plan): add --emit FRAMEWORK, or drop "
                        "--plan")
    if force and (emit is None or output is None):
        missing = "--emit" if emit is None else "-o DIR"
        fix = "--emit FRAMEWORK -o DIR" if emit is None else "-o DIR"
        problems.append(f"--force lets --emit FRAMEWORK -o DIR replace the files already in "
                        f"DIR; without {missing} it does nothing: add {fix}, or drop --force")
    # the table lists --top plans and, when none of them runs without a pipeline or the
    # margin puts one first, the best plan that does, one more
    if emit is not None and 1 <= top <= limits.MAX_TOP and not 1 <= plan <= top + 1:
        problems.append(f"--plan {plan} is not among the plans --top {top} lists (at most "
                        f"{top + 1}: the best plan without a pipeline may follow); give --plan "
                        f"1 to {top + 1} (or raise --top)")
    if emit is not None and output is None:
        from pptune.plan.emit import file_names

        names = file_names(emit)
        if len(names) > 1:
            problems.append(f"--emit {emit} writes {len(names)} files ({', '.join(names)}), "
                            "which stdout cannot keep apart: give -o DIR, the folder to write "
                            "them into")
    if problems:
        raise BadInput("; ".join(problems))


def framework_versions(values: list[str], framework: str | None
                       ) -> tuple[Versions | None, list[str]]:
    """(the releases --emit or --framework rank and write for, notes) of
    ``--framework-version`` values, parsed as check-config parses them (a bare version
    names that framework); BadInput for a bad value, or for any without either (they
    change nothing then). ``framework``: --emit's, else --framework's."""
    if not values:
        return None, []
    if framework is None:
        raise BadInput(f"--framework-version {values[0]} names the release --framework ranks "
                       "plans for and --emit writes its files for; without either it does "
                       "nothing: add --framework FRAMEWORK or --emit FRAMEWORK, or drop "
                       "--framework-version")
    from pptune.frameworks.read import foreign_versions, versions_of
    from pptune.frameworks.registry import ADAPTERS
    from pptune.plan.framework_search import parse_framework

    fw = parse_framework(framework)
    adapter = ADAPTERS[fw]
    versions, notes = versions_of(values, fw)
    # a release of another framework's library changes nothing in these files: refused
    # as a flag without --emit is (module docstring), not ignored
    foreign = foreign_versions(values, fw)
    if foreign:
        said = ", ".join(k.name for k in adapter.versions) or "none"
        raise BadInput(f"--framework-version {foreign[0].strip()} names a release of another "
                       f"framework than {adapter.title}, whose plans --emit or --framework "
                       f"rank and write here (its releases: {said}); it does nothing: drop it, "
                       f"or emit that framework")
    return versions, notes


