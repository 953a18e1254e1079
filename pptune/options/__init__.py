"""The option groups, declared once (``groups``), the parsers of their values
(``kinds``) and their record in a plan file (``record``).

Below the CLI and the schemas: pure declarations on the standard library and
the cost model's enums (the plan file's record uses pydantic, as ``schemas`` does).
"""

from pptune.options.groups import CostOptions, Field, Flag, PlanSpace, build, fields_of
from pptune.options.kinds import parse_ints
from pptune.options.output import OutputOptions, RunOptions

__all__ = [
    "CostOptions",
    "Field",
    "Flag",
    "OutputOptions",
    "PlanSpace",
    "RunOptions",
    "build",
    "fields_of",
    "parse_ints",
]
