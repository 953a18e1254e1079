"""torchtitan's quantization converters by name, and the tables a file configures for a
converter its ``[model] converters`` does not name.

torchtitan builds one converter per name in ``model.converters`` (0.2.2
protocols/model_converter.py: ``build_model_converters`` looks each name up in the
registry) and reads a converter's table only for a converter it builds: a
``[quantize.linear.float8]`` table beside a list without ``quantize.linear.float8``
configures nothing, and the model trains BF16. Its own reference configs do so on
purpose: llama3's train_configs keep a float8 table of defaults
(``enable_fsdp_float8_all_gather = false``, ``filter_fqns``) with the converter
commented out: a note says the table configures nothing. A table that turns something
on (a true flag, a recipe, modules to convert) under an unlisted converter is a warning
naming the converter, by the name the file's release registers (``registered``: one
table per release, also the one converters.py refuses other names by), so following the
advice never meets pptune's own ``torchtitan-converter`` error.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.torchtitan.fqns import TORCHTITAN

FLOAT8, MX, OLD_FLOAT8 = "quantize.linear.float8", "quantize.linear.mx", "float8"
GMM_FLOAT8, GMM_MX = "quantize.grouped_mm.float8", "quantize.grouped_mm.mx"
OLD_MX = "mx"  # torchtitan 0.1's name and table of the MX linear converter
# a converter table -> the converter names that read it (a file that renamed the
# converter and kept the old table name is read by converters.py the same way)
READ_BY = {FLOAT8: (FLOAT8, OLD_FLOAT8), OLD_FLOAT8: (OLD_FLOAT8, FLOAT8), MX: (MX, OLD_MX),
           OLD_MX: (OLD_MX, MX), GMM_FLOAT8: (GMM_FLOAT8,), GMM_MX: (GMM_MX,)}
# the converters each release registers (register_model_converter calls: 0.1.0
# float8/float8.py and mx.py; 0.2.2 components/quantization/float8.py:238 and mx.py):
# others raise KeyError in ModelConvertersContainer (protocols/model_converter.py)
REGISTERED_0_1 = (OLD_FLOAT8, OLD_MX)
REGISTERED_0_2 = (FLOAT8, GMM_FLOAT8, MX, GMM_MX)
RENAMED_0_2 = {OLD_FLOAT8: FLOAT8, OLD_MX: MX}  # 0.1's names -> 0.2's
# keys that restrict a conversion rather than ask for one
RESTRICTING = frozenset({"filter_fqns"})


def registered(versions: Versions) -> tuple[str, ...]:
    """The converter names the file's torchtitan release registers."""
    return REGISTERED_0_2 if versions.at_least(TORCHTITAN, 0, 2) else REGISTERED_0_1


def converter_for(versions: Versions, path: str) -> str:
    """The name, registered by the file's release, of the converter that reads table
    ``path`` (``path`` itself where the release registers none of its readers)."""
    known = registered(versions)
    return next((name for name in READ_BY[path] if name in known), path)


def _table(data: dict[str, Any], path: str) -> dict[str, Any] | None:
    node: Any = data
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def unlisted_tables(ctx: Ctx, data: dict[str, Any], converters: list[str]) -> None:
    """A warning for each converter table that turns something on while
    ``converters`` names none of the converters that read it (module docstring)."""
    for path, readers in READ_BY.items():
        table = _table(data, path)
        if table is None or any(name in converters for name in readers):
            continue
        asks = [key for key, value in table.items() if value and key not in RESTRICTING]
        parts = "routed experts' grouped GEMMs" if "grouped_mm" in path else "linears"
        if not asks:  # defaults kept on purpose (llama3's configs): said, not warned of
            ctx.note(f"[{path}] configures nothing: [model] converters does not name it "
                     f"(torchtitan builds only the converters listed), so the {parts} "
                     "train BF16 (priced so)")
            continue
        name = converter_for(ctx.semantics.versions, path)
        listed = ", ".join(f'"{each}"' for each in [*converters, name])
        # each release names a converter's table as the converter (0.2.2 job_config.py)
        table_too = f" and name the table [{name}]" if name != path else ""
        ctx.warn("torchtitan-converter-unlisted",
                 f"[{path}] sets {', '.join(asks)}, but [model] converters does not name "
                 f"{path}: torchtitan builds only the converters listed "
                 "(protocols/model_converter.py) and ignores the table, so the "
                 f"{parts} train BF16 (priced so); to run them low precision, set "
                 f"converters = [{listed}] in [model]{table_too}")
